//! Toolchains shipped to the agent: compile with a client's exact compiler
//! without having it installed.
//!
//! A task whose route key is none of the agent's own compilers names a
//! toolchain some consumerd packaged ([`crate::toolchain::Package`]). The
//! agent leases it from its [`Store`] — fetching, through the scheduler,
//! only the blobs it lacks — and runs it in a [`Sandbox`]: the toolchain's
//! files as the root, the task's directory the only writable place, no
//! network, no root. An agent that cannot make the sandbox says so at start
//! and serves only its installed compilers.

mod fetch;
pub mod inputs;
mod sandbox;
mod store;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;

pub use sandbox::{Sandbox, Top};
pub use store::{Lease, Origin, Ready, Store, StoreError, DEFAULT_MAX_BYTES};

/// What an agent needs to run shipped toolchains.
#[derive(Debug, Clone)]
pub struct Shipping {
    /// The sandbox.
    pub sandbox: Sandbox,
    /// The store.
    pub store: Arc<Store>,
}

/// Where the store lives by default: `$XDG_CACHE_HOME/ccroute/agent-store`,
/// else `~/.cache/ccroute/agent-store`, else the temp dir's.
pub fn default_store_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("ccroute").join("agent-store")
}
