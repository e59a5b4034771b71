//! The consumerd's link to the scheduler: the [`Remote`] the local side
//! sends its jobs through.
//!
//! One long-lived QUIC connection, re-established for as long as the
//! consumerd runs: while nothing answers, a knock every 0.5 s
//! (`net::knock`); after a refusal or a connection that ended early,
//! exponential backoff (0.5 s, ×√2, at most 5 s, with jitter; reset after
//! 10 s connected). While it is down the remote window is 0 and
//! every job runs locally. A job in flight when it drops waits up to
//! [`RESUME_GRACE`] for the link to come back, and is then sent again,
//! marked resumed, with its source: a restarted scheduler gives it to the
//! agent that still runs it (`scheduler/resume.rs`), so nothing is compiled
//! twice. Past the grace it runs locally. A connection that carried a load
//! and has been quiet since is replaced by a new one at once, to give back
//! the buffers both ends kept for it (`crate::memory::Recycling`).
//!
//! A job becomes a task: its toolchain key, its cache key (when the result
//! may be cached), its encoded spec, and the preprocessed text compressed.
//! The task is registered before it is sent (kubecc C1 registered after, and
//! lost fast answers), and a job whose wrapper goes away is cancelled on the
//! scheduler. Answers are matched by task id; anything but a compile result
//! — no agent, agent lost, over budget — is "run it locally".
//!
//! Tasks are sent longest expected first ([`SendOrder`]): a build that runs
//! ahead of the farm's tokens (`make -j` far above the window) gives the
//! link more tasks than it can send at once, and the last long unit in
//! make's order, sent last, would end the build late however the scheduler
//! orders what reached it. What a unit is expected to cost comes from a
//! cost model of the link's own (`crate::cost`), taught by its results and
//! kept in [`LinkConfig::costs_file`] across runs.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ccroute_wire::{
    cache_key, codec, payload, Cancel, Demand, Frame, HelloBody, Message, Outcome, PayloadInfo, ResultHeader,
    RetryReason, Role, TaskHeader, TaskSpec, Toolchain, ToolchainKey, ToolchainUpdate,
};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::supply::Supply;
use super::{BoxFuture, Compiled, CompiledParts, Remote, RemoteError, RemoteJob, Stats};
use crate::cost::{Costs, Expected};
use crate::memory;
use crate::net::{self, Identity, NetError, TransportOptions, INLINE_PAYLOAD_MAX};

/// The most bytes an object may decompress to.
const MAX_OBJECT: u64 = 1 << 30;
/// Texts larger than this are compressed off the async threads.
const BLOCKING_COMPRESS: usize = 256 << 10;
/// A task frame's bytes besides its spec and payload (length prefix, ids,
/// keys, payload info), counted with each task sent.
const TASK_FRAME_OVERHEAD: usize = 80;

/// How often the demand is reported when it changed.
const DEMAND_EVERY: Duration = Duration::from_millis(100);
/// After the scheduler said no agent takes a toolchain's inputs, or agents
/// failed [`INPUTS_FAILURES_IN_A_ROW`] of its units sent as inputs in a row,
/// units of it go as text for this long before inputs are tried again.
const INPUTS_RETRY: Duration = Duration::from_secs(10);
/// Units of one toolchain that agents failed to compile from their inputs,
/// one after another with none compiled so between, before inputs are left
/// off for [`INPUTS_RETRY`]: each such unit costs a round trip before it
/// goes as text. An agent of several that fails them gets there only when
/// it is given three of them one after another.
const INPUTS_FAILURES_IN_A_ROW: u32 = 3;
/// How long tasks in flight wait for a lost scheduler connection to come
/// back before they compile here. A restarted scheduler has its peers back
/// within about a second of listening; one that stays away costs a build
/// this much more (after its idle timeout) than compiling at once would.
pub const RESUME_GRACE: Duration = Duration::from_secs(3);
/// Tasks being sent at once (compressed, and waiting for room on the
/// control stream or for a stream of their own to open); the others wait
/// their turn, longest expected first. Enough that tasks waiting for room
/// on the control stream do not keep large texts from their streams: at
/// 16, the farm's `thin` preset (100 Mbit/s) took 1.33-1.37 × its bound
/// against 1.22 with no limit, at 256 1.26 (single runs).
const SENDING_AT_ONCE: usize = 256;
/// The consumerd's cost model, in its cache's directory.
pub const COSTS_FILE: &str = "consumerd-cost-model";

/// Where and how to reach the scheduler.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// The scheduler's address.
    pub scheduler: SocketAddr,
    /// The consumerd's certificate and the cluster CA.
    pub identity: Arc<Identity>,
    /// QUIC settings.
    pub transport: TransportOptions,
    /// This consumerd's node id.
    pub node_id: u128,
    /// This host's name.
    pub host_name: String,
    /// Where the link's cost model is kept across runs (`None`: in memory).
    pub costs_file: Option<PathBuf>,
    /// Tasks waiting to be sent go longest expected first; off, in the
    /// order they came.
    pub longest_first: bool,
}

impl LinkConfig {
    /// The defaults, for a link to `scheduler` with `identity`: default QUIC
    /// settings, a random node id, this host's name (the command line and the
    /// in-process cluster both start here).
    pub fn new(scheduler: SocketAddr, identity: Identity) -> LinkConfig {
        LinkConfig {
            scheduler,
            identity: Arc::new(identity),
            transport: TransportOptions::default(),
            node_id: crate::net::random_id(),
            host_name: crate::host::host_name(),
            costs_file: None,
            longest_first: true,
        }
    }
}

/// Where a task's answer goes: the scheduler's result as it came (turned
/// into a [`Compiled`] by the task's own job, so that a large object's
/// decompression holds up no other answer), or why there is none.
type Waiter = oneshot::Sender<Result<(ResultHeader, Bytes), RemoteError>>;

/// A task sent and not answered: who waits, and what to send again if the
/// connection is lost (the header and the compressed source, shared).
struct Pending {
    waiter: Waiter,
    header: TaskHeader,
    payload: Bytes,
    /// What it was expected to cost, taught what it took by its result.
    expected: Expected,
}

struct Connected {
    conn: quinn::Connection,
    writer: net::FrameWriter,
}

struct Inner {
    window: watch::Sender<u32>,
    /// The connection; a task is registered in `pending` (and numbered)
    /// under this lock, so that a connection found quiet under it has no
    /// task on its way.
    current: Mutex<Option<Arc<Connected>>>,
    pending: Mutex<HashMap<u64, Pending>>,
    next_id: AtomicU64,
    /// While a quiet connection is being replaced: jobs wait for the new
    /// one ([`connection`]) instead of compiling here.
    replacing: AtomicBool,
    /// Told when `replacing` ends.
    replaced: tokio::sync::Notify,
    /// Toolchains seen in jobs, announced to each new connection.
    toolchains: Mutex<Vec<Toolchain>>,
    announced: Mutex<HashSet<ToolchainKey>>,
    /// Their packages, for agents that fetch them.
    supply: Supply,
    /// Toolchains whose inputs no agent took lately, and since when.
    inputs_off: Mutex<HashMap<ToolchainKey, Instant>>,
    /// Units of each toolchain agents failed from their inputs since the
    /// last one compiled so.
    inputs_failed: Mutex<HashMap<ToolchainKey, u32>>,
    /// Agents' failures to compile units from their inputs, as logged.
    inputs_failure_said: crate::said::Every,
    /// The local side's counters (bytes sent are counted here).
    stats: Arc<Stats>,
    /// What each unit is expected to cost, learnt from results.
    costs: Costs,
    /// Tasks waiting to be sent.
    order: SendOrder,
    /// [`LinkConfig::longest_first`].
    longest_first: bool,
}

/// The link; cheap to clone.
#[derive(Clone)]
pub struct Link {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").field("window", &*self.inner.window.borrow()).finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Link {
    /// Starts connecting (and reconnecting, until `shutdown` is cancelled),
    /// as a task of `tasks`, which its owner waits on. `stats` is the local
    /// side's, read to report demand.
    pub fn start(config: LinkConfig, stats: Arc<Stats>, shutdown: CancellationToken, tasks: &TaskTracker) -> Link {
        let inner = Arc::new(Inner {
            window: watch::Sender::new(0),
            current: Mutex::new(None),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            replacing: AtomicBool::new(false),
            replaced: tokio::sync::Notify::new(),
            toolchains: Mutex::new(Vec::new()),
            announced: Mutex::new(HashSet::new()),
            supply: Supply::default(),
            inputs_off: Mutex::new(HashMap::new()),
            inputs_failed: Mutex::new(HashMap::new()),
            inputs_failure_said: crate::said::Every::new(crate::said::A_MINUTE),
            stats: stats.clone(),
            costs: Costs::open_file(config.costs_file.clone(), None),
            order: SendOrder::default(),
            longest_first: config.longest_first,
        });
        if config.costs_file.is_some() {
            tasks.spawn(keep_costs(inner.clone(), shutdown.clone()));
        }
        tasks.spawn(keep_connected(inner.clone(), config, stats, shutdown));
        Link { inner }
    }

    /// The transport's figures of the connection now (round trip,
    /// congestion window, packets lost), if connected.
    pub fn transport_stats(&self) -> Option<quinn::ConnectionStats> {
        lock(&self.inner.current).as_ref().map(|c| c.conn.stats())
    }
}

impl Remote for Link {
    fn compile(&self, job: RemoteJob) -> BoxFuture<Result<Compiled, RemoteError>> {
        let inner = self.inner.clone();
        Box::pin(async move { compile(inner, job).await })
    }

    fn window(&self) -> watch::Receiver<u32> {
        self.inner.window.subscribe()
    }
}

/// Unregisters a task and cancels it on the scheduler (the one connected
/// now: it may have been sent again since) if its job is dropped before its
/// answer came.
struct Registration {
    inner: Arc<Inner>,
    id: u64,
    answered: bool,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        self.inner.supply.forget(self.id);
        if lock(&self.inner.pending).remove(&self.id).is_some() {
            if let Some(conn) = lock(&self.inner.current).clone() {
                let cancel = Message::Cancel(Cancel { task_id: self.id });
                let queued =
                    conn.writer.try_send(net::Outgoing::Frame { message: cancel.clone(), payload: Bytes::new() });
                // A full queue (a backlog of tasks waiting to go) must not
                // lose the cancel: its agent would compile on, its token held.
                if let (Err(net::TrySendError::Full(_)), Ok(runtime)) = (queued, tokio::runtime::Handle::try_current())
                {
                    runtime.spawn(async move {
                        let _ = conn.writer.send(cancel, Bytes::new()).await;
                    });
                }
            }
        }
    }
}

async fn compile(inner: Arc<Inner>, mut job: RemoteJob) -> Result<Compiled, RemoteError> {
    let Some(conn) = connection(&inner).await else {
        return Err(RemoteError::NotConnected);
    };
    let toolchain = job.toolchain.key();
    if let Some(package) = &job.package {
        inner.supply.offer(&job.toolchain, package.clone());
    }
    announce(&inner, &conn, &job.toolchain).await;
    let mut text_because = None;
    if let Some(inputs) = job.inputs.take() {
        let off = lock(&inner.inputs_off).get(&toolchain).is_some_and(|t| t.elapsed() < INPUTS_RETRY);
        if off {
            text_because = Some("no agent took this toolchain's inputs lately");
        } else {
            match compile_inputs(&inner, &job, &inputs).await {
                Ok(c) if c.exit_status == 0 || !may_lack_a_file(&c.parts.stderr, &inputs.spec.env) => {
                    lock(&inner.inputs_failed).remove(&toolchain);
                    return Ok(Compiled { from_inputs: true, ..c });
                }
                // A file the sandbox lacked must not fail the build: the
                // local compile says whether it does.
                Ok(_) => {
                    return Err(RemoteError::Agent("the compile from its inputs missed a file; compiling here".into()))
                }
                Err(RemoteError::SentBack(RetryReason::NoAgents)) => {
                    let first = lock(&inner.inputs_off).insert(toolchain, Instant::now()).is_none();
                    if first {
                        tracing::info!(toolchain = %job.toolchain, "no agent takes this toolchain's units as inputs (none can make the sandbox); sending text");
                    }
                    text_because = Some("no agent takes this toolchain's inputs");
                }
                Err(RemoteError::Agent(why)) => {
                    say_inputs_failure(&inner, &why, inputs.text_allowed);
                    text_because = Some("the agent could not compile the unit from its inputs");
                    let in_a_row = {
                        let mut failed = lock(&inner.inputs_failed);
                        let n = failed.entry(toolchain).or_default();
                        *n += 1;
                        *n
                    };
                    if in_a_row >= INPUTS_FAILURES_IN_A_ROW {
                        let first = lock(&inner.inputs_off).insert(toolchain, Instant::now()).is_none();
                        if first {
                            tracing::info!(
                                toolchain = %job.toolchain,
                                in_a_row,
                                "agents failed this toolchain's units sent as inputs one after another; sending text, and \
                                 inputs again every {} s",
                                INPUTS_RETRY.as_secs()
                            );
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
        if !inputs.text_allowed {
            return Err(RemoteError::Agent(format!("only its inputs may go remote: {}", text_because.unwrap_or(""))));
        }
    }
    // Its turn to be sent, before the work of sending it (compressing).
    let (expected, turn) = inner.turn_for(toolchain, &job.spec, job.text.len()).await;
    let spec = codec::encode_spec(&job.spec);
    let text = job.text;
    let large = text.len() >= BLOCKING_COMPRESS;
    let cacheable = job.cacheable;
    let prepare = {
        let spec = spec.clone();
        move || {
            let key = cacheable.then(|| cache_key(toolchain, &spec, &text));
            let (packed, info) = payload::compress(&text);
            (key, Bytes::from(packed), info)
        }
    };
    let (key, packed, info) = if large {
        tokio::task::spawn_blocking(prepare).await.map_err(|e| RemoteError::Compress(e.to_string()))?
    } else {
        prepare()
    };
    let header = TaskHeader {
        task_id: 0,
        toolchain,
        cache_key: key,
        spec,
        payload: info,
        inputs: false,
        origin: None,
        resumed: false,
    };
    let compiled = submit(&inner, header, packed, None, expected, turn).await?;
    Ok(Compiled { text_because, ..compiled })
}

/// Logs, at most once a minute (a broken agent fails every unit the
/// scheduler gives it; at debug level in between), that an agent could not
/// compile a unit from its inputs: the build goes on (the unit goes as
/// text, or compiles here), but each such unit costs a round trip more, and
/// the agent needs mending.
fn say_inputs_failure(inner: &Inner, why: &str, text_allowed: bool) {
    let then = if text_allowed { "sending it as text" } else { "compiling it here" };
    if inner.inputs_failure_said.due().is_some() {
        tracing::warn!(
            agent_said = %why,
            "an agent could not compile a unit from its inputs; {then}. Its log says why (a sandbox it cannot make, \
             a store it cannot write); `ccroute status` lists the agents (said at most once a minute)"
        );
    } else {
        tracing::debug!(agent_said = %why, "an agent could not compile a unit from its inputs; {then}");
    }
}

/// Whether a failed compile's `stderr` may come from a file the sandbox
/// lacked rather than from the source: a missing file in gcc's or clang's
/// words, or messages in a language these words are not in.
fn may_lack_a_file(stderr: &[u8], env: &[(String, String)]) -> bool {
    let english = env
        .iter()
        .filter(|(k, _)| matches!(k.as_str(), "LANG" | "LC_ALL" | "LC_MESSAGES"))
        .all(|(_, v)| v.is_empty() || v.starts_with("C") || v.starts_with("POSIX") || v.starts_with("en"));
    let has = |needle: &[u8]| stderr.windows(needle.len()).any(|w| w == needle);
    !english || has(b"No such file or directory") || has(b"file not found")
}

/// Sends the unit as its inputs, on the toolchain's inputs twin.
async fn compile_inputs(
    inner: &Arc<Inner>,
    job: &RemoteJob,
    inputs: &super::InputsJob,
) -> Result<Compiled, RemoteError> {
    let twin = job.toolchain.inputs_twin().key();
    let spec = codec::encode_spec(&inputs.spec);
    // Over the spec (command, input paths and digests) and no text: what the
    // agent verifies as it materialises each input.
    let key = job.cacheable.then(|| cache_key(twin, &spec, &[]));
    let header = TaskHeader {
        task_id: 0,
        toolchain: twin,
        cache_key: key,
        spec,
        payload: PayloadInfo::EMPTY,
        inputs: true,
        origin: None,
        resumed: false,
    };
    let (expected, turn) = inner.turn_for(twin, &inputs.spec, 0).await;
    submit(inner, header, Bytes::new(), Some(inputs.sources.clone()), expected, turn).await
}

/// Registers a task, sends it, and waits for its answer; `sources` are
/// served to its agent while it runs.
/// How long a job waits for the connection that replaces a quiet one
/// before it compiles here: a scheduler that answers gives it in a few
/// round trips.
const REPLACE_WAIT: Duration = Duration::from_secs(2);

/// The connection; while a quiet one is being replaced, the new one once
/// it is made (at most [`REPLACE_WAIT`]). `None`: compile here.
async fn connection(inner: &Inner) -> Option<Arc<Connected>> {
    let deadline = tokio::time::Instant::now() + REPLACE_WAIT;
    loop {
        let replaced = inner.replaced.notified();
        tokio::pin!(replaced);
        replaced.as_mut().enable();
        if let Some(conn) = lock(&inner.current).clone() {
            return Some(conn);
        }
        if !inner.replacing.load(Ordering::Acquire) {
            return None;
        }
        tokio::time::timeout_at(deadline, replaced).await.ok()?;
    }
}

/// Ends replacing a connection (made, or not): jobs waiting go on.
fn replacing_done(inner: &Inner) {
    if inner.replacing.swap(false, Ordering::AcqRel) {
        inner.replaced.notify_waiters();
    }
}

async fn submit(
    inner: &Arc<Inner>,
    mut header: TaskHeader,
    packed: Bytes,
    sources: Option<super::supply::Sources>,
    expected: Expected,
    turn: Turn<'_>,
) -> Result<Compiled, RemoteError> {
    // `turn` was waited for before the task was registered: a task
    // registered is sent again on a new connection, and this one had not
    // been sent. The connection may have changed while it waited.
    let (tx, rx) = oneshot::channel();
    let (conn, id) = loop {
        if connection(inner).await.is_none() {
            return Err(RemoteError::NotConnected);
        }
        // Numbered and registered under the connection's lock (see `Inner::current`).
        let current = lock(&inner.current);
        let Some(conn) = current.clone() else { continue };
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        header.task_id = id;
        // Registered before it is sent: the answer may come back at once.
        let kept = Pending { waiter: tx, header: header.clone(), payload: packed.clone(), expected };
        lock(&inner.pending).insert(id, kept);
        break (conn, id);
    };
    if let Some(sources) = sources {
        inner.supply.register(id, sources);
    }
    let mut registration = Registration { inner: inner.clone(), id, answered: false };
    let bytes = (header.spec.len() + packed.len() + TASK_FRAME_OVERHEAD) as u64;
    let counter = if header.inputs { &inner.stats.inputs_task_bytes } else { &inner.stats.text_task_bytes };
    // Relaxed: a display counter.
    counter.fetch_add(bytes, Ordering::Relaxed);
    match send_task(&conn, header, packed, Some(turn)).await {
        // The scheduler read its header and stopped its text's stream: its
        // answer (from the cache, over budget) comes all the same.
        Ok(()) | Err(NetError::Stopped { .. }) => {}
        Err(e) => return Err(RemoteError::Send(e)),
    }
    let answer = rx.await.unwrap_or(Err(RemoteError::ConnectionLost));
    registration.answered = true;
    inner.supply.forget(id);
    let (header, object) = answer?;
    if object.len() < BLOCKING_COMPRESS {
        return to_compiled(header, &object);
    }
    tokio::task::spawn_blocking(move || to_compiled(header, &object))
        .await
        .map_err(|e| RemoteError::Compress(format!("decompressing the object: {e}")))?
}

impl Inner {
    /// What a task of `toolchain` with `spec` and a text of `bytes` is
    /// expected to cost, and its turn to be sent, waited for.
    async fn turn_for(&self, toolchain: ToolchainKey, spec: &TaskSpec, bytes: usize) -> (Expected, Turn<'_>) {
        let expected = self.costs.expect_spec(toolchain, spec, bytes);
        let turn = self.order.turn(self.rank(&expected)).await;
        (expected, turn)
    }

    /// Where a task expected to cost `e` waits for its turn: by its cost
    /// when its unit has a history here, else (or with the order off) with
    /// the tasks that came before it. A guess from the text's size does not
    /// reorder the build: on the farm's `thin` preset (100 Mbit/s) it sent
    /// the largest texts first and the build took 1.33 × its bound against
    /// 1.22 in the build's order.
    fn rank(&self, e: &Expected) -> u64 {
        match e.prediction.basis {
            ccroute_core::cost::Basis::History if self.longest_first => e.prediction.micros,
            _ => 0,
        }
    }
}

/// Tasks waiting for their turn to be sent: at most [`SENDING_AT_ONCE`]
/// are sent at once, and a turn given back goes to the waiting task
/// expected to cost the most (the oldest of equals).
#[derive(Default)]
struct SendOrder {
    state: Mutex<OrderState>,
}

#[derive(Default)]
struct OrderState {
    /// Turns held.
    sending: usize,
    waiting: BinaryHeap<Waiting>,
    /// Arrival order, for ties.
    arrived: u64,
}

/// A task waiting its turn; the heap's greatest goes first.
struct Waiting {
    micros: u64,
    arrived: u64,
    go: oneshot::Sender<()>,
}

impl Waiting {
    fn rank(&self) -> (u64, Reverse<u64>) {
        (self.micros, Reverse(self.arrived))
    }
}

impl PartialEq for Waiting {
    fn eq(&self, other: &Self) -> bool {
        self.rank() == other.rank()
    }
}

impl Eq for Waiting {}

impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Waiting {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.rank().cmp(&other.rank())
    }
}

/// A turn to send, given back when dropped.
struct Turn<'a> {
    order: &'a SendOrder,
    held: bool,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if self.held {
            self.order.give_back();
        }
    }
}

/// A wait for a turn; one handed over to a wait dropped meanwhile (its job
/// cancelled) is passed on.
struct Queued<'a> {
    order: &'a SendOrder,
    go: oneshot::Receiver<()>,
    /// The wait ended: what it was handed is the task's.
    ended: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.go.close();
            if self.go.try_recv().is_ok() {
                self.order.give_back();
            }
        }
    }
}

impl SendOrder {
    /// Waits for a turn to send a task expected to cost `micros`.
    async fn turn(&self, micros: u64) -> Turn<'_> {
        let go = {
            let mut s = lock(&self.state);
            if s.sending < SENDING_AT_ONCE {
                s.sending += 1;
                return Turn { order: self, held: true };
            }
            let (tx, rx) = oneshot::channel();
            let arrived = s.arrived;
            s.arrived += 1;
            s.waiting.push(Waiting { micros, arrived, go: tx });
            rx
        };
        let mut queued = Queued { order: self, go, ended: false };
        let handed = (&mut queued.go).await.is_ok();
        queued.ended = true;
        // Not handed (never: a wait leaves the heap only to be handed a
        // turn): sent without one.
        Turn { order: self, held: handed }
    }

    /// A turn ends: the next task goes, or one turn fewer is held.
    fn give_back(&self) {
        let mut s = lock(&self.state);
        while let Some(next) = s.waiting.pop() {
            if next.go.send(()).is_ok() {
                return;
            }
        }
        s.sending -= 1;
    }
}

/// Writes the link's cost model to its file now and then, and at the end.
async fn keep_costs(inner: Arc<Inner>, shutdown: CancellationToken) {
    let mut every = tokio::time::interval(crate::cost::SAVE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        let stop = tokio::select! {
            _ = every.tick() => false,
            () = shutdown.cancelled() => true,
        };
        let saving = inner.clone();
        let _ = tokio::task::spawn_blocking(move || saving.costs.save()).await;
        if stop {
            return;
        }
    }
}

/// Sends one task: a small source inline, a large one on a stream of its own.
/// Its `turn` ends once its place is taken: queued on the control stream, or
/// its own stream opened (the bytes of a large text may take long on a thin
/// link, and the streams opened after it wait for them anyway).
async fn send_task(
    conn: &Connected,
    header: TaskHeader,
    packed: Bytes,
    turn: Option<Turn<'_>>,
) -> Result<(), NetError> {
    if packed.len() <= INLINE_PAYLOAD_MAX {
        let queued = conn.writer.send(Message::Task(header), packed).await;
        drop(turn);
        queued
    } else {
        net::send_on_new_stream_then(&conn.conn, &Message::Task(header), packed, move || drop(turn)).await
    }
}

/// Answers every task in flight "connection lost" (each then compiles here).
fn fail_pending(inner: &Inner) {
    let lost: Vec<Pending> = lock(&inner.pending).drain().map(|(_, p)| p).collect();
    if !lost.is_empty() {
        tracing::warn!(
            tasks = lost.len(),
            grace = ?RESUME_GRACE,
            "the scheduler did not come back within the grace; compiling the tasks in flight here"
        );
    }
    for p in lost {
        let _ = p.waiter.send(Err(RemoteError::ConnectionLost));
    }
}

/// The tasks in flight, marked resumed, to send again on a new connection:
/// taken before the connection is published, so that a task registered
/// after it (sent on the new connection by its own job) is not sent twice.
fn in_flight_again(inner: &Inner) -> Vec<(TaskHeader, Bytes)> {
    lock(&inner.pending)
        .values()
        .map(|p| (TaskHeader { resumed: true, ..p.header.clone() }, p.payload.clone()))
        .collect()
}

/// Sends `again` ([`in_flight_again`]) on `conn`.
async fn resend(conn: &Connected, again: Vec<(TaskHeader, Bytes)>) {
    if again.is_empty() {
        return;
    }
    tracing::info!(tasks = again.len(), "sending the tasks in flight again to the scheduler");
    for (header, payload) in again {
        // Sent again without a turn: they were sent once, and come first.
        match send_task(conn, header, payload, None).await {
            // Its text's stream stopped: answered without it, as a first send.
            Ok(()) | Err(NetError::Stopped { .. }) => {}
            Err(e) => {
                // The connection is failing: its end sends them again, or
                // its grace ends them.
                tracing::debug!(error = %e, "a task could not be sent again");
                return;
            }
        }
    }
}

/// Waits until `deadline`, or forever without one.
async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Tells the scheduler about a toolchain the first time a job uses it, so
/// that its routes list this consumerd.
async fn announce(inner: &Inner, conn: &Connected, toolchain: &Toolchain) {
    let key = toolchain.key();
    if lock(&inner.announced).contains(&key) {
        return;
    }
    let all = {
        let mut list = lock(&inner.toolchains);
        if !list.iter().any(|t| t.key() == key) {
            list.push(toolchain.clone());
        }
        list.clone()
    };
    lock(&inner.announced).insert(key);
    let _ = conn.writer.send(Message::ToolchainUpdate(ToolchainUpdate { toolchains: all }), Bytes::new()).await;
}

/// Turns a scheduler's result into what the local side wants.
fn to_compiled(header: ResultHeader, object: &[u8]) -> Result<Compiled, RemoteError> {
    match header.outcome {
        Outcome::Success => {
            let object = payload::decompress(&header.payload, object, MAX_OBJECT).map_err(RemoteError::BadObject)?;
            let parts = CompiledParts { stdout: header.stdout, stderr: header.stderr, object: Bytes::from(object) };
            Ok(Compiled { exit_status: 0, parts, cached: header.cached, from_inputs: false, text_because: None })
        }
        Outcome::CompileFailed => {
            // An agent that did not ask, or a failure cached before agents
            // asked: a local compile decides (DESIGN.md, invariant 1).
            if let Some(why) = crate::cc::failure::suspect(header.exit_status, &header.stderr) {
                return Err(RemoteError::Agent(format!(
                    "its compile failed in a way that may be the machine's, not the source's ({why})"
                )));
            }
            let parts = CompiledParts { stdout: header.stdout, stderr: header.stderr, object: Bytes::new() };
            Ok(Compiled {
                exit_status: header.exit_status,
                parts,
                cached: header.cached,
                from_inputs: false,
                text_because: None,
            })
        }
        Outcome::InternalError(why) => Err(RemoteError::Agent(why)),
        Outcome::Defunct => Err(RemoteError::AgentLost),
        Outcome::Retry(_, reason) => Err(RemoteError::SentBack(reason)),
    }
}

/// Connects, serves, and reconnects with backoff until shutdown.
async fn keep_connected(inner: Arc<Inner>, config: LinkConfig, stats: Arc<Stats>, shutdown: CancellationToken) {
    let mut backoff = net::Backoff::new();
    let mut last_error: Option<String> = None;
    // While the connection is lost with tasks in flight: when they stop waiting for it.
    let mut grace: Option<tokio::time::Instant> = None;
    while !shutdown.is_cancelled() {
        let started = Instant::now();
        // Dialling knocks for as long as nothing answers: shutdown stops it.
        let dialled = tokio::select! {
            d = connect(&inner, &config) => d,
            () = until(grace) => {
                grace = None;
                fail_pending(&inner);
                continue;
            }
            () = shutdown.cancelled() => break,
        };
        let pause = match dialled {
            Ok((conn, reader, welcome_limit)) => {
                tracing::info!(scheduler = %config.scheduler, limit = welcome_limit, "connected to the scheduler");
                last_error = None;
                grace = None;
                let connected = Instant::now();
                let again = in_flight_again(&inner);
                *lock(&inner.current) = Some(conn.clone());
                replacing_done(&inner);
                // Answers are read while the tasks in flight are sent again
                // (thousands of them may answer at once, from the cache); new
                // jobs wait until they are sent, unless a limit came meanwhile.
                let resending = async {
                    resend(&conn, again).await;
                    inner.window.send_if_modified(|w| {
                        let opened = *w == 0;
                        if opened {
                            *w = welcome_limit;
                        }
                        opened
                    });
                    std::future::pending::<()>().await
                };
                let served = tokio::select! {
                    s = serve(&inner, &conn, reader, &stats) => s,
                    () = resending => Served::Ended,
                    () = shutdown.cancelled() => Served::Ended,
                };
                // Why it ended, before our own close below overwrites it.
                let why = conn.conn.close_reason().map_or_else(|| "shutting down".to_owned(), |e| e.to_string());
                *lock(&inner.current) = None;
                if served != Served::Recycle {
                    inner.window.send_replace(0);
                }
                lock(&inner.announced).clear();
                let reason: &[u8] = if served == Served::Recycle {
                    b"consumerd recycling its connection"
                } else {
                    b"consumerd leaving or lost"
                };
                conn.conn.close(net::CloseReason::Done.code(), reason);
                // Tasks still pending (never any after a replacement) are sent
                // again on the next connection, or compile here once the grace ends.
                let in_flight = lock(&inner.pending).len();
                if shutdown.is_cancelled() {
                    fail_pending(&inner);
                } else {
                    if in_flight > 0 {
                        grace = Some(tokio::time::Instant::now() + RESUME_GRACE);
                    }
                    if served == Served::Recycle {
                        tracing::info!(
                            scheduler = %config.scheduler,
                            "connection quiet after a load: replaced by a new one, to give back the buffers it kept"
                        );
                    } else {
                        tracing::warn!(
                            scheduler = %config.scheduler,
                            error = %why,
                            in_flight,
                            "scheduler connection ended; new jobs compile locally until it is back, those in flight wait {RESUME_GRACE:?} for it"
                        );
                    }
                }
                let pause = backoff.after_lost(connected.elapsed());
                if served == Served::Recycle {
                    Duration::ZERO
                } else {
                    pause
                }
            }
            Err(e) => {
                // Jobs waiting for a replacement compile here.
                if inner.replacing.load(Ordering::Acquire) {
                    inner.window.send_replace(0);
                    replacing_done(&inner);
                }
                // No retry can change a certificate or a version: say so once,
                // compile everything here, and stop asking.
                if let Some(what_to_do) = e.final_refusal() {
                    tracing::error!(
                        scheduler = %config.scheduler,
                        error = %e,
                        "the scheduler will never admit this consumerd; compiling everything locally until it is restarted: {what_to_do}"
                    );
                    // Nor will it answer what was in flight: compiled here now.
                    fail_pending(&inner);
                    shutdown.cancelled().await;
                    return;
                }
                let text = e.to_string();
                if last_error.as_deref() != Some(text.as_str()) {
                    tracing::warn!(scheduler = %config.scheduler, error = %text, "cannot reach the scheduler; compiling locally");
                    last_error = Some(text);
                }
                backoff.after(started.elapsed())
            }
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = until(grace) => {
                grace = None;
                fail_pending(&inner);
            }
            () = shutdown.cancelled() => {}
        }
    }
    replacing_done(&inner);
    fail_pending(&inner);
}

async fn connect(inner: &Arc<Inner>, config: &LinkConfig) -> Result<(Arc<Connected>, net::FrameReader, u32), NetError> {
    let toolchains = lock(&inner.toolchains).clone();
    let keys: Vec<_> = toolchains.iter().map(Toolchain::key).collect();
    let body = HelloBody {
        role: Role::Consumerd,
        node_id: config.node_id,
        host_name: config.host_name.clone(),
        system: net::system_info(),
        toolchains,
        usage_limit: 0,
        speed_milli: 0,
        probed_speed_milli: 0,
        shipping: ccroute_wire::Shipping::Off,
        resumed: Vec::new(),
    };
    let (conn, writer, reader, welcome) =
        net::dial(&config.identity, &config.transport, config.scheduler, body).await?;
    {
        let mut announced = lock(&inner.announced);
        announced.clear();
        announced.extend(keys);
    }
    // Published by the caller, once it has taken the tasks to send again.
    Ok((Arc::new(Connected { conn, writer }), reader, welcome.limit))
}

/// Why [`serve`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
    /// The connection ended or failed.
    Ended,
    /// It carried a load and has been quiet since ([`memory::Recycling`]):
    /// to be replaced.
    Recycle,
}

/// Reads answers and limits until the connection ends (or is quiet after a
/// load: [`Served::Recycle`]); reports demand.
async fn serve(inner: &Arc<Inner>, conn: &Arc<Connected>, mut reader: net::FrameReader, stats: &Stats) -> Served {
    let mut uni =
        net::accept_frames(conn.conn.clone(), ccroute_wire::Limits { max_payload: MAX_OBJECT, ..Default::default() });
    let mut demand_tick = tokio::time::interval(DEMAND_EVERY);
    let mut last_demand = u32::MAX;
    let mut fetches = tokio::task::JoinSet::new();
    let mut recycling = memory::Recycling::new(Instant::now(), inner.next_id.load(Ordering::Relaxed));
    let mut recycle_tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        let frame: Frame = tokio::select! {
            _ = recycle_tick.tick() => {
                // Under the connection's lock no task can be registered on
                // it: quiet here means none is on its way.
                let mut current = lock(&inner.current);
                let busy = !fetches.is_empty() || !lock(&inner.pending).is_empty();
                if recycling.observe(Instant::now(), inner.next_id.load(Ordering::Relaxed), busy) {
                    // Jobs from now on wait for the next connection.
                    inner.replacing.store(true, Ordering::Release);
                    *current = None;
                    return Served::Recycle;
                }
                continue;
            }
            // An agent fetching one of our toolchains, through the scheduler.
            stream = conn.conn.accept_bi() => match stream {
                Ok((send, recv)) => {
                    let inner = inner.clone();
                    let peer = conn.conn.remote_address();
                    fetches.spawn(async move { inner.supply.serve(send, recv, peer, &inner.stats.inputs_blob_bytes).await });
                    continue;
                }
                Err(_) => return Served::Ended,
            },
            Some(_) = fetches.join_next(), if !fetches.is_empty() => continue,
            next = reader.next() => match next {
                Ok(Some(f)) => f,
                Ok(None) => return Served::Ended,
                Err(e) => {
                    tracing::debug!(error = %e, "control stream ended");
                    return Served::Ended;
                }
            },
            next = uni.next() => match next {
                Some(Ok(f)) => f,
                Some(Err(NetError::ConnectionLost { .. })) | None => return Served::Ended,
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "a result stream failed");
                    match e.into_unfinished() {
                        // Its task is compiled here at once rather than at its deadline.
                        Ok((Message::TaskResult(h), why)) => {
                            let why = format!("its result came without its object: {why}");
                            let h = ResultHeader::run_locally(h.task_id, RetryReason::Rejected(why));
                            Frame { message: Message::TaskResult(h), payload: Bytes::new() }
                        }
                        _ => continue,
                    }
                }
            },
            _ = demand_tick.tick() => {
                let s = stats.snapshot();
                let wanted = u32::try_from(s.waiting + s.remote_running).unwrap_or(u32::MAX - 1);
                if wanted != last_demand {
                    last_demand = wanted;
                    if conn.writer.send(Message::Demand(Demand { wanted }), Bytes::new()).await.is_err() {
                        return Served::Ended;
                    }
                }
                continue;
            }
            e = conn.writer.failed() => {
                tracing::debug!(error = %e, "control stream failed");
                return Served::Ended;
            }
        };
        match frame.message {
            Message::TaskResult(header) => {
                let waiter = lock(&inner.pending).remove(&header.task_id);
                tracing::trace!(task = header.task_id, waited = waiter.is_some(), "result");
                match waiter {
                    Some(p) => {
                        if matches!(header.outcome, Outcome::Success) && !header.cached {
                            let took = if header.wall_us > 0 { header.wall_us } else { header.cpu_time_us };
                            inner.costs.took(&p.expected, Duration::from_micros(took));
                        }
                        let _ = p.waiter.send(Ok((header, frame.payload)));
                    }
                    // Given up on meanwhile (its wrapper left, its deadline
                    // passed), or — never — answered twice: counted.
                    None => {
                        stats.stray_results.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
            Message::PreferredRemoteLimit(l) => {
                inner.window.send_replace(l.limit);
            }
            other => tracing::warn!(message = other.name(), "unexpected message from the scheduler"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Takes every turn there is, so that the next ones wait.
    fn all_turns(order: &SendOrder) -> Vec<Turn<'_>> {
        (0..SENDING_AT_ONCE).map(|_| futures_poll(std::pin::pin!(order.turn(0))).expect("a turn is free")).collect()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn turns_given_back_go_to_the_longest_waiting_task_first() {
        let order = SendOrder::default();
        let mut held = all_turns(&order);
        let went = Mutex::new(Vec::new());
        let wait = |micros: u64| {
            let (order, went) = (&order, &went);
            async move {
                let turn = order.turn(micros).await;
                lock(went).push(micros);
                turn
            }
        };
        let mut waits: Vec<_> = [5, 300, 40, 300, 7_000].into_iter().map(|m| Some(Box::pin(wait(m)))).collect();
        // Each is polled once, in arrival order: all wait.
        for w in waits.iter_mut().flatten() {
            assert!(futures_poll(w.as_mut()).is_none());
        }
        assert!(lock(&went).is_empty());
        let mut kept = Vec::new();
        for _ in 0..waits.len() {
            drop(held.pop());
            for slot in &mut waits {
                if let Some(turn) = slot.as_mut().and_then(|w| futures_poll(w.as_mut())) {
                    kept.push(turn);
                    *slot = None;
                }
            }
            assert_eq!(kept.len() + held.len(), SENDING_AT_ONCE, "one turn given back, one taken");
        }
        // Longest first; of two equal, the first to come.
        assert_eq!(*lock(&went), vec![7_000, 300, 300, 40, 5]);
        drop(held);
        drop(kept);
        assert_eq!(lock(&order.state).sending, 0, "every turn came back");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_turn_handed_to_a_wait_given_up_goes_to_the_next() {
        let order = SendOrder::default();
        let mut held = all_turns(&order);
        let mut gone = Box::pin(order.turn(9_000));
        let mut next = Box::pin(order.turn(10));
        assert!(futures_poll(gone.as_mut()).is_none());
        assert!(futures_poll(next.as_mut()).is_none());
        // The turn goes to the longest, whose job is then dropped before it
        // ran again: the turn passes on rather than being lost.
        drop(held.pop());
        drop(gone);
        let turn = futures_poll(next.as_mut()).expect("the turn passed on");
        assert_eq!(lock(&order.state).sending, SENDING_AT_ONCE);
        drop(turn);
        drop(held);
        assert_eq!(lock(&order.state).sending, 0);
        assert!(lock(&order.state).waiting.is_empty());
    }

    /// Polls `f` once.
    fn futures_poll<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> Option<F::Output> {
        let waker = std::task::Waker::noop();
        match f.poll(&mut std::task::Context::from_waker(waker)) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        }
    }

    fn failed(stderr: &str) -> ResultHeader {
        ResultHeader {
            exit_status: 1,
            stderr: Bytes::from(stderr.to_owned()),
            ..ResultHeader::bare(7, Outcome::CompileFailed)
        }
    }

    /// A failure an agent passed on as the source's, but that names the
    /// machine (an agent that did not ask, a failure cached before agents
    /// asked), is compiled here; the source's own failure is the answer.
    #[test]
    fn a_failure_that_may_be_the_machines_is_compiled_here() {
        let full =
            failed("x.s: Fatal error: can't fill 256 bytes in section .data of out.o: 'No space left on device'\n");
        match to_compiled(full, &[]) {
            Err(RemoteError::Agent(why)) => assert!(why.contains("No space left on device"), "{why}"),
            other => panic!("{other:?}"),
        }
        let own = to_compiled(failed("t.c:1:25: error: expected ';' before '}' token\n"), &[]).unwrap();
        assert_eq!(own.exit_status, 1);
        assert!(String::from_utf8_lossy(&own.parts.stderr).contains("expected ';'"));
    }

    /// A scheduler with one agent of `agent_jobs` running the test
    /// toolchain (its result cache in `cache_dir`, if any), and a link to
    /// it whose window has opened.
    async fn one_agent_and_a_link(
        agent_jobs: u32,
        cache_dir: Option<PathBuf>,
    ) -> (crate::cluster::LocalCluster, Link, watch::Receiver<u32>) {
        use crate::cluster::{ClusterConfig, LocalCluster};
        let cluster = LocalCluster::start(ClusterConfig {
            agents: 1,
            agent_jobs,
            discover: false,
            test_toolchain: true,
            cache_dir,
            tune_agents: false,
            consumerd: false,
            ..ClusterConfig::default()
        })
        .await
        .unwrap();
        let link = cluster.link(Arc::new(Stats::default())).unwrap();
        let mut window = link.window();
        tokio::time::timeout(Duration::from_secs(60), window.wait_for(|w| *w > 0)).await.unwrap().unwrap();
        (cluster, link, window)
    }

    /// A large unit the scheduler answers from its cache has its text's
    /// stream stopped unread, while the link is still writing it; the
    /// answer comes on the control stream all the same and is the job's
    /// (the job failed with "sending the task failed" before, its answer
    /// dropped, and compiled again).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_large_unit_answered_from_the_cache_before_its_text_was_read_gets_that_answer() {
        let cache = tempfile::tempdir().unwrap();
        let (cluster, link, _) = one_agent_and_a_link(2, Some(cache.path().to_path_buf())).await;
        // Incompressible, and three times the scheduler's stream window: its
        // stream cannot be written whole before the scheduler reads it.
        let window_bytes = TransportOptions::default().stream_receive_window as usize;
        let mut text = vec![0u8; 3 * window_bytes];
        crate::agent::executor::replay::fill_noise(&mut text, 7);
        let text = Bytes::from(text);
        let job = || RemoteJob {
            compiler: "/usr/bin/ccroute-test".into(),
            toolchain: Arc::new(crate::toolchain::test_toolchain()),
            package: None,
            spec: TaskSpec { args: vec![], input_path: "big.c".into(), cwd: None, env: vec![], inputs: None },
            text: text.clone(),
            cacheable: true,
            inputs: None,
        };
        let first = link.compile(job()).await.unwrap();
        assert!(!first.cached);
        // The cache stores the result as it answers; the same unit again
        // until it is a hit (each an answer, never a failed send).
        let mut hit = None;
        for _ in 0..50 {
            let again = link.compile(job()).await.unwrap_or_else(|e| panic!("the same unit again: {e}"));
            if again.cached {
                hit = Some(again);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let hit = hit.expect("the cache answered the same unit");
        assert_eq!(hit.parts.object, first.parts.object);
        cluster.shutdown().await;
    }

    /// A connection that carried a load and then went quiet is replaced,
    /// the agent's too, and nothing is lost: the next unit is compiled by
    /// the agent over the new connections.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_quiet_after_a_load_is_replaced_and_serves_on() {
        use crate::cluster::wait_for;
        let (cluster, link, mut window) = one_agent_and_a_link(64, None).await;
        let job = |n: u64| RemoteJob {
            compiler: "/usr/bin/ccroute-test".into(),
            toolchain: Arc::new(crate::toolchain::test_toolchain()),
            package: None,
            spec: TaskSpec { args: vec![], input_path: format!("u{n}.c"), cwd: None, env: vec![], inputs: None },
            text: Bytes::from(format!("int u{n};\n")),
            cacheable: false,
            inputs: None,
        };
        let mut load = tokio::task::JoinSet::new();
        for n in 0..memory::RECYCLE_AFTER_TASKS {
            load.spawn(link.compile(job(n)));
        }
        while let Some(done) = load.join_next().await {
            let compiled = done.unwrap().unwrap_or_else(|e| panic!("a unit of the load: {e}"));
            assert_eq!(compiled.exit_status, 0);
        }
        let first_agent = cluster.scheduler.agents()[0].id;
        let first_consumerd = cluster.scheduler.consumerds()[0].id;
        // Quiet: both connections are replaced.
        let scheduler = cluster.scheduler.clone();
        wait_for("both connections replaced", move || {
            let (agents, consumerds) = (scheduler.agents(), scheduler.consumerds());
            agents.len() == 1
                && consumerds.len() == 1
                && agents[0].id != first_agent
                && consumerds[0].id != first_consumerd
        })
        .await
        .unwrap();
        tokio::time::timeout(Duration::from_secs(10), window.wait_for(|w| *w > 0)).await.unwrap().unwrap();
        let last = link.compile(job(u64::MAX)).await.unwrap_or_else(|e| panic!("the unit after: {e}"));
        assert_eq!(last.exit_status, 0);
        assert_eq!(cluster.scheduler.agents()[0].assigned, 1, "the agent's new session compiled it");
        let totals = cluster.scheduler.totals();
        assert_eq!(totals.completed, memory::RECYCLE_AFTER_TASKS + 1);
        assert_eq!((totals.requeued, totals.retried), (0, 0), "nothing lost with the old connections");
        cluster.shutdown().await;
    }
}
