//! The optimizer.
