//! ccroute: distributed C/C++ compiles for bare-metal build farms.
//!
//! - [`scheduler`]: the lock-free core — routes, tokens, the task lifecycle,
//!   hooks, the optimizer — and (feature `daemon`) the scheduler daemon.
//! - [`cc`]: compiler argument rules: what can go remote, how to preprocess it,
//!   what an agent may run.
//! - [`wrapper`]: the short process make and ninja run for every compile.
//! - `consumerd` (feature `daemon`): the local daemon the wrapper talks to.
//! - [`agent`]: toolchain discovery, the CPU sampler, cgroups, and (feature
//!   `daemon`) the compile executor and the agent daemon.
//! - [`cache`]: the result cache's storage tiers.
//! - `net` (feature `daemon`): QUIC endpoints, mutual TLS, framed streams.
//! - `cli`, `cluster` (feature `daemon`): the command line, and a whole
//!   cluster in one process for the demo and benches.
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
