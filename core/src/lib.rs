//! The scheduler core: routes, tokens, the task lifecycle, hooks, and the
//! optimizer's control law. No I/O and no async runtime: the network layer
//! drives it through sessions, and tests and benches drive it the same way.
//!
//! - [`Scheduler`]: the handle; connects agents and consumerds, answers
//!   status questions, moves token limits, shuts down.
//! - [`ConsumerdSession`] / [`AgentSession`]: one per connected peer, owned
//!   by the task that serves its connection; each has an outbox that task
//!   drains (see [`broker`]).
//! - [`router`]: routes, lanes and placement; [`tokens`]: per-agent
//!   semaphores; [`task`]: the state word that makes each task end once;
//!   [`hooks`]: `pre_receive` before routing, as in kubecc.
//!
//! The hot path — submit, place, take and give back a token, complete,
//! answer — takes no lock: atomics, lock-free queues and arc-swap snapshots.
//! The sharded maps of routes, agents and consumerds are locked (one shard,
//! briefly) only when a peer joins, leaves or changes toolchains, and when a
//! cancel looks up its agent.
//!
//! Left out on purpose: bytes, sockets, time. A task's body and an answer are
//! whatever the [`Job`] says; timeouts belong to the callers.

pub mod broker;
pub mod hooks;
pub mod optimizer;
pub mod outbox;
pub mod router;
pub mod stats;
pub mod sync;
pub mod task;
pub mod tokens;

use ccroute_wire::{RetryReason, Toolchain, ToolchainKey, Totals};

pub use self::broker::{AgentSession, Answer, CompleteError, ConsumerdSession, Dispatch, PeerInfo, Reply};
pub use self::hooks::{EndView, Hook, HookAction, Interception, TaskRef};
pub use self::stats::{AgentSnapshot, ConsumerdSnapshot, RouteSnapshot};
pub use self::task::Task;
pub use self::tokens::{TokenPool, MAX_TOKENS};

use self::broker::{AgentEntry, ConsumerdEntry};
use self::router::Route;
use self::stats::Retired;
use crate::sync::{Arc, AtomicBool, AtomicU32, Ordering, ShardedMap};

/// What the scheduler carries: the network layer's task bodies and answers.
pub trait Job: Send + Sync + Sized + 'static {
    /// What an agent needs to run a task (header and payload).
    type Task: Send + Sync + 'static;
    /// What an agent, or a hook, answers.
    type Answer: Send + Sync + 'static;
    /// How an answer counts.
    fn classify(answer: &Self::Answer) -> AnswerKind;
}

/// How an answer counts in the statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerKind {
    /// The compile succeeded.
    Success,
    /// The compile failed, or the agent could not run it.
    Failed,
}

/// One agent as the optimizer sees it, from [`Scheduler::agent_loads`].
#[derive(Debug, Clone, PartialEq)]
pub struct AgentLoad {
    /// The agent.
    pub id: AgentId,
    /// CPU samples since the last call, oldest first.
    pub samples: Vec<ccroute_wire::CpuSample>,
    /// Its token limit.
    pub limit: u32,
    /// The most it allows.
    pub max_limit: u32,
    /// Tokens held now.
    pub tokens_in_use: u32,
    /// Whether all its tokens were taken at some point since the last call.
    pub all_taken: bool,
    /// Whether tasks waited on its routes since the last call.
    pub tasks_waited: bool,
}

/// One consumerd as the optimizer sees it, from [`Scheduler::consumerd_loads`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerdLoad {
    /// The consumerd.
    pub id: ConsumerdId,
    /// Tasks it wants remote now.
    pub wanted: u32,
    /// Tasks it submitted so far.
    pub submitted: u64,
    /// Of those, answered by a hook (the cache) so far.
    pub intercepted: u64,
}

/// The scheduler's id for a connected agent (never reused while it runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AgentId(pub u32);

/// The scheduler's id for a connected consumerd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConsumerdId(pub u32);

/// The scheduler's id for a task: its consumerd's id and a sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(pub u64);

/// The seed's errors, with their meanings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// No connected agent has the task's toolchain.
    #[error("no available agents can run this task")]
    NoAgents,
    /// The task's stream (its consumerd's connection) is closed.
    #[error("task stream closed")]
    StreamClosed,
    /// A hook rejected the task.
    #[error("the task has been rejected by the server: {0}")]
    Rejected(String),
    /// The task names no toolchain.
    #[error("invalid or missing toolchain {0}")]
    InvalidToolchain(ToolchainKey),
    /// A task id already in flight was submitted again.
    #[error("task {0} is already in flight")]
    DuplicateTask(u64),
}

/// Bounds and policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Placements a task gets in all; when its agent is lost after the last
    /// one, it goes back to run locally.
    pub max_attempts: u8,
    /// Tasks that may wait on one route; past it a task goes back to run
    /// locally at once.
    pub max_queued_per_route: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config { max_attempts: 3, max_queued_per_route: 4096 }
    }
}

/// The shared state behind a [`Scheduler`].
pub(crate) struct Core<J: Job> {
    pub(crate) config: Config,
    pub(crate) routes: ShardedMap<ToolchainKey, Arc<Route<J>>>,
    pub(crate) agents: ShardedMap<AgentId, Arc<AgentEntry<J>>>,
    pub(crate) consumerds: ShardedMap<ConsumerdId, Arc<ConsumerdEntry<J>>>,
    /// Immutable after construction: plain std `Arc`s, outside what loom models.
    pub(crate) hooks: Vec<std::sync::Arc<dyn Hook<J>>>,
    pub(crate) retired: Retired,
    next_peer: AtomicU32,
    shutting_down: AtomicBool,
}

impl<J: Job> Core<J> {
    pub(crate) fn next_peer_id(&self) -> u32 {
        // Starts at 1: 0 means "no agent" in a task's state word.
        self.next_peer.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }
}

/// The scheduler: cheap to clone, shared by every connection.
pub struct Scheduler<J: Job> {
    core: Arc<Core<J>>,
}

impl<J: Job> Clone for Scheduler<J> {
    fn clone(&self) -> Self {
        Scheduler { core: self.core.clone() }
    }
}

impl<J: Job> std::fmt::Debug for Scheduler<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler").field("config", &self.core.config).finish()
    }
}

impl<J: Job> Scheduler<J> {
    /// A scheduler with no hooks.
    pub fn new(config: Config) -> Self {
        Self::with_hooks(config, Vec::new())
    }

    /// A scheduler whose tasks pass through `hooks`, in order, before routing.
    pub fn with_hooks(config: Config, hooks: Vec<std::sync::Arc<dyn Hook<J>>>) -> Self {
        let config = Config { max_attempts: config.max_attempts.max(1), ..config };
        Scheduler {
            core: Arc::new(Core {
                config,
                routes: ShardedMap::new(),
                agents: ShardedMap::new(),
                consumerds: ShardedMap::new(),
                hooks,
                retired: Retired::default(),
                next_peer: AtomicU32::new(1),
                shutting_down: AtomicBool::new(false),
            }),
        }
    }

    /// An agent connected, with these toolchains and at most `max_limit`
    /// tasks at once (its `--jobs`; clamped to `[1, MAX_TOKENS]`, and its
    /// starting token limit). Dropping the session is the agent leaving.
    pub fn connect_agent(&self, peer: PeerInfo, toolchains: &[Toolchain], max_limit: u32) -> AgentSession<J> {
        AgentSession::connect(&self.core, peer, toolchains, max_limit)
    }

    /// A consumerd connected, announcing these toolchains. Dropping the
    /// session is the consumerd leaving.
    pub fn connect_consumerd(&self, peer: PeerInfo, toolchains: &[Toolchain]) -> ConsumerdSession<J> {
        ConsumerdSession::connect(&self.core, peer, toolchains)
    }

    /// Every route that has an agent, an announcing consumerd, or waiting tasks.
    pub fn routes(&self) -> Vec<RouteSnapshot> {
        let mut out: Vec<RouteSnapshot> = self
            .core
            .routes
            .values()
            .into_iter()
            .map(|r| RouteSnapshot {
                toolchain: r.key,
                description: r.description.load().as_ref().clone(),
                agents: r.agents.load().iter().map(|a| a.node_id).collect(),
                consumerds: r
                    .lanes
                    .load()
                    .iter()
                    .filter(|l| l.advertised.load(Ordering::Relaxed))
                    .map(|l| l.node_id)
                    .collect(),
                queued: r.queued(),
            })
            .filter(|r| !r.agents.is_empty() || !r.consumerds.is_empty() || r.queued > 0)
            .collect();
        out.sort_by_key(|r| r.toolchain);
        out
    }

    /// Every connected agent.
    pub fn agents(&self) -> Vec<AgentSnapshot> {
        let mut out: Vec<AgentSnapshot> = self
            .core
            .agents
            .values()
            .into_iter()
            .map(|a| AgentSnapshot {
                id: a.id,
                node_id: a.node_id,
                host_name: a.host_name.clone(),
                tokens_in_use: a.tokens.in_use(),
                token_limit: a.tokens.limit(),
                max_limit: a.max_limit.load(Ordering::Relaxed),
                assigned: a.counters.assigned.get(),
                completed: a.counters.completed.get(),
                failed: a.counters.failed.get(),
                stale: a.counters.stale.get(),
                lost: a.counters.lost.get(),
                waiting: a.routes.load().iter().map(|r| r.queued()).sum(),
            })
            .collect();
        out.sort_by_key(|a| a.id);
        out
    }

    /// Every connected consumerd.
    pub fn consumerds(&self) -> Vec<ConsumerdSnapshot> {
        let mut out: Vec<ConsumerdSnapshot> = self
            .core
            .consumerds
            .values()
            .into_iter()
            .map(|c| ConsumerdSnapshot {
                id: c.id,
                node_id: c.node_id,
                host_name: c.host_name.clone(),
                submitted: c.counters.submitted.get(),
                in_flight: c.in_flight.load(Ordering::Relaxed),
                remote_limit: c.remote_limit.load(Ordering::Relaxed),
            })
            .collect();
        out.sort_by_key(|c| c.id);
        out
    }

    /// Scheduler-wide counters: connected peers plus those that left.
    pub fn totals(&self) -> Totals {
        let mut t = self.core.retired.totals();
        for c in self.core.consumerds.values() {
            stats::add_consumerd(&mut t, &c.counters);
        }
        for a in self.core.agents.values() {
            t.requeued += a.counters.lost.get();
        }
        t
    }

    /// Sets an agent's token limit, clamped to `[1, its maximum]`; returns
    /// the limit applied, or `None` when no such agent is connected. Tasks
    /// waiting on its routes are placed at once when the limit grows.
    pub fn set_agent_limit(&self, agent: AgentId, limit: u32) -> Option<u32> {
        let entry = self.core.agents.get(&agent)?;
        let applied = limit.clamp(1, entry.max_limit.load(Ordering::Relaxed));
        let old = entry.tokens.set_limit(applied);
        if applied > old {
            self.core.serve_routes_of(&entry);
        }
        Some(applied)
    }

    /// What the optimizer needs of every connected agent since its last
    /// call: the samples (drained from each agent's ring), whether all its
    /// tokens were taken and whether tasks waited on its routes (both read
    /// and cleared), and its limits now.
    pub fn agent_loads(&self) -> Vec<AgentLoad> {
        let mut out: Vec<AgentLoad> = self
            .core
            .agents
            .values()
            .into_iter()
            .map(|a| {
                let mut samples = Vec::with_capacity(a.samples.len());
                while let Some(s) = a.samples.pop() {
                    samples.push(s);
                }
                let (in_use, limit, _) = a.tokens.load();
                let routes = a.routes.load();
                // Every route is looked at (and cleared), not just until one says yes.
                let waited = routes.iter().fold(false, |any, r| r.waited.swap(false, Ordering::Relaxed) | any)
                    || routes.iter().any(|r| r.queued() > 0);
                AgentLoad {
                    id: a.id,
                    samples,
                    limit,
                    max_limit: a.max_limit.load(Ordering::Relaxed),
                    tokens_in_use: in_use,
                    all_taken: a.full_seen.swap(false, Ordering::Relaxed) || in_use >= limit,
                    tasks_waited: waited,
                }
            })
            .collect();
        out.sort_by_key(|a| a.id);
        out
    }

    /// What each connected consumerd wants remote — what it last said, or
    /// its tasks in flight if it never said — and how many of its tasks the
    /// hooks (the cache) answered so far.
    pub fn consumerd_loads(&self) -> Vec<ConsumerdLoad> {
        let mut out: Vec<ConsumerdLoad> = self
            .core
            .consumerds
            .values()
            .into_iter()
            .map(|c| {
                let said = c.demand.load(Ordering::Relaxed);
                let wanted = if said == u32::MAX { c.in_flight.load(Ordering::Relaxed) as u32 } else { said };
                ConsumerdLoad {
                    id: c.id,
                    wanted,
                    submitted: c.counters.submitted.get(),
                    intercepted: c.counters.intercepted.get(),
                }
            })
            .collect();
        out.sort_by_key(|c| c.id);
        out
    }

    /// Sets a consumerd's preferred remote limit.
    pub fn set_remote_limit(&self, consumerd: ConsumerdId, limit: u32) {
        if let Some(entry) = self.core.consumerds.get(&consumerd) {
            entry.remote_limit.store(limit, Ordering::Relaxed);
        }
    }

    /// The sum of the connected agents' token limits.
    pub fn cluster_limit(&self) -> u32 {
        self.core.agents.values().iter().map(|a| a.tokens.limit()).sum()
    }

    /// Stops accepting work: new tasks, and every task still waiting, are
    /// answered "run locally"; tasks on agents finish normally.
    pub fn shutdown(&self) {
        self.core.shutting_down.store(true, Ordering::SeqCst);
        self.core.drain_all(RetryReason::ShuttingDown);
    }

    /// Whether [`Scheduler::shutdown`] was called.
    pub fn is_shutting_down(&self) -> bool {
        self.core.is_shutting_down()
    }
}

#[cfg(all(test, not(ccroute_loom)))]
mod tests;

/// What the root package's tests build their own cores from.
#[cfg(not(ccroute_loom))]
#[doc(hidden)]
pub mod test_support {
    use ccroute_wire::{Lang, Toolchain, ToolchainKind};

    use super::{AnswerKind, Job, PeerInfo};

    /// Bodies are numbers; answers say whether the compile succeeded.
    #[derive(Debug)]
    pub struct TestJob;

    impl Job for TestJob {
        type Task = u64;
        type Answer = bool;
        fn classify(ok: &bool) -> AnswerKind {
            if *ok {
                AnswerKind::Success
            } else {
                AnswerKind::Failed
            }
        }
    }

    /// A gcc-like toolchain named `name`.
    pub fn tc(name: &str) -> Toolchain {
        Toolchain {
            kind: ToolchainKind::Gnu,
            lang: Lang::C,
            compiler: name.into(),
            target: "x86_64-linux-gnu".into(),
            version: "12".into(),
            pic_default: true,
            pie_default: true,
            binary_hash: [1; 32],
        }
    }

    /// A peer numbered `n`.
    pub fn peer(n: u128) -> PeerInfo {
        PeerInfo { node_id: n, host_name: format!("host-{n}") }
    }
}
