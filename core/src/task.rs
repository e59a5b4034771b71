//! A task and its state word.
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

use ccroute_wire::ToolchainKey;

use super::broker::ConsumerdEntry;
use super::router::{Lane, Route};
use super::{Job, TaskId};
use crate::sync::{Arc, AtomicU64, Ordering};

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
}

impl<J: Job> Task<J> {
    pub(crate) fn new(
        id: TaskId,
        client_id: u64,
        body: J::Task,
        route: Arc<Route<J>>,
        lane: Arc<Lane<J>>,
        consumerd: Arc<ConsumerdEntry<J>>,
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
        }
    }

    /// The current state. A snapshot: act on it only through [`Task::transition`].
    #[inline]
    /// Whether the task has ended (answered, sent back or cancelled).
    pub fn has_ended(&self) -> bool {
        self.state().phase == Phase::Ended
    }

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
