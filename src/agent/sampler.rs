//! CPU sampler.
