//! Tasks that outlive a scheduler: a restarted scheduler adopts what its
//! peers still hold instead of compiling it again.
//!
//! When the scheduler is lost, agents keep compiling what they were given
//! and keep what finishes (the agent daemon, `agent/daemon.rs`), and
//! consumerds keep their tasks in flight for a short grace
//! (`consumerd/link.rs`). Once they are back:
//!
//! - an agent's hello lists what it still holds, each task by its
//!   [`Origin`] (the consumerd's node id and its id for the task) and the
//!   agent's handle for it; the agent's session starts with a token reserved
//!   for each ([`ccroute_core::Scheduler::connect_agent_resuming`]);
//! - a consumerd sends each task in flight again, marked `resumed`, with its
//!   source.
//!
//! The [`ResumeHook`], first of the hooks, matches the two by origin: a
//! resumed task an agent holds is adopted by that agent
//! ([`Interception::adopt`]) — the agent answers it under its new id, at
//! once if it has finished — and is compiled nowhere else. A resumed task no
//! agent announced waits until [`RESUME_WINDOW`] after the scheduler
//! started, for agents still reconnecting, then goes on to be placed like
//! any task. An announced task no consumerd sent again within
//! [`RESUME_WINDOW`] of its agent's connection is dropped by the agent and
//! its token comes back (its consumerd gave up and compiled it itself, or
//! the old scheduler's answer reached it).
//!
//! Exactly once holds as for any task: a resumed task is one task of its
//! consumerd's session, answered once, whichever of its agent, a new
//! placement or a cancel ends it.
//!
//! The table is one sharded map from origin to what waits there (an
//! announced task or a held resumed one); a shard lock is held only to take
//! or put an entry, never while a task is adopted or placed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ccroute_wire::{Origin, ResumedTask};
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use super::job::NetJob;
use ccroute_core::{AgentId, Hook, HookAction, Interception, TaskRef};

/// How long a resumed task waits for an agent's announcement after the
/// scheduler started, and an announced task for its consumerd after its
/// agent connected. Peers come back within about a second of a restarted
/// scheduler listening (`net::knock`, stateless resets).
pub(crate) const RESUME_WINDOW: Duration = Duration::from_secs(2);

/// How often held resumed tasks and announced tasks are checked against
/// the window.
pub(crate) const SWEEP_EVERY: Duration = Duration::from_millis(250);

/// What waits under an origin.
enum Slot {
    /// An agent holds the task.
    Announced { agent: AgentId, handle: u64 },
    /// Its consumerd sent it again; held until an agent announces it.
    Waiting(Interception<NetJob>),
}

/// The table of tasks carried over from an earlier scheduler.
pub(crate) struct Resumes {
    /// Until when a resumed task no agent announced is held.
    until: Instant,
    slots: DashMap<Origin, Slot>,
    /// Tasks adopted by the agent that held them.
    adopted: AtomicU64,
    /// Announced tasks no consumerd sent again in time.
    dropped: AtomicU64,
    /// Resumed tasks no agent held, placed anew.
    placed: AtomicU64,
}

impl std::fmt::Debug for Resumes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resumes").field("slots", &self.slots.len()).finish_non_exhaustive()
    }
}

/// What to do with a task that is adopted outside the table's lock.
type Adoption = (Interception<NetJob>, AgentId, u64);

impl Resumes {
    /// A table for a scheduler that starts now.
    pub(crate) fn new() -> Resumes {
        Resumes {
            until: Instant::now() + RESUME_WINDOW,
            slots: DashMap::new(),
            adopted: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            placed: AtomicU64::new(0),
        }
    }

    /// An agent connected holding `tasks`: each is adopted at once by a
    /// resumed task already waiting for it, or waits for one.
    pub(crate) fn announce(&self, agent: AgentId, tasks: &[ResumedTask]) {
        let mut adopt = Vec::new();
        for t in tasks {
            match self.slots.entry(t.origin) {
                Entry::Occupied(e) if matches!(e.get(), Slot::Waiting(_)) => {
                    if let Slot::Waiting(held) = e.remove() {
                        adopt.push((held, agent, t.handle));
                    }
                }
                // Announced twice (an agent that reconnected at once):
                // the newer connection holds it now.
                Entry::Occupied(mut e) => {
                    e.insert(Slot::Announced { agent, handle: t.handle });
                }
                Entry::Vacant(e) => {
                    e.insert(Slot::Announced { agent, handle: t.handle });
                }
            }
        }
        for a in adopt {
            self.adopt(a);
        }
    }

    /// The announced tasks of `agent` among `tasks` that no consumerd
    /// claimed: taken out of the table, for the agent to drop.
    pub(crate) fn unclaimed(&self, agent: AgentId, tasks: &[ResumedTask]) -> Vec<u64> {
        let mut out = Vec::new();
        for t in tasks {
            let mine = |_: &Origin, s: &Slot| matches!(s, Slot::Announced { agent: a, handle } if *a == agent && *handle == t.handle);
            if self.slots.remove_if(&t.origin, mine).is_some() {
                out.push(t.handle);
            }
        }
        self.dropped.fetch_add(out.len() as u64, Ordering::Relaxed);
        out
    }

    /// Places the resumed tasks whose wait is over (the scheduler's window
    /// has passed), and lets go of those cancelled meanwhile.
    pub(crate) fn sweep(&self) {
        if Instant::now() >= self.until {
            self.place_waiting();
        }
    }

    /// Places every resumed task still held, whatever the window (the
    /// scheduler is shutting down: they are answered "run it locally").
    pub(crate) fn place_waiting(&self) {
        let waiting: Vec<Origin> =
            self.slots.iter().filter(|e| matches!(e.value(), Slot::Waiting(_))).map(|e| *e.key()).collect();
        for origin in waiting {
            if let Some((_, Slot::Waiting(held))) = self.slots.remove_if(&origin, |_, s| matches!(s, Slot::Waiting(_)))
            {
                if held.is_live() {
                    self.placed.fetch_add(1, Ordering::Relaxed);
                }
                held.proceed();
            }
        }
    }

    /// Tasks adopted, announced tasks dropped, resumed tasks placed anew.
    pub(crate) fn counts(&self) -> (u64, u64, u64) {
        (
            self.adopted.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
            self.placed.load(Ordering::Relaxed),
        )
    }

    fn adopt(&self, (held, agent, handle): Adoption) {
        match held.adopt(agent, handle) {
            Ok(true) => {
                self.adopted.fetch_add(1, Ordering::Relaxed);
            }
            Ok(false) => {}
            // The agent left (its session placed what it held) or has no
            // token reserved for it: place the task like any other.
            Err(held) => {
                self.placed.fetch_add(1, Ordering::Relaxed);
                held.proceed();
            }
        }
    }
}

/// The first hook: a resumed task goes to the agent that still holds it.
#[derive(Clone, Debug)]
pub(crate) struct ResumeHook {
    pub(crate) resumes: std::sync::Arc<Resumes>,
}

impl Hook<NetJob> for ResumeHook {
    fn pre_receive(&self, task: &TaskRef<'_, NetJob>) -> HookAction {
        let body = task.task().body();
        if !body.header.resumed {
            return HookAction::ProcessRequestNormally;
        }
        let origin = Origin { consumerd: body.origin.0, task_id: body.header.task_id };
        let table = &self.resumes;
        let holding = Instant::now() < table.until;
        // A copy sent earlier that still waits (a consumerd that reconnected
        // twice; its earlier session cancelled it): let go of outside the lock.
        let mut stale = None;
        let held = match table.slots.entry(origin) {
            Entry::Occupied(mut e) => {
                let announced = match e.get() {
                    Slot::Announced { agent, handle } => Some((*agent, *handle)),
                    Slot::Waiting(_) => None,
                };
                match announced {
                    Some((agent, handle)) => {
                        // Cancelled already: the announcement stays, to expire.
                        let Some(held) = task.intercept() else { return HookAction::RequestIntercepted };
                        e.remove();
                        Some((held, agent, handle))
                    }
                    None if holding => {
                        let Some(held) = task.intercept() else { return HookAction::RequestIntercepted };
                        stale = Some(e.insert(Slot::Waiting(held)));
                        None
                    }
                    None => return HookAction::ProcessRequestNormally,
                }
            }
            Entry::Vacant(e) => {
                if !holding {
                    table.placed.fetch_add(1, Ordering::Relaxed);
                    return HookAction::ProcessRequestNormally;
                }
                let Some(held) = task.intercept() else { return HookAction::RequestIntercepted };
                e.insert(Slot::Waiting(held));
                None
            }
        };
        drop(stale);
        if let Some(adoption) = held {
            table.adopt(adoption);
        }
        HookAction::RequestIntercepted
    }
}
