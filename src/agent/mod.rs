//! The agent: toolchain discovery, the CPU sampler, and CPU-limited cgroups.

pub mod cgroup;
pub mod sampler;
pub mod toolchain;
