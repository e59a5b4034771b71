//! The handle a daemon holds: connects agents and consumerds (each a
//! session), answers status questions, moves token limits, shuts down.

use ccroute_wire::{RetryReason, Toolchain, Totals};

use crate::counters;
use crate::lifecycle::{Core, Hook};
use crate::records::{AgentId, AgentLoad, Config, ConsumerdId, ConsumerdLoad, Job, PeerInfo};
use crate::sessions::{AgentSession, ConsumerdSession};
use crate::stats::{AgentSnapshot, ConsumerdSnapshot, RouteSnapshot};
use crate::sync::{Arc, Ordering};

/// The scheduler: cheap to clone, shared by every connection.
pub struct Scheduler<J: Job> {
    pub(crate) core: Arc<Core<J>>,
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
        Scheduler { core: Arc::new(Core::new(config, hooks)) }
    }

    /// An agent connected, with these toolchains and at most `max_limit`
    /// tasks at once (its `--jobs`; clamped to `[1, MAX_TOKENS]`, and its
    /// starting token limit). Dropping the session is the agent leaving.
    pub fn connect_agent(&self, peer: PeerInfo, toolchains: &[Toolchain], max_limit: u32) -> AgentSession<J> {
        AgentSession::connect(&self.core, peer, toolchains, max_limit, 0)
    }

    /// [`Scheduler::connect_agent`] for an agent that still runs `resumed`
    /// tasks for an earlier scheduler: that many of its tokens (at most its
    /// limit) are reserved before any placement sees it, and each moves to
    /// the task that adopts it ([`crate::Interception::adopt`]) or comes back
    /// through [`AgentSession::release_reserved`].
    pub fn connect_agent_resuming(
        &self,
        peer: PeerInfo,
        toolchains: &[Toolchain],
        max_limit: u32,
        resumed: u32,
    ) -> AgentSession<J> {
        AgentSession::connect(&self.core, peer, toolchains, max_limit, resumed)
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
            .router
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
                hedged: a.counters.hedged.get(),
                copies_won: a.counters.copies_won.get(),
                waiting: a.routes.load().iter().map(|r| r.queued()).sum(),
                tasks_started: a.tasks_started.load(Ordering::Relaxed),
                speed: a.speed.load(Ordering::Relaxed),
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
                intercepted: c.counters.intercepted.get(),
            })
            .collect();
        out.sort_by_key(|c| c.id);
        out
    }

    /// Tokens that leaving agents' sessions ended without, after waiting
    /// [`crate::Config::token_wait`] for them: a leak, a bug in ccroute;
    /// 0 on a healthy scheduler.
    pub fn leaked_tokens(&self) -> u64 {
        self.core.retired.leaked_tokens()
    }

    /// Scheduler-wide counters: connected peers plus those that left.
    pub fn totals(&self) -> Totals {
        let mut t = self.core.retired.totals();
        for c in self.core.consumerds.values() {
            counters::add_consumerd(&mut t, &c.counters);
        }
        for a in self.core.agents.values() {
            t.requeued += a.counters.lost.get();
            t.agent_results += a.counters.results();
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
            self.core.router.serve_routes_of(&entry, &*self.core);
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
        self.core.router.drain_all(RetryReason::ShuttingDown, &*self.core);
    }
}
