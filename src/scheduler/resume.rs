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
//! once if it has finished — and is compiled nowhere else. A task two
//! agents hold (hedged when the scheduler was lost) is adopted by the one
//! that announced it last; the other copy is dropped as unclaimed, or, when
//! its offer (below) finds the task already adopted and running, becomes
//! its copy.
//! A resumed task no agent announced waits, for agents still reconnecting,
//! until [`RESUME_WINDOW`] after the scheduler started, or while an agent
//! that left with tasks in flight has not come back (at most [`AWAY_WAIT`]
//! after it left: a scheduler that kept running but lost every connection
//! when its own link failed is in a restarted one's place), then goes on
//! to be placed like any task. An announced task no consumerd sent again within
//! [`RESUME_WINDOW`] of its agent's connection is dropped by the agent and
//! its token comes back (its consumerd gave up and compiled it itself, or
//! the old scheduler's answer reached it).
//!
//! The same scheduler sees this too, when only an agent's link failed: it
//! placed the agent's tasks again once the connection timed out, and the
//! agent comes back with its runs of them, often finished. Its consumerd
//! is still connected and sends nothing again; an announced task is
//! offered to it instead (by its node), and a task of its session that
//! runs on another agent takes the held run as its copy
//! ([`ccroute_core::ConsumerdSession::copy_held`]): the first answer of the
//! two is the task's, as for a hedge. Before, such a run was dropped and
//! the unit ran again from the start: when it was the build's longest, the
//! build took 1.6x as long.
//!
//! Exactly once holds as for any task: a resumed task is one task of its
//! consumerd's session, answered once, whichever of its agent, a new
//! placement or a cancel ends it.
//!
//! The table is one sharded map from origin to what waits there (an
//! announced task or a held resumed one); a shard lock is held only to take
//! or put an entry, and while a held run is made a copy (atomics, reads of
//! the core's agent map and outbox pushes: no hook or placement runs then,
//! and nothing there comes back to this table), never while a task is
//! adopted or placed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ccroute_wire::{Origin, ResumedTask};
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use tokio::sync::mpsc;

use super::job::NetJob;
use ccroute_core::{AgentId, Hook, HookAction, Interception, TaskRef};

/// How long a resumed task waits for an agent's announcement after the
/// scheduler started, and an announced task for its consumerd after its
/// agent connected. Peers come back within about a second of a restarted
/// scheduler listening (`net::knock`, stateless resets).
pub(crate) const RESUME_WINDOW: Duration = Duration::from_secs(2);

/// How long, after an agent left with tasks in flight, a resumed task no
/// agent announced waits for it to come back: the two ends of a connection
/// time out apart by up to the idle timeout (5 s; the agent may hear of
/// the loss that much later), and a peer dials again within about a second
/// of noticing.
pub(crate) const AWAY_WAIT: Duration = Duration::from_secs(7);

/// How often held resumed tasks and announced tasks are checked against
/// the window.
pub(crate) const SWEEP_EVERY: Duration = Duration::from_millis(250);

/// An agent's session and its handle for a task it announced.
type Holder = (AgentId, u64);

/// What waits under an origin.
enum Slot {
    /// Agents hold the task, in the order they announced it: one, or more
    /// for a task hedged when the earlier scheduler was lost (each copy's
    /// agent announces it) or an agent that reconnected at once (its older
    /// session is leaving, so the newest announcement is adopted first).
    /// One is adopted; the others are dropped at their agent's window,
    /// their tokens back, unless taken as the task's copy first.
    Announced(Vec<Holder>),
    /// Its consumerd sent it again; held until an agent announces it.
    Waiting(Interception<NetJob>),
}

/// A run an agent holds, offered to the consumerd session whose task it is:
/// the consumerd's id for the task, and who holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeldRun {
    pub(crate) task_id: u64,
    pub(crate) holder: Holder,
}

/// The table of tasks carried over from an earlier scheduler.
pub(crate) struct Resumes {
    /// Until when a resumed task no agent announced is held.
    until: Instant,
    slots: DashMap<Origin, Slot>,
    /// Connected consumerds by node, each with its connection's id: where
    /// announced runs are offered.
    consumerds: DashMap<u128, (u64, mpsc::UnboundedSender<HeldRun>)>,
    /// Agents by node: sessions open, and for one that left with tasks in
    /// flight and has none open, until when it is waited for.
    agents: Mutex<HashMap<u128, Presence>>,
    /// Tasks adopted by the agent that held them (as the task, or as its copy).
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

/// An agent node's sessions, as the table knows them.
#[derive(Clone, Copy, Debug, Default)]
struct Presence {
    open: u32,
    /// Set when its last session ended with tasks in flight.
    awaited_until: Option<Instant>,
}

/// What to do with a task that is adopted outside the table's lock: its
/// origin, the task, the agent to ask first.
type Adoption = (Origin, Interception<NetJob>, Holder);

impl Resumes {
    /// A table for a scheduler that starts now.
    pub(crate) fn new() -> Resumes {
        Resumes {
            until: Instant::now() + RESUME_WINDOW,
            slots: DashMap::new(),
            consumerds: DashMap::new(),
            agents: Mutex::new(HashMap::new()),
            adopted: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            placed: AtomicU64::new(0),
        }
    }

    /// A session of agent `node` began: it is no longer waited for.
    pub(crate) fn agent_joined(&self, node: u128) {
        let mut agents = self.agents.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let p = agents.entry(node).or_default();
        p.open += 1;
        p.awaited_until = None;
    }

    /// A session of agent `node` ended with `in_flight` tasks: with none of
    /// its sessions left open and tasks in flight, resumed tasks wait up to
    /// [`AWAY_WAIT`] for it to come back and announce them.
    pub(crate) fn agent_left(&self, node: u128, in_flight: usize, now: Instant) {
        let mut agents = self.agents.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(p) = agents.get_mut(&node) else { return };
        p.open = p.open.saturating_sub(1);
        if p.open == 0 {
            if in_flight > 0 {
                p.awaited_until = Some(now + AWAY_WAIT);
            } else {
                agents.remove(&node);
            }
        }
    }

    /// Whether a resumed task no agent announced is held at `now`: within
    /// the window after the start, or while an agent that left with tasks
    /// in flight is awaited. Agents awaited past their time are forgotten.
    fn holding(&self, now: Instant) -> bool {
        if now < self.until {
            return true;
        }
        let mut agents = self.agents.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        agents.retain(|_, p| p.open > 0 || p.awaited_until.is_some_and(|t| now < t));
        agents.values().any(|p| p.awaited_until.is_some())
    }

    /// Consumerd `node` connected (connection `conn`): runs agents
    /// announce of its tasks come on the receiver, for its session to copy
    /// ([`Resumes::copy_held`]). A later connection of the same node takes
    /// its place.
    pub(crate) fn consumerd_joined(&self, node: u128, conn: u64) -> mpsc::UnboundedReceiver<HeldRun> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.consumerds.insert(node, (conn, tx));
        rx
    }

    /// Connection `conn` of consumerd `node` ended.
    pub(crate) fn consumerd_left(&self, node: u128, conn: u64) {
        self.consumerds.remove_if(&node, |_, (c, _)| *c == conn);
    }

    /// An agent connected holding `tasks`: each is adopted at once by a
    /// resumed task already waiting for it, or waits for one; and is
    /// offered to its consumerd's session, which may be running it on
    /// another agent.
    pub(crate) fn announce(&self, agent: AgentId, tasks: &[ResumedTask]) {
        let mut adopt = Vec::new();
        let mut offer = Vec::new();
        for t in tasks {
            match self.slots.entry(t.origin) {
                Entry::Occupied(e) if matches!(e.get(), Slot::Waiting(_)) => {
                    if let Slot::Waiting(held) = e.remove() {
                        adopt.push((t.origin, held, (agent, t.handle)));
                    }
                }
                Entry::Occupied(mut e) => {
                    if let Slot::Announced(holders) = e.get_mut() {
                        holders.push((agent, t.handle));
                    }
                    offer.push(t);
                }
                Entry::Vacant(e) => {
                    e.insert(Slot::Announced(vec![(agent, t.handle)]));
                    offer.push(t);
                }
            }
        }
        for a in adopt {
            self.adopt(a);
        }
        for t in offer {
            if let Some(c) = self.consumerds.get(&t.origin.consumerd) {
                // A session that ended meanwhile has nothing to copy.
                let _ = c.1.send(HeldRun { task_id: t.origin.task_id, holder: (agent, t.handle) });
            }
        }
    }

    /// The session of consumerd `node` looks at a run offered to it: if the
    /// run is still announced (not yet dropped, adopted or copied), `copy`
    /// is asked to make it the task's copy (`Some`: it took the agent's
    /// reservation, `Some(true)` with the copy in place), and a run it took
    /// leaves the table, so that its agent is not told to drop it twice.
    /// Returns what `copy` said; `None` when the run was not taken.
    pub(crate) fn copy_held(&self, node: u128, run: HeldRun, copy: impl FnOnce() -> Option<bool>) -> Option<bool> {
        let origin = Origin { consumerd: node, task_id: run.task_id };
        let Entry::Occupied(mut e) = self.slots.entry(origin) else { return None };
        let Slot::Announced(holders) = e.get_mut() else { return None };
        let at = holders.iter().position(|h| *h == run.holder)?;
        // Under the shard's lock: the run is either copied here or dropped
        // at its agent's window, never both.
        let copied = copy()?;
        holders.remove(at);
        if holders.is_empty() {
            e.remove();
        }
        if copied {
            self.adopted.fetch_add(1, Ordering::Relaxed);
        }
        Some(copied)
    }

    /// The announced tasks of `agent` among `tasks` that no consumerd
    /// claimed: taken out of the table, for the agent to drop.
    pub(crate) fn unclaimed(&self, agent: AgentId, tasks: &[ResumedTask]) -> Vec<u64> {
        let mut out = Vec::new();
        for t in tasks {
            let Entry::Occupied(mut e) = self.slots.entry(t.origin) else { continue };
            let Slot::Announced(holders) = e.get_mut() else { continue };
            let Some(at) = holders.iter().position(|h| *h == (agent, t.handle)) else { continue };
            holders.remove(at);
            if holders.is_empty() {
                e.remove();
            }
            out.push(t.handle);
        }
        self.dropped.fetch_add(out.len() as u64, Ordering::Relaxed);
        out
    }

    /// Places the resumed tasks whose wait is over (the scheduler's window
    /// has passed and no agent is awaited), and lets go of those cancelled
    /// meanwhile.
    pub(crate) fn sweep(&self) {
        if !self.holding(Instant::now()) {
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

    /// The newest holder announced for `origin`, taken out of the table;
    /// any other holder stays, to be dropped at its agent's window.
    fn claim(&self, origin: Origin) -> Option<Holder> {
        let Entry::Occupied(e) = self.slots.entry(origin) else { return None };
        take_newest(e)
    }

    fn adopt(&self, (origin, held, holder): Adoption) {
        self.adopt_by(origin, held, holder);
    }

    /// [`Resumes::adopt`], for any task that can be adopted.
    fn adopt_by<A: Adopt>(&self, origin: Origin, mut held: A, mut holder: Holder) {
        // Holders that could not adopt it: they still hold the run, and go
        // back to the table to be dropped at their agent's window.
        let mut refused = Vec::new();
        loop {
            match held.adopt(holder) {
                Ok(true) => {
                    self.adopted.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Ok(false) => break,
                // The agent left (its session placed what it held) or has no
                // token reserved for it: another holder, or placed like any
                // other task.
                Err(back) => {
                    held = back;
                    refused.push(holder);
                    match self.claim(origin) {
                        Some(next) => holder = next,
                        None => {
                            self.placed.fetch_add(1, Ordering::Relaxed);
                            held.proceed();
                            break;
                        }
                    }
                }
            }
        }
        if !refused.is_empty() {
            match self.slots.entry(origin) {
                Entry::Occupied(mut e) => {
                    if let Slot::Announced(holders) = e.get_mut() {
                        holders.extend(refused);
                    }
                }
                Entry::Vacant(e) => {
                    e.insert(Slot::Announced(refused));
                }
            }
        }
    }
}

/// A resumed task an agent's held run may be adopted as.
trait Adopt: Sized {
    /// Adopted by `holder` (`Ok(false)`: it ended meanwhile); `Err` gives it
    /// back when that agent cannot (gone, or no token reserved).
    fn adopt(self, holder: Holder) -> Result<bool, Self>;
    /// Placed like any task.
    fn proceed(self);
}

impl Adopt for Interception<NetJob> {
    fn adopt(self, (agent, handle): Holder) -> Result<bool, Self> {
        Interception::adopt(self, agent, handle)
    }

    fn proceed(self) {
        Interception::proceed(self);
    }
}

/// The newest holder of an announced task, taken out of its slot; the slot
/// goes once no holder is left.
fn take_newest(mut e: dashmap::mapref::entry::OccupiedEntry<'_, Origin, Slot>) -> Option<Holder> {
    let Slot::Announced(holders) = e.get_mut() else { return None };
    let newest = holders.pop();
    if holders.is_empty() {
        e.remove();
    }
    newest
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
        let holding = table.holding(Instant::now());
        // A copy sent earlier that still waits (a consumerd that reconnected
        // twice; its earlier session cancelled it): let go of outside the lock.
        let mut stale = None;
        let held = match table.slots.entry(origin) {
            Entry::Occupied(mut e) => match e.get() {
                Slot::Announced(holders) if !holders.is_empty() => {
                    // Cancelled already: the announcements stay, to expire.
                    let Some(held) = task.intercept() else { return HookAction::RequestIntercepted };
                    take_newest(e).map(|h| (origin, held, h))
                }
                _ if holding => {
                    let Some(held) = task.intercept() else { return HookAction::RequestIntercepted };
                    stale = Some(e.insert(Slot::Waiting(held)));
                    None
                }
                _ => return HookAction::ProcessRequestNormally,
            },
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

#[cfg(test)]
mod tests {
    use super::*;
    use ccroute_wire::ToolchainKey;

    fn holding(handle: u64, origin: Origin) -> [ResumedTask; 1] {
        [ResumedTask { handle, origin, toolchain: ToolchainKey(1) }]
    }

    /// A task hedged when its scheduler was lost is held by two agents,
    /// and both announce it: one copy is adopted, the other dropped at its
    /// agent's window with its token; neither is forgotten (a forgotten one
    /// keeps its agent's reserved token for the whole session).
    #[test]
    fn every_announced_copy_is_either_claimed_or_dropped() {
        let table = Resumes::new();
        let task = Origin { consumerd: 3, task_id: 40 };
        let (a, b) = (AgentId(1), AgentId(2));
        let (on_a, on_b) = (holding(11, task), holding(22, task));
        table.announce(a, &on_a);
        table.announce(b, &on_b);

        let claimed = table.claim(task);
        assert!(claimed.is_some(), "one copy is adopted");
        let mut ended: Vec<u64> = claimed.into_iter().map(|(_, h)| h).collect();
        ended.extend(table.unclaimed(a, &on_a));
        ended.extend(table.unclaimed(b, &on_b));
        ended.sort_unstable();
        assert_eq!(ended, [11, 22], "each copy ends once: adopted or dropped");
        assert!(table.slots.is_empty());
    }

    /// A scheduler that kept running but lost its agents' connections (its
    /// own link failed) holds a resumed task no agent announced while an
    /// agent that left with tasks in flight has not come back, as a
    /// restarted one does in its first window; not for an agent that left
    /// with nothing, one that is back (even before its old session was
    /// seen to end), or one awaited past [`AWAY_WAIT`].
    #[test]
    fn resumed_tasks_wait_for_agents_that_left_holding_tasks() {
        let mut table = Resumes::new();
        let start = Instant::now();
        table.until = start;
        assert!(!table.holding(start), "past the start's window, nobody awaited");

        table.agent_joined(1);
        table.agent_left(1, 0, start);
        assert!(!table.holding(start), "it left holding nothing");

        table.agent_joined(2);
        table.agent_left(2, 8, start);
        assert!(table.holding(start + Duration::from_secs(1)), "it left holding 8 tasks");
        assert!(!table.holding(start + AWAY_WAIT), "awaited no longer than AWAY_WAIT");

        table.agent_joined(4);
        table.agent_left(4, 8, start);
        assert!(table.holding(start + Duration::from_secs(1)));
        table.agent_joined(4);
        assert!(!table.holding(start + Duration::from_secs(1)), "it came back");

        // Back before its old session was seen to end: not awaited.
        table.agent_joined(3);
        table.agent_joined(3);
        table.agent_left(3, 8, start);
        assert!(!table.holding(start + Duration::from_secs(1)));
        table.agent_left(3, 8, start);
        assert!(table.holding(start + Duration::from_secs(1)), "both its sessions ended");
    }

    /// A run an agent announced on coming back is offered to its
    /// consumerd's session; once taken as a copy it leaves the table (its
    /// agent is not told to drop it at the window), one not taken stays to
    /// be dropped, and one already dropped is not asked about.
    #[test]
    fn a_held_run_is_either_copied_or_dropped_never_both() {
        let table = Resumes::new();
        let mut offers = table.consumerd_joined(3, 1);
        let (copied, kept) = (Origin { consumerd: 3, task_id: 40 }, Origin { consumerd: 3, task_id: 41 });
        let agent = AgentId(1);
        let held = [
            ResumedTask { handle: 11, origin: copied, toolchain: ToolchainKey(1) },
            ResumedTask { handle: 12, origin: kept, toolchain: ToolchainKey(1) },
        ];
        table.announce(agent, &held);
        let first = offers.try_recv().unwrap();
        let second = offers.try_recv().unwrap();
        assert_eq!((first.task_id, second.task_id), (40, 41), "each run offered to its consumerd");
        assert_eq!(table.copy_held(3, first, || Some(true)), Some(true));
        assert_eq!(table.copy_held(3, second, || None), None, "the session could not take it");
        assert_eq!(table.unclaimed(agent, &held), vec![12], "only the run not taken is dropped");
        let mut asked = false;
        let again = table.copy_held(3, second, || {
            asked = true;
            Some(true)
        });
        assert!(again.is_none() && !asked, "a dropped run is not offered again");
        assert_eq!(table.counts().0, 1, "one run adopted as a copy");
        table.consumerd_left(3, 1);
        table.announce(agent, &held);
        assert!(offers.try_recv().is_err(), "a consumerd gone is offered nothing");
    }

    /// The newest announcement is asked first (an agent that reconnected at
    /// once announces again from a new session while its old one is
    /// leaving); when it cannot adopt, the one before; a table with no
    /// holder left has nothing to claim.
    #[test]
    fn holders_are_claimed_newest_first_until_none_is_left() {
        let table = Resumes::new();
        let task = Origin { consumerd: 1, task_id: 7 };
        table.announce(AgentId(5), &holding(1, task));
        table.announce(AgentId(6), &holding(2, task));
        assert_eq!(table.claim(task), Some((AgentId(6), 2)));
        assert_eq!(table.claim(task), Some((AgentId(5), 1)));
        assert_eq!(table.claim(task), None);
        assert_eq!(table.unclaimed(AgentId(5), &holding(1, task)), Vec::<u64>::new());
    }

    /// A task whose adoption its holders refuse, one by one.
    struct Refused(std::rc::Rc<std::cell::Cell<bool>>);

    impl Adopt for Refused {
        fn adopt(self, _: Holder) -> Result<bool, Self> {
            Err(self)
        }

        fn proceed(self) {
            self.0.set(true);
        }
    }

    /// An agent that holds more runs than it had tokens to reserve cannot
    /// adopt the rest: each such task is placed anew, and the run its agent
    /// holds is still dropped at the agent's window (it was forgotten: the
    /// agent compiled on without a token, and kept the result).
    #[test]
    fn a_run_whose_agent_could_not_adopt_it_is_still_dropped_at_its_window() {
        let table = Resumes::new();
        let task = Origin { consumerd: 1, task_id: 7 };
        let (a, b) = (AgentId(5), AgentId(6));
        table.announce(a, &holding(1, task));
        table.announce(b, &holding(2, task));
        let placed = std::rc::Rc::new(std::cell::Cell::new(false));
        let first = table.claim(task).expect("a holder");
        table.adopt_by(task, Refused(placed.clone()), first);
        assert!(placed.get(), "placed like any task once no holder could adopt it");
        assert_eq!(table.unclaimed(a, &holding(1, task)), vec![1]);
        assert_eq!(table.unclaimed(b, &holding(2, task)), vec![2]);
        assert!(table.slots.is_empty());
    }
}
