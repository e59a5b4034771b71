//! The tokio side of the consumerd's local half: one task that owns every
//! connection's state, the [`Slots`], and the remote compiles in flight.
//!
//! Per connection: `Job` → a direct-mode lookup (when the consumerd has a
//! [`DirectCache`] and the wrapper sent what it needs): a hit is answered at
//! once (`Hit`), before any slot is taken → else waits in line → `RunLocally` (holds a local slot
//! until the connection closes) or `Preprocess` (holds a remote slot; the
//! compiler's identity is looked up meanwhile; at most
//! [`super::Config::preprocess_slots`] wrappers preprocess at once, the
//! others holding their remote slot in line for it) → `Source` → remote compile →
//! `Compiled`. `Abandon`, a failed identity lookup or a failed remote compile
//! give the remote slot back and wait for a local one (`RunLocally`). A
//! connection that closes gives up whatever it held and cancels its remote
//! compile. Anything out of order closes the connection; its wrapper then
//! compiles locally. A compile that missed is recorded once it succeeds:
//! a remote one from its result, a local one from the wrapper's `Record`.
//!
//! Main item: [`Dispatcher`]. Left out: socket I/O ([`super::ipc`]).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::future::Future;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ccroute_wire::local::{
    split_four, CompiledHeader, ConsumerdMsg, DirectJob, Job, JobserverSize, Query, WrapperMsg, HEARTBEAT,
    LOCAL_PROTOCOL_VERSION,
};
use ccroute_wire::{TaskSpec, Toolchain};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinError, JoinSet};
use tokio::time::Instant;
use tracing::{debug, warn};

use super::direct::{DirectCache, Lookup, Probe};
use super::ipc::{ConnId, IpcEvent, IpcHandle, Outbound};
use super::slots::{Grant, Slots, Want};
use super::{Compiled, Config, Ended, InputsJob, Remote, RemoteError, RemoteJob, Stats};
use crate::toolchain::ToolchainMemo;

/// The outcome of background work for a connection.
enum Done {
    Toolchain(Result<Arc<Toolchain>, String>),
    Remote(Result<Compiled, RemoteError>),
    Lookup(Lookup),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WorkKind {
    Toolchain,
    Remote,
    Lookup,
}

/// How often changed manifests are written out.
const PERSIST_EVERY: Duration = Duration::from_secs(10);

enum IdentityLookup {
    Pending,
    Ready(Arc<Toolchain>),
    Failed(String),
}

enum ConnState {
    /// The direct-mode lookup runs; nothing is held.
    Looking,
    /// In line for a first grant.
    Queued,
    /// A remote slot is held; in line to be told to preprocess.
    Granted,
    /// `RunLocally` sent: a local slot is held.
    Local,
    /// `Preprocess` sent: a remote slot is held; the wrapper preprocesses
    /// while the compiler's identity is looked up.
    Preprocessing { lookup: IdentityLookup, source: Option<(Bytes, bool)> },
    /// The remote compile runs: a remote slot is held.
    Compiling { task: AbortHandle, started: Instant, bytes: usize },
    /// Back in line, for a local slot this time.
    FallingBack { reason: String },
    /// `Compiled` sent: nothing is held.
    Answered,
}

struct Conn {
    /// The wrapper speaks this consumerd's protocol (one that does not is
    /// only ever told to run locally, and would not understand a heartbeat).
    same_protocol: bool,
    compiler: PathBuf,
    spec: TaskSpec,
    pid: u32,
    state: ConnState,
    /// What a direct-mode lookup and record need (`None`: no cache for this one).
    direct: Option<Arc<DirectJob>>,
    /// Set by a lookup that missed: record the compile under it.
    probe: Option<Probe>,
    /// For a remote compile to record: the files its preprocessing read and
    /// the dependency file it wrote.
    read: Option<(Vec<Vec<u8>>, Bytes)>,
    /// What it waits for in line.
    want: Want,
    /// It runs here whatever happens, without a slot (why): only the cache may answer it.
    stay_local: Option<String>,
    /// The agent's arguments for a compile from the unit's inputs.
    inputs_args: Option<Vec<String>>,
    /// It may go remote only as its inputs (why not as text).
    text_refused: Option<String>,
    /// The files its preprocessing read, for its inputs.
    listed: Option<Vec<Vec<u8>>>,
    /// While it compiles remotely: what it needs to go remote again
    /// without its wrapper, should the link to the scheduler fail.
    again: Option<Again>,
    /// It went remote a second time after its link failed: not a third.
    went_again: bool,
}

/// A remote compile's text and toolchain, kept while it runs (within
/// [`KEPT_TEXT_BYTES`] for all): when the link to the scheduler fails
/// under it, the unit waits for a local slot or for the link to come back,
/// whichever is first, and goes remote again in the second case. After a
/// partition the farm then takes the units given up on during it (the
/// scheduler may even have their results in its cache: their agents went
/// on), instead of this machine's few slots working through all of them.
struct Again {
    toolchain: Arc<Toolchain>,
    text: Bytes,
    cacheable: bool,
    listed: Option<Vec<Vec<u8>>>,
}

/// The most text kept for compiles to go remote again ([`Again`]): beyond
/// it, a unit whose link fails waits for a local slot only. 64 MiB holds
/// the texts of `make -j64`'s units of up to 1 MiB each; the texts are
/// otherwise dropped once compressed, so this is what a consumerd may hold
/// more while its units compile remotely.
const KEPT_TEXT_BYTES: usize = 64 << 20;

/// Lets go of a connection's kept text, if any, in the count of kept bytes.
fn let_go(kept_bytes: &mut usize, again: Option<Again>) {
    if let Some(kept) = again {
        *kept_bytes -= kept.text.len();
    }
}

/// Owns the connections' states and drives them.
pub(super) struct Dispatcher {
    remote: Arc<dyn Remote>,
    ipc: IpcHandle,
    slots: Slots,
    conns: HashMap<ConnId, Conn>,
    toolchains: Arc<ToolchainMemo>,
    work: JoinSet<Done>,
    work_owner: HashMap<tokio::task::Id, (ConnId, WorkKind)>,
    stats: Arc<Stats>,
    deadlines: Deadlines,
    direct: Option<Arc<DirectCache>>,
    /// Connections of builds (`ccroute make`) told the jobserver size at each change.
    jobserver_builds: std::collections::HashSet<ConnId>,
    /// Wrappers told to preprocess that have not sent their text yet.
    preprocessing: std::collections::HashSet<ConnId>,
    /// Granted a remote slot, in line to preprocess (a connection that
    /// left or moved on meanwhile is passed over).
    to_preprocess: std::collections::VecDeque<ConnId>,
    /// At most this many in `preprocessing`.
    preprocess_slots: usize,
    /// Units that went remote and were compiled here instead, said at most
    /// once a minute with how many and the last reason: the build goes on,
    /// but an operator should learn that the farm gave units back (an agent
    /// that fails them, a link that drops, deadlines).
    fallbacks: crate::said::Every,
    /// Bytes of text in the connections' [`Again`]s.
    kept_bytes: usize,
}

/// How long a remote compile may take before it is given up and the unit
/// compiles here: from its expected cost, learnt from this consumerd's own
/// remote compiles (seconds per byte of text), with a floor (a slow agent or
/// a busy link is no reason to give up) and a cap.
#[derive(Debug, Clone)]
pub(super) struct Deadlines {
    floor: Duration,
    cap: Duration,
    /// Seconds per byte of text, a moving average of finished remote compiles.
    rate: f64,
}

impl Deadlines {
    /// How many times its expected cost a unit may take.
    const SLACK: f64 = 10.0;
    /// What a unit is expected to cost before any was measured: 1 s per MiB
    /// of preprocessed text (a large C file here takes about 0.5 s per MiB).
    const FIRST_RATE: f64 = 1.0 / (1u64 << 20) as f64;

    pub(super) fn new(floor: Duration, cap: Duration) -> Deadlines {
        Deadlines { floor: floor.min(cap), cap, rate: Self::FIRST_RATE }
    }

    /// The deadline for a unit of `bytes` of text.
    pub(super) fn for_unit(&self, bytes: usize) -> Duration {
        let expected = Duration::try_from_secs_f64(self.rate * bytes as f64 * Self::SLACK).unwrap_or(self.cap);
        expected.clamp(self.floor, self.cap)
    }

    /// A remote compile of `bytes` took `took`.
    pub(super) fn observe(&mut self, bytes: usize, took: Duration) {
        if bytes == 0 {
            return;
        }
        let rate = took.as_secs_f64() / bytes as f64;
        self.rate = 0.9 * self.rate + 0.1 * rate;
    }
}

impl Dispatcher {
    pub(super) fn new(
        config: &Config,
        remote: Arc<dyn Remote>,
        ipc: IpcHandle,
        stats: Arc<Stats>,
        direct: Option<Arc<DirectCache>>,
    ) -> Dispatcher {
        Dispatcher {
            remote,
            ipc,
            slots: Slots::new(config.local_slots, 0)
                .prefer_remote(config.prefer_remote)
                .remote_only(config.remote_only),
            conns: HashMap::new(),
            toolchains: Arc::new(ToolchainMemo::new()),
            work: JoinSet::new(),
            work_owner: HashMap::new(),
            stats,
            deadlines: Deadlines::new(config.remote_deadline_floor, config.remote_timeout),
            direct,
            jobserver_builds: std::collections::HashSet::new(),
            preprocessing: std::collections::HashSet::new(),
            to_preprocess: std::collections::VecDeque::new(),
            preprocess_slots: config.preprocess_slots.max(1) as usize,
            fallbacks: crate::said::Every::new(crate::said::A_MINUTE),
            kept_bytes: 0,
        }
    }

    /// Serves until `shutdown`, idleness or the end of the socket thread.
    pub(super) async fn run(
        mut self,
        inbound: flume::Receiver<(ConnId, IpcEvent)>,
        mut window: watch::Receiver<u32>,
        idle_exit: Duration,
        shutdown: impl Future<Output = ()>,
    ) -> Ended {
        tokio::pin!(shutdown);
        self.set_window(*window.borrow_and_update());
        let mut window_open = true;
        let mut idle_deadline = Instant::now() + idle_exit;
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut persist = tokio::time::interval(PERSIST_EVERY);
        persist.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Freed memory goes back to the system once a build is over.
        let mut trim = crate::memory::IdleTrim::new();
        let mut events: u64 = 0;
        let ended = loop {
            // A build through the jobserver counts as a connection.
            let idle = !idle_exit.is_zero() && self.conns.is_empty() && self.jobserver_builds.is_empty();
            tokio::select! {
                () = &mut shutdown => break Ended::Shutdown,
                msg = inbound.recv_async() => match msg {
                    Ok((conn, msg)) => {
                        self.on_inbound(conn, msg);
                        events += 1;
                        idle_deadline = Instant::now() + idle_exit;
                    }
                    Err(_) => break Ended::SocketClosed,
                },
                changed = window.changed(), if window_open => {
                    let w = match changed {
                        Ok(()) => *window.borrow_and_update(),
                        Err(_) => {
                            window_open = false;
                            0
                        }
                    };
                    debug!(window = w, "remote window changed");
                    self.set_window(w);
                }
                Some(done) = self.work.join_next_with_id(), if !self.work.is_empty() => self.on_done(done),
                _ = heartbeat.tick() => {
                    self.heartbeat();
                    let busy = (self.conns.len() + self.work.len()) as u64;
                    if trim.observe(std::time::Instant::now(), events, busy) {
                        drop(tokio::task::spawn_blocking(crate::memory::release_free_memory));
                    }
                }
                _ = persist.tick(), if self.direct.is_some() => {
                    if let Some(d) = self.direct.clone() {
                        drop(tokio::task::spawn_blocking(move || d.persist()));
                    }
                }
                () = tokio::time::sleep_until(idle_deadline), if idle => break Ended::Idle,
            }
            self.pump();
        };
        // Dropping the work cancels remote compiles; dropping the handle
        // closes every connection, and each wrapper compiles locally.
        self.work.abort_all();
        let ipc = self.ipc;
        let _ = tokio::task::spawn_blocking(move || ipc.shutdown()).await;
        if let Some(d) = self.direct {
            let _ = tokio::task::spawn_blocking(move || d.persist()).await;
        }
        ended
    }

    fn on_inbound(&mut self, id: ConnId, msg: IpcEvent) {
        let frame = match msg {
            IpcEvent::Closed => return self.forget(id),
            IpcEvent::Message(frame) => frame,
        };
        let Some(conn) = self.conns.get_mut(&id) else {
            return match frame.message {
                WrapperMsg::Job(job) => self.on_job(id, job),
                WrapperMsg::Query(q) => self.on_query(id, q),
                other => self.violation(id, &format!("{} before a job", name(&other))),
            };
        };
        match (frame.message, &mut conn.state) {
            (WrapperMsg::Abandon { reason }, ConnState::Preprocessing { .. } | ConnState::Granted) => {
                debug!(conn = %id, pid = conn.pid, %reason, "wrapper abandoned remote");
                self.fall_back(id, reason, Want::LocalOnly);
            }
            (WrapperMsg::Source(header), ConnState::Preprocessing { source, .. }) if source.is_none() => {
                *source = Some((frame.payload, header.cacheable));
                self.preprocessed(id);
                let Some(conn) = self.conns.get_mut(&id) else { return };
                if conn.inputs_args.is_some() {
                    conn.listed = Some(header.files.clone());
                }
                if let Some(why) = header.text_refused {
                    conn.text_refused.get_or_insert(why);
                }
                if conn.probe.is_some() {
                    // The dependency file is read now, while the wrapper
                    // waits: once it exits, the build may move it.
                    let dep = conn.direct.as_ref().and_then(|d| d.dep_file.clone());
                    match dep.map(|p| std::fs::read(OsStr::from_bytes(&p))).transpose() {
                        Ok(deps) => conn.read = Some((header.files, deps.map(Bytes::from).unwrap_or_default())),
                        Err(_) => conn.probe = None,
                    }
                }
                self.try_compile(id);
            }
            (WrapperMsg::Record(header), ConnState::Local) if conn.probe.is_some() => {
                let (Some(probe), Some(job), Some(cache)) =
                    (conn.probe.take(), conn.direct.clone(), self.direct.clone())
                else {
                    return;
                };
                let Some(parts) = split_four(&header.lens, frame.payload) else {
                    return self.violation(id, "a record whose payload does not match its header");
                };
                let compiler = conn.compiler.clone();
                drop(tokio::task::spawn_blocking(move || {
                    if header.user_only {
                        cache.record_later(&compiler, probe, job, header.files, parts);
                    } else {
                        record(&cache, &compiler, &probe, &job, &header.files, parts);
                    }
                }));
            }
            (other, _) => self.violation(id, &format!("unexpected {}", name(&other))),
        }
    }

    /// The remote window moved: slots follow, and builds' jobservers are told.
    fn set_window(&mut self, window: u32) {
        let moved = window != self.slots.counts().window;
        self.slots.set_window(window);
        if moved {
            self.tell_builds();
        }
    }

    /// What a build's jobserver should hold now: its part of the local
    /// slots and of the window, shared evenly among the builds that follow
    /// the size (rounded up: the slots still bound what runs).
    fn jobserver_size(&self) -> JobserverSize {
        let n = self.slots.counts();
        let builds = u32::try_from(self.jobserver_builds.len()).unwrap_or(u32::MAX).max(1);
        JobserverSize { local: n.local_capacity.div_ceil(builds), window: n.window.div_ceil(builds) }
    }

    /// Tells every build following the jobserver size what it is now.
    fn tell_builds(&self) {
        let size = self.jobserver_size();
        for id in &self.jobserver_builds {
            self.ipc.send(*id, Outbound::Message(ConsumerdMsg::Jobserver(size), vec![]));
        }
    }

    fn on_query(&mut self, id: ConnId, q: Query) {
        if q == Query::Jobserver {
            // Every build's part shrinks with one more: each is told, this one too.
            self.jobserver_builds.insert(id);
            let size = self.jobserver_size();
            debug!(conn = %id, ?size, builds = self.jobserver_builds.len(), "a build follows the jobserver size");
            return self.tell_builds();
        }
        let Some(cache) = self.direct.clone() else {
            let report = ccroute_wire::local::CacheReport { counters: self.counters(), ..Default::default() };
            self.ipc.send(id, Outbound::Message(ConsumerdMsg::Report(report), vec![]));
            return self.ipc.send(id, Outbound::Close);
        };
        let counters = self.counters();
        let ipc = self.ipc.sender();
        drop(tokio::task::spawn_blocking(move || {
            if q == Query::Clear {
                cache.clear();
            }
            let mut report = cache.report();
            report.counters.extend(counters);
            ipc.send(id, Outbound::Message(ConsumerdMsg::Report(report), vec![]));
            ipc.send(id, Outbound::Close);
        }));
    }

    /// The dispatcher's own counters, for a report.
    fn counters(&self) -> Vec<(String, u64)> {
        let s = self.stats.snapshot();
        vec![
            ("preprocessed_hit".into(), s.preprocessed_hits),
            ("remote".into(), s.remote),
            ("local".into(), s.local),
            ("fallback".into(), s.fallbacks),
            ("remote_inputs".into(), s.remote_inputs),
            ("remote_text".into(), s.remote_text),
            ("inputs_task_bytes".into(), s.inputs_task_bytes),
            ("inputs_blob_bytes".into(), s.inputs_blob_bytes),
            ("text_task_bytes".into(), s.text_task_bytes),
            ("stray_results".into(), s.stray_results),
        ]
        .into_iter()
        .chain(self.stats.text_reasons().into_iter().map(|(why, n)| (format!("text_because: {why}"), n)))
        .collect()
    }

    fn on_job(&mut self, id: ConnId, job: Job) {
        let compiler = PathBuf::from(OsStr::from_bytes(&job.compiler));
        let want = if job.version != LOCAL_PROTOCOL_VERSION {
            warn!(conn = %id, wrapper = job.version, consumerd = LOCAL_PROTOCOL_VERSION, "wrapper speaks another protocol version; compiling locally");
            Want::LocalOnly
        } else if !compiler.is_absolute() {
            Want::LocalOnly
        } else {
            Want::Any
        };
        debug!(conn = %id, pid = job.pid, input = %job.spec.input_path, "job");
        let same_protocol = job.version == LOCAL_PROTOCOL_VERSION;
        let direct = job.direct.filter(|_| want == Want::Any && self.direct.is_some()).map(Arc::new);
        let inputs_args = job.inputs_args.filter(|_| direct.is_some());
        // Text would not compile as the source does: remote only as inputs.
        let text_refused = job.text_refused.filter(|_| same_protocol);
        let stay_local = match &text_refused {
            Some(why) if inputs_args.is_none() => Some(why.clone()),
            _ => None,
        };
        let want = if stay_local.is_some() { Want::LocalOnly } else { want };
        let state = if direct.is_some() { ConnState::Looking } else { ConnState::Queued };
        let lookup = self.direct.clone().zip(direct.clone()).map(|(cache, job)| (cache, job, compiler.clone()));
        let conn = Conn {
            same_protocol,
            compiler,
            spec: job.spec,
            pid: job.pid,
            state,
            direct,
            probe: None,
            read: None,
            want,
            stay_local,
            inputs_args,
            text_refused,
            listed: None,
            again: None,
            went_again: false,
        };
        self.conns.insert(id, conn);
        let Some((cache, job, compiler)) = lookup else {
            return self.queue(id);
        };
        let toolchains = self.toolchains.clone();
        let task = self.work.spawn_blocking(move || {
            Done::Lookup(match toolchains.get(&compiler) {
                Ok(t) => cache.lookup(&identity(&t), &compiler, &job),
                Err(_) => Lookup::Refused("the compiler's identity is unknown"),
            })
        });
        self.work_owner.insert(task.id(), (id, WorkKind::Lookup));
    }

    /// Puts a connection in line for a slot; one that stays local without a
    /// slot is told to compile at once.
    fn queue(&mut self, id: ConnId) {
        let Some(conn) = self.conns.get_mut(&id) else { return };
        conn.state = ConnState::Queued;
        if let Some(reason) = conn.stay_local.clone() {
            conn.state = ConnState::Local;
            bump(&self.stats.local);
            let record = conn.probe.is_some();
            self.ipc.send(id, Outbound::Message(ConsumerdMsg::RunLocally { reason, record }, vec![]));
            return;
        }
        self.slots.request(id, conn.want);
    }

    /// Hands out every slot that can be handed out.
    fn pump(&mut self) {
        let mut grants = Vec::new();
        let mut again = Vec::new();
        self.slots.grant(&mut grants);
        for (id, grant) in grants {
            let Some(conn) = self.conns.get_mut(&id) else {
                // Cannot happen: a connection leaves the slots when it is forgotten.
                self.slots.release(id);
                continue;
            };
            match grant {
                Grant::Local => {
                    let_go(&mut self.kept_bytes, conn.again.take());
                    let record = conn.probe.is_some();
                    let reason = match std::mem::replace(&mut conn.state, ConnState::Local) {
                        ConnState::FallingBack { reason } => {
                            bump(&self.stats.fallbacks);
                            reason
                        }
                        _ => {
                            bump(&self.stats.local);
                            "a local slot is free".to_owned()
                        }
                    };
                    self.ipc.send(id, Outbound::Message(ConsumerdMsg::RunLocally { reason, record }, vec![]));
                }
                Grant::Remote => match (conn.again.take(), &conn.state) {
                    (Some(kept), ConnState::FallingBack { reason }) => {
                        self.kept_bytes -= kept.text.len();
                        debug!(conn = %id, pid = conn.pid, %reason, "the link is back: remote again");
                        conn.went_again = true;
                        conn.listed = kept.listed;
                        let source = Some((kept.text, kept.cacheable));
                        conn.state = ConnState::Preprocessing { lookup: IdentityLookup::Ready(kept.toolchain), source };
                        again.push(id);
                    }
                    (kept, _) => {
                        let_go(&mut self.kept_bytes, kept);
                        conn.state = ConnState::Granted;
                        self.to_preprocess.push_back(id);
                    }
                },
            }
        }
        for id in again {
            self.try_compile(id);
        }
        self.start_preprocessing();
        self.publish();
    }

    /// Tells wrappers in line to preprocess, while fewer than
    /// `preprocess_slots` do.
    fn start_preprocessing(&mut self) {
        while self.preprocessing.len() < self.preprocess_slots {
            let Some(id) = self.to_preprocess.pop_front() else { return };
            let Some(conn) = self.conns.get_mut(&id) else { continue };
            if !matches!(conn.state, ConnState::Granted) {
                continue;
            }
            conn.state = ConnState::Preprocessing { lookup: IdentityLookup::Pending, source: None };
            self.preprocessing.insert(id);
            self.ipc.send(id, Outbound::Message(ConsumerdMsg::Preprocess, vec![]));
            let cache = self.toolchains.clone();
            let compiler = conn.compiler.clone();
            let task = self.work.spawn_blocking(move || {
                Done::Toolchain(cache.get(&compiler).map_err(|e| format!("compiler identity: {e}")))
            });
            self.work_owner.insert(task.id(), (id, WorkKind::Toolchain));
        }
    }

    /// `id` no longer preprocesses (its text came, it gave up, it left):
    /// the next in line may.
    fn preprocessed(&mut self, id: ConnId) {
        if self.preprocessing.remove(&id) {
            self.start_preprocessing();
        }
    }

    /// Starts the remote compile once both the text and the identity are there.
    fn try_compile(&mut self, id: ConnId) {
        let Some(conn) = self.conns.get_mut(&id) else { return };
        let ConnState::Preprocessing { lookup, source } = &mut conn.state else { return };
        let toolchain = match lookup {
            IdentityLookup::Pending => return,
            IdentityLookup::Failed(reason) => {
                let reason = std::mem::take(reason);
                return self.fall_back(id, reason, Want::LocalOnly);
            }
            IdentityLookup::Ready(t) => t.clone(),
        };
        let Some((text, cacheable)) = source.take() else { return };
        let package = self.toolchains.package(toolchain.key());
        let plan = match (&conn.inputs_args, &conn.direct, &self.direct, conn.listed.take()) {
            (Some(args), Some(job), Some(cache), Some(listed)) => {
                Ok((args.clone(), job.clone(), cache.clone(), listed, conn.compiler.clone()))
            }
            (None, ..) => Err("the command cannot be sent as its inputs"),
            _ => Err("no direct-mode cache to vouch for its inputs"),
        };
        let text_allowed = conn.text_refused.is_none();
        if !conn.went_again && self.kept_bytes + text.len() <= KEPT_TEXT_BYTES {
            self.kept_bytes += text.len();
            let listed = plan.as_ref().ok().map(|p| p.3.clone());
            conn.again = Some(Again { toolchain: toolchain.clone(), text: text.clone(), cacheable, listed });
        }
        let job = RemoteJob {
            compiler: conn.compiler.clone(),
            toolchain,
            package,
            spec: conn.spec.clone(),
            text,
            cacheable,
            inputs: None,
        };
        let bytes = job.text.len();
        let remote = self.remote.clone();
        let limit = self.deadlines.for_unit(bytes);
        let task = self.work.spawn(async move {
            let mut job = job;
            let inputs = match plan {
                Ok((args, direct, cache, listed, compiler)) => {
                    let (spec, key) = (job.spec.clone(), job.toolchain.key());
                    tokio::task::spawn_blocking(move || {
                        inputs_job(&cache, &compiler, &direct, &listed, &spec, args, key, text_allowed)
                    })
                    .await
                    .unwrap_or(Err("building its inputs failed"))
                }
                Err(why) => Err(why),
            };
            let refused = match inputs {
                Ok(inputs) => {
                    job.inputs = Some(inputs);
                    None
                }
                Err(why) if text_allowed => Some(why),
                Err(why) => {
                    return Done::Remote(Err(RemoteError::Agent(format!("only its inputs may go remote: {why}"))))
                }
            };
            // Past the deadline the compile's future is dropped, which
            // cancels the task at the scheduler (its agent's compiler is
            // killed); the unit then compiles here, so exactly one result
            // reaches the wrapper.
            let result = match tokio::time::timeout(limit, remote.compile(job)).await {
                Ok(r) => r,
                Err(_) => Err(RemoteError::Deadline(limit)),
            };
            Done::Remote(result.map(|c| Compiled { text_because: c.text_because.or(refused), ..c }))
        });
        self.work_owner.insert(task.id(), (id, WorkKind::Remote));
        conn.state = ConnState::Compiling { task, started: Instant::now(), bytes };
    }

    /// Tells every wrapper that waits on this consumerd that it is still at work.
    fn heartbeat(&self) {
        // A build following the jobserver size learns this way that the consumerd still runs.
        for id in &self.jobserver_builds {
            self.ipc.send(*id, Outbound::Message(ConsumerdMsg::Waiting, vec![]));
        }
        for (id, conn) in &self.conns {
            let waiting = matches!(
                conn.state,
                ConnState::Looking
                    | ConnState::Queued
                    | ConnState::Granted
                    | ConnState::Preprocessing { .. }
                    | ConnState::Compiling { .. }
                    | ConnState::FallingBack { .. }
            );
            if waiting && conn.same_protocol {
                self.ipc.send(*id, Outbound::Message(ConsumerdMsg::Waiting, vec![]));
            }
        }
    }

    fn on_done(&mut self, done: Result<(tokio::task::Id, Done), JoinError>) {
        let (task, done) = match done {
            Ok((task, done)) => (task, Ok(done)),
            Err(e) => (e.id(), Err(e)),
        };
        let Some((id, kind)) = self.work_owner.remove(&task) else { return };
        let done = match done {
            Ok(d) => d,
            Err(e) if e.is_cancelled() => return,
            Err(e) => {
                warn!(conn = %id, error = %e, "background work failed");
                match kind {
                    WorkKind::Toolchain => Done::Toolchain(Err("the compiler identity lookup failed".into())),
                    WorkKind::Remote => Done::Remote(Err(RemoteError::Failed)),
                    WorkKind::Lookup => Done::Lookup(Lookup::Refused("the lookup failed")),
                }
            }
        };
        let Some(conn) = self.conns.get_mut(&id) else { return };
        match (done, &mut conn.state) {
            (Done::Lookup(found), ConnState::Looking) => match found {
                Lookup::Hit(parts) => {
                    conn.state = ConnState::Answered;
                    bump(&self.stats.direct_hits);
                    debug!(conn = %id, pid = conn.pid, "direct-mode hit");
                    let lens = parts.each_ref().map(|p| p.len() as u64);
                    self.ipc.send(id, Outbound::Message(ConsumerdMsg::Hit { lens }, parts.into()));
                }
                Lookup::Miss(probe) => {
                    conn.probe = Some(probe);
                    self.queue(id);
                }
                Lookup::Refused(why) => {
                    debug!(conn = %id, pid = conn.pid, why, "direct mode does not apply");
                    self.queue(id);
                }
            },
            (Done::Toolchain(result), ConnState::Preprocessing { lookup, .. }) => {
                *lookup = match result {
                    Ok(t) => IdentityLookup::Ready(t),
                    Err(reason) => IdentityLookup::Failed(reason),
                };
                self.try_compile(id);
            }
            (Done::Remote(Ok(compiled)), ConnState::Compiling { started, bytes, .. }) => {
                self.deadlines.observe(*bytes, started.elapsed());
                conn.state = ConnState::Answered;
                let_go(&mut self.kept_bytes, conn.again.take());
                self.slots.finish_remote(id);
                bump(&self.stats.remote);
                if compiled.cached {
                    bump(&self.stats.preprocessed_hits);
                }
                if compiled.from_inputs {
                    bump(&self.stats.remote_inputs);
                } else {
                    bump(&self.stats.remote_text);
                    self.stats.text_because(compiled.text_because.unwrap_or("not sent as inputs"));
                }
                let from_inputs = compiled.from_inputs;
                let (status, parts) = (compiled.exit_status, compiled.parts);
                if let (0, Some(probe), Some(job), Some((listed, deps)), Some(cache)) =
                    (status, conn.probe.take(), conn.direct.clone(), conn.read.take(), self.direct.clone())
                {
                    let compiler = conn.compiler.clone();
                    let parts = [parts.stdout.clone(), parts.stderr.clone(), parts.object.clone(), deps];
                    drop(tokio::task::spawn_blocking(move || record(&cache, &compiler, &probe, &job, &listed, parts)));
                }
                let header = CompiledHeader { from_inputs, ..CompiledHeader::of(status, &parts) };
                debug!(conn = %id, pid = conn.pid, status, from_inputs, "remote result");
                let payload = vec![parts.stdout, parts.stderr, parts.object];
                self.ipc.send(id, Outbound::Message(ConsumerdMsg::Compiled(header), payload));
            }
            (Done::Remote(Err(reason)), ConnState::Compiling { started, bytes, .. }) => {
                if matches!(reason, RemoteError::Deadline(_)) {
                    // It took at least this long: the estimate must not only ever fall.
                    self.deadlines.observe(*bytes, started.elapsed());
                }
                let again = reason.is_the_links() && conn.again.is_some();
                debug!(conn = %id, pid = conn.pid, %reason, again, "remote compile failed; falling back");
                if let Some(units) = self.fallbacks.due() {
                    warn!(
                        units,
                        last_reason = %reason,
                        "units that went remote are compiled here instead, or once the link to the scheduler is \
                         back if it comes back first (said at most once a minute; `ccroute stats` counts those \
                         compiled here as fallbacks)"
                    );
                }
                if !again {
                    let_go(&mut self.kept_bytes, conn.again.take());
                }
                let reason = match &conn.text_refused {
                    // Why it could not go as text, then why not as inputs.
                    Some(text) => format!("{text}; {reason}"),
                    None => reason.to_string(),
                };
                // With its text kept: a local slot, or the link back, whichever is first.
                self.fall_back(id, reason, if again { Want::Any } else { Want::LocalOnly });
            }
            // A result for a state that moved on (e.g. an abandoned job's lookup).
            _ => {}
        }
    }

    /// Gives the remote slot back and waits for a local one (or, `Want::Any`,
    /// a remote one again).
    fn fall_back(&mut self, id: ConnId, reason: String, want: Want) {
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.state = ConnState::FallingBack { reason };
            self.slots.fall_back(id, want);
        }
        self.preprocessed(id);
    }

    fn violation(&mut self, id: ConnId, what: &str) {
        warn!(conn = %id, what, "protocol violation; closing the connection");
        self.ipc.send(id, Outbound::Close);
        self.forget(id);
    }

    /// The connection is gone: release its slot and cancel its work.
    fn forget(&mut self, id: ConnId) {
        if self.jobserver_builds.remove(&id) {
            // The builds left have its part back.
            self.tell_builds();
        }
        if let Some(conn) = self.conns.remove(&id) {
            let_go(&mut self.kept_bytes, conn.again);
            if let ConnState::Compiling { task, .. } = conn.state {
                task.abort();
            }
            debug!(conn = %id, pid = conn.pid, "connection closed");
        }
        self.slots.release(id);
        self.preprocessed(id);
    }

    fn publish(&self) {
        let n = self.slots.counts();
        // Relaxed: display counters written by this task alone.
        let set = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        set(&self.stats.in_flight, self.conns.len() as u64);
        set(&self.stats.local_running, u64::from(n.local_used));
        set(&self.stats.remote_running, u64::from(n.remote_used));
        set(&self.stats.waiting, n.waiting as u64);
        self.stats.peak_local.fetch_max(u64::from(n.local_used), Ordering::Relaxed);
        self.stats.peak_remote.fetch_max(u64::from(n.remote_used), Ordering::Relaxed);
    }
}

/// What tells toolchains apart in a manifest key: the route key and the
/// binaries' digest.
fn identity(t: &Toolchain) -> Vec<u8> {
    let mut v = t.key().0.to_le_bytes().to_vec();
    v.extend_from_slice(&t.binary_hash);
    v
}

/// Most bytes of an encoded inputs spec: a task header must stay within a frame.
const MAX_INPUTS_SPEC: usize = 768 << 10;

/// The unit `direct` as its inputs (on a blocking thread): `text` is the
/// spec of its text, `args` the agent's arguments for the inputs, `toolchain`
/// the route key of the compiler itself.
#[allow(clippy::too_many_arguments)]
fn inputs_job(
    cache: &DirectCache,
    compiler: &std::path::Path,
    direct: &DirectJob,
    listed: &[Vec<u8>],
    text: &TaskSpec,
    args: Vec<String>,
    toolchain: ccroute_wire::ToolchainKey,
    text_allowed: bool,
) -> Result<InputsJob, &'static str> {
    let unit = cache.inputs_of(compiler, direct, listed, &text.env)?;
    let cwd = std::str::from_utf8(&direct.cwd).map_err(|_| "the working directory is not UTF-8")?;
    let mut env = text.env.clone();
    for (k, v) in &direct.env {
        if crate::cc::plan::INCLUDE_ENV.contains(&k.as_str()) {
            let v = std::str::from_utf8(v).map_err(|_| "an include-path variable is not UTF-8")?;
            env.push((k.clone(), v.to_owned()));
        }
    }
    let spec = TaskSpec {
        args,
        input_path: text.input_path.clone(),
        cwd: Some(cwd.trim_end_matches('/').to_owned()).filter(|c| !c.is_empty()).or(Some("/".into())),
        env,
        inputs: Some(ccroute_wire::Inputs {
            toolchain,
            driver: compiler.to_str().ok_or("the compiler's path is not UTF-8")?.to_owned(),
            files: unit.files,
            dirs: unit.dirs,
        }),
    };
    if let Some(Err(e)) = spec.inputs.as_ref().map(ccroute_wire::Inputs::validate) {
        debug!(error = %e, "inputs not sent");
        return Err("its inputs are not a list an agent accepts");
    }
    if ccroute_wire::codec::encode_spec(&spec).len() > MAX_INPUTS_SPEC {
        return Err("its list of inputs is larger than a task header");
    }
    Ok(InputsJob { spec, sources: Arc::new(unit.sources), text_allowed })
}

/// Records a compile in the direct-mode cache (on a blocking thread).
fn record(
    cache: &DirectCache,
    compiler: &std::path::Path,
    probe: &Probe,
    job: &DirectJob,
    listed: &[Vec<u8>],
    parts: [Bytes; 4],
) {
    let system = cache.system_dirs(compiler, job.cxx);
    if let Err(why) = cache.record(probe, job, listed, parts, &system) {
        debug!(why, "not recorded");
    }
}

fn bump(counter: &AtomicU64) {
    // Relaxed: a display counter.
    counter.fetch_add(1, Ordering::Relaxed);
}

fn name(msg: &WrapperMsg) -> &'static str {
    match msg {
        WrapperMsg::Job(_) => "job",
        WrapperMsg::Abandon { .. } => "abandon",
        WrapperMsg::Source(_) => "source",
        WrapperMsg::Record(_) => "record",
        WrapperMsg::Query(_) => "query",
    }
}

#[cfg(test)]
mod deadline_tests {
    use super::*;

    #[test]
    fn deadlines_follow_what_units_cost_within_floor_and_cap() {
        let mut d = Deadlines::new(Duration::from_secs(30), Duration::from_secs(600));
        // Before any measurement: 1 s per MiB, ten times over, at least the floor.
        assert_eq!(d.for_unit(1 << 10), Duration::from_secs(30));
        assert_eq!(d.for_unit(100 << 20), Duration::from_secs(600), "capped");
        // Slow units (40 s for 100 KiB: heavy templates) raise the estimate past the floor.
        for _ in 0..60 {
            d.observe(100 << 10, Duration::from_secs(40));
        }
        let slow = d.for_unit(100 << 10);
        assert!(slow > Duration::from_secs(300) && slow <= Duration::from_secs(600), "{slow:?}");
        // Fast ones bring it down again, never under the floor.
        for _ in 0..200 {
            d.observe(100 << 10, Duration::from_millis(1));
        }
        assert_eq!(d.for_unit(100 << 10), Duration::from_secs(30));
        // A floor above the cap is the cap.
        assert_eq!(Deadlines::new(Duration::from_secs(9), Duration::from_secs(2)).for_unit(1), Duration::from_secs(2));
    }
}
