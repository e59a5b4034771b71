//! The shared tables of a scheduler ([`Core`]) and a task's way through
//! them: the hooks it passes before routing, placement (by
//! [`crate::router`]), and its one end.
//!
//! # Hooks
//!
//! As in kubecc, a hook's `pre_receive` returns one of
//! [`HookAction::ProcessRequestNormally`] (go on to the next hook, then route),
//! [`HookAction::RejectRequest`] (answer "run locally" with the hook's reason)
//! or [`HookAction::RequestIntercepted`] (the hook took the task over). To
//! intercept, a hook calls [`TaskRef::intercept`] and keeps the
//! [`Interception`]: a handle that answers the task, sends it back to run
//! locally, or lets it proceed to the next hook and the router — exactly one
//! of those, from any thread, at any later time. Dropping the handle lets the
//! task proceed, so a hook can never strand a task. A cancel that races an
//! interception wins or loses by the task's state word like any other end.
//!
//! `pre_receive` runs on the submitting connection's task and must not
//! block: a hook that needs I/O (the result cache's disk and Redis tiers)
//! intercepts, does the I/O elsewhere, and answers or proceeds from there.
//!
//! `on_end` sees every task's end — answered, sent back, cancelled — after
//! its state word says ENDED and before its consumerd is told: the cache
//! stores results there and releases the tasks that waited on identical work.

use ccroute_wire::RetryReason;

use crate::counters::Retired;
use crate::records::{
    AgentEntry, AgentEvent, AgentId, Answer, Config, ConsumerdEntry, ConsumerdId, Ending, Job, Phase, Reply, State,
    Task,
};
use crate::router::{Ends, Router};
use crate::sync::{Arc, AtomicBool, AtomicU32, Ordering, ShardedMap};

/// The shared state behind a [`Scheduler`].
pub(crate) struct Core<J: Job> {
    pub(crate) config: Config,
    pub(crate) router: Router<J>,
    pub(crate) agents: ShardedMap<AgentId, Arc<AgentEntry<J>>>,
    pub(crate) consumerds: ShardedMap<ConsumerdId, Arc<ConsumerdEntry<J>>>,
    /// Immutable after construction: plain std `Arc`s, outside what loom models.
    pub(crate) hooks: Vec<std::sync::Arc<dyn Hook<J>>>,
    pub(crate) retired: Retired,
    next_peer: AtomicU32,
    pub(crate) shutting_down: AtomicBool,
}

impl<J: Job> Core<J> {
    pub(crate) fn new(config: Config, hooks: Vec<std::sync::Arc<dyn Hook<J>>>) -> Self {
        let config = Config { max_attempts: config.max_attempts.max(1), ..config };
        Core {
            router: Router::new(config.max_queued_per_route, config.speed_aware),
            config,
            agents: ShardedMap::new(),
            consumerds: ShardedMap::new(),
            hooks,
            retired: Retired::default(),
            next_peer: AtomicU32::new(1),
            shutting_down: AtomicBool::new(false),
        }
    }

    pub(crate) fn next_peer_id(&self) -> u32 {
        // Starts at 1: 0 means "no agent" in a task's state word.
        self.next_peer.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Finishes a task whose state word this caller moved to ENDED: hooks see
    /// the end, then the consumerd gets its answer (unless it cancelled).
    pub(crate) fn end(&self, task: &Arc<Task<J>>, ending: Ending<J::Answer>) {
        if !self.hooks.is_empty() {
            let view = match &ending {
                Ending::Answered(a) => EndView::Answered(a),
                Ending::Intercepted(a) => EndView::Intercepted(a),
                Ending::RunLocally(r) => EndView::RunLocally(r),
                Ending::Cancelled => EndView::Cancelled,
            };
            for hook in &self.hooks {
                hook.on_end(task, view);
            }
        }
        let reply = match ending {
            Ending::Answered(a) => Reply::Done(a),
            Ending::Intercepted(a) => Reply::Intercepted(a),
            Ending::RunLocally(r) => Reply::RunLocally(r),
            Ending::Cancelled => return,
        };
        task.consumerd.outbox.push(Answer { client_id: task.client_id, task: task.id, reply });
    }

    /// Ends a task a hook holds. False when it had ended meanwhile.
    pub(crate) fn end_held(&self, task: &Arc<Task<J>>, ending: Ending<J::Answer>) -> bool {
        let s = task.state();
        if s.phase != Phase::Held || !task.transition(s, State::ended()) {
            return false;
        }
        self.end(task, ending);
        true
    }

    /// A hook let a held task go on.
    pub(crate) fn resume(core: &Arc<Self>, task: Arc<Task<J>>, next_hook: usize) {
        let s = task.state();
        if s.phase == Phase::Held && task.transition(s, State::queued(s.attempt)) {
            Self::run_hooks(core, task, next_hook);
        }
    }

    /// Runs hooks from `from` on, then places the task.
    pub(crate) fn run_hooks(core: &Arc<Self>, task: Arc<Task<J>>, from: usize) {
        if core.is_shutting_down() {
            core.end_queued(&task, RetryReason::ShuttingDown);
            return;
        }
        for (i, hook) in core.hooks.iter().enumerate().skip(from) {
            let handle = TaskRef { core, task: &task, hook: i, took: AtomicBool::new(false) };
            match hook.pre_receive(&handle) {
                HookAction::ProcessRequestNormally => {}
                HookAction::RejectRequest(why) => {
                    core.end_queued(&task, RetryReason::Rejected(why));
                    return;
                }
                HookAction::RequestIntercepted => {
                    // The hook took it: it is the hook's, whatever phase it is
                    // in by now (its background work may already have let it
                    // go and placed it, or answered it). Relaxed: set and read
                    // on this thread, within the call above.
                    if handle.took.load(Ordering::Relaxed) || task.state().phase != Phase::Queued {
                        return;
                    }
                    // The hook said it intercepted but did not take the task:
                    // route it rather than strand it.
                    tracing::warn!(task = ?task.id, hook = i, "hook returned RequestIntercepted without intercepting");
                }
            }
        }
        core.router.place(task, core.as_ref());
    }

    fn end_queued(&self, task: &Arc<Task<J>>, reason: RetryReason) {
        let s = task.state();
        if s.phase == Phase::Queued && task.transition(s, State::ended()) {
            self.end(task, Ending::RunLocally(reason));
        }
    }

    /// Cancels a task from whatever phase it is in. True if this call ended it.
    pub(crate) fn cancel(&self, task: &Arc<Task<J>>) -> bool {
        let Some(prev) = task.end_from_any() else {
            return false;
        };
        if prev.phase == Phase::Assigned {
            self.cancel_on(prev.agent, task.id, prev.attempt);
            self.drop_copy(task);
        }
        self.end(task, Ending::Cancelled);
        true
    }

    /// Tells `agent` to stop its run of `task` at `attempt` (it still
    /// answers, which frees its token).
    pub(crate) fn cancel_on(&self, agent: u32, task: crate::records::TaskId, attempt: u8) {
        if let Some(agent) = self.agents.get(&AgentId(agent)) {
            agent.outbox.push(AgentEvent::Cancel(task, attempt));
        }
    }

    /// The task's copy, if any, is not wanted any more: its agent is told.
    pub(crate) fn drop_copy(&self, task: &Task<J>) {
        if let Some((agent, attempt)) = task.take_hedge() {
            self.cancel_on(agent, task.id, attempt);
        }
    }

    /// An agent holding `task` at `attempt` was lost: a copy running on
    /// another agent carries on as the task's own run; else the task is
    /// placed again, or sent back once it has used its attempts. An agent
    /// that held only a copy lets the copy go, and the task runs on where
    /// it is — unless its own agent was lost meanwhile and handed it to
    /// this copy, when it is placed again.
    pub(crate) fn requeue(&self, task: Arc<Task<J>>, agent: AgentId, attempt: u8) {
        let from = State::assigned(agent.0, attempt);
        if task.clear_hedge(agent.0, attempt) && task.state() != from {
            return;
        }
        if let Some((copy, at)) = task.hedged() {
            if at == attempt && copy != agent.0 && task.transition(from, State::assigned(copy, attempt)) {
                // Handed over; the copy's agent may have left meanwhile, and
                // then its own drop, or this, places it again.
                if !task.clear_hedge(copy, attempt) {
                    self.place_again(task, State::assigned(copy, attempt), attempt);
                }
                return;
            }
        }
        self.place_again(task, from, attempt);
    }

    fn place_again(&self, task: Arc<Task<J>>, from: State, attempt: u8) {
        if attempt.saturating_add(1) >= self.config.max_attempts {
            if task.transition(from, State::ended()) {
                self.drop_copy(&task);
                self.end(&task, Ending::RunLocally(RetryReason::AttemptsExhausted));
            }
            return;
        }
        if task.transition(from, State::queued(attempt + 1)) {
            // A copy belongs to the attempt that ended: it cannot answer.
            self.drop_copy(&task);
            self.router.place(task, self);
        }
    }
}

impl<J: Job> Ends<J> for Core<J> {
    fn end(&self, task: &Arc<Task<J>>, ending: Ending<J::Answer>) {
        Core::end(self, task, ending);
    }

    fn is_shutting_down(&self) -> bool {
        Core::is_shutting_down(self)
    }
}

/// What a hook decided about a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookAction {
    /// Continue with the next hook, then route.
    ProcessRequestNormally,
    /// Answer "run locally", with this reason.
    RejectRequest(String),
    /// The hook called [`TaskRef::intercept`] and owns the task now.
    RequestIntercepted,
}

/// How a task ended, as hooks see it.
#[derive(Debug)]
pub enum EndView<'a, A> {
    /// An agent's answer.
    Answered(&'a A),
    /// A hook's answer.
    Intercepted(&'a A),
    /// Sent back to run locally.
    RunLocally(&'a RetryReason),
    /// Cancelled by its consumerd.
    Cancelled,
}

impl<A> Clone for EndView<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for EndView<'_, A> {}

/// Code that sees every task before routing and at its end.
pub trait Hook<J: Job>: Send + Sync {
    /// Decides what happens to a task before it is routed. Must not block.
    fn pre_receive(&self, task: &TaskRef<'_, J>) -> HookAction;

    /// Sees the end of every task (every hook sees every end, whichever hook
    /// or agent ended it).
    fn on_end(&self, task: &Task<J>, end: EndView<'_, J::Answer>) {
        let _ = (task, end);
    }
}

/// A task as `pre_receive` sees it.
pub struct TaskRef<'a, J: Job> {
    pub(crate) core: &'a Arc<Core<J>>,
    pub(crate) task: &'a Arc<Task<J>>,
    pub(crate) hook: usize,
    /// Set when [`TaskRef::intercept`] took the task during this call.
    pub(crate) took: AtomicBool,
}

impl<J: Job> std::fmt::Debug for TaskRef<'_, J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskRef").field("task", self.task).field("hook", &self.hook).finish()
    }
}

impl<J: Job> TaskRef<'_, J> {
    /// The task.
    pub fn task(&self) -> &Task<J> {
        self.task
    }

    /// The task, shared (for work that outlives this call).
    pub fn task_handle(&self) -> Arc<Task<J>> {
        self.task.clone()
    }

    /// Whether any connected agent serves the task's toolchain.
    pub fn has_agents(&self) -> bool {
        !self.task.route.agents.load().is_empty()
    }

    /// Takes the task over. Return [`HookAction::RequestIntercepted`] after
    /// this. `None` when the task is no longer waiting (it was cancelled).
    pub fn intercept(&self) -> Option<Interception<J>> {
        let s = self.task.state();
        if s.phase != Phase::Queued || !self.task.transition(s, State::held(s.attempt)) {
            return None;
        }
        self.took.store(true, Ordering::Relaxed);
        Some(Interception { core: self.core.clone(), task: Some(self.task.clone()), next_hook: self.hook + 1 })
    }
}

/// A task a hook took over; it must be resolved exactly once (dropping it
/// resolves it as [`Interception::proceed`]).
pub struct Interception<J: Job> {
    core: Arc<Core<J>>,
    task: Option<Arc<Task<J>>>,
    next_hook: usize,
}

impl<J: Job> Interception<J> {
    /// The task.
    pub fn task(&self) -> Option<&Task<J>> {
        self.task.as_deref()
    }

    /// The task, shared (for work that outlives this handle).
    pub fn task_handle(&self) -> Option<Arc<Task<J>>> {
        self.task.clone()
    }

    /// Whether the task still waits on this interception (not ended by a cancel).
    pub fn is_live(&self) -> bool {
        self.task.as_ref().is_some_and(|t| t.state().phase == Phase::Held)
    }

    /// Answers the task (a cache hit, a deduplicated result). Returns false
    /// when it had ended meanwhile (its consumerd cancelled it).
    pub fn answer(mut self, answer: J::Answer) -> bool {
        match self.task.take() {
            Some(task) => self.core.end_held(&task, Ending::Intercepted(answer)),
            None => false,
        }
    }

    /// Sends the task back to its consumerd to compile locally.
    pub fn run_locally(mut self, reason: RetryReason) -> bool {
        match self.task.take() {
            Some(task) => self.core.end_held(&task, Ending::RunLocally(reason)),
            None => false,
        }
    }

    /// Assigns the task to `agent`, which still runs it (or has finished it)
    /// under `handle` for an earlier scheduler, with one of the tokens
    /// reserved for it at the agent's connection. `Ok(true)`: the agent's
    /// session sends the adoption; `Ok(false)`: the task had ended meanwhile
    /// (cancelled); `Err(self)`: the agent is gone or has no reservation
    /// left, and the caller decides (usually [`Interception::proceed`]).
    ///
    /// # Errors
    /// The interception itself, when the agent cannot adopt the task.
    pub fn adopt(mut self, agent: AgentId, handle: u64) -> Result<bool, Self> {
        let Some(task) = self.task.clone() else { return Ok(false) };
        let Some(entry) = self.core.agents.get(&agent) else { return Err(self) };
        // The token first: one the agent's connection reserved.
        loop {
            let r = entry.reserved.load(Ordering::SeqCst);
            if r == 0 {
                return Err(self);
            }
            if entry.reserved.compare_exchange(r, r - 1, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                break;
            }
        }
        self.task = None;
        let s = task.state();
        if s.phase != Phase::Held || !task.transition(s, State::assigned(agent.0, s.attempt)) {
            // Cancelled: the token is the agent session's to give back (it
            // tells the agent to drop what it holds).
            entry.outbox.push(AgentEvent::Adopt(task, handle));
            return Ok(false);
        }
        entry.outbox.push(AgentEvent::Adopt(task, handle));
        Ok(true)
    }

    /// Lets the task go on to the next hook and the router.
    pub fn proceed(mut self) {
        if let Some(task) = self.task.take() {
            Core::resume(&self.core, task, self.next_hook);
        }
    }
}

impl<J: Job> Drop for Interception<J> {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            Core::resume(&self.core, task, self.next_hook);
        }
    }
}

impl<J: Job> std::fmt::Debug for Interception<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interception").field("task", &self.task).finish()
    }
}
