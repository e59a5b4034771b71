//! ccroute: distributed C/C++ compiles for bare-metal build farms.
//!
//! - `scheduler` (feature `daemon`): the scheduler daemon around the
//!   lock-free core of the crate `ccroute-core` (routes, tokens, the task
//!   lifecycle, hooks, the optimizer's law): its QUIC server, the result
//!   cache hook, the payload budget, the optimizer's thread.
//! - [`cc`]: compiler argument rules: what can go remote, how to preprocess it,
//!   what an agent may run.
//! - [`wrapper`]: the short process make and ninja run for every compile.
//! - `consumerd` (feature `daemon`): the local daemon the wrapper talks to.
//! - [`agent`]: the CPU sampler, cgroups, and (feature `daemon`) the
//!   compile executor and the agent daemon.
//! - [`toolchain`]: a compiler's identity and discovery, which the agent
//!   (what it offers) and the consumerd (what a compile needs) share.
//! - [`host`]: facts about this machine: CPUs, host name, mounts, whether a
//!   process runs.
//! - [`local_socket`]: where the wrapper and the consumerd meet: the socket
//!   path, its directory's rules, the one-instance lock.
//! - [`jobserver`]: GNU make's jobserver pipe that `ccroute make` holds for
//!   a build, sized to the local slots and the farm's share.
//! - [`cache`]: the result cache's storage tiers.
//! - [`said`]: a recurring trouble said at most once a minute.
//! - `net` (feature `daemon`): QUIC endpoints, mutual TLS, framed streams.
//! - `cli`, `cluster` (feature `daemon`): the command line, and a whole
//!   cluster in one process for the demo and benches.

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
pub(crate) mod cost;
pub mod host;
pub mod jobserver;
pub mod local_socket;
pub mod memory;
#[cfg(feature = "daemon")]
pub mod net;
pub mod said;
#[cfg(feature = "daemon")]
pub mod scheduler;
#[doc(hidden)]
pub mod test_env;
pub mod toolchain;
pub mod wrapper;

/// The package's version and the commit it was built from (see build.rs;
/// "unknown" outside a git checkout), for `--version`.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("CCROUTE_COMMIT"), ")");
