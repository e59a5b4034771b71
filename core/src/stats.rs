//! The snapshots status pages are made of (see [`crate::counters`] for what
//! they count).

use ccroute_wire::ToolchainKey;

use crate::records::{AgentId, ConsumerdId};

/// One route, for status pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSnapshot {
    /// Its key.
    pub toolchain: ToolchainKey,
    /// A toolchain with that key, when a peer described one.
    pub description: Option<ccroute_wire::Toolchain>,
    /// Node ids of the agents serving it.
    pub agents: Vec<u128>,
    /// Node ids of the consumerds that announce it.
    pub consumerds: Vec<u128>,
    /// Tasks waiting for a token.
    pub queued: usize,
}

/// One agent, for status pages and the optimizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSnapshot {
    /// The scheduler's id for it.
    pub id: AgentId,
    /// Its node id.
    pub node_id: u128,
    /// Its host name.
    pub host_name: String,
    /// Tokens held.
    pub tokens_in_use: u32,
    /// Token limit.
    pub token_limit: u32,
    /// The most it allows.
    pub max_limit: u32,
    /// Tasks sent to it.
    pub assigned: u64,
    /// Successful results.
    pub completed: u64,
    /// Failed results.
    pub failed: u64,
    /// Results for tasks that had ended.
    pub stale: u64,
    /// Tasks it held when lost.
    pub lost: u64,
    /// Its tasks that ran long and were copied to another agent.
    pub hedged: u64,
    /// Copies of other agents' tasks it answered first.
    pub copies_won: u64,
    /// Tasks waiting on its routes.
    pub waiting: usize,
    /// Compiles it says it started since it started (its last CPU sample).
    pub tasks_started: u64,
    /// Its speed, thousandths of the nominal (learnt or pinned).
    pub speed: u32,
}

/// One consumerd, for status pages and the optimizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerdSnapshot {
    /// The scheduler's id for it.
    pub id: ConsumerdId,
    /// Its node id.
    pub node_id: u128,
    /// Its host name.
    pub host_name: String,
    /// Tasks it submitted.
    pub submitted: u64,
    /// Tasks in flight.
    pub in_flight: u64,
    /// Its preferred remote limit.
    pub remote_limit: u32,
    /// Of its tasks, those a hook answered (cache hits).
    pub intercepted: u64,
}
