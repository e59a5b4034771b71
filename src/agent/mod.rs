//! The agent: toolchain discovery, the compile executor, the CPU sampler,
//! and CPU-limited cgroups.

pub mod cgroup;
#[cfg(feature = "daemon")]
pub mod daemon;
#[cfg(feature = "daemon")]
pub mod executor;
pub mod sampler;
pub mod toolchain;
