//! Compiler argument rules.
