//! The scheduler core.

pub mod optimizer;
