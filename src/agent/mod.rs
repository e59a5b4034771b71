//! The agent: the compile executor, the CPU sampler, and CPU-limited
//! cgroups (toolchain discovery, shared with the consumerd, is
//! [`crate::toolchain`]).

pub mod cgroup;
#[cfg(feature = "daemon")]
pub mod daemon;
#[cfg(feature = "daemon")]
pub mod executor;
pub mod sampler;
pub mod shipped;
