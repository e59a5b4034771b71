//! Unit tests of the farm harness's trace format and bounds, and of how it
//! reads its network's counters (its modules are a bench target's, which
//! `cargo test` runs without a test harness).

#[path = "../benches/farm/trace.rs"]
#[allow(dead_code, clippy::unwrap_used)]
mod trace;

#[path = "../benches/farm/netns.rs"]
#[allow(dead_code)]
mod netns;

#[path = "../benches/farm/relay.rs"]
#[allow(dead_code)]
mod relay;
