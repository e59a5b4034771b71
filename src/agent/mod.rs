//! The agent: toolchain discovery and the CPU sampler.

pub mod sampler;
pub mod toolchain;
