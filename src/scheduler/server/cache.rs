//! The result cache in the scheduler: a [`Hook`] in front of the router.
//!
//! - **Look-up before routing.** A task whose consumerd sent a cache key is
//!   looked up before it is routed: a large source on its own stream is
//!   looked up from its header alone (the gate in `consumerd.rs`, whose hit
//!   never reads the payload); a small inline one here, memory first, then
//!   disk and Redis off the connection's task. A hit answers at once with
//!   the object and the original compile's stdout and stderr — whether or
//!   not any agent is connected.
//! - **No poisoning.** A result is stored only under the key re-derived
//!   from the bytes this scheduler actually forwarded (decompressed and
//!   hashed with the toolchain and the spec, off the async threads), and
//!   only when that equals the key the consumerd claimed; and only
//!   successful compiles are stored. A consumerd that lies about a key
//!   gets its own lie back and harms no one.
//! - **In-flight dedup.** A task whose key is already being compiled waits
//!   for that compile instead of compiling again. When it ends with a
//!   compile (success or failure), each waiter whose own bytes hash to the
//!   key gets that answer; when it ends for an infrastructure reason (agent
//!   lost, sent back to run locally, cancelled) the next live waiter
//!   compiles instead, and the others keep waiting.
//!
//! The dedup table is a sharded map; its shard lock is never held while
//! a task is routed or answered (those can end tasks, and ending a task
//! calls back into this hook).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ccroute_wire::{cache_key, payload, CacheKey, CacheStatus, Outcome};
use dashmap::DashMap;

use super::job::{AgentAnswer, NetJob, TaskBody};
use crate::cache::{CachedResult, Storage};
use crate::scheduler::{EndView, Hook, HookAction, Interception, Task, TaskId, TaskRef};

/// The most bytes a source may decompress to for verification.
const MAX_RAW: u64 = 1 << 30;

/// What the connection already knows about a task's key.
#[derive(Debug, Default)]
pub enum Lookup {
    /// Not looked up yet (an inline task).
    #[default]
    Unchecked,
    /// Looked up: not there.
    Missed,
    /// Looked up: here is the result.
    Hit(CachedResult),
}

/// A compile of one key in flight, and the tasks waiting for it.
struct Flight {
    leader: TaskId,
    waiters: Vec<Interception<NetJob>>,
}

/// The cache hook; cheap to clone (clones share everything).
#[derive(Clone)]
pub struct CacheHook {
    shared: Arc<Shared>,
    runtime: tokio::runtime::Handle,
}

/// What the hook and the work it spawns share.
struct Shared {
    storage: Arc<Storage>,
    inflight: DashMap<CacheKey, Flight>,
    poison_rejected: AtomicU64,
    deduplicated: AtomicU64,
}

impl std::fmt::Debug for CacheHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheHook").field("in_flight", &self.shared.inflight.len()).finish_non_exhaustive()
    }
}

impl CacheHook {
    /// A hook over `storage`, spawning its work on the current runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn new(storage: Arc<Storage>) -> Self {
        CacheHook {
            shared: Arc::new(Shared {
                storage,
                inflight: DashMap::new(),
                poison_rejected: AtomicU64::new(0),
                deduplicated: AtomicU64::new(0),
            }),
            runtime: tokio::runtime::Handle::current(),
        }
    }

    /// The storage behind it.
    pub fn storage(&self) -> &Arc<Storage> {
        &self.shared.storage
    }

    /// Tiers' counters plus the hook's own.
    pub fn status(&self) -> CacheStatus {
        let mut s = self.shared.storage.stats();
        s.poison_rejected = self.shared.poison_rejected.load(Ordering::Relaxed);
        s.deduplicated = self.shared.deduplicated.load(Ordering::Relaxed);
        s
    }
}

impl Shared {
    /// Joins the flight of `key` as a waiter, or starts it as its leader.
    /// Returns the interception back when it leads (the caller lets it
    /// proceed, outside the table's lock).
    fn join_or_lead(&self, key: CacheKey, held: Interception<NetJob>) -> Option<Interception<NetJob>> {
        let id = held.task().map(Task::id)?;
        match self.inflight.entry(key) {
            dashmap::Entry::Occupied(mut e) => {
                e.get_mut().waiters.push(held);
                self.deduplicated.fetch_add(1, Ordering::Relaxed);
                None
            }
            dashmap::Entry::Vacant(v) => {
                v.insert(Flight { leader: id, waiters: Vec::new() });
                Some(held)
            }
        }
    }

    /// The leader of `key` ended without a compile: the next live waiter
    /// leads, the rest keep waiting.
    fn promote(&self, key: CacheKey, mut waiters: Vec<Interception<NetJob>>) {
        waiters.retain(Interception::is_live);
        if waiters.is_empty() {
            return;
        }
        let next = waiters.remove(0);
        let Some(id) = next.task().map(Task::id) else { return };
        match self.inflight.entry(key) {
            dashmap::Entry::Occupied(mut e) => {
                // Someone else started the key meanwhile: everyone waits for it.
                e.get_mut().waiters.push(next);
                e.get_mut().waiters.extend(waiters);
                return;
            }
            dashmap::Entry::Vacant(v) => {
                v.insert(Flight { leader: id, waiters });
            }
        }
        next.proceed();
    }
}

/// Whether a task's bytes hash to the key it claims (computed once).
fn verified(body: &TaskBody) -> bool {
    *body.verified.get_or_init(|| key_matches(&body.header, &body.payload))
}

/// Whether `payload`, the task's compressed source, hashes to the key `header` claims.
fn key_matches(header: &ccroute_wire::TaskHeader, payload: &[u8]) -> bool {
    let Some(claimed) = header.cache_key else { return false };
    match payload::decompress(&header.payload, payload, MAX_RAW) {
        Ok(raw) => cache_key(header.toolchain, &header.spec, &raw) == claimed,
        Err(_) => false,
    }
}

fn answer_of(result: &CachedResult) -> AgentAnswer {
    AgentAnswer { header: result.to_header(0), payload: result.object.clone(), reservation: None }
}

impl Hook<NetJob> for CacheHook {
    fn pre_receive(&self, task: &TaskRef<'_, NetJob>) -> HookAction {
        let body = task.task().body();
        let Some(key) = body.header.cache_key else {
            return HookAction::ProcessRequestNormally;
        };
        match &body.lookup {
            Lookup::Hit(result) => {
                if let Some(held) = task.intercept() {
                    held.answer(answer_of(result));
                }
                HookAction::RequestIntercepted
            }
            Lookup::Unchecked => {
                if let Some(result) = self.shared.storage.memory().get(&key) {
                    if let Some(held) = task.intercept() {
                        held.answer(answer_of(&result));
                    }
                    return HookAction::RequestIntercepted;
                }
                let Some(held) = task.intercept() else {
                    return HookAction::ProcessRequestNormally;
                };
                let shared = self.shared.clone();
                self.runtime.spawn(async move {
                    match shared.storage.get(&key).await {
                        Some(result) => {
                            held.answer(answer_of(&result));
                        }
                        None => {
                            if let Some(lead) = shared.join_or_lead(key, held) {
                                lead.proceed();
                            }
                        }
                    }
                });
                HookAction::RequestIntercepted
            }
            Lookup::Missed => {
                let id = task.task().id();
                match self.shared.inflight.entry(key) {
                    dashmap::Entry::Occupied(mut e) => match task.intercept() {
                        Some(held) => {
                            e.get_mut().waiters.push(held);
                            self.shared.deduplicated.fetch_add(1, Ordering::Relaxed);
                            HookAction::RequestIntercepted
                        }
                        None => HookAction::ProcessRequestNormally,
                    },
                    dashmap::Entry::Vacant(v) => {
                        v.insert(Flight { leader: id, waiters: Vec::new() });
                        HookAction::ProcessRequestNormally
                    }
                }
            }
        }
    }

    fn on_end(&self, task: &Task<NetJob>, end: EndView<'_, AgentAnswer>) {
        let body = task.body();
        let Some(key) = body.header.cache_key else { return };
        let Some((_, flight)) = self.shared.inflight.remove_if(&key, |_, f| f.leader == task.id()) else {
            return; // a waiter, or answered from the cache
        };
        let answer = match end {
            EndView::Answered(a) if matches!(a.header.outcome, Outcome::Success | Outcome::CompileFailed) => a.clone(),
            _ => {
                self.shared.promote(key, flight.waiters);
                return;
            }
        };
        // The leader's own bytes decide whether its result may be stored or
        // shared; each waiter's bytes decide whether it may take it.
        // Owned, for the check off the async threads.
        let leader = (body.header.clone(), body.payload.clone());
        let this = self.shared.clone();
        self.runtime.spawn(async move {
            let (leader_ok, waiters) = tokio::task::spawn_blocking(move || {
                let leader_ok = key_matches(&leader.0, &leader.1);
                let checked: Vec<(Interception<NetJob>, bool)> = flight
                    .waiters
                    .into_iter()
                    .filter(Interception::is_live)
                    .map(|w| {
                        let ok = w.task().is_some_and(|t| verified(t.body()));
                        (w, ok)
                    })
                    .collect();
                (leader_ok, checked)
            })
            .await
            .unwrap_or((false, Vec::new()));
            if !leader_ok {
                this.poison_rejected.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(key = ?key, "a result's source does not hash to its claimed key: not stored, not shared");
                this.promote(key, waiters.into_iter().map(|(w, _)| w).collect());
                return;
            }
            if answer.header.outcome == Outcome::Success {
                if let Ok(result) = CachedResult::from_result(&answer.header, answer.payload.clone()) {
                    this.storage.put(key, result);
                }
            }
            let mut liars = Vec::new();
            for (w, ok) in waiters {
                if ok {
                    w.answer(answer.clone());
                } else {
                    liars.push(w);
                }
            }
            // Waiters whose bytes are not what they claimed compile their own.
            for w in liars {
                w.proceed();
            }
        });
    }
}
