//! Hooks: code that sees every task before it is routed.
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

use super::broker::Ending;
use super::task::{Phase, State, Task};
use super::{Core, Job};
use crate::sync::Arc;

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

    /// Sees the end of every task this hook let through or intercepted.
    fn on_end(&self, task: &Task<J>, end: EndView<'_, J::Answer>) {
        let _ = (task, end);
    }
}

/// A task as `pre_receive` sees it.
pub struct TaskRef<'a, J: Job> {
    pub(crate) core: &'a Arc<Core<J>>,
    pub(crate) task: &'a Arc<Task<J>>,
    pub(crate) hook: usize,
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
