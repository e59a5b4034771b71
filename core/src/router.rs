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
//!   window is full), or else waits in its consumerd's lane. A task that
//!   finds others waiting joins them, while the route's queue has room.
//! - An agent that gives a token back serves its routes' waiting tasks,
//!   looking at itself beside the window, and stops once a task has that
//!   token ([`Router::gave_one_back`]). In a full farm — most of a large build — its
//!   token is the only free one: found at once, where a look over the
//!   window and then every agent of the route cost 85 % of the core's time
//!   at 1,000 agents (`cargo bench --bench dispatch`, "1000 agents, full").
//! - Lanes are served round-robin, so one consumerd's big build cannot starve
//!   another's (fairness across consumerds within a route). Within a lane,
//!   with [`crate::Config::longest_first`], the longest expected task goes
//!   first ([`Ranked`]: a queue per cost class), so a build's long units do
//!   not start last and hold its end.
//!
//! - With [`crate::Config::speed_aware`], agents have speeds (thousandths of
//!   the nominal, learnt from their results) and a task goes to the agent
//!   expected to finish it first: the fastest with a free token (least
//!   loaded among those of about its speed). When only agents clearly slower
//!   than the route's fastest have a token, a task whose expected finish on
//!   a faster agent — after the wait for one of their tokens, estimated
//!   from their rate of tasks and the tasks waiting ahead — is sooner waits
//!   for it instead; a slow agent serves the cheapest waiting tasks first
//!   and a fast one the dearest. A task so kept waiting is a task a faster
//!   agent's next free token serves: every token given back serves its
//!   routes, as below. A task whose cost is not known ([`Job::expected_micros`]
//!   is `None`: a cold model's guess) is never kept waiting so.
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

use crate::records::{AgentEntry, AgentEvent, ConsumerdEntry, Ending, Job, Lane, Phase, Ranked, Route, State, Task};
use crate::sync::{fence, yield_now, Arc, AtomicBool, Ordering, ShardedMap};

/// Routes with more agents than this look at a window of this many agents
/// per placement instead of all of them.
pub const WINDOW: usize = 8;

/// How placement ends a task it cannot place (no agent, no room, a lane
/// whose consumerd left): the lifecycle's end, which runs the hooks' `on_end`
/// and answers the consumerd. Implemented by [`crate::lifecycle::Core`].
pub(crate) trait Ends<J: Job> {
    /// Finishes a task whose state word the caller moved to ENDED.
    fn end(&self, task: &Arc<Task<J>>, ending: Ending<J::Answer>);
    /// Whether the scheduler is shutting down (the reason a drained task gets).
    fn is_shutting_down(&self) -> bool;
}

/// Every route, by toolchain key, and the bound on a route's waiting tasks.
pub(crate) struct Router<J: Job> {
    pub(crate) routes: ShardedMap<ToolchainKey, Arc<Route<J>>>,
    max_queued: usize,
    /// [`crate::Config::speed_aware`].
    speed_aware: bool,
}

impl<J: Job> Router<J> {
    pub(crate) fn new(max_queued: usize, speed_aware: bool) -> Self {
        Router { routes: ShardedMap::new(), max_queued, speed_aware }
    }

    /// Attaches an agent to the route for `toolchain`, creating the route.
    /// `key` is `toolchain.key()`, computed once by the caller.
    pub(crate) fn attach_agent(
        &self,
        key: ToolchainKey,
        toolchain: &Toolchain,
        agent: &Arc<AgentEntry<J>>,
    ) -> Arc<Route<J>> {
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
                route.fastest.fetch_max(agent.speed.load(Ordering::Relaxed), Ordering::Relaxed);
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
        self.speed_changed(route);
        self.routes.remove_if(&route.key, |r| r.is_unused());
    }

    /// An agent of `route` changed speed, or left: its fastest is looked up again.
    pub(crate) fn speed_changed(&self, route: &Route<J>) {
        let fastest = route.agents.load().iter().map(|a| a.speed.load(Ordering::Relaxed)).max().unwrap_or(0);
        route.fastest.store(fastest, Ordering::Relaxed);
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
                    queue: Ranked::new(),
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
    pub(crate) fn detach_lane(&self, route: &Arc<Route<J>>, lane: &Arc<Lane<J>>, ends: &impl Ends<J>) {
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
        self.drain_lane(route, lane, RetryReason::NoAgents, ends);
        self.routes.remove_if(&route.key, |r| r.is_unused());
    }

    /// Empties a lane, answering "run locally" for any task still waiting.
    fn drain_lane(&self, route: &Route<J>, lane: &Lane<J>, reason: RetryReason, ends: &impl Ends<J>) {
        while let Some(task) = lane.queue.pop() {
            route.queued.fetch_sub(1, Ordering::SeqCst);
            self.end_waiting(&task, reason.clone(), ends);
        }
    }

    /// Ends a task that is waiting (QUEUED) with "run locally".
    fn end_waiting(&self, task: &Arc<Task<J>>, reason: RetryReason, ends: &impl Ends<J>) {
        let s = task.state();
        if s.phase == Phase::Queued && task.transition(s, State::ended()) {
            ends.end(task, Ending::RunLocally(reason));
        }
    }

    /// Places a task that is QUEUED: on an agent with a free token, or in its
    /// lane; or answers it when its route has no agent or no room.
    pub(crate) fn place(&self, task: Arc<Task<J>>, ends: &impl Ends<J>) {
        // No clone of the route's Arc on this path: its count is shared by
        // every thread placing on it.
        let agents = task.route.agents.load();
        // With tasks waiting, a token that comes free serves them: this one
        // joins them (below) rather than take a token ahead of them, and
        // does not look over every agent of a full farm twice. Unless there
        // is no room to wait: then it runs anywhere before it is refused.
        let queued = task.route.queued();
        let joins = queued > 0 && queued < self.max_queued;
        let first = if joins { None } else { pick_agent(&task.route, &agents, self.speed_aware, 0, None) };
        if let Some(agent) = first {
            let room = task.route.queued() < self.max_queued;
            if room && self.speed_aware && sooner_elsewhere(&task, agent, &task.route, &agents) {
                // Placed below, by a faster agent's token (or waits for one).
                agent.tokens.release();
            } else {
                if self.try_assign(agent, task).is_err() {
                    // The task ended meanwhile; the token we took is free again.
                    agent.tokens.release();
                    self.gave_one_back(agent, ends);
                }
                return;
            }
        }
        let no_agents = agents.is_empty();
        drop(agents);
        if no_agents {
            self.end_waiting(&task, RetryReason::NoAgents, ends);
            return;
        }
        if task.route.queued() >= self.max_queued {
            self.end_waiting(&task, RetryReason::QueueFull, ends);
            return;
        }
        let route = task.route.clone();
        self.enqueue(&route, task, ends);
        self.dispatch(&route, None, ends);
    }

    /// Puts a task in its lane and counts it in.
    fn enqueue(&self, route: &Route<J>, task: Arc<Task<J>>, ends: &impl Ends<J>) {
        let lane = task.lane.clone();
        lane.queue.push(task.class, task);
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
            self.drain_lane(route, &lane, RetryReason::NoAgents, ends);
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
        if self.speed_aware {
            // A moving average (1/16 a task); a racing update may be lost, and
            // that only makes it a little staler.
            let cost = J::expected_or_default(&task.body);
            let typical = agent.typical_cost.load(Ordering::Relaxed);
            agent.typical_cost.store(typical - typical / 16 + cost / 16, Ordering::Relaxed);
        }
        agent.outbox.push(AgentEvent::Assign(task));
        Ok(())
    }

    /// Serves waiting tasks of `route` while it has both waiting tasks and
    /// free tokens. Called after every push to a lane, every token given
    /// back and every agent that joins or leaves. `gave_one` is the agent
    /// that gave one token back, if that is why: it is looked at first, and
    /// the serving is done once a task has that token. Any other free token
    /// is its own giver's to serve, or was seen by a submitter after it came
    /// free (the pair the module describes), so in a full farm a completion
    /// serves the next task without a look over every agent of the route.
    /// Otherwise (a push, an agent that joined, left or has more tokens) it
    /// serves while tasks wait and tokens are free.
    pub(crate) fn dispatch(&self, route: &Route<J>, gave_one: Option<&AgentEntry<J>>, ends: &impl Ends<J>) {
        // After an agent declined (each task was expected to finish sooner
        // elsewhere): only agents clearly faster than it, so the loop ends.
        let mut above = 0;
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
                let reason = if ends.is_shutting_down() { RetryReason::ShuttingDown } else { RetryReason::NoAgents };
                for lane in route.lanes.load().iter() {
                    self.drain_lane(route, lane, reason.clone(), ends);
                }
                return;
            }
            let Some(agent) = pick_agent(route, &agents, self.speed_aware, above, gave_one) else {
                return;
            };
            let speed = agent.speed.load(Ordering::Relaxed);
            let slow = self.speed_aware && clearly_faster(route.fastest.load(Ordering::Relaxed), speed);
            // We hold a token on `agent`: spend it on the next live task.
            loop {
                match pop(route, slow) {
                    Some(task) => {
                        if slow && sooner_elsewhere(&task, agent, route, &agents) {
                            // The cheapest is better off waiting for a faster
                            // agent, so is every other: put it back (counted in
                            // and fenced, as any push) and look for one.
                            agent.tokens.release();
                            self.enqueue(route, task, ends);
                            above = speed;
                            continue 'outer;
                        }
                        if self.try_assign(agent, task).is_ok() {
                            if gave_one.is_some_and(|a| std::ptr::eq(a, agent)) {
                                return;
                            }
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

    /// After tokens of `agent` came back, or it has more (its limit grew, its
    /// routes changed): serve the waiting tasks of its routes.
    pub(crate) fn serve_routes_of(&self, agent: &AgentEntry<J>, ends: &impl Ends<J>) {
        self.serve_routes(&agent.routes.load(), None, ends);
    }

    /// After one token of `agent` came back: as [`Router::serve_routes_of`],
    /// done on each route once a task has that token.
    pub(crate) fn gave_one_back(&self, agent: &AgentEntry<J>, ends: &impl Ends<J>) {
        self.serve_routes(&agent.routes.load(), Some(agent), ends);
    }

    /// As [`Router::serve_routes_of`], given the agent's routes (its session
    /// keeps a copy, sparing the snapshot load on every completion), and the
    /// agent that gave one token back if that is why ([`Router::dispatch`]).
    pub(crate) fn serve_routes(&self, routes: &[Arc<Route<J>>], gave_one: Option<&AgentEntry<J>>, ends: &impl Ends<J>) {
        // Pairs with the fence in `enqueue`: the token given back is ordered
        // before these looks at `queued`.
        fence(Ordering::SeqCst);
        for route in routes {
            if route.queued() > 0 {
                self.dispatch(route, gave_one, ends);
            }
        }
    }

    /// Answers every waiting task "run locally", for shutdown.
    pub(crate) fn drain_all(&self, reason: RetryReason, ends: &impl Ends<J>) {
        for route in self.routes.values() {
            for lane in route.lanes.load().iter() {
                self.drain_lane(&route, lane, reason.clone(), ends);
            }
        }
    }
}

/// Takes the next waiting task, round-robin across lanes. Tasks that
/// ended while they waited (cancelled) are dropped on the way.
fn pop<J: Job>(route: &Route<J>, cheapest: bool) -> Option<Arc<Task<J>>> {
    let lanes = route.lanes.load();
    let n = lanes.len();
    if n == 0 {
        return None;
    }
    let start = route.cursor.fetch_add(1, Ordering::Relaxed);
    let mut i = 0;
    while i < n {
        let lane = &lanes[(start + i) % n];
        let popped = if cheapest { lane.queue.pop_cheapest() } else { lane.queue.pop() };
        match popped {
            Some(task) => {
                route.queued.fetch_sub(1, Ordering::SeqCst);
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

/// Whether speed `a` is clearly above `b` (by more than a quarter): speeds
/// learnt from results wander, and agents of about one speed are placed on
/// by load alone.
fn clearly_faster(a: u32, b: u32) -> bool {
    u64::from(a) * 4 > u64::from(b) * 5
}

/// Whether `task` is expected to finish sooner on an agent clearly faster
/// than `agent` (which holds a token for it) than on `agent` now: one of
/// them has a free token, or the wait for their next one — the tasks
/// waiting on the route, plus this one, at their rate of tasks (Σ tokens ×
/// speed ÷ typical cost) — plus its cost at their best speed is less than
/// its cost at `agent`'s. A task whose cost is not known waits for none:
/// it goes to a faster agent only if one has a free token.
fn sooner_elsewhere<J: Job>(
    task: &Task<J>,
    agent: &AgentEntry<J>,
    route: &Route<J>,
    agents: &[Arc<AgentEntry<J>>],
) -> bool {
    let here_speed = agent.speed.load(Ordering::Relaxed);
    if !clearly_faster(route.fastest.load(Ordering::Relaxed), here_speed) {
        return false;
    }
    // Tasks per microsecond the faster agents end, and their best speed.
    let (mut rate, mut best) = (0.0f64, 0u32);
    for other in agents {
        let speed = other.speed.load(Ordering::Relaxed);
        if !clearly_faster(speed, here_speed) {
            continue;
        }
        let (_, limit, free) = other.tokens.load();
        if free {
            return true;
        }
        let typical = other.typical_cost.load(Ordering::Relaxed).max(1) as f64;
        rate += f64::from(limit) * f64::from(speed) / 1000.0 / typical;
        best = best.max(speed);
    }
    // A task whose cost nothing tells (a cold model's guess) takes this
    // token rather than wait for a faster agent's: against a guess, every
    // task of a cold farm's first wave waited while the slower agents idled.
    let Some(cost) = J::expected_micros(&task.body) else {
        return false;
    };
    let cost = cost as f64;
    if best == 0 || rate <= 0.0 {
        return false;
    }
    let wait = (route.queued() as f64 + 1.0) / rate;
    wait + cost * 1000.0 / f64::from(best) < cost * 1000.0 / f64::from(here_speed)
}

/// The agent with a free token expected to finish a task first — the least
/// loaded, or with `by_speed` the fastest (then the least loaded among
/// those of about its speed) — with that token taken; only agents clearly
/// faster than `above` when it is not 0. `first`, an agent of the route
/// that just gave a token back, is looked at with the window.
fn pick_agent<'a, J: Job>(
    route: &Route<J>,
    agents: &'a [Arc<AgentEntry<J>>],
    by_speed: bool,
    above: u32,
    first: Option<&'a AgentEntry<J>>,
) -> Option<&'a AgentEntry<J>> {
    let n = agents.len();
    if n == 0 {
        return None;
    }
    let (mut start, mut width) =
        if n <= WINDOW { (0, n) } else { (route.window.fetch_add(1, Ordering::Relaxed) % n, WINDOW) };
    // The best so far: the agent, its tokens in use and limit, its speed.
    type Best<'b, J> = Option<(&'b AgentEntry<J>, u32, u32, u32)>;
    let consider = |agent: &'a AgentEntry<J>, best: &mut Best<'a, J>| {
        let (in_use, limit, free) = agent.tokens.load();
        let speed = if by_speed { agent.speed.load(Ordering::Relaxed) } else { 0 };
        let better = |&(_, bu, bl, bs): &(&AgentEntry<J>, u32, u32, u32)| {
            if clearly_faster(speed, bs) {
                return true;
            }
            !clearly_faster(bs, speed) && lighter((in_use, limit), (bu, bl))
        };
        if free && (above == 0 || clearly_faster(speed, above)) && best.as_ref().is_none_or(better) {
            *best = Some((agent, in_use, limit, speed));
        }
    };
    loop {
        let mut best: Best<'a, J> = None;
        if let Some(agent) = first.filter(|_| width < n) {
            consider(agent, &mut best);
        }
        let mut idx = start;
        for _ in 0..width {
            consider(&agents[idx], &mut best);
            idx += 1;
            if idx == n {
                idx = 0;
            }
        }
        match best {
            Some((agent, in_use, limit, _)) => {
                if agent.tokens.try_acquire() {
                    if in_use + 1 >= limit {
                        agent.full_seen.store(true, Ordering::Relaxed);
                    }
                    return Some(agent);
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

/// Whether load `a` (tokens in use, limit) is below load `b`: `in_use / limit`
/// compared without division.
fn lighter(a: (u32, u32), b: (u32, u32)) -> bool {
    u64::from(a.0) * u64::from(b.1) < u64::from(b.0) * u64::from(a.1)
}

/// An agent other than `not`, of at least `min_speed`, with a free token,
/// for a copy of a task `not` runs: the fastest, then the least loaded;
/// with that token taken.
pub(crate) fn pick_copy<J: Job>(
    agents: &[Arc<AgentEntry<J>>],
    not: u32,
    min_speed: u32,
) -> Option<&Arc<AgentEntry<J>>> {
    loop {
        let mut best: Option<(usize, u32, u32, u32)> = None;
        for (idx, agent) in agents.iter().enumerate() {
            let (in_use, limit, free) = agent.tokens.load();
            let speed = agent.speed.load(Ordering::Relaxed);
            if agent.id.0 == not || !free || speed < min_speed {
                continue;
            }
            let better =
                best.is_none_or(|(_, bu, bl, bs)| speed > bs || (speed == bs && lighter((in_use, limit), (bu, bl))));
            if better {
                best = Some((idx, in_use, limit, speed));
            }
        }
        let (idx, ..) = best?;
        if agents[idx].tokens.try_acquire() {
            return Some(&agents[idx]);
        }
        // Lost the token to a placement: look again.
    }
}
