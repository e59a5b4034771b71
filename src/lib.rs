//! ccroute: distributed C/C++ compiles for bare-metal build farms.
//!
//! - [`scheduler`]: the lock-free core — routes, tokens, the task lifecycle,
//!   hooks, the optimizer.
//! - [`cc`]: compiler argument rules: what can go remote, how to preprocess it,
//!   what an agent may run.
//! - [`agent`]: toolchain discovery and the CPU sampler.
//! - [`cache`]: the result cache's storage tiers.
//! - `net` (feature `daemon`): QUIC endpoints, mutual TLS, framed streams.
//! - [`sync`]: std or loom primitives, by `cfg(ccroute_loom)`.

pub mod agent;
pub mod cache;
pub mod cc;
#[cfg(feature = "daemon")]
pub mod cli;
#[cfg(feature = "daemon")]
pub mod cluster;
#[cfg(feature = "daemon")]
pub mod consumerd;
#[cfg(feature = "daemon")]
pub mod net;
pub mod scheduler;
pub mod sync;
pub mod wrapper;
