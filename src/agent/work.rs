//! What an agent runs and holds, across its connections to the scheduler.
//!
//! A compile does not end because the scheduler went away: a restarted
//! scheduler adopts it (`scheduler/resume.rs`). So the compiles live here,
//! not in one connection's loop, and each is known by the id it answers
//! under — the scheduler's task id while its connection lives, a *handle*
//! (an id with [`ResumedTask::HANDLE_BIT`] set) once that connection is lost.
//!
//! When a connection is lost ([`Work::orphan`]):
//! - every running compile keeps running under a new handle;
//! - every result sent after the scheduler was last heard from, or up to
//!   [`RETAIN`] before, is kept under a handle too: the lost scheduler may
//!   have taken it and died before passing it on, or never have got it (a
//!   peer learns of a dead scheduler or a dead link only from a successor's
//!   reset or the idle timeout, so anything sent that close to the silence
//!   is in doubt; an agent may notice seconds after the scheduler did).
//!
//! The next hello lists them all ([`Work::resumable`]). The scheduler then
//! either adopts one ([`Work::adopt`]: it answers under the new task id, at
//! once if it has finished) or drops it ([`Work::cancel`] with the handle).
//! Kept results are bounded: [`HELD_MAX_BYTES`] in all, none older than
//! [`HELD_MAX_AGE`]; a consumerd waits far less than that for its scheduler
//! before it compiles the unit itself.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ccroute_wire::{Origin, Outcome, ResultHeader, ResumedTask, TaskHeader, ToolchainKey};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::executor::{ExecTask, Executor};

/// How long before the scheduler was last heard from a sent result is
/// still kept in case its connection turns out lost: past the idle timeout
/// (5 s), after which a silent scheduler is known dead.
pub const RETAIN: Duration = Duration::from_secs(6);
/// The most bytes of objects kept for results sent lately or not delivered.
pub const HELD_MAX_BYTES: usize = 64 << 20;
/// How long a result no scheduler took is kept.
pub const HELD_MAX_AGE: Duration = Duration::from_secs(60);
/// How long a cancel for a task that has not arrived waits for it (a cancel
/// on the control stream can overtake a task sent on a stream of its own,
/// which may take up to its payload's deadline to arrive, longer when it
/// waits behind others: `net::queued_payload_deadline`), and how long an
/// answered id is remembered (a cancel that crossed the answer on the wire
/// is then known to be for that run, not a later one; an answer is
/// remembered when it is queued, and a large object may take up to its
/// deadline to go). Longer than the latest deadline any payload of the
/// wire's size can have, queued or not (checked by a test). The cost of its length: a real early cancel for a
/// run sent within it after an answer under the same id is taken for a
/// crossed one, and that run goes to its end (a compile wasted, as before
/// early cancels were kept); the opposite mistake would refuse a run the
/// scheduler wants, and its unit would be compiled again elsewhere.
pub const EARLY_CANCEL_FOR: Duration = Duration::from_secs(120);
/// The most answered ids remembered for [`EARLY_CANCEL_FOR`].
const ANSWERED_MAX: usize = 1 << 16;

/// A compile in progress.
struct Running {
    cancel: CancellationToken,
    /// Whose it is; `None` from a scheduler that did not say (it is then
    /// not carried over a lost connection).
    origin: Option<Origin>,
    toolchain: ToolchainKey,
    /// Dropped by the scheduler: its result goes nowhere.
    dropped: bool,
}

/// A finished result kept for a scheduler to adopt.
struct Held {
    header: ResultHeader,
    object: Bytes,
    origin: Origin,
    toolchain: ToolchainKey,
    since: Instant,
}

/// A result sent lately.
struct Sent {
    at: Instant,
    origin: Origin,
    toolchain: ToolchainKey,
    header: ResultHeader,
    object: Bytes,
}

/// A result to send: its header carries the id to send it under.
pub type Outgoing = (ResultHeader, Bytes);

/// The agent's compiles and kept results.
pub struct Work {
    executor: Arc<Executor>,
    compiles: JoinSet<Outgoing>,
    /// The id each compile answers under, by its tokio task.
    ids: HashMap<tokio::task::Id, u64>,
    running: HashMap<u64, Running>,
    held: HashMap<u64, Held>,
    held_bytes: usize,
    recent: VecDeque<Sent>,
    recent_bytes: usize,
    /// When the scheduler was last heard from (see [`Work::heard`]).
    heard: Instant,
    next_handle: u64,
    /// Task ids told to stop before their task came, and when.
    cancelled_early: HashMap<u64, Instant>,
    /// Task ids answered in the last [`EARLY_CANCEL_FOR`]: when, and in order.
    answered: HashMap<u64, Instant>,
    answered_order: VecDeque<(u64, Instant)>,
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Work")
            .field("running", &self.running.len())
            .field("held", &self.held.len())
            .field("recent", &self.recent.len())
            .finish_non_exhaustive()
    }
}

impl Work {
    /// Nothing running, nothing held.
    pub fn new(executor: Arc<Executor>) -> Work {
        Work {
            executor,
            compiles: JoinSet::new(),
            ids: HashMap::new(),
            running: HashMap::new(),
            held: HashMap::new(),
            held_bytes: 0,
            recent: VecDeque::new(),
            recent_bytes: 0,
            heard: Instant::now(),
            next_handle: 1,
            cancelled_early: HashMap::new(),
            answered: HashMap::new(),
            answered_order: VecDeque::new(),
        }
    }

    /// The executor compiles run in.
    pub fn executor(&self) -> &Arc<Executor> {
        &self.executor
    }

    /// Starts compiling a task the scheduler sent; `fetch` is the connection
    /// its inputs are fetched through. A task whose cancel came before it
    /// is not run: its answer, to send now, is returned.
    #[must_use]
    pub fn start(&mut self, header: TaskHeader, source: Bytes, fetch: Option<quinn::Connection>) -> Option<Outgoing> {
        let id = header.task_id;
        if self.cancelled_early.remove(&id).is_some_and(|at| at.elapsed() <= EARLY_CANCEL_FOR) {
            tracing::debug!(task = id, "a task whose cancel overtook it is answered without running");
            return Some(self.refuse(id, "cancelled before the task arrived".into()));
        }
        self.replace(id);
        let cancel = CancellationToken::new();
        let task = ExecTask {
            task_id: id,
            toolchain: header.toolchain,
            fetch,
            spec: header.spec,
            payload: header.payload,
            source,
        };
        let executor = self.executor.clone();
        let token = cancel.clone();
        let began = Instant::now();
        let handle = self.compiles.spawn(async move {
            let mut result = executor.run(task, token).await;
            // Timed as it ends: it may be collected much later (while no
            // scheduler is connected), and the wait is not the unit's cost.
            result.header.wall_us = u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX);
            (result.header, result.object)
        });
        self.ids.insert(handle.id(), id);
        let running = Running { cancel, origin: header.origin, toolchain: header.toolchain, dropped: false };
        self.running.insert(id, running);
        None
    }

    /// Answers task `id` as an internal error saying `why`, without running
    /// it (a task whose source did not arrive whole, or that was cancelled
    /// before it came).
    pub fn refuse(&mut self, id: u64, why: String) -> Outgoing {
        self.cancelled_early.remove(&id);
        self.answering(id);
        (ResultHeader::bare(id, Outcome::InternalError(why)), Bytes::new())
    }

    /// `id` is answered now: a cancel for it that comes within
    /// [`EARLY_CANCEL_FOR`] crossed the answer.
    fn answering(&mut self, id: u64) {
        self.answering_at(id, Instant::now());
    }

    /// [`Work::answering`] at `now`.
    fn answering_at(&mut self, id: u64, now: Instant) {
        if id & ResumedTask::HANDLE_BIT != 0 {
            return;
        }
        while let Some(&(old, at)) = self.answered_order.front() {
            if now.duration_since(at) <= EARLY_CANCEL_FOR && self.answered_order.len() < ANSWERED_MAX {
                break;
            }
            self.answered_order.pop_front();
            if self.answered.get(&old) == Some(&at) {
                self.answered.remove(&old);
            }
        }
        self.answered.insert(id, now);
        self.answered_order.push_back((id, now));
    }

    /// Waits for the next compile to finish; `Some` is a result to send now
    /// (its header names the id), `None` one that was kept or dropped.
    /// Pending while nothing runs.
    pub async fn next_finished(&mut self) -> Option<Outgoing> {
        let done = match self.compiles.join_next_with_id().await {
            Some(done) => done,
            None => return std::future::pending().await,
        };
        let (tokio_id, (mut header, object)) = match done {
            Ok(x) => x,
            // Not a lost answer: the scheduler gets one, and its token back.
            Err(e) => {
                let why = Outcome::InternalError(format!("the compile failed: {e}"));
                (e.id(), (ResultHeader::bare(0, why), Bytes::new()))
            }
        };
        let id = self.ids.remove(&tokio_id)?;
        let running = self.running.remove(&id)?;
        if running.dropped {
            return None;
        }
        header.task_id = id;
        let (header, object) = fit_the_wire(header, object);
        if id & ResumedTask::HANDLE_BIT != 0 {
            // Finished while no scheduler had it: kept for one to adopt.
            if let Some(origin) = running.origin {
                self.hold(id, origin, running.toolchain, header, object, Instant::now());
            }
            return None;
        }
        if let Some(origin) = running.origin {
            self.remember(origin, running.toolchain, &header, &object);
        }
        self.answering(id);
        Some((header, object))
    }

    /// The scheduler no longer wants `id` (its task id or a handle): a
    /// running compile is killed — a task's still answers, so that its token
    /// comes back; a handle's answers nothing — and a kept result is dropped.
    /// A task id neither running nor answered lately names a task still on
    /// its way (a cancel overtakes a task on a stream of its own): it is
    /// answered without running when it comes (within [`EARLY_CANCEL_FOR`]).
    pub fn cancel(&mut self, id: u64) {
        self.cancel_at(id, Instant::now());
    }

    /// [`Work::cancel`] at `now`.
    fn cancel_at(&mut self, id: u64, now: Instant) {
        if let Some(r) = self.running.get_mut(&id) {
            r.cancel.cancel();
            r.dropped = id & ResumedTask::HANDLE_BIT != 0;
            return;
        }
        if self.unhold(id).is_some() || id & ResumedTask::HANDLE_BIT != 0 {
            return;
        }
        if self.answered.get(&id).is_some_and(|at| now.duration_since(*at) <= EARLY_CANCEL_FOR) {
            // It crossed the answer: the run it was for has ended.
            return;
        }
        self.cancelled_early.retain(|_, at| now.duration_since(*at) <= EARLY_CANCEL_FOR);
        self.cancelled_early.insert(id, now);
    }

    /// The scheduler adopted what this agent holds as `handle`, as its
    /// `task_id`: a kept result to send under that id at once, or a running
    /// compile that will answer under it. Something that is no longer here
    /// is answered as an internal error, so that the task's token comes
    /// back and its consumerd compiles it.
    pub fn adopt(&mut self, handle: u64, task_id: u64) -> Option<Outgoing> {
        // One run per id, whatever this adoption finds (see `replace`).
        self.replace(task_id);
        if let Some(held) = self.unhold(handle) {
            let mut header = held.header;
            header.task_id = task_id;
            self.remember(held.origin, held.toolchain, &header, &held.object);
            self.answering(task_id);
            return Some(fit_the_wire(header, held.object));
        }
        match self.running.remove(&handle) {
            Some(r) if !r.dropped => {
                self.running.insert(task_id, r);
                if let Some(id) = self.ids.values_mut().find(|id| **id == handle) {
                    *id = task_id;
                }
                None
            }
            other => {
                if let Some(r) = other {
                    self.running.insert(handle, r);
                }
                Some(self.refuse(task_id, "the agent no longer holds this task".into()))
            }
        }
    }

    /// The scheduler was heard from at `at` (a frame, a packet): results
    /// sent [`RETAIN`] before it are taken as delivered.
    pub fn heard(&mut self, at: Instant) {
        self.heard = self.heard.max(at);
    }

    /// Whether a result sent at `at` is still in doubt.
    fn in_doubt(&self, at: Instant) -> bool {
        self.heard.saturating_duration_since(at) <= RETAIN
    }

    /// The connection is lost: what runs goes on under handles, and results
    /// still in doubt are kept under handles too. Kept results past their
    /// age are dropped.
    pub fn orphan(&mut self) {
        let now = Instant::now();
        // Task ids are the lost connection's: the next scheduler's may repeat them.
        self.cancelled_early.clear();
        self.answered.clear();
        self.answered_order.clear();
        let ids: Vec<u64> = self.running.keys().copied().filter(|id| id & ResumedTask::HANDLE_BIT == 0).collect();
        for id in ids {
            let Some(r) = self.running.remove(&id) else { continue };
            if r.origin.is_none() || r.dropped {
                // Nobody could adopt it: stop it.
                r.cancel.cancel();
                continue;
            }
            let handle = self.new_handle();
            if let Some(tid) = self.ids.values_mut().find(|tid| **tid == id) {
                *tid = handle;
            }
            self.running.insert(handle, r);
        }
        while let Some(sent) = self.recent.pop_front() {
            self.recent_bytes -= kept_bytes(&sent.header, &sent.object);
            if self.in_doubt(sent.at) {
                let handle = self.new_handle();
                self.hold(handle, sent.origin, sent.toolchain, sent.header, sent.object, sent.at);
            }
        }
        let old: Vec<u64> =
            self.held.iter().filter(|(_, h)| now.duration_since(h.since) > HELD_MAX_AGE).map(|(k, _)| *k).collect();
        for handle in old {
            self.unhold(handle);
        }
    }

    /// What to announce in the next hello: every compile running under a
    /// handle and every kept result.
    pub fn resumable(&self) -> Vec<ResumedTask> {
        let running = self
            .running
            .iter()
            .filter(|(id, r)| **id & ResumedTask::HANDLE_BIT != 0 && !r.dropped)
            .filter_map(|(id, r)| Some(ResumedTask { handle: *id, origin: r.origin?, toolchain: r.toolchain }));
        let held =
            self.held.iter().map(|(id, h)| ResumedTask { handle: *id, origin: h.origin, toolchain: h.toolchain });
        running.chain(held).collect()
    }

    /// The agent is shutting down: every compile is killed.
    pub fn stop(&mut self) {
        for r in self.running.values() {
            r.cancel.cancel();
        }
        self.compiles.abort_all();
        self.running.clear();
        self.ids.clear();
    }

    /// Compiles running now, under task ids or handles.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Results kept for a scheduler to adopt.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Whether a result sent lately may not have reached the scheduler
    /// (sent within [`RETAIN`] of the last packet heard): a connection
    /// ended now could lose it.
    pub fn results_in_doubt(&self) -> bool {
        self.recent.iter().any(|sent| self.in_doubt(sent.at))
    }

    /// `id` is about to be run again: a compile still running under it is
    /// killed and answers nothing (an answer under the id would be taken
    /// for the new run's). A scheduler of this version sends an id again
    /// only once its older run answered; this keeps one run per id if one
    /// does not (an older scheduler, or a bug).
    fn replace(&mut self, id: u64) {
        if let Some(old) = self.running.remove(&id) {
            tracing::debug!(task = id, "a task id still running was sent again; the older compile is dropped");
            old.cancel.cancel();
            self.ids.retain(|_, i| *i != id);
        }
    }

    fn new_handle(&mut self) -> u64 {
        let h = ResumedTask::HANDLE_BIT | self.next_handle;
        self.next_handle += 1;
        h
    }

    fn hold(
        &mut self,
        handle: u64,
        origin: Origin,
        toolchain: ToolchainKey,
        header: ResultHeader,
        object: Bytes,
        since: Instant,
    ) {
        let bytes = kept_bytes(&header, &object);
        if self.held_bytes + bytes > HELD_MAX_BYTES {
            tracing::warn!(
                bytes,
                held = self.held_bytes,
                "a result no scheduler took is not kept: past the bound of kept results; its consumerd compiles it"
            );
            return;
        }
        self.held_bytes += bytes;
        self.held.insert(handle, Held { header, object, origin, toolchain, since });
    }

    fn unhold(&mut self, handle: u64) -> Option<Held> {
        let held = self.held.remove(&handle)?;
        self.held_bytes -= kept_bytes(&held.header, &held.object);
        Some(held)
    }

    /// Keeps a copy of a result being sent while it is in doubt (the object
    /// is shared, not copied), within [`HELD_MAX_BYTES`].
    fn remember(&mut self, origin: Origin, toolchain: ToolchainKey, header: &ResultHeader, object: &Bytes) {
        let now = Instant::now();
        let bytes = kept_bytes(header, object);
        while let Some(first) = self.recent.front() {
            if self.in_doubt(first.at) && self.recent_bytes + bytes <= HELD_MAX_BYTES {
                break;
            }
            self.recent_bytes -= kept_bytes(&first.header, &first.object);
            self.recent.pop_front();
        }
        if bytes > HELD_MAX_BYTES {
            return;
        }
        self.recent_bytes += bytes;
        self.recent.push_back(Sent { at: now, origin, toolchain, header: header.clone(), object: object.clone() });
    }
}

/// What a kept result counts against [`HELD_MAX_BYTES`]: its object, and
/// its compiler's output (a failed compile's stderr may be far larger than
/// its empty object).
fn kept_bytes(header: &ResultHeader, object: &Bytes) -> usize {
    object.len() + header.stdout.len() + header.stderr.len()
}

/// A result whose object is past what a scheduler reads
/// ([`ccroute_wire::Limits::DEFAULT`]) is answered as an internal error
/// (its consumerd compiles the unit itself): sent, it would be refused after
/// its header and its task answered only when the connection ends.
fn fit_the_wire(header: ResultHeader, object: Bytes) -> Outgoing {
    let max = ccroute_wire::Limits::DEFAULT.max_payload;
    if object.len() as u64 <= max {
        return (header, object);
    }
    let why = format!("its object ({} bytes compressed) is past the {max} bytes a result may carry", object.len());
    tracing::warn!(task = header.task_id, "{why}; its consumerd compiles it");
    (ResultHeader::bare(header.task_id, Outcome::InternalError(why)), Bytes::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::executor::ExecutorConfig;

    fn work(scratch: &std::path::Path) -> Work {
        let config = ExecutorConfig { scratch_parent: scratch.to_owned(), ..ExecutorConfig::default() };
        Work::new(Arc::new(Executor::new(config).expect("an executor")))
    }

    fn sent(at: Instant, task_id: u64) -> Sent {
        Sent {
            at,
            origin: Origin { consumerd: 1, task_id },
            toolchain: ToolchainKey(1),
            header: ResultHeader::bare(task_id, Outcome::Success),
            object: Bytes::from_static(b"object"),
        }
    }

    /// What every compile still here answers, once each has ended (within 30 s).
    async fn every_answer(work: &mut Work) -> Vec<Outgoing> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut answers = vec![];
        while !work.compiles.is_empty() {
            let finished = tokio::time::timeout_at(deadline, work.next_finished()).await.expect("every compile ends");
            answers.extend(finished);
        }
        answers
    }

    /// A task of the test toolchain that sleeps `ms`, under `id`.
    fn sleeper(id: u64, ms: u64) -> (TaskHeader, Bytes) {
        let spec = ccroute_wire::TaskSpec {
            args: vec![format!("-sleep={ms}")],
            input_path: "a.c".into(),
            cwd: None,
            env: vec![],
            inputs: None,
        };
        let source = Bytes::from_static(b"int x;\n");
        let payload = ccroute_wire::PayloadInfo {
            len: source.len() as u64,
            raw_len: source.len() as u64,
            compression: ccroute_wire::Compression::None,
        };
        let header = TaskHeader {
            task_id: id,
            toolchain: crate::toolchain::test_toolchain().key(),
            cache_key: None,
            spec: ccroute_wire::codec::encode_spec(&spec),
            payload,
            inputs: false,
            origin: Some(Origin { consumerd: 1, task_id: id }),
            resumed: false,
        };
        (header, source)
    }

    /// An id this agent still runs is sent again (a scheduler holds a new
    /// run until the older one answered, but the agent does not count on
    /// it): the older compile is killed and answers nothing; the one answer
    /// under the id is the new run's.
    #[tokio::test]
    async fn an_id_sent_again_while_it_runs_is_answered_once_by_the_new_run() {
        let scratch = tempfile::tempdir().expect("a scratch dir");
        let mut work = work(scratch.path());
        let (old, source) = sleeper(5, 60_000);
        assert!(work.start(old, source, None).is_none());
        let (new, source) = sleeper(5, 10);
        assert!(work.start(new, source, None).is_none());
        assert_eq!(work.running(), 1);
        let answers = every_answer(&mut work).await;
        assert_eq!(answers.len(), 1, "{answers:?}");
        assert_eq!((answers[0].0.task_id, &answers[0].0.outcome), (5, &Outcome::Success));
        assert_eq!(work.running(), 0);
    }

    /// A result collected long after its compile ended (its agent was
    /// redialling a scheduler meanwhile) says how long the compile took,
    /// not how long it waited to be collected: that time teaches the
    /// scheduler the unit's cost and the agent's speed.
    #[tokio::test]
    async fn a_result_collected_late_is_timed_by_its_compile() {
        let scratch = tempfile::tempdir().expect("a scratch dir");
        let mut work = work(scratch.path());
        let (task, source) = sleeper(5, 10);
        assert!(work.start(task, source, None).is_none());
        // Far longer than the compile (10 ms) can take, even on a loaded machine.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let answers = every_answer(&mut work).await;
        assert_eq!(answers.len(), 1, "{answers:?}");
        let wall = Duration::from_micros(answers[0].0.wall_us);
        assert!(wall >= Duration::from_millis(10), "shorter than the compile: {wall:?}");
        assert!(wall < Duration::from_secs(2), "the wait to be collected counted: {wall:?}");
    }

    /// An adoption under an id whose older, replaced run still compiles
    /// here stops that run, whatever the adoption finds (here: the handle
    /// is gone, answered as an internal error at once): one answer.
    #[tokio::test]
    async fn an_adoption_under_an_id_still_running_stops_the_older_run() {
        let scratch = tempfile::tempdir().expect("a scratch dir");
        let mut work = work(scratch.path());
        let (old, source) = sleeper(5, 60_000);
        assert!(work.start(old, source, None).is_none());
        let answered = work.adopt(ResumedTask::HANDLE_BIT | 1, 5).expect("a handle gone is answered at once");
        assert_eq!(answered.0.task_id, 5);
        assert_eq!(work.running(), 0, "the older run still runs");
        let answers = every_answer(&mut work).await;
        assert!(answers.is_empty(), "the older run answered too: {answers:?}");
    }

    /// A cancel that overtook its task (sent on a stream of its own) stops
    /// it when it comes: answered at once, nothing run. A cancel that
    /// crossed a run's answer stops nothing later: the next run of that id
    /// runs. A lost connection forgets both (the next scheduler's ids).
    #[tokio::test]
    async fn a_cancel_that_overtook_its_task_stops_it_and_one_that_crossed_an_answer_does_not() {
        let scratch = tempfile::tempdir().expect("a scratch dir");
        let mut work = work(scratch.path());
        work.cancel(7);
        let (task, source) = sleeper(7, 60_000);
        let (header, object) = work.start(task, source, None).expect("answered without running");
        assert_eq!(header.task_id, 7);
        assert!(matches!(&header.outcome, Outcome::InternalError(why) if why.contains("before the task arrived")));
        assert!(object.is_empty());
        assert_eq!(work.running(), 0);
        // Once only: the same id sent again later runs.
        let (task, source) = sleeper(7, 10);
        assert!(work.start(task, source, None).is_none());
        let answers = every_answer(&mut work).await;
        assert_eq!(answers.len(), 1);
        assert_eq!(answers[0].0.outcome, Outcome::Success);
        // Its answer crossed a cancel for it: the run the scheduler sends
        // after that answer is not stopped.
        work.cancel(7);
        let (task, source) = sleeper(7, 10);
        assert!(work.start(task, source, None).is_none(), "a cancel that crossed the answer refused the next run");
        assert_eq!(every_answer(&mut work).await[0].0.outcome, Outcome::Success);
        // An answer given at an adoption counts too: a cancel that crossed
        // it is not kept.
        let handle = ResumedTask::HANDLE_BIT | 5;
        let held = ResultHeader::bare(handle, Outcome::Success);
        work.hold(handle, Origin { consumerd: 1, task_id: 8 }, ToolchainKey(1), held, Bytes::new(), Instant::now());
        assert_eq!(work.adopt(handle, 8).expect("a kept result is answered at once").0.task_id, 8);
        work.cancel(8);
        assert!(work.cancelled_early.is_empty(), "a cancel that crossed an adoption's answer was kept");
        // A handle's cancel for something gone is not remembered.
        work.cancel(ResumedTask::HANDLE_BIT | 3);
        assert!(work.cancelled_early.is_empty());
        // A lost connection forgets early cancels.
        work.cancel(9);
        work.orphan();
        let (task, source) = sleeper(9, 10);
        assert!(work.start(task, source, None).is_none());
        assert_eq!(every_answer(&mut work).await[0].0.outcome, Outcome::Success);
    }

    /// Both windows end: an early cancel older than [`EARLY_CANCEL_FOR`]
    /// stops nothing, an answer older than that no longer turns a cancel
    /// away; and past [`ANSWERED_MAX`] answers the oldest is forgotten.
    #[tokio::test]
    async fn early_cancels_and_answers_are_forgotten_after_their_window_or_past_the_cap() {
        let scratch = tempfile::tempdir().expect("a scratch dir");
        let mut work = work(scratch.path());
        let now = Instant::now();
        let expired = now.checked_sub(EARLY_CANCEL_FOR + Duration::from_secs(1)).expect("a machine up for minutes");
        // A cancel that came too long before its task: the task runs.
        work.cancel_at(1, expired);
        let (task, source) = sleeper(1, 10);
        assert!(work.start(task, source, None).is_none(), "an expired early cancel refused its task");
        assert_eq!(every_answer(&mut work).await[0].0.outcome, Outcome::Success);
        // A cancel long after the answer is an early cancel for the next run.
        work.answering_at(2, expired);
        work.cancel(2);
        assert!(work.cancelled_early.contains_key(&2), "an expired answer turned a cancel away");
        let (task, source) = sleeper(2, 60_000);
        assert!(work.start(task, source, None).is_some(), "the cancelled run was not answered at once");
        assert_eq!(work.running(), 0);
        // An expired early cancel is dropped when the next one comes.
        work.cancel_at(3, expired);
        work.cancel(4);
        assert!(!work.cancelled_early.contains_key(&3));
        assert!(work.cancelled_early.contains_key(&4));
        // The cap: the oldest answer goes, the newest stay.
        for id in 100..100 + ANSWERED_MAX as u64 + 1 {
            work.answering_at(id, now);
        }
        assert_eq!(work.answered_order.len(), ANSWERED_MAX);
        assert!(!work.answered.contains_key(&100));
        assert!(work.answered.contains_key(&101));
        work.cancel(100);
        assert!(work.cancelled_early.contains_key(&100), "a forgotten answer still turned a cancel away");
        work.cancel(101);
        assert!(!work.cancelled_early.contains_key(&101), "a remembered answer let a crossed cancel stay");
    }

    /// The windows of early cancels outlast the slowest payload a stream may
    /// carry; an object past the wire's limit is answered as an error.
    #[test]
    fn early_cancels_outlast_the_largest_payload_and_oversized_objects_are_refused() {
        let max = ccroute_wire::Limits::DEFAULT.max_payload;
        let slowest = crate::net::queued_payload_deadline(max, u64::MAX, max);
        assert_eq!(
            slowest,
            crate::net::queued_payload_deadline(1, u64::MAX, max),
            "the queued cap is the same for all sizes"
        );
        assert!(EARLY_CANCEL_FOR > slowest + Duration::from_secs(10), "{slowest:?}");
        let max = usize::try_from(ccroute_wire::Limits::DEFAULT.max_payload).unwrap();
        let ok = ResultHeader::bare(4, Outcome::Success);
        let (header, object) = fit_the_wire(ok.clone(), Bytes::from(vec![0; max]));
        assert_eq!((header.outcome, object.len()), (Outcome::Success, max));
        let (header, object) = fit_the_wire(ok, Bytes::from(vec![0; max + 1]));
        assert!(matches!(&header.outcome, Outcome::InternalError(why) if why.contains("past the")), "{header:?}");
        assert_eq!((header.task_id, object.len()), (4, 0));
    }

    /// A result sent while the scheduler was already silent is kept when
    /// the connection is lost, however late the agent notices (an agent
    /// can notice seconds after the scheduler timed it out, and the old
    /// rule, "sent in the last RETAIN", dropped such a result: its unit was
    /// compiled again); one sent well before the scheduler was last heard
    /// from is taken as delivered.
    #[test]
    fn results_sent_near_or_after_the_last_word_from_the_scheduler_are_kept() {
        let scratch = tempfile::tempdir().expect("a scratch dir");
        let mut work = work(scratch.path());
        let now = Instant::now();
        let ago = |s: u64| now.checked_sub(Duration::from_secs(s)).expect("a clock past 30 s");
        work.heard = ago(20);
        work.recent.push_back(sent(ago(30), 1)); // 10 s before the last word: delivered
        work.recent.push_back(sent(ago(24), 2)); // 4 s before it: in doubt
        work.recent.push_back(sent(ago(12), 3)); // after it, 12 s before the loss is noticed
        work.recent_bytes = work.recent.iter().map(|s| kept_bytes(&s.header, &s.object)).sum();
        work.orphan();
        let mut kept: Vec<u64> = work.held.values().map(|h| h.origin.task_id).collect();
        kept.sort_unstable();
        assert_eq!(kept, [2, 3]);
        assert_eq!(work.resumable().len(), 2, "both are announced to the next scheduler");
    }

    /// Failed compiles carry their output and no object: what they keep
    /// counts against the bound of kept results all the same (it counted
    /// objects only, so any number of them was kept).
    #[test]
    fn kept_results_count_their_compilers_output() {
        let scratch = tempfile::tempdir().expect("a scratch dir");
        let mut work = work(scratch.path());
        let stderr = Bytes::from(vec![b'e'; 1 << 20]);
        let failed = |id: u64| ResultHeader {
            stderr: stderr.clone(),
            exit_status: 1,
            ..ResultHeader::bare(id, Outcome::CompileFailed)
        };
        let n = HELD_MAX_BYTES / stderr.len() * 2;
        for id in 0..n as u64 {
            let origin = Origin { consumerd: 1, task_id: id };
            work.remember(origin, ToolchainKey(1), &failed(id), &Bytes::new());
            work.hold(ResumedTask::HANDLE_BIT | id, origin, ToolchainKey(1), failed(id), Bytes::new(), Instant::now());
        }
        assert!(work.held_bytes <= HELD_MAX_BYTES && work.held.len() <= n / 2, "{} held", work.held.len());
        assert!(work.recent_bytes <= HELD_MAX_BYTES && work.recent.len() <= n / 2, "{} kept", work.recent.len());
    }
}
