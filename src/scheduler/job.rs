//! What the networked scheduler carries through the core: task bodies (a
//! consumerd's task header and its compressed source) and answers (an
//! agent's result header and its compressed object). Both hold their payload
//! budget reservation, so that the bytes are counted exactly as long as the
//! scheduler holds them.

use std::sync::{Arc, OnceLock};

use super::cache_hook::CacheLookup;

use bytes::Bytes;
use ccroute_wire::{Outcome, ResultHeader, TaskHeader};

use super::budget::Reservation;
use ccroute_core::cost::Basis;
use ccroute_core::{AnswerKind, Job};

/// The networked scheduler's [`Job`].
#[derive(Debug)]
pub struct NetJob;

/// A task as the scheduler holds it.
#[derive(Debug)]
pub struct TaskBody {
    /// The consumerd's header (its task id, toolchain, cache key, spec).
    pub header: TaskHeader,
    /// The compressed preprocessed source, never decoded here.
    pub payload: Bytes,
    /// Its bytes against the payload budget.
    pub reservation: Option<Reservation>,
    /// What the connection learnt of its cache key before submitting it.
    pub lookup: CacheLookup,
    /// Whether the payload hashes to the claimed cache key (computed once, when needed).
    pub verified: OnceLock<bool>,
    /// The consumerd session that sent it (an agent fetches a unit's inputs from it).
    pub origin: super::shipping::SessionKey,
    /// When it arrived (its wait until dispatch is a metric).
    pub received: std::time::Instant,
    /// What it is expected to cost; `None` when its spec does not decode.
    pub(crate) expected: Option<crate::cost::Expected>,
}

impl TaskBody {
    /// A task as it arrived, not looked up in the cache yet.
    pub fn new(header: TaskHeader, payload: Bytes, reservation: Option<Reservation>, lookup: CacheLookup) -> Self {
        TaskBody {
            header,
            payload,
            reservation,
            lookup,
            verified: OnceLock::new(),
            origin: (0, 0),
            received: std::time::Instant::now(),
            expected: None,
        }
    }
}

/// An answer as the scheduler holds it: cheap to clone (identical tasks in
/// flight share one).
#[derive(Debug, Clone)]
pub struct AgentAnswer {
    /// The result header (its task id is the agent's view; rewritten for the consumerd).
    pub header: ResultHeader,
    /// The compressed object.
    pub payload: Bytes,
    /// Its bytes against the payload budget.
    pub reservation: Option<Arc<Reservation>>,
}

impl Job for NetJob {
    type Task = TaskBody;
    type Answer = AgentAnswer;

    fn classify(answer: &AgentAnswer) -> AnswerKind {
        match answer.header.outcome {
            Outcome::Success => AnswerKind::Success,
            Outcome::CompileFailed => AnswerKind::Failed,
            // The agent's trouble, not the unit's: the consumerd compiles it.
            _ => AnswerKind::Internal,
        }
    }

    /// A cold model's prediction is no knowledge: the core places such a
    /// task on any free token rather than hold it for a faster agent.
    fn expected_micros(task: &TaskBody) -> Option<u64> {
        task.expected.filter(|e| e.prediction.basis != Basis::Cold).map(|e| e.prediction.micros)
    }
}
