//! Routes and placement: which agent runs a task, or where it waits.
//!
//! A [`Route`] is everything that serves one toolchain key: the agents that
//! have it and one [`Lane`] (a FIFO of waiting tasks) per consumerd that sends
//! it. Routes live in a sharded map keyed by [`ToolchainKey`]; a route is
//! created by the first peer that attaches and removed, under the same shard
//! lock that attaches take, only once no agent and no lane is attached
//! (kubecc B7, B8: its routes were torn down asynchronously and a send could
//! hit a closed channel).
//!
//! Placement never takes a lock: the agent and lane lists are snapshots
//! (arc-swap), tokens are atomics, lanes are lock-free queues.
//!
//! - A new task takes a token from the least loaded agent of its route that
//!   has one (`in_use / limit`; for routes of more than [`WINDOW`] agents, the
//!   least loaded of a rotating window of them, widening to all when the
//!   window is full), or else waits in its consumerd's lane.
//! - An agent that gives a token back serves its routes' waiting tasks.
//! - Lanes are served round-robin, so one consumerd's big build cannot starve
//!   another's (fairness across consumerds within a route).
//!
//! The protocol that no task waits while a token is free — the one loom
//! checks — is a Dekker pair: a submitter *pushes, counts itself in
//! `queued`, fences, then looks for a token*; a releaser *gives the token
//! back, fences, then looks at `queued`*. With a `SeqCst` fence between each
//! side's write and its read, at least one of them sees the other's write,
//! so at least one of them places the task. (The writes are `SeqCst`
//! read-modify-writes already, which x86 orders anyway; the fences make the
//! argument hold in the language's memory model — and in loom, which models
//! `SeqCst` accesses as acquire/release but `SeqCst` fences exactly. Loom
//! found the missed wake-up without them.) The same pair guards an agent
//! leaving (remove it from the list, fence, look at `queued`) against a
//! submitter that saw it, and a consumerd leaving (mark its lane detached,
//! fence, drain) against a push into that lane.

use ccroute_wire::{RetryReason, Toolchain, ToolchainKey};

use super::broker::{AgentEntry, AgentEvent, ConsumerdEntry, Ending};
use super::task::{Phase, State, Task};
use super::{Core, Job};
use crate::sync::{fence, yield_now, Arc, AtomicBool, AtomicUsize, CachePadded, Ordering, Queue, Snapshot};

/// Routes with more agents than this look at a window of this many agents
/// per placement instead of all of them.
pub const WINDOW: usize = 8;

/// One toolchain's agents and waiting tasks.
pub(crate) struct Route<J: Job> {
    pub(crate) key: ToolchainKey,
    /// A toolchain with this key, for status pages.
    pub(crate) description: Snapshot<Option<Toolchain>>,
    pub(crate) agents: Snapshot<Vec<Arc<AgentEntry<J>>>>,
    pub(crate) lanes: Snapshot<Vec<Arc<Lane<J>>>>,
    /// Tasks pushed to a lane and not yet popped. May briefly read high
    /// (popped, not yet counted down) but never low: a push counts itself
    /// in only after the task is in its lane.
    queued: CachePadded<AtomicUsize>,
    /// Round-robin position over lanes.
    cursor: AtomicUsize,
    /// Rotating start of the agent window for large routes.
    window: AtomicUsize,
    /// Set when a task had to wait; the optimizer reads and clears it.
    pub(crate) waited: AtomicBool,
}

/// One consumerd's waiting tasks on one route.
pub(crate) struct Lane<J: Job> {
    pub(crate) node_id: u128,
    queue: Queue<Arc<Task<J>>>,
    /// Set once, when the consumerd leaves; a push that finds it set drains
    /// the lane itself (the leaver's drain may already have run).
    detached: AtomicBool,
    /// Whether the consumerd currently announces this toolchain.
    pub(crate) advertised: AtomicBool,
}

impl<J: Job> Route<J> {
    fn new(key: ToolchainKey) -> Self {
        Route {
            key,
            description: Snapshot::new(None),
            agents: Snapshot::new(Vec::new()),
            lanes: Snapshot::new(Vec::new()),
            queued: CachePadded::new(AtomicUsize::new(0)),
            cursor: AtomicUsize::new(0),
            window: AtomicUsize::new(0),
            waited: AtomicBool::new(false),
        }
    }

    /// Tasks waiting on this route.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    fn is_unused(&self) -> bool {
        self.agents.load().is_empty() && self.lanes.load().is_empty()
    }

    /// Takes the next waiting task, round-robin across lanes. Tasks that
    /// ended while they waited (cancelled) are dropped on the way.
    fn pop(&self) -> Option<Arc<Task<J>>> {
        let lanes = self.lanes.load();
        let n = lanes.len();
        if n == 0 {
            return None;
        }
        let start = self.cursor.fetch_add(1, Ordering::Relaxed);
        let mut i = 0;
        while i < n {
            let lane = &lanes[(start + i) % n];
            match lane.queue.pop() {
                Some(task) => {
                    self.queued.fetch_sub(1, Ordering::SeqCst);
                    if task.state().phase == Phase::Queued {
                        return Some(task);
                    }
                    // Ended while waiting: look at the same lane again.
                }
                None => i += 1,
            }
        }
        None
    }

    /// The least loaded agent with a free token, with that token taken.
    fn pick_agent<'a>(&self, agents: &'a [Arc<AgentEntry<J>>]) -> Option<&'a Arc<AgentEntry<J>>> {
        let n = agents.len();
        if n == 0 {
            return None;
        }
        let (mut start, mut width) =
            if n <= WINDOW { (0, n) } else { (self.window.fetch_add(1, Ordering::Relaxed) % n, WINDOW) };
        loop {
            let mut best: Option<(usize, u32, u32)> = None;
            let mut idx = start;
            for _ in 0..width {
                let (in_use, limit, free) = agents[idx].tokens.load();
                // in_use/limit < best_in_use/best_limit, without division.
                if free
                    && best
                        .is_none_or(|(_, bu, bl)| u64::from(in_use) * u64::from(bl) < u64::from(bu) * u64::from(limit))
                {
                    best = Some((idx, in_use, limit));
                }
                idx += 1;
                if idx == n {
                    idx = 0;
                }
            }
            match best {
                Some((idx, in_use, limit)) => {
                    if agents[idx].tokens.try_acquire() {
                        if in_use + 1 >= limit {
                            agents[idx].full_seen.store(true, Ordering::Relaxed);
                        }
                        return Some(&agents[idx]);
                    }
                    // Lost the token to another placement: look again.
                }
                None if width < n => {
                    start = 0;
                    width = n;
                }
                None => return None,
            }
        }
    }
}

impl<J: Job> Core<J> {
    /// Attaches an agent to the route for `toolchain`, creating the route.
    pub(crate) fn attach_agent(&self, toolchain: &Toolchain, agent: &Arc<AgentEntry<J>>) -> Arc<Route<J>> {
        let key = toolchain.key();
        self.routes.with_entry(
            key,
            || Arc::new(Route::new(key)),
            |route| {
                route.agents.update(|list| {
                    let mut next = list.clone();
                    next.push(agent.clone());
                    next
                });
                if route.description.load().is_none() {
                    route.description.update(|_| Some(toolchain.clone()));
                }
                route.clone()
            },
        )
    }

    /// Detaches an agent from a route, removing the route if nothing is left.
    pub(crate) fn detach_agent(&self, route: &Arc<Route<J>>, agent: &Arc<AgentEntry<J>>) {
        self.routes.with_entry(
            route.key,
            || route.clone(),
            |r| {
                r.agents.update(|list| list.iter().filter(|a| !Arc::ptr_eq(a, agent)).cloned().collect());
            },
        );
        self.routes.remove_if(&route.key, |r| r.is_unused());
    }

    /// Gives a consumerd a lane on the route for `toolchain`.
    pub(crate) fn attach_lane(
        &self,
        toolchain: ToolchainKey,
        description: Option<&Toolchain>,
        consumerd: &ConsumerdEntry<J>,
        advertised: bool,
    ) -> (Arc<Route<J>>, Arc<Lane<J>>) {
        self.routes.with_entry(
            toolchain,
            || Arc::new(Route::new(toolchain)),
            |route| {
                let lane = Arc::new(Lane {
                    node_id: consumerd.node_id,
                    queue: Queue::new(),
                    detached: AtomicBool::new(false),
                    advertised: AtomicBool::new(advertised),
                });
                route.lanes.update(|list| {
                    let mut next = list.clone();
                    next.push(lane.clone());
                    next
                });
                if let (Some(d), true) = (description, route.description.load().is_none()) {
                    route.description.update(|_| Some(d.clone()));
                }
                (route.clone(), lane)
            },
        )
    }

    /// Detaches a leaving consumerd's lane. Its tasks have all ended already;
    /// whatever still sits in the lane is dropped.
    pub(crate) fn detach_lane(&self, route: &Arc<Route<J>>, lane: &Arc<Lane<J>>) {
        lane.detached.store(true, Ordering::SeqCst);
        // Pairs with the fence in `enqueue`: a push we do not see, sees us.
        fence(Ordering::SeqCst);
        self.routes.with_entry(
            route.key,
            || route.clone(),
            |r| {
                r.lanes.update(|list| list.iter().filter(|l| !Arc::ptr_eq(l, lane)).cloned().collect());
            },
        );
        self.drain_lane(route, lane, RetryReason::NoAgents);
        self.routes.remove_if(&route.key, |r| r.is_unused());
    }

    /// Empties a lane, answering "run locally" for any task still waiting.
    fn drain_lane(&self, route: &Route<J>, lane: &Lane<J>, reason: RetryReason) {
        while let Some(task) = lane.queue.pop() {
            route.queued.fetch_sub(1, Ordering::SeqCst);
            self.end_waiting(&task, reason.clone());
        }
    }

    /// Ends a task that is waiting (QUEUED) with "run locally".
    fn end_waiting(&self, task: &Arc<Task<J>>, reason: RetryReason) {
        let s = task.state();
        if s.phase == Phase::Queued && task.transition(s, State::ended()) {
            self.end(task, Ending::RunLocally(reason));
        }
    }

    /// Places a task that is QUEUED: on an agent with a free token, or in its
    /// lane; or answers it when its route has no agent or no room.
    pub(crate) fn place(&self, task: Arc<Task<J>>) {
        // No clone of the route's Arc on this path: its count is shared by
        // every thread placing on it.
        let agents = task.route.agents.load();
        if let Some(agent) = task.route.pick_agent(&agents) {
            if self.try_assign(agent, task).is_err() {
                // The task ended meanwhile; the token we took is free again.
                agent.tokens.release();
                self.serve_routes_of(agent);
            }
            return;
        }
        let no_agents = agents.is_empty();
        drop(agents);
        if no_agents {
            self.end_waiting(&task, RetryReason::NoAgents);
            return;
        }
        if task.route.queued() >= self.config.max_queued_per_route {
            self.end_waiting(&task, RetryReason::QueueFull);
            return;
        }
        let route = task.route.clone();
        self.enqueue(&route, task);
        self.dispatch(&route);
    }

    /// Puts a task in its lane and counts it in.
    fn enqueue(&self, route: &Route<J>, task: Arc<Task<J>>) {
        let lane = task.lane.clone();
        lane.queue.push(task);
        route.queued.fetch_add(1, Ordering::SeqCst);
        if !route.waited.load(Ordering::Relaxed) {
            route.waited.store(true, Ordering::Relaxed);
        }
        // Pairs with the fence in `dispatch`/`serve_routes_of` (token given
        // back, agent gone) and in `detach_lane` (lane detached).
        fence(Ordering::SeqCst);
        if lane.detached.load(Ordering::SeqCst) {
            // The consumerd left between our look-up and the push, and its
            // drain may have run already: drain behind it.
            self.drain_lane(route, &lane, RetryReason::NoAgents);
        }
    }

    /// CAS QUEUED → ASSIGNED(agent) and hand the task (moved, not cloned)
    /// to the agent. The caller holds a token on `agent`; on `Err` — the task
    /// had ended — it still does.
    fn try_assign(&self, agent: &AgentEntry<J>, task: Arc<Task<J>>) -> Result<(), Arc<Task<J>>> {
        let s = task.state();
        if s.phase != Phase::Queued || !task.transition(s, State::assigned(agent.id.0, s.attempt)) {
            return Err(task);
        }
        agent.outbox.push(AgentEvent::Assign(task));
        Ok(())
    }

    /// Serves waiting tasks of `route` while it has both waiting tasks and
    /// free tokens. Called after every push to a lane, every token given
    /// back and every agent that joins or leaves.
    pub(crate) fn dispatch(&self, route: &Route<J>) {
        'outer: loop {
            // Pairs with the fence in `enqueue`: whatever the caller just did
            // (gave a token back, removed an agent, pushed a task) is ordered
            // before this look at `queued`.
            fence(Ordering::SeqCst);
            if route.queued() == 0 {
                return;
            }
            let agents = route.agents.load();
            if agents.is_empty() {
                let reason = if self.is_shutting_down() { RetryReason::ShuttingDown } else { RetryReason::NoAgents };
                for lane in route.lanes.load().iter() {
                    self.drain_lane(route, lane, reason.clone());
                }
                return;
            }
            let Some(agent) = route.pick_agent(&agents) else {
                return;
            };
            // We hold a token on `agent`: spend it on the next live task.
            loop {
                match route.pop() {
                    Some(task) => {
                        if self.try_assign(agent, task).is_ok() {
                            continue 'outer;
                        }
                    }
                    None => {
                        agent.tokens.release();
                        // `queued` said there was work but a concurrent pop
                        // took it: let that pop finish counting down.
                        yield_now();
                        continue 'outer;
                    }
                }
            }
        }
    }

    /// After a token of `agent` came back: serve the waiting tasks of its routes.
    pub(crate) fn serve_routes_of(&self, agent: &AgentEntry<J>) {
        self.serve_routes(&agent.routes.load());
    }

    /// As [`Core::serve_routes_of`], given the agent's routes (its session
    /// keeps a copy, sparing the snapshot load on every completion).
    pub(crate) fn serve_routes(&self, routes: &[Arc<Route<J>>]) {
        // Pairs with the fence in `enqueue`: the token given back is ordered
        // before these looks at `queued`.
        fence(Ordering::SeqCst);
        for route in routes {
            if route.queued() > 0 {
                self.dispatch(route);
            }
        }
    }

    /// Answers every waiting task "run locally", for shutdown.
    pub(crate) fn drain_all(&self, reason: RetryReason) {
        for route in self.routes.values() {
            for lane in route.lanes.load().iter() {
                self.drain_lane(&route, lane, reason.clone());
            }
        }
    }
}
