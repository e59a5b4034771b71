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

use ccroute_wire::{payload, CacheKey, CacheKeyHasher, CacheStatus, Outcome};
use dashmap::DashMap;
use tokio_util::task::TaskTracker;

use super::job::{AgentAnswer, NetJob, TaskBody};
use crate::cache::{CachedResult, Storage};
use ccroute_core::{EndView, Hook, HookAction, Interception, Task, TaskId, TaskRef};

/// The most bytes a source may decompress to for verification.
const MAX_RAW: u64 = 1 << 30;

/// What the connection already knows about a task's key.
#[derive(Debug, Default)]
pub enum CacheLookup {
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
}

/// What the hook and the work it spawns share.
struct Shared {
    storage: Arc<Storage>,
    /// Where the hook's background work runs.
    runtime: tokio::runtime::Handle,
    /// The background lookups and key checks ([`CacheHook::close`] waits for them).
    work: TaskTracker,
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
                runtime: tokio::runtime::Handle::current(),
                work: TaskTracker::new(),
                inflight: DashMap::new(),
                poison_rejected: AtomicU64::new(0),
                deduplicated: AtomicU64::new(0),
            }),
        }
    }

    /// The storage behind it.
    pub fn storage(&self) -> &Arc<Storage> {
        &self.shared.storage
    }

    /// Waits for every lookup and key check the hook started (the
    /// scheduler calls it as it shuts down), then for the storage's
    /// background writes.
    pub async fn close(&self) {
        self.shared.work.close();
        self.shared.work.wait().await;
        self.shared.storage.close().await;
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
    /// proceed, outside the table's lock). A task that has ended (its
    /// consumerd cancelled it while it was being looked up) joins nothing and
    /// leads nothing.
    fn join_or_lead(self: &Arc<Self>, key: CacheKey, held: Interception<NetJob>) -> Option<Interception<NetJob>> {
        if !held.is_live() {
            return None;
        }
        let id = held.task()?.id();
        match self.inflight.entry(key) {
            dashmap::Entry::Occupied(mut e) => {
                e.get_mut().waiters.push(held);
                self.deduplicated.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            dashmap::Entry::Vacant(v) => {
                v.insert(Flight { leader: id, waiters: Vec::new() });
            }
        }
        if held.is_live() {
            return Some(held);
        }
        self.leader_gone(key, id);
        None
    }

    /// Called when `id`, just recorded as the leader of `key`, turns out to
    /// have ended. Its end was stored in its state word before its `on_end`
    /// ran, and `on_end` takes the table's shard lock: either `on_end` came
    /// after the record and removed the flight itself (then this finds
    /// nothing), or it came before and found nothing to remove, and the flight
    /// goes here. Either way no dead task leads a flight.
    fn leader_gone(self: &Arc<Self>, key: CacheKey, id: TaskId) {
        if let Some((_, flight)) = self.inflight.remove_if(&key, |_, f| f.leader == id) {
            self.promote(key, flight.waiters);
        }
    }

    /// The leader's bytes do not hash to the key it claimed: it keeps its own
    /// compile but leads nobody, and its waiters stop waiting for it at once.
    fn depose(self: &Arc<Self>, key: CacheKey, id: TaskId) {
        if let Some((_, flight)) = self.inflight.remove_if(&key, |_, f| f.leader == id) {
            self.poison_rejected.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(key = ?key, "a task's source does not hash to its claimed key: it compiles alone, its waiters go on without it");
            self.promote(key, flight.waiters);
        }
    }

    /// Checks a new leader's bytes off the async threads; a liar is deposed.
    fn watch_leader(self: &Arc<Self>, key: CacheKey, task: Arc<Task<NetJob>>) {
        let shared = self.clone();
        self.work.spawn_on(
            async move {
                let id = task.id();
                let honest = tokio::task::spawn_blocking(move || verified(task.body())).await.unwrap_or(false);
                if !honest {
                    shared.depose(key, id);
                }
            },
            &self.runtime,
        );
    }

    /// The leader of `key` ended without a compile: the next live waiter
    /// leads, the rest keep waiting.
    fn promote(self: &Arc<Self>, key: CacheKey, mut waiters: Vec<Interception<NetJob>>) {
        loop {
            waiters.retain(Interception::is_live);
            if waiters.is_empty() {
                return;
            }
            let next = waiters.remove(0);
            let Some(id) = next.task().map(Task::id) else { continue };
            match self.inflight.entry(key) {
                dashmap::Entry::Occupied(mut e) => {
                    // Someone else started the key meanwhile: everyone waits for it.
                    e.get_mut().waiters.push(next);
                    e.get_mut().waiters.extend(waiters);
                    return;
                }
                dashmap::Entry::Vacant(v) => {
                    v.insert(Flight { leader: id, waiters: std::mem::take(&mut waiters) });
                }
            }
            if next.is_live() {
                // A promoted leader's bytes are checked as a first leader's are.
                if let Some(task) = next.task_handle() {
                    self.watch_leader(key, task);
                }
                next.proceed();
                return;
            }
            // It ended before the record existed (see `leader_gone`): hand
            // its waiters on, unless its own `on_end` already did.
            match self.inflight.remove_if(&key, |_, f| f.leader == id) {
                Some((_, flight)) => waiters = flight.waiters,
                None => return,
            }
        }
    }
}

/// Whether a task's bytes hash to the key it claims (computed once).
fn verified(body: &TaskBody) -> bool {
    *body.verified.get_or_init(|| key_matches(&body.header, &body.payload))
}

/// Whether `payload`, the task's compressed source, hashes to the key
/// `header` claims. Read in pieces: a source that claims a GiB costs a
/// piece's memory here, not a GiB (a peer could send many such at once).
fn key_matches(header: &ccroute_wire::TaskHeader, payload: &[u8]) -> bool {
    let Some(claimed) = header.cache_key else { return false };
    let mut key = CacheKeyHasher::new(header.toolchain, &header.spec, header.payload.raw_len);
    match payload::for_each_raw_chunk(&header.payload, payload, MAX_RAW, |chunk| key.update(chunk)) {
        Ok(()) => key.finish() == Some(claimed),
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
            CacheLookup::Hit(result) => {
                if let Some(held) = task.intercept() {
                    held.answer(answer_of(result));
                }
                HookAction::RequestIntercepted
            }
            CacheLookup::Unchecked => {
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
                self.shared.work.spawn_on(
                    async move {
                        match shared.storage.get(&key).await {
                            Some(result) => {
                                held.answer(answer_of(&result));
                            }
                            None => {
                                if let Some(lead) = shared.join_or_lead(key, held) {
                                    if let Some(task) = lead.task_handle() {
                                        shared.watch_leader(key, task);
                                    }
                                    lead.proceed();
                                }
                            }
                        }
                    },
                    &self.shared.runtime,
                );
                HookAction::RequestIntercepted
            }
            CacheLookup::Missed => {
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
                        if task.task().has_ended() {
                            self.shared.leader_gone(key, id);
                        } else {
                            self.shared.watch_leader(key, task.task_handle());
                        }
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
            // A failure that may be its agent's, not its source's, is
            // neither stored nor shared (an agent that did not ask).
            EndView::Answered(a)
                if a.header.outcome == Outcome::Success
                    || (a.header.outcome == Outcome::CompileFailed
                        && crate::cc::failure::suspect(a.header.exit_status, &a.header.stderr).is_none()) =>
            {
                a.clone()
            }
            _ => {
                self.shared.promote(key, flight.waiters);
                return;
            }
        };
        // The leader's own bytes decide whether its result may be stored or
        // shared; each waiter's bytes decide whether it may take it.
        // Owned, for the check off the async threads.
        let leader = (body.header.clone(), body.payload.clone(), body.verified.get().copied());
        let this = self.shared.clone();
        self.shared.work.spawn_on(async move {
            let (leader_ok, waiters) = tokio::task::spawn_blocking(move || {
                let leader_ok = leader.2.unwrap_or_else(|| key_matches(&leader.0, &leader.1));
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
        }, &self.shared.runtime);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::cache::StorageConfig;
    use ccroute_core::test_support::{peer, tc};
    use ccroute_core::{Config, ConsumerdSession, Dispatch, Reply, Scheduler};
    use ccroute_wire::{cache_key, codec, TaskHeader, TaskSpec};

    /// An honest task (or, with `lie`, one whose bytes are not what its key
    /// says) for the toolchain `tc("gcc")`.
    fn body(task_id: u64, source: &[u8], lie: bool) -> TaskBody {
        let spec = codec::encode_spec(&TaskSpec {
            args: vec!["-O2".into()],
            input_path: "a.c".into(),
            cwd: None,
            env: vec![],
            inputs: None,
        });
        let key = cache_key(tc("gcc").key(), &spec, source);
        let sent: &[u8] = if lie { b"int something_else;" } else { source };
        let (packed, info) = payload::compress(sent);
        let header = TaskHeader {
            task_id,
            toolchain: tc("gcc").key(),
            cache_key: Some(key),
            spec,
            payload: info,
            inputs: false,
            origin: None,
            resumed: false,
        };
        TaskBody::new(header, packed.into(), None, CacheLookup::Unchecked)
    }

    async fn cluster() -> (Scheduler<NetJob>, CacheHook) {
        let storage = Storage::open(StorageConfig::default()).await.unwrap();
        let hook = CacheHook::new(Arc::new(storage));
        let s = Scheduler::with_hooks(Config::default(), vec![Arc::new(hook.clone())]);
        (s, hook)
    }

    /// Lets every spawned lookup and check run (the runtime is single-threaded).
    /// Waits until the hook's background work (lookups, checks of a
    /// leader's bytes off the async threads) has all run: a state, not a
    /// guess at how long a loaded machine takes. The deadline only turns a
    /// hang into a failure.
    async fn settle(hook: &CacheHook) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !hook.shared.work.is_empty() {
            assert!(std::time::Instant::now() < deadline, "the hook's background work did not end within 60 s");
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        tokio::task::yield_now().await;
    }

    fn assigned(agent: &mut ccroute_core::AgentSession<NetJob>) -> Vec<u64> {
        std::iter::from_fn(|| agent.poll())
            .filter_map(|d| match d {
                Dispatch::Assign(t) => Some(t.body().header.task_id),
                _ => None,
            })
            .collect()
    }

    fn answered(cd: &mut ConsumerdSession<NetJob>) -> Vec<(u64, bool)> {
        std::iter::from_fn(|| cd.poll_answer()).map(|a| (a.client_id, matches!(a.reply, Reply::Done(_)))).collect()
    }

    /// The order: the lookup is in flight, the consumerd cancels, the
    /// task's end runs before the lookup comes back. The lookup must not then
    /// record the dead task as the compile of its key, or every later task
    /// with that key waits for it forever.
    #[tokio::test(flavor = "current_thread")]
    async fn a_task_cancelled_during_its_lookup_leads_nothing() {
        let (s, hook) = cluster().await;
        let mut agent = s.connect_agent(peer(1), &[tc("gcc")], 4);
        let mut cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
        let source = b"int x;\n";
        cd.submit(1, tc("gcc").key(), body(1, source, false)).unwrap();
        // The lookup is spawned but has not run: cancel now.
        assert!(cd.cancel(1));
        settle(&hook).await;
        assert_eq!(hook.shared.inflight.len(), 0, "a cancelled task was recorded as compiling its key");
        let mut other = s.connect_consumerd(peer(3), &[tc("gcc")]);
        other.submit(2, tc("gcc").key(), body(2, source, false)).unwrap();
        settle(&hook).await;
        assert_eq!(assigned(&mut agent), vec![2], "a later task with the same key must reach an agent");
    }

    /// A leader cancelled while an identical task waits on it: its end hands
    /// the key on, and the waiter compiles.
    #[tokio::test(flavor = "current_thread")]
    async fn a_leader_cancelled_while_others_wait_hands_its_key_on() {
        let (s, hook) = cluster().await;
        let mut agent = s.connect_agent(peer(1), &[tc("gcc")], 4);
        let mut cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
        let source = b"int y;\n";
        cd.submit(1, tc("gcc").key(), body(1, source, false)).unwrap();
        settle(&hook).await;
        assert_eq!(assigned(&mut agent), vec![1]);
        let mut other = s.connect_consumerd(peer(3), &[tc("gcc")]);
        other.submit(2, tc("gcc").key(), body(2, source, false)).unwrap();
        settle(&hook).await;
        assert!(assigned(&mut agent).is_empty(), "an identical task waits for the one in flight");
        assert!(cd.cancel(1));
        settle(&hook).await;
        assert_eq!(assigned(&mut agent), vec![2], "the waiter compiles once its leader is gone");
        assert!(answered(&mut other).is_empty());
    }

    /// A leader whose bytes do not hash to its key is found out while it
    /// compiles: an honest waiter goes on at once instead of waiting out the
    /// liar's compile.
    #[tokio::test(flavor = "current_thread")]
    async fn a_waiter_does_not_wait_for_a_lying_leader() {
        let (s, hook) = cluster().await;
        let mut agent = s.connect_agent(peer(1), &[tc("gcc")], 4);
        let mut liar = s.connect_consumerd(peer(2), &[tc("gcc")]);
        let mut honest = s.connect_consumerd(peer(3), &[tc("gcc")]);
        let source = b"int z;\n";
        // Both arrive before any lookup has run: the liar's lookup finishes
        // first, it leads, and the honest task joins its flight as a waiter.
        liar.submit(1, tc("gcc").key(), body(1, source, true)).unwrap();
        honest.submit(2, tc("gcc").key(), body(2, source, false)).unwrap();
        settle(&hook).await;
        // The liar is still compiling (no answer came), yet the honest task
        // reached the agent: its leader was found out and it went on.
        assert_eq!(assigned(&mut agent), vec![1, 2], "the honest task must not wait for the liar's compile");
        assert!(hook.status().poison_rejected >= 1);
    }

    /// A source that expands far (here 256 MiB of zeros in a few KiB) is
    /// checked against its key: the key it has is recognised, and one it
    /// does not have is not. (That the reading goes in pieces of 64 KiB is
    /// `payload::for_each_raw_chunk`'s own test.)
    #[test]
    fn a_source_that_expands_far_is_checked_against_its_key() {
        let raw = vec![0u8; 256 << 20];
        let honest = body(1, &raw, false);
        drop(raw);
        assert!(honest.payload.len() < 1 << 20);
        assert!(key_matches(&honest.header, &honest.payload));
        let other = TaskHeader { cache_key: Some(CacheKey([7; 32])), ..honest.header.clone() };
        assert!(!key_matches(&other, &honest.payload));
    }
}
