//! The sessions the network layer drives the core through.
//!
//! Each connected peer is one session, owned by the one connection task that
//! serves it (`&mut self`: no lock inside a session):
//!
//! - [`ConsumerdSession`]: `submit` tasks, `cancel` them, take `Answer`s.
//! - [`AgentSession`]: take `Dispatch`es (tasks to run, cancels to forward),
//!   `complete` tasks with the agent's answer.
//!
//! Dropping a session is the peer leaving, for whatever reason. An agent that
//! leaves gets its pool closed and every task it held — sent, or still in its
//! outbox — placed again (at most [`crate::records::Config::max_attempts`] placements
//! in all, then "run locally"); kubecc B5 lost the request a forwarder held
//! for a dead agent, and B15 retried forever. A consumerd that leaves has
//! its tasks cancelled, and the agents running them are told.

use std::collections::HashSet;
use std::task::{Poll, Waker};

use ccroute_wire::{CpuSample, Toolchain, ToolchainKey};
use rustc_hash::FxHashMap;

use crate::counters::{AgentCounters, ConsumerdCounters};
use crate::lifecycle::Core;
use crate::outbox::Outbox;
use crate::records::{
    cost_class, AgentEntry, AgentEvent, AgentId, Answer, AnswerKind, CompleteError, ConsumerdEntry, ConsumerdId,
    Dispatch, Ending, Job, Lane, PeerInfo, Phase, Reply, Route, RouteError, State, Task, TaskId, MAX_SPEED, MIN_SPEED,
    NOMINAL_SPEED, SAMPLE_RING, UNKNOWN_COST_MICROS,
};
use crate::router::pick_copy;
use crate::sync::{yield_now, Arc, AtomicBool, AtomicU32, AtomicU64, Ordering, Snapshot};
use crate::tokens::{clamp_limit, TokenPool};

/// One connected agent, as its connection task drives it.
pub struct AgentSession<J: Job> {
    core: Arc<Core<J>>,
    entry: Arc<AgentEntry<J>>,
    /// Runs sent to the agent and not answered, by task: one at most per
    /// task, so that an answer or a cancel under a task's id names one run.
    outstanding: FxHashMap<TaskId, Run<J>>,
    /// New runs of tasks whose older run here has not answered yet, held
    /// until it does ([`AgentSession::park`]), in the order they came.
    parked: FxHashMap<TaskId, Vec<AgentEvent<J>>>,
    /// Parked runs whose older run answered: looked at before the outbox.
    unparked: std::collections::VecDeque<AgentEvent<J>>,
    /// A copy of the agent's routes: only this session changes them.
    routes: Vec<Arc<Route<J>>>,
}

/// A run sent to an agent: the task, the attempt it was sent at, and
/// whether the agent was told to stop it.
struct Run<J: Job> {
    task: Arc<Task<J>>,
    attempt: u8,
    cancelled: bool,
}

impl<J: Job> Run<J> {
    fn new(task: Arc<Task<J>>, attempt: u8) -> Self {
        Run { task, attempt, cancelled: false }
    }
}

impl<J: Job> AgentSession<J> {
    pub(crate) fn connect(
        core: &Arc<Core<J>>,
        peer: PeerInfo,
        toolchains: &[Toolchain],
        max_limit: u32,
        resumed: u32,
    ) -> Self {
        let id = AgentId(core.next_peer_id());
        let max_limit = clamp_limit(max_limit);
        let tokens = TokenPool::new(max_limit);
        // Its resumed tasks hold tokens before any placement can see it:
        // they run on the agent already.
        let mut reserved = 0;
        while reserved < resumed && tokens.try_acquire() {
            reserved += 1;
        }
        // Fully built — tokens included — before anyone can see it (kubecc B22).
        let entry = Arc::new(AgentEntry {
            id,
            node_id: peer.node_id,
            host_name: peer.host_name,
            tokens,
            max_limit: AtomicU32::new(max_limit),
            outbox: Outbox::new(),
            routes: Snapshot::new(Vec::new()),
            counters: AgentCounters::default(),
            samples: crossbeam_queue::ArrayQueue::new(SAMPLE_RING),
            full_seen: AtomicBool::new(false),
            reserved: AtomicU32::new(reserved),
            tasks_started: AtomicU64::new(0),
            speed: AtomicU32::new(NOMINAL_SPEED),
            typical_cost: AtomicU64::new(UNKNOWN_COST_MICROS),
        });
        core.agents.insert(id, entry.clone());
        let mut session = AgentSession {
            core: core.clone(),
            entry,
            outstanding: FxHashMap::default(),
            parked: FxHashMap::default(),
            unparked: std::collections::VecDeque::new(),
            routes: Vec::new(),
        };
        session.set_toolchains(toolchains);
        tracing::info!(agent = ?id, node = %format_args!("{:032x}", peer.node_id), limit = max_limit, "agent connected");
        session
    }

    /// The scheduler's id for this agent.
    pub fn id(&self) -> AgentId {
        self.entry.id
    }

    /// The next thing to send the agent, if any.
    pub fn poll(&mut self) -> Option<Dispatch<J>> {
        while let Some(event) = self.unparked.pop_front().or_else(|| self.entry.outbox.pop()) {
            match event {
                AgentEvent::Assign(task) => {
                    let s = task.state();
                    if s.phase != Phase::Assigned || s.agent != self.entry.id.0 {
                        // Ended before it could be sent: its token is free.
                        self.entry.tokens.release();
                        self.core.router.gave_one_back(&self.entry, &*self.core);
                        continue;
                    }
                    if self.outstanding.contains_key(&task.id) {
                        match self.park(task.id, AgentEvent::Assign(task)) {
                            Some(cancel) => return Some(cancel),
                            None => continue,
                        }
                    }
                    self.record_sent(&task, s.attempt);
                    return Some(Dispatch::Assign(task));
                }
                AgentEvent::Cancel(id, attempt) => {
                    if let Some(run) = self.outstanding.get_mut(&id).filter(|r| r.attempt == attempt && !r.cancelled) {
                        run.cancelled = true;
                        return Some(Dispatch::Cancel(id));
                    }
                }
                AgentEvent::Adopt(task, handle) => {
                    let s = task.state();
                    if s.phase != Phase::Assigned || s.agent != self.entry.id.0 {
                        // Cancelled since: the agent drops what it holds.
                        self.entry.tokens.release();
                        self.core.router.gave_one_back(&self.entry, &*self.core);
                        return Some(Dispatch::Abandon(handle));
                    }
                    if self.outstanding.contains_key(&task.id) {
                        match self.park(task.id, AgentEvent::Adopt(task, handle)) {
                            Some(cancel) => return Some(cancel),
                            None => continue,
                        }
                    }
                    self.record_sent(&task, s.attempt);
                    return Some(Dispatch::Adopt { task, handle });
                }
                AgentEvent::Hedge(task, attempt, held) => {
                    // This attempt already runs here, not told to stop (a
                    // straggler's copy and a held run of one task): one of
                    // the two is enough. An older run of the task waits
                    // (`park`).
                    let runs_it = self.outstanding.get(&task.id).is_some_and(|r| r.attempt == attempt && !r.cancelled);
                    if !self.is_copy(&task, attempt) || runs_it {
                        // Answered, cancelled or placed again before it could
                        // be sent, or run here already.
                        self.entry.tokens.release();
                        self.core.router.gave_one_back(&self.entry, &*self.core);
                        match held {
                            Some(handle) => return Some(Dispatch::Abandon(handle)),
                            None => continue,
                        }
                    }
                    if self.outstanding.contains_key(&task.id) {
                        match self.park(task.id, AgentEvent::Hedge(task, attempt, held)) {
                            Some(cancel) => return Some(cancel),
                            None => continue,
                        }
                    }
                    self.record_sent(&task, attempt);
                    return Some(match held {
                        Some(handle) => Dispatch::Adopt { task, handle },
                        None => Dispatch::Assign(task),
                    });
                }
            }
        }
        None
    }

    /// Holds `event` — a new run of task `id`, which this agent still runs
    /// an older run of (a copy it was told to cancel, an attempt that
    /// ended) — until that run answers ([`AgentSession::complete`] hands it
    /// back to [`AgentSession::poll`], which looks at it afresh). An agent
    /// names a run by its task's id alone: sent at once, the new run could
    /// be taken for the answer the older one gives to its cancel (which can
    /// overtake a large task on the wire), and a cancel meant for the older
    /// one could stop it. The event keeps its token meanwhile. Returns the
    /// cancel to send for the older run when nobody has sent one: it cannot
    /// answer the task any more.
    fn park(&mut self, id: TaskId, event: AgentEvent<J>) -> Option<Dispatch<J>> {
        self.parked.entry(id).or_default().push(event);
        let run = self.outstanding.get_mut(&id)?;
        (!std::mem::replace(&mut run.cancelled, true)).then_some(Dispatch::Cancel(id))
    }

    /// Records `task` at `attempt` as sent to the agent: no older run of
    /// it is outstanding here ([`AgentSession::park`]).
    fn record_sent(&mut self, task: &Arc<Task<J>>, attempt: u8) {
        self.entry.counters.assigned.bump();
        let older = self.outstanding.insert(task.id, Run::new(task.clone(), attempt));
        debug_assert!(older.is_none(), "a run sent while an older run of its task is outstanding");
    }

    /// Whether a copy of `task` at `attempt` is this agent's to run: that
    /// attempt still runs, and the copy is still its copy or was handed to
    /// it as the task's own run (its agent was lost).
    fn is_copy(&self, task: &Task<J>, attempt: u8) -> bool {
        // The copy first, then the state: a hand-over moves the state to
        // this agent before it clears the copy, so one of the two says so.
        let copy = task.hedged();
        copy_of(task.state(), copy, self.entry.id.0, attempt)
    }

    /// Starts a copy of `task` — which this agent runs, past the time it
    /// was expected to take — on another agent of its route with a free
    /// token (the fastest, then the least loaded), when no task waits on the
    /// route: hedging never takes a token a waiting task could use. Only
    /// an agent of at least `min_speed` (thousandths, as
    /// [`AgentSession::set_speed`]) may take the copy: a copy on a host no
    /// faster than its own cannot overtake a unit that is merely long. The
    /// first answer of the two is the task's; the other agent is told to
    /// cancel (and still answers, which frees its token). A copy that could
    /// not run ([`AnswerKind::Internal`]) does not answer: the task's own run
    /// goes on, and the core would let it be copied again (the scheduler's
    /// agent session copies a run once). A task has at most one copy.
    /// Returns whether a copy was started.
    pub fn hedge(&self, task: TaskId, min_speed: u32) -> bool {
        let Some(Run { task, attempt, cancelled: false }) = self.outstanding.get(&task) else {
            return false;
        };
        let (me, attempt) = (self.entry.id.0, *attempt);
        if task.state() != State::assigned(me, attempt) || task.hedged().is_some() || task.route.queued() > 0 {
            return false;
        }
        let agents = task.route.agents.load();
        let Some(copy) = pick_copy(&agents, me, min_speed) else {
            return false;
        };
        // Looked at again with the token held: a task that came meanwhile gets it.
        if task.route.queued() > 0 || !task.set_hedge(copy.id.0, attempt) {
            copy.tokens.release();
            self.core.router.gave_one_back(copy, &*self.core);
            return false;
        }
        // The event owns the token: the copy's session sends the task or frees it.
        copy.outbox.push(AgentEvent::Hedge(task.clone(), attempt, None));
        if task.state() != State::assigned(me, attempt) && task.clear_hedge(copy.id.0, attempt) {
            // It ended (or was placed again) meanwhile, and whoever did it
            // may have missed the copy.
            copy.outbox.push(AgentEvent::Cancel(task.id, attempt));
            return false;
        }
        self.entry.counters.hedged.bump();
        true
    }

    /// Gives back `n` of the tokens reserved at connection for resumed
    /// tasks that no consumerd sent again (the agent is told to drop them).
    /// Returns how many were still reserved and given back.
    pub fn release_reserved(&self, n: u32) -> u32 {
        let mut given = 0;
        while given < n {
            let r = self.entry.reserved.load(Ordering::SeqCst);
            if r == 0 {
                break;
            }
            if self.entry.reserved.compare_exchange(r, r - 1, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                self.entry.tokens.release();
                given += 1;
            }
        }
        if given > 0 {
            self.core.router.serve_routes(&self.routes, None, &*self.core);
        }
        given
    }

    /// Tokens still reserved for resumed tasks.
    pub fn reserved(&self) -> u32 {
        self.entry.reserved.load(Ordering::SeqCst)
    }

    /// Wakes `waker` when there is something to poll. Poll once more after
    /// registering before going to sleep.
    pub fn register_waker(&self, waker: &Waker) {
        self.entry.outbox.register(waker);
    }

    /// Waits for the next thing to send the agent (any async runtime).
    pub async fn next(&mut self) -> Dispatch<J> {
        std::future::poll_fn(|cx| {
            if let Some(d) = self.poll() {
                return Poll::Ready(d);
            }
            self.register_waker(cx.waker());
            self.poll().map_or(Poll::Pending, Poll::Ready)
        })
        .await
    }

    /// The agent answered `task`.
    ///
    /// # Errors
    /// [`CompleteError::UnknownTask`] when the agent does not hold that task:
    /// a protocol error; nothing changes.
    pub fn complete(&mut self, task: TaskId, answer: J::Answer) -> Result<(), CompleteError> {
        let Some(Run { task, attempt, cancelled }) = self.outstanding.remove(&task) else {
            return Err(CompleteError::UnknownTask(task));
        };
        // Runs of it held until this one answered go out now; one may be a
        // copy of this very attempt.
        let parked = self.parked.remove(&task.id).unwrap_or_default();
        let copy_waits = parked.iter().any(|e| matches!(e, AgentEvent::Hedge(_, at, _) if *at == attempt));
        self.unparked.extend(parked);
        let kind = J::classify(&answer);
        // The agent finished running it: its token is free — before the
        // answer goes out, so that the consumerd's next task finds it.
        self.entry.tokens.release();
        let me = self.entry.id.0;
        // A run told to stop that says it could not finish, while a copy of
        // the same attempt waits behind it here (`park`), answers nothing:
        // the task and its copy word are that copy's now, which this answer
        // must not fail (nor, were the task handed to the copy meanwhile,
        // end). Otherwise the first of the task's runs to end the attempt
        // answers it (a copy's could-not-finish clears its copy word).
        let copy_stopped = cancelled && kind == AnswerKind::Internal && copy_waits;
        let won = if copy_stopped { None } else { self.first_to_end(&task, attempt, kind) };
        if let Some(primary) = won {
            match kind {
                AnswerKind::Success => self.entry.counters.completed.bump(),
                AnswerKind::Failed | AnswerKind::Internal => self.entry.counters.failed.bump(),
            }
            match primary {
                Some(primary) => {
                    self.entry.counters.copies_won.bump();
                    // A copy that took this one's place meanwhile (a held
                    // run replacing a straggler's) is not wanted either.
                    if let Some((other, at)) = task.take_hedge().filter(|&(c, _)| c != me) {
                        self.core.cancel_on(other, task.id, at);
                    }
                    self.core.cancel_on(primary, task.id, attempt);
                }
                None => self.core.drop_copy(&task),
            }
            self.core.end(&task, Ending::Answered(answer));
        } else {
            self.entry.counters.stale.bump();
        }
        self.core.router.serve_routes(&self.routes, Some(&self.entry), &*self.core);
        Ok(())
    }

    /// Ends `task` with this agent's answer at `attempt` if its run is the
    /// first of the task's two (its own and its copy) to end that attempt:
    /// `Some(other)` when it won, `other` being the task's agent when the
    /// copy won (to be told to cancel); `None` when the answer is stale.
    fn first_to_end(&self, task: &Task<J>, attempt: u8, kind: AnswerKind) -> Option<Option<u32>> {
        let me = self.entry.id.0;
        loop {
            // The copy first, then the state, as in `is_copy`.
            let hedge = task.hedged();
            let s = task.state();
            if !copy_of(s, hedge, me, attempt) {
                return None;
            }
            // A copy that could not run leaves the task to its own run, as
            // if its agent had gone — unless the task was handed to it
            // meanwhile, when it answers like any run.
            if kind == AnswerKind::Internal
                && s.agent != me
                && task.clear_hedge(me, attempt)
                && task.state() != State::assigned(me, attempt)
            {
                return None;
            }
            if task.transition(s, State::ended()) {
                return Some((s.agent != me).then_some(s.agent));
            }
        }
    }

    /// Replaces the agent's toolchains, attaching it to new routes and
    /// detaching it from old ones, without touching any other peer (kubecc
    /// B9). Tasks it runs for a dropped toolchain finish normally.
    pub fn set_toolchains(&mut self, toolchains: &[Toolchain]) {
        // Each key once: hashing a toolchain is the dearest step here.
        let keyed: Vec<(ToolchainKey, &Toolchain)> = toolchains.iter().map(|tc| (tc.key(), tc)).collect();
        let wanted: HashSet<ToolchainKey> = keyed.iter().map(|(key, _)| *key).collect();
        let current = self.entry.routes.load();
        let mut kept = Vec::new();
        let mut dropped = Vec::new();
        for route in current.iter() {
            if wanted.contains(&route.key) {
                kept.push(route.clone());
            } else {
                dropped.push(route.clone());
            }
        }
        let have: HashSet<ToolchainKey> = kept.iter().map(|r| r.key).collect();
        let mut seen = HashSet::new();
        for &(key, tc) in &keyed {
            if !have.contains(&key) && seen.insert(key) {
                kept.push(self.core.router.attach_agent(key, tc, &self.entry));
            }
        }
        drop(current);
        self.routes.clone_from(&kept);
        self.entry.routes.update(|_| kept);
        for route in &dropped {
            self.core.router.detach_agent(route, &self.entry);
            self.core.router.dispatch(route, None, &*self.core);
        }
        self.core.router.serve_routes_of(&self.entry, &*self.core);
    }

    /// The agent's speed, thousandths of the nominal (its expected cost ÷
    /// the time it took; clamped to 50..=20,000). With
    /// [`crate::Config::speed_aware`], placement prefers faster agents and
    /// may keep a long task waiting for one; a change serves its routes'
    /// waiting tasks again.
    pub fn set_speed(&self, milli: u32) {
        let milli = milli.clamp(MIN_SPEED, MAX_SPEED);
        let old = self.entry.speed.swap(milli, Ordering::Relaxed);
        if old == milli {
            return;
        }
        for route in &self.routes {
            self.core.router.speed_changed(route);
        }
        self.core.router.serve_routes(&self.routes, None, &*self.core);
    }

    /// The agent's speed in thousandths ([`AgentSession::set_speed`]).
    pub fn speed(&self) -> u32 {
        self.entry.speed.load(Ordering::Relaxed)
    }

    /// The agent's own maximum changed (`--jobs`). The token limit follows
    /// when it is above the new maximum.
    pub fn set_max_limit(&self, max: u32) {
        let max = clamp_limit(max);
        self.entry.max_limit.store(max, Ordering::Relaxed);
        if self.entry.tokens.limit() > max {
            self.entry.tokens.set_limit(max);
        }
    }

    /// Records a CPU sample for the optimizer, dropping the oldest when full.
    pub fn push_sample(&self, sample: CpuSample) {
        // Relaxed: a gauge for status pages.
        self.entry.tasks_started.store(sample.tasks_started, Ordering::Relaxed);
        self.entry.samples.force_push(sample);
    }

    /// Tasks sent to the agent and not answered yet.
    pub fn in_flight(&self) -> usize {
        self.outstanding.len()
    }

    /// The current token limit.
    pub fn token_limit(&self) -> u32 {
        self.entry.tokens.limit()
    }
}

/// Whether agent `me` runs attempt `attempt` of a task in state `s` with
/// the copy `hedge`: as the task's own agent, or as its copy.
fn copy_of(s: State, hedge: Option<(u32, u8)>, me: u32, attempt: u8) -> bool {
    s.phase == Phase::Assigned && s.attempt == attempt && (s.agent == me || hedge == Some((me, attempt)))
}

impl<J: Job> Drop for AgentSession<J> {
    /// The agent is gone: no more tasks for it, and every task it held is
    /// placed again.
    fn drop(&mut self) {
        let entry = self.entry.clone();
        entry.tokens.close();
        let routes = entry.routes.load().clone();
        for route in routes.iter() {
            self.core.router.detach_agent(route, &entry);
        }
        entry.routes.update(|_| Vec::new());
        self.core.agents.remove(&entry.id);
        // Reservations no adoption took: one swap, so that an adoption
        // racing this drop either took its token before (and pushed its
        // event, collected below) or finds none.
        for _ in 0..entry.reserved.swap(0, Ordering::SeqCst) {
            entry.tokens.release();
        }
        // Collect every assignment: those sent, and those still in the
        // outbox. A placement that took a token before the pool closed may
        // not have pushed yet; `in_use` reaching 0 says every one has.
        #[cfg(not(ccroute_loom))]
        let (began, mut waits) = (std::time::Instant::now(), 0u32);
        // Runs held behind an older run of their task count as sent: the
        // agent is gone, and with it both.
        let mut held: Vec<AgentEvent<J>> = self.unparked.drain(..).collect();
        held.extend(self.parked.drain().flat_map(|(_, events)| events));
        loop {
            while let Some(event) = held.pop().or_else(|| entry.outbox.pop()) {
                match event {
                    AgentEvent::Assign(task) | AgentEvent::Adopt(task, _) => {
                        let s = task.state();
                        if s.phase == Phase::Assigned && s.agent == entry.id.0 {
                            // Placed again below once, whatever older run
                            // of it the agent had.
                            if self.outstanding.insert(task.id, Run::new(task, s.attempt)).is_some() {
                                entry.tokens.release();
                            }
                        } else {
                            entry.tokens.release();
                        }
                    }
                    AgentEvent::Hedge(task, attempt, _) => {
                        // A copy not sent: forgotten below like one sent
                        // (the agent is gone: what it holds goes with it).
                        let runs_it = self.outstanding.get(&task.id).is_some_and(|r| r.attempt == attempt);
                        if !self.is_copy(&task, attempt)
                            || runs_it
                            || self.outstanding.insert(task.id, Run::new(task, attempt)).is_some()
                        {
                            entry.tokens.release();
                        }
                    }
                    AgentEvent::Cancel(..) => {}
                }
            }
            for (_, Run { task, attempt, .. }) in self.outstanding.drain() {
                entry.tokens.release();
                if task.state() == State::assigned(entry.id.0, attempt) {
                    entry.counters.lost.bump();
                }
                self.core.requeue(task, entry.id, attempt);
            }
            if entry.tokens.in_use() == 0 {
                break;
            }
            #[cfg(not(ccroute_loom))]
            {
                waits = waits.wrapping_add(1);
                if waits % 1024 == 0 && began.elapsed() >= self.core.config.token_wait {
                    let leaked = entry.tokens.in_use();
                    tracing::error!(
                        agent = ?entry.id,
                        tokens = leaked,
                        waited = ?self.core.config.token_wait,
                        "a leaving agent's tokens did not all come back: a token leaked (a bug in ccroute; please \
                         report it with this log). The session ends without them; a task being placed on this \
                         agent at this moment, if any, is answered only by its consumerd's deadline"
                    );
                    self.core.retired.add_leaked_tokens(leaked);
                    break;
                }
            }
            yield_now();
        }
        for route in routes.iter() {
            self.core.router.dispatch(route, None, &*self.core);
        }
        self.core.retired.add_agent(&entry.counters);
        tracing::info!(agent = ?entry.id, lost = entry.counters.lost.get(), "agent disconnected");
    }
}

impl<J: Job> std::fmt::Debug for AgentSession<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSession").field("id", &self.entry.id).field("in_flight", &self.outstanding.len()).finish()
    }
}

/// A consumerd's place on a route: the route and its lane there.
type Attachment<J> = (Arc<Route<J>>, Arc<Lane<J>>);

/// One connected consumerd, as its connection task drives it.
pub struct ConsumerdSession<J: Job> {
    core: Arc<Core<J>>,
    entry: Arc<ConsumerdEntry<J>>,
    /// Its tasks in flight, by its ids for them.
    tasks: FxHashMap<u64, Arc<Task<J>>>,
    /// Its lane on each route it sends to.
    lanes: FxHashMap<ToolchainKey, Attachment<J>>,
    next_seq: u32,
}

impl<J: Job> ConsumerdSession<J> {
    pub(crate) fn connect(core: &Arc<Core<J>>, peer: PeerInfo, toolchains: &[Toolchain]) -> Self {
        let id = ConsumerdId(core.next_peer_id());
        let entry = Arc::new(ConsumerdEntry {
            id,
            node_id: peer.node_id,
            host_name: peer.host_name,
            outbox: Outbox::new(),
            counters: ConsumerdCounters::default(),
            in_flight: AtomicU64::new(0),
            remote_limit: AtomicU32::new(0),
            demand: AtomicU32::new(u32::MAX),
        });
        core.consumerds.insert(id, entry.clone());
        let mut session = ConsumerdSession {
            core: core.clone(),
            entry,
            tasks: FxHashMap::default(),
            lanes: FxHashMap::default(),
            next_seq: 0,
        };
        session.set_toolchains(toolchains);
        tracing::info!(consumerd = ?id, node = %format_args!("{:032x}", peer.node_id), "consumerd connected");
        session
    }

    /// The scheduler's id for this consumerd.
    pub fn id(&self) -> ConsumerdId {
        self.entry.id
    }

    /// Submits a task under the consumerd's own id for it. Its answer comes
    /// from [`ConsumerdSession::poll_answer`], exactly once, unless it is
    /// cancelled first.
    ///
    /// A toolchain the consumerd has not announced gets its lane on first
    /// use: announcements only say which routes list it (a task and the
    /// announcement of its toolchain may travel on different streams).
    ///
    /// # Errors
    /// [`RouteError::DuplicateTask`] when `client_id` is already in flight,
    /// [`RouteError::InvalidToolchain`] for the all-zero key (no toolchain).
    /// Nothing was submitted.
    pub fn submit(&mut self, client_id: u64, toolchain: ToolchainKey, body: J::Task) -> Result<TaskId, RouteError> {
        if self.tasks.contains_key(&client_id) {
            return Err(RouteError::DuplicateTask(client_id));
        }
        if toolchain == ToolchainKey(0) {
            return Err(RouteError::InvalidToolchain(toolchain));
        }
        let (route, lane) = match self.lanes.get(&toolchain) {
            Some(attached) => attached,
            None => {
                let attached = self.core.router.attach_lane(toolchain, None, &self.entry, false);
                self.lanes.entry(toolchain).or_insert(attached)
            }
        };
        let id = TaskId(u64::from(self.entry.id.0) << 32 | u64::from(self.next_seq));
        self.next_seq = self.next_seq.wrapping_add(1);
        let ranked = self.core.config.longest_first || self.core.config.speed_aware;
        let class = if ranked { cost_class(J::expected_micros(&body)) } else { 0 };
        let task = Arc::new(Task::new(id, client_id, body, route.clone(), lane.clone(), self.entry.clone(), class));
        self.tasks.insert(client_id, task.clone());
        self.entry.counters.submitted.bump();
        self.publish_in_flight();
        Core::run_hooks(&self.core, task, 0);
        Ok(id)
    }

    /// Cancels a task. Its answer, if one was already on its way, is dropped.
    /// False when no such task is in flight.
    pub fn cancel(&mut self, client_id: u64) -> bool {
        let Some(task) = self.tasks.remove(&client_id) else {
            return false;
        };
        self.core.cancel(&task);
        self.entry.counters.cancelled.bump();
        self.publish_in_flight();
        true
    }

    /// Agent `agent` came back holding a run of task `client_id` under
    /// `handle` — started before it lost its connection, finished or still
    /// running — while the task was placed again on another agent: that run
    /// becomes the task's copy, adopted with one of the tokens reserved at
    /// the agent's connection, and the first answer of the two is the
    /// task's, as for a hedge ([`AgentSession::hedge`]). Without it, a unit
    /// the agent finished while cut off is compiled again from the start.
    ///
    /// A copy the task already has (a straggler's, begun after the task was
    /// placed again and so after this run) is cancelled for it.
    ///
    /// `None`: nothing changed (the task is not in flight or not running on
    /// another agent; or the agent is gone or has no reservation left), and what the agent holds is still the caller's
    /// to drop. Otherwise the reservation went to the copy, and the agent's
    /// session sends the adoption or — the task having ended or moved
    /// meanwhile — tells the agent to drop what it holds and frees the
    /// token: `Some(true)` when the copy was in place after the check,
    /// `Some(false)` when it was seen lost at once.
    pub fn copy_held(&self, client_id: u64, agent: AgentId, handle: u64) -> Option<bool> {
        let task = self.tasks.get(&client_id)?;
        let s = task.state();
        if s.phase != Phase::Assigned || s.agent == agent.0 || task.hedged().is_some_and(|(c, _)| c == agent.0) {
            return None;
        }
        let entry = self.core.agents.get(&agent)?;
        // The token: one the agent's connection reserved for what it holds.
        loop {
            let r = entry.reserved.load(Ordering::SeqCst);
            if r == 0 {
                return None;
            }
            if entry.reserved.compare_exchange(r, r - 1, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                break;
            }
        }
        // A copy already running (a straggler's) began after the task was
        // placed again, so after this run: this run takes its place, and
        // its agent is told to cancel (its answer, if it comes, is stale) —
        // unless that copy went to this very agent meanwhile: it stays, and
        // this run is dropped.
        let copied = match task.hedged() {
            Some((other, _)) if other == agent.0 => false,
            Some((other, attempt)) => {
                if task.clear_hedge(other, attempt) {
                    self.core.cancel_on(other, task.id, attempt);
                }
                task.set_hedge(agent.0, s.attempt)
            }
            None => task.set_hedge(agent.0, s.attempt),
        };
        // From here the event owns the token, whatever happens to the task.
        entry.outbox.push(AgentEvent::Hedge(task.clone(), s.attempt, Some(handle)));
        if !copied {
            return Some(false);
        }
        if task.state() != s && task.clear_hedge(agent.0, s.attempt) {
            // It ended (or was placed again) meanwhile, and whoever did it
            // may have missed the copy.
            entry.outbox.push(AgentEvent::Cancel(task.id, s.attempt));
            return Some(false);
        }
        Some(true)
    }

    /// The next answer, if any.
    pub fn poll_answer(&mut self) -> Option<Answer<J::Answer>> {
        while let Some(answer) = self.entry.outbox.pop() {
            // The id may have been cancelled and reused since: match the task.
            match self.tasks.remove(&answer.client_id) {
                Some(t) if t.id == answer.task => {}
                Some(other) => {
                    self.tasks.insert(answer.client_id, other);
                    continue;
                }
                None => continue,
            }
            let c = &self.entry.counters;
            match &answer.reply {
                Reply::Done(a) => match J::classify(a) {
                    AnswerKind::Success => c.completed.bump(),
                    AnswerKind::Failed | AnswerKind::Internal => c.failed.bump(),
                },
                Reply::Intercepted(_) => c.intercepted.bump(),
                Reply::RunLocally(_) => c.retried.bump(),
            }
            self.publish_in_flight();
            return Some(answer);
        }
        None
    }

    /// Wakes `waker` when an answer arrives. Poll once more after
    /// registering before going to sleep.
    pub fn register_waker(&self, waker: &Waker) {
        self.entry.outbox.register(waker);
    }

    /// Waits for the next answer (any async runtime).
    pub async fn next_answer(&mut self) -> Answer<J::Answer> {
        std::future::poll_fn(|cx| {
            if let Some(a) = self.poll_answer() {
                return Poll::Ready(a);
            }
            self.register_waker(cx.waker());
            self.poll_answer().map_or(Poll::Pending, Poll::Ready)
        })
        .await
    }

    /// Replaces the toolchains the consumerd announces. Routes for new ones
    /// get its lane; dropped ones stop listing it. Tasks in flight are
    /// untouched, and no other peer is disturbed (kubecc B9).
    pub fn set_toolchains(&mut self, toolchains: &[Toolchain]) {
        let keyed: Vec<(ToolchainKey, &Toolchain)> = toolchains.iter().map(|tc| (tc.key(), tc)).collect();
        let wanted: HashSet<ToolchainKey> = keyed.iter().map(|(key, _)| *key).collect();
        for (key, (_, lane)) in &self.lanes {
            lane.advertised.store(wanted.contains(key), Ordering::Relaxed);
        }
        for &(key, tc) in &keyed {
            if !self.lanes.contains_key(&key) {
                let attached = self.core.router.attach_lane(key, Some(tc), &self.entry, true);
                self.lanes.insert(key, attached);
            }
        }
    }

    /// Tasks submitted and not yet answered or cancelled.
    pub fn in_flight(&self) -> usize {
        self.tasks.len()
    }

    /// Records how many tasks the consumerd wants remote now.
    pub fn set_demand(&self, wanted: u32) {
        self.entry.demand.store(wanted.min(u32::MAX - 1), Ordering::Relaxed);
    }

    /// The preferred remote limit the optimizer gives this consumerd.
    pub fn remote_limit(&self) -> u32 {
        self.entry.remote_limit.load(Ordering::Relaxed)
    }

    fn publish_in_flight(&self) {
        self.entry.in_flight.store(self.tasks.len() as u64, Ordering::Relaxed);
    }
}

impl<J: Job> Drop for ConsumerdSession<J> {
    /// The consumerd is gone: its tasks are cancelled (agents running them are
    /// told), its lanes detached, its answers dropped.
    fn drop(&mut self) {
        for (_, task) in self.tasks.drain() {
            self.core.cancel(&task);
            self.entry.counters.cancelled.bump();
        }
        for (_, (route, lane)) in self.lanes.drain() {
            self.core.router.detach_lane(&route, &lane, &*self.core);
        }
        while self.entry.outbox.pop().is_some() {}
        self.core.consumerds.remove(&self.entry.id);
        self.core.retired.add_consumerd(&self.entry.counters);
        tracing::info!(consumerd = ?self.entry.id, "consumerd disconnected");
    }
}

impl<J: Job> std::fmt::Debug for ConsumerdSession<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerdSession").field("id", &self.entry.id).field("in_flight", &self.tasks.len()).finish()
    }
}
