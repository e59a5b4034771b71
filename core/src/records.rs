//! The records the core passes around: plain data, each type with only the
//! methods that read or move its own fields. Behaviour sits above them:
//! placement in [`crate::router`], a task's way through the hooks to its end
//! in [`crate::lifecycle`], the peers' sessions in [`crate::sessions`].
//!
//! - the [`Job`] a scheduler carries, and how its answers count;
//! - ids, [`PeerInfo`], [`Config`], [`RouteError`];
//! - a [`Task`] and its state word ([`State`], [`Phase`]);
//! - a [`Route`] (one toolchain's agents and lanes) and its [`Lane`]s (one
//!   consumerd's waiting tasks each);
//! - agent and consumerd entries, the events in their outboxes, answers and
//!   endings.
//!
//! # The state word
//!
//! Every task is one `Arc<Task>` shared by whoever holds it at the moment —
//! its consumerd's session, a route's queue, an agent's outbox or session, a
//! hook — and there is no global table to lock: the task itself is the
//! record. Its lifecycle is one `AtomicU64`:
//!
//! ```text
//!            ┌──────── hook intercepts ────────┐
//!            ▼                                  │
//!   HELD(attempt) ──proceed──▶ QUEUED(attempt) ─┴─assign──▶ ASSIGNED(agent, attempt)
//!       │                        │    ▲                          │       │
//!       │                        │    └──── agent lost ──────────┘       │
//!       ▼                        ▼          (attempt + 1)                ▼
//!     ENDED ◀──────────── answer, cancel, run locally ──────────────── ENDED
//! ```
//!
//! Every transition is a compare-exchange from the exact word the caller
//! observed, so of two racing transitions exactly one wins; the one that
//! moves a task to ENDED is the one that answers it (invariant 2). The word
//! for ASSIGNED names the agent and the attempt, so a result or a loss that
//! belongs to an earlier placement can never end a later one (kubecc B14).

use std::time::Duration;

use ccroute_wire::{CpuSample, RetryReason, Toolchain, ToolchainKey};

use crate::counters::{AgentCounters, ConsumerdCounters};
use crate::outbox::Outbox;
use crate::sync::{Arc, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, CachePadded, Ordering, Queue, Snapshot};
use crate::tokens::TokenPool;

/// What the scheduler carries: the network layer's task bodies and answers.
pub trait Job: Send + Sync + Sized + 'static {
    /// What an agent needs to run a task (header and payload).
    type Task: Send + Sync + 'static;
    /// What an agent, or a hook, answers.
    type Answer: Send + Sync + 'static;
    /// How an answer counts.
    fn classify(answer: &Self::Answer) -> AnswerKind;

    /// What a task is expected to cost, microseconds of compile, when that
    /// is known: among one consumerd's waiting tasks the dearest go first
    /// (see [`Config::longest_first`]). `None` ranks it with a unit of a
    /// second, and never keeps it from a free token of a slower agent
    /// ([`Config::speed_aware`]).
    fn expected_micros(_task: &Self::Task) -> Option<u64> {
        None
    }

    /// [`Job::expected_micros`], or [`UNKNOWN_COST_MICROS`] when not known.
    fn expected_or_default(task: &Self::Task) -> u64 {
        Self::expected_micros(task).unwrap_or(UNKNOWN_COST_MICROS)
    }
}

/// What a task is taken to cost when nothing is known of it: a second.
pub(crate) const UNKNOWN_COST_MICROS: u64 = 1_000_000;

/// Cost classes a lane ranks its waiting tasks in.
#[cfg(not(ccroute_loom))]
pub(crate) const CLASSES: usize = 8;
/// Two classes under loom: every scan of a lane is more interleavings to
/// explore, and two are enough to hold a task pushed into a class the
/// scan has passed.
#[cfg(ccroute_loom)]
pub(crate) const CLASSES: usize = 2;

/// The cost class of a task expected to take `micros`: doublings from
/// 64 ms (class 0, anything shorter) to 4 s and over (the last).
pub(crate) fn cost_class(micros: Option<u64>) -> u8 {
    let ms = micros.unwrap_or(UNKNOWN_COST_MICROS) / 1000;
    let mut class = 0usize;
    let mut bound = 64;
    while ms >= bound && class + 1 < CLASSES {
        class += 1;
        bound *= 2;
    }
    class as u8
}

/// A lane's waiting tasks, ranked by cost class: a pop takes from the
/// dearest class that has one, first in first out within a class. Each
/// class is a lock-free queue; a push completes before its task is counted
/// in its route's `queued`, so a pop that follows a count it saw finds the
/// task, whichever classes it scans after.
pub(crate) struct Ranked<T> {
    classes: [Queue<T>; CLASSES],
}

impl<T> Ranked<T> {
    pub(crate) fn new() -> Self {
        Ranked { classes: std::array::from_fn(|_| Queue::new()) }
    }

    pub(crate) fn push(&self, class: u8, value: T) {
        self.classes[usize::from(class).min(CLASSES - 1)].push(value);
    }

    pub(crate) fn pop(&self) -> Option<T> {
        self.classes.iter().rev().find_map(Queue::pop)
    }

    /// Takes from the cheapest class that has one (for a slow agent).
    pub(crate) fn pop_cheapest(&self) -> Option<T> {
        self.classes.iter().find_map(Queue::pop)
    }
}

/// How an answer counts in the statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerKind {
    /// The compile succeeded.
    Success,
    /// The compile failed: the compiler's own verdict.
    Failed,
    /// The agent could not run the compile (its own trouble, not the
    /// unit's): the consumerd compiles it itself. A copy's run that ends so
    /// does not answer its task while the task's own run goes on.
    Internal,
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
    /// Among one consumerd's waiting tasks, the longest expected first
    /// ([`Job::expected_micros`]); off: first come, first served. Off by
    /// default: on the farm harness it did not shorten builds (lanes rarely
    /// hold more than a consumerd's window, so there is little to reorder).
    pub longest_first: bool,
    /// Placement by agent speed ([`crate::router`]): a task goes to the
    /// agent expected to finish it first — the fastest with a free token,
    /// or, when only clearly slower agents have one, it waits for a faster
    /// agent if that is expected to end sooner; a slow agent takes the
    /// cheapest waiting tasks. Lanes then rank tasks by cost class.
    pub speed_aware: bool,
    /// How long a leaving agent's session waits for the tokens placements
    /// took from its pool to come back (each placement gives its task over
    /// within microseconds). Past it, the session is dropped without them
    /// and says so in an error: a token that never comes back is a leak,
    /// and waiting for it would hold a scheduler thread for good.
    pub token_wait: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_attempts: 3,
            max_queued_per_route: 4096,
            longest_first: false,
            speed_aware: false,
            token_wait: Duration::from_secs(10),
        }
    }
}

/// Who a peer is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// Its random id.
    pub node_id: u128,
    /// Its host name.
    pub host_name: String,
}

/// The phases of the state word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting to be placed (or being placed).
    Queued,
    /// Running on an agent.
    Assigned,
    /// Answered, cancelled or sent back to run locally. Final.
    Ended,
    /// Owned by a hook until it answers or lets the task proceed.
    Held,
}

/// A decoded state word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct State {
    pub(crate) phase: Phase,
    pub(crate) attempt: u8,
    pub(crate) agent: u32,
}

impl State {
    pub(crate) const fn queued(attempt: u8) -> State {
        State { phase: Phase::Queued, attempt, agent: 0 }
    }
    pub(crate) const fn held(attempt: u8) -> State {
        State { phase: Phase::Held, attempt, agent: 0 }
    }
    pub(crate) const fn assigned(agent: u32, attempt: u8) -> State {
        State { phase: Phase::Assigned, attempt, agent }
    }
    pub(crate) const fn ended() -> State {
        State { phase: Phase::Ended, attempt: 0, agent: 0 }
    }

    const fn pack(self) -> u64 {
        let phase = match self.phase {
            Phase::Queued => 0,
            Phase::Assigned => 1,
            Phase::Ended => 2,
            Phase::Held => 3,
        };
        phase | (self.attempt as u64) << 8 | (self.agent as u64) << 32
    }

    const fn unpack(word: u64) -> State {
        let phase = match word & 0xff {
            0 => Phase::Queued,
            1 => Phase::Assigned,
            3 => Phase::Held,
            _ => Phase::Ended,
        };
        State { phase, attempt: ((word >> 8) & 0xff) as u8, agent: (word >> 32) as u32 }
    }
}

/// One compile on its way through the scheduler.
pub struct Task<J: Job> {
    pub(crate) id: TaskId,
    /// The consumerd's own id for it.
    pub(crate) client_id: u64,
    pub(crate) toolchain: ToolchainKey,
    state: AtomicU64,
    pub(crate) body: J::Task,
    pub(crate) route: Arc<Route<J>>,
    pub(crate) lane: Arc<Lane<J>>,
    pub(crate) consumerd: Arc<ConsumerdEntry<J>>,
    /// Its cost class in its lane ([`cost_class`]).
    pub(crate) class: u8,
    /// A copy running on a second agent while it runs long on its own
    /// ([`crate::AgentSession::hedge`]): that agent and the attempt the copy
    /// belongs to ([`hedge_word`]); 0 when none. Whoever clears it tells the
    /// copy's agent to cancel.
    hedge: AtomicU64,
}

/// The packed form of a copy on `agent` at `attempt` (never 0).
const fn hedge_word(agent: u32, attempt: u8) -> u64 {
    1 << 63 | (attempt as u64) << 32 | agent as u64
}

impl<J: Job> Task<J> {
    pub(crate) fn new(
        id: TaskId,
        client_id: u64,
        body: J::Task,
        route: Arc<Route<J>>,
        lane: Arc<Lane<J>>,
        consumerd: Arc<ConsumerdEntry<J>>,
        class: u8,
    ) -> Self {
        Task {
            id,
            client_id,
            toolchain: route.key,
            state: AtomicU64::new(State::queued(0).pack()),
            body,
            route,
            lane,
            consumerd,
            class,
            hedge: AtomicU64::new(0),
        }
    }

    /// The agent running a copy of this task, and the attempt the copy belongs to.
    pub(crate) fn hedged(&self) -> Option<(u32, u8)> {
        let w = self.hedge.load(Ordering::SeqCst);
        (w != 0).then_some((w as u32, (w >> 32) as u8))
    }

    /// Records a copy on `agent` at `attempt`; false when there is one already.
    pub(crate) fn set_hedge(&self, agent: u32, attempt: u8) -> bool {
        self.hedge.compare_exchange(0, hedge_word(agent, attempt), Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }

    /// Forgets the copy on `agent` at `attempt`; false when that is not the copy.
    pub(crate) fn clear_hedge(&self, agent: u32, attempt: u8) -> bool {
        self.hedge.compare_exchange(hedge_word(agent, attempt), 0, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }

    /// Forgets whatever copy there is; returns its agent and attempt.
    pub(crate) fn take_hedge(&self) -> Option<(u32, u8)> {
        let w = self.hedge.swap(0, Ordering::SeqCst);
        (w != 0).then_some((w as u32, (w >> 32) as u8))
    }

    /// Whether the task has ended (answered, sent back or cancelled).
    pub fn has_ended(&self) -> bool {
        self.state().phase == Phase::Ended
    }

    /// The current state. A snapshot: act on it only through [`Task::transition`].
    #[inline]
    pub(crate) fn state(&self) -> State {
        State::unpack(self.state.load(Ordering::SeqCst))
    }

    /// Moves from exactly `from` to `to`; false when another transition won.
    #[inline]
    pub(crate) fn transition(&self, from: State, to: State) -> bool {
        self.state.compare_exchange(from.pack(), to.pack(), Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }

    /// Ends the task from whatever non-final phase it is in; returns the
    /// state it ended from, or `None` if it had already ended.
    pub(crate) fn end_from_any(&self) -> Option<State> {
        loop {
            let s = self.state();
            if s.phase == Phase::Ended {
                return None;
            }
            if self.transition(s, State::ended()) {
                return Some(s);
            }
        }
    }

    /// The scheduler's id of this task.
    pub fn id(&self) -> TaskId {
        self.id
    }

    /// The id the consumerd gave it.
    pub fn client_id(&self) -> u64 {
        self.client_id
    }

    /// What the agent needs to run it.
    pub fn body(&self) -> &J::Task {
        &self.body
    }

    /// Its route.
    pub fn toolchain(&self) -> ToolchainKey {
        self.toolchain
    }
}

impl<J: Job> std::fmt::Debug for Task<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Task").field("id", &self.id).field("state", &self.state()).finish()
    }
}

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
    pub(crate) queued: CachePadded<AtomicUsize>,
    /// Round-robin position over lanes.
    pub(crate) cursor: AtomicUsize,
    /// Rotating start of the agent window for large routes.
    pub(crate) window: AtomicUsize,
    /// Set when a task had to wait; the optimizer reads and clears it.
    pub(crate) waited: AtomicBool,
    /// The speed of its fastest agent, in thousandths ([`AgentEntry::speed`]);
    /// may read high for a while after that agent slowed down or left (a
    /// placement then looks for a faster agent and finds none).
    pub(crate) fastest: AtomicU32,
}

/// One consumerd's waiting tasks on one route.
pub(crate) struct Lane<J: Job> {
    pub(crate) node_id: u128,
    pub(crate) queue: Ranked<Arc<Task<J>>>,
    /// Set once, when the consumerd leaves; a push that finds it set drains
    /// the lane itself (the leaver's drain may already have run).
    pub(crate) detached: AtomicBool,
    /// Whether the consumerd currently announces this toolchain.
    pub(crate) advertised: AtomicBool,
}

impl<J: Job> Route<J> {
    pub(crate) fn new(key: ToolchainKey) -> Self {
        Route {
            key,
            description: Snapshot::new(None),
            agents: Snapshot::new(Vec::new()),
            lanes: Snapshot::new(Vec::new()),
            queued: CachePadded::new(AtomicUsize::new(0)),
            cursor: AtomicUsize::new(0),
            window: AtomicUsize::new(0),
            waited: AtomicBool::new(false),
            fastest: AtomicU32::new(0),
        }
    }

    /// Tasks waiting on this route.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    pub(crate) fn is_unused(&self) -> bool {
        self.agents.load().is_empty() && self.lanes.load().is_empty()
    }
}

/// Samples kept per agent between two optimizer ticks; the oldest is dropped
/// when the ring is full.
pub const SAMPLE_RING: usize = 64;

/// How a task ends (the transition to ENDED already happened).
pub(crate) enum Ending<A> {
    Answered(A),
    Intercepted(A),
    RunLocally(RetryReason),
    Cancelled,
}

/// What an agent's outbox carries.
pub(crate) enum AgentEvent<J: Job> {
    Assign(Arc<Task<J>>),
    /// Stop the run of this task at this attempt, if the agent still runs
    /// that run (a run of another attempt is not the one meant).
    Cancel(TaskId, u8),
    /// The task the agent holds under `handle` (from an earlier scheduler)
    /// is this one; it was assigned to the agent with a reserved token.
    Adopt(Arc<Task<J>>, u64),
    /// Run a copy of this task, which another agent runs at this attempt;
    /// a token was taken for it. Sent only if it is still the task's copy.
    /// With a handle, the copy is a run the agent already holds under it
    /// (from before it lost its connection): adopted, not sent; when it is
    /// no longer the task's copy, the agent is told to drop what it holds.
    Hedge(Arc<Task<J>>, u8, Option<u64>),
}

/// A connected agent.
pub(crate) struct AgentEntry<J: Job> {
    pub(crate) id: AgentId,
    pub(crate) node_id: u128,
    pub(crate) host_name: String,
    pub(crate) tokens: TokenPool,
    /// The most tokens the agent allows (its `--jobs`).
    pub(crate) max_limit: AtomicU32,
    pub(crate) outbox: Outbox<AgentEvent<J>>,
    pub(crate) routes: Snapshot<Vec<Arc<Route<J>>>>,
    pub(crate) counters: AgentCounters,
    /// CPU samples for the optimizer thread (a bounded lock-free ring).
    pub(crate) samples: crossbeam_queue::ArrayQueue<CpuSample>,
    /// Set when a placement took its last free token; the optimizer reads
    /// and clears it once per interval ("all tokens were taken").
    pub(crate) full_seen: AtomicBool,
    /// Tokens taken at connection for tasks the agent still ran for an
    /// earlier scheduler, not yet adopted by a task or given back. An
    /// adoption moves one to its task (a compare-exchange above 0); the
    /// session's drop takes what is left with one swap, so each is released
    /// exactly once.
    pub(crate) reserved: AtomicU32,
    /// The agent's own count of compiles started, from its last sample.
    pub(crate) tasks_started: AtomicU64,
    /// Its speed in thousandths: expected cost ÷ time taken, learnt by the
    /// server from its results or pinned in its configuration (1000 until
    /// then). See [`crate::Config::speed_aware`].
    pub(crate) speed: AtomicU32,
    /// The expected cost of the tasks it was given lately, microseconds at
    /// speed 1 (a moving average; a second until it has had one): how
    /// often its tokens come free.
    pub(crate) typical_cost: AtomicU64,
}

/// An agent's speed before anything is known of it, in thousandths.
pub const NOMINAL_SPEED: u32 = 1000;
/// The slowest speed an agent is given (a twentieth of the nominal).
pub const MIN_SPEED: u32 = 50;
/// The fastest speed an agent is given (twenty times the nominal).
pub const MAX_SPEED: u32 = 20_000;

/// A connected consumerd.
pub(crate) struct ConsumerdEntry<J: Job> {
    pub(crate) id: ConsumerdId,
    pub(crate) node_id: u128,
    pub(crate) host_name: String,
    pub(crate) outbox: Outbox<Answer<J::Answer>>,
    pub(crate) counters: ConsumerdCounters,
    /// Tasks in flight, published by the session for status pages.
    pub(crate) in_flight: AtomicU64,
    /// Its preferred remote limit, set by the optimizer.
    pub(crate) remote_limit: AtomicU32,
    /// What it last said it wants remote (`u32::MAX`: it never said; the
    /// optimizer then uses its tasks in flight).
    pub(crate) demand: AtomicU32,
}

/// A task's answer, for its consumerd.
#[derive(Debug)]
pub struct Answer<A> {
    /// The consumerd's id for the task.
    pub client_id: u64,
    /// The scheduler's id for the task.
    pub task: TaskId,
    /// What happened.
    pub reply: Reply<A>,
}

/// What happened to a task.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply<A> {
    /// An agent's answer.
    Done(A),
    /// A hook's answer (a cache hit).
    Intercepted(A),
    /// Compile it locally, for this reason.
    RunLocally(RetryReason),
}

/// What an agent's connection sends next.
#[derive(Debug)]
pub enum Dispatch<J: Job> {
    /// Run this task.
    Assign(Arc<Task<J>>),
    /// Stop running this task; still answer it (any outcome) so that its
    /// token comes back.
    Cancel(TaskId),
    /// The task the agent still runs (or has finished) under `handle`, for
    /// an earlier scheduler, is this task: the agent answers it under the
    /// task's id.
    Adopt {
        /// The task.
        task: Arc<Task<J>>,
        /// The agent's id for it.
        handle: u64,
    },
    /// The task the agent holds under `handle` is wanted no more (its
    /// adoption raced a cancel): the agent drops it and answers nothing.
    Abandon(u64),
}

/// Why a completion was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompleteError {
    /// The agent answered a task it does not hold (never sent, or answered twice).
    #[error("agent answered task {0:?}, which it does not hold")]
    UnknownTask(TaskId),
}

#[cfg(all(test, not(ccroute_loom)))]
mod tests {
    use super::*;

    #[test]
    fn state_words_round_trip() {
        for s in [State::queued(0), State::queued(7), State::held(2), State::assigned(u32::MAX, 255), State::ended()] {
            assert_eq!(State::unpack(s.pack()), s);
        }
        assert_ne!(State::assigned(1, 0).pack(), State::assigned(1, 1).pack(), "attempts are part of the word");
        assert_ne!(State::assigned(1, 0).pack(), State::assigned(2, 0).pack(), "agents are part of the word");
    }
}
