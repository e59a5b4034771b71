//! Toolchain discovery.
