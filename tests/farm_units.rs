//! Unit tests of the farm harness's trace format and bounds (its modules
//! are a bench target's, which `cargo test` runs without a test harness).

#[path = "../benches/farm/trace.rs"]
#[allow(dead_code, clippy::unwrap_used)]
mod trace;
