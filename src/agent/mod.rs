//! The agent: the compile executor, the speed probe, the CPU sampler, CPU-limited cgroups,
//! and the store and sandbox of toolchains shipped to it (toolchain discovery, shared with the consumerd, is
//! [`crate::toolchain`]).

pub mod cgroup;
#[cfg(feature = "daemon")]
pub mod daemon;
#[cfg(feature = "daemon")]
pub mod executor;
pub mod sampler;
#[cfg(feature = "daemon")]
pub mod shipped;
#[cfg(feature = "daemon")]
pub mod speed_probe;
#[cfg(feature = "daemon")]
pub mod work;
