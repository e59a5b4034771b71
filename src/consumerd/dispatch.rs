//! The tokio side of the consumerd's local half: one task that owns every
//! connection's state, the [`Slots`], and the remote compiles in flight.
//!
//! Per connection: `Job` → waits in line → `RunLocally` (holds a local slot
//! until the connection closes) or `Preprocess` (holds a remote slot; the
//! compiler's identity is looked up meanwhile) → `Source` → remote compile →
//! `Compiled`. `Abandon`, a failed identity lookup or a failed remote compile
//! give the remote slot back and wait for a local one (`RunLocally`). A
//! connection that closes gives up whatever it held and cancels its remote
//! compile. Anything out of order closes the connection; its wrapper then
//! compiles locally.
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
use ccroute_wire::local::{CompiledHeader, ConsumerdMsg, Job, WrapperMsg, HEARTBEAT, LOCAL_PROTOCOL_VERSION};
use ccroute_wire::{TaskSpec, Toolchain};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinError, JoinSet};
use tokio::time::Instant;
use tracing::{debug, warn};

use super::ipc::{ConnId, IpcEvent, IpcHandle, Outbound};
use super::slots::{Grant, Slots, Want};
use super::{Compiled, Config, Ended, Remote, RemoteError, RemoteJob, Stats};
use crate::toolchain::ToolchainMemo;

/// The outcome of background work for a connection.
enum Done {
    Toolchain(Result<Arc<Toolchain>, String>),
    Remote(Result<Compiled, RemoteError>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WorkKind {
    Toolchain,
    Remote,
}

enum IdentityLookup {
    Pending,
    Ready(Arc<Toolchain>),
    Failed(String),
}

enum ConnState {
    /// In line for a first grant.
    Queued,
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
    pub(super) fn new(config: &Config, remote: Arc<dyn Remote>, ipc: IpcHandle, stats: Arc<Stats>) -> Dispatcher {
        Dispatcher {
            remote,
            ipc,
            slots: Slots::new(config.local_slots, 0).prefer_remote(config.prefer_remote),
            conns: HashMap::new(),
            toolchains: Arc::new(ToolchainMemo::new()),
            work: JoinSet::new(),
            work_owner: HashMap::new(),
            stats,
            deadlines: Deadlines::new(config.remote_deadline_floor, config.remote_timeout),
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
        self.slots.set_window(*window.borrow_and_update());
        let mut window_open = true;
        let mut idle_deadline = Instant::now() + idle_exit;
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let ended = loop {
            let idle = !idle_exit.is_zero() && self.conns.is_empty();
            tokio::select! {
                () = &mut shutdown => break Ended::Shutdown,
                msg = inbound.recv_async() => match msg {
                    Ok((conn, msg)) => {
                        self.on_inbound(conn, msg);
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
                    self.slots.set_window(w);
                }
                Some(done) = self.work.join_next_with_id(), if !self.work.is_empty() => self.on_done(done),
                _ = heartbeat.tick() => self.heartbeat(),
                () = tokio::time::sleep_until(idle_deadline), if idle => break Ended::Idle,
            }
            self.pump();
        };
        // Dropping the work cancels remote compiles; dropping the handle
        // closes every connection, and each wrapper compiles locally.
        self.work.abort_all();
        let ipc = self.ipc;
        let _ = tokio::task::spawn_blocking(move || ipc.shutdown()).await;
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
                other => self.violation(id, &format!("{} before a job", name(&other))),
            };
        };
        match (frame.message, &mut conn.state) {
            (WrapperMsg::Abandon { reason }, ConnState::Preprocessing { .. }) => {
                debug!(conn = %id, pid = conn.pid, %reason, "wrapper abandoned remote");
                self.fall_back(id, reason);
            }
            (WrapperMsg::Source(header), ConnState::Preprocessing { source, .. }) if source.is_none() => {
                *source = Some((frame.payload, header.cacheable));
                self.try_compile(id);
            }
            (other, _) => self.violation(id, &format!("unexpected {}", name(&other))),
        }
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
        self.conns.insert(id, Conn { same_protocol, compiler, spec: job.spec, pid: job.pid, state: ConnState::Queued });
        self.slots.request(id, want);
    }

    /// Hands out every slot that can be handed out.
    fn pump(&mut self) {
        let mut grants = Vec::new();
        self.slots.grant(&mut grants);
        for (id, grant) in grants {
            let Some(conn) = self.conns.get_mut(&id) else {
                // Cannot happen: a connection leaves the slots when it is forgotten.
                self.slots.release(id);
                continue;
            };
            match grant {
                Grant::Local => {
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
                    self.ipc.send(id, Outbound::Message(ConsumerdMsg::RunLocally { reason }, vec![]));
                }
                Grant::Remote => {
                    conn.state = ConnState::Preprocessing { lookup: IdentityLookup::Pending, source: None };
                    self.ipc.send(id, Outbound::Message(ConsumerdMsg::Preprocess, vec![]));
                    let cache = self.toolchains.clone();
                    let compiler = conn.compiler.clone();
                    let task = self.work.spawn_blocking(move || {
                        Done::Toolchain(cache.get(&compiler).map_err(|e| format!("compiler identity: {e}")))
                    });
                    self.work_owner.insert(task.id(), (id, WorkKind::Toolchain));
                }
            }
        }
        self.publish();
    }

    /// Starts the remote compile once both the text and the identity are there.
    fn try_compile(&mut self, id: ConnId) {
        let Some(conn) = self.conns.get_mut(&id) else { return };
        let ConnState::Preprocessing { lookup, source } = &mut conn.state else { return };
        let toolchain = match lookup {
            IdentityLookup::Pending => return,
            IdentityLookup::Failed(reason) => {
                let reason = std::mem::take(reason);
                return self.fall_back(id, reason);
            }
            IdentityLookup::Ready(t) => t.clone(),
        };
        let Some((text, cacheable)) = source.take() else { return };
        let job = RemoteJob { compiler: conn.compiler.clone(), toolchain, spec: conn.spec.clone(), text, cacheable };
        let bytes = job.text.len();
        let compile = self.remote.compile(job);
        let limit = self.deadlines.for_unit(bytes);
        let task = self.work.spawn(async move {
            // Past the deadline the compile's future is dropped, which
            // cancels the task at the scheduler (its agent's compiler is
            // killed); the unit then compiles here, so exactly one result
            // reaches the wrapper.
            let result = match tokio::time::timeout(limit, compile).await {
                Ok(r) => r,
                Err(_) => Err(RemoteError::Deadline(limit)),
            };
            Done::Remote(result)
        });
        self.work_owner.insert(task.id(), (id, WorkKind::Remote));
        conn.state = ConnState::Compiling { task, started: Instant::now(), bytes };
    }

    /// Tells every wrapper that waits on this consumerd that it is still at work.
    fn heartbeat(&self) {
        for (id, conn) in &self.conns {
            let waiting = matches!(
                conn.state,
                ConnState::Queued
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
                }
            }
        };
        let Some(conn) = self.conns.get_mut(&id) else { return };
        match (done, &mut conn.state) {
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
                self.slots.finish_remote(id);
                bump(&self.stats.remote);
                let (status, parts) = (compiled.exit_status, compiled.parts);
                let header = CompiledHeader::of(status, &parts);
                debug!(conn = %id, pid = conn.pid, status, "remote result");
                let payload = vec![parts.stdout, parts.stderr, parts.object];
                self.ipc.send(id, Outbound::Message(ConsumerdMsg::Compiled(header), payload));
            }
            (Done::Remote(Err(reason)), ConnState::Compiling { started, bytes, .. }) => {
                if matches!(reason, RemoteError::Deadline(_)) {
                    // It took at least this long: the estimate must not only ever fall.
                    self.deadlines.observe(*bytes, started.elapsed());
                }
                debug!(conn = %id, pid = conn.pid, %reason, "remote compile failed; falling back");
                self.fall_back(id, reason.to_string());
            }
            // A result for a state that moved on (e.g. an abandoned job's lookup).
            _ => {}
        }
    }

    /// Gives the remote slot back and waits for a local one.
    fn fall_back(&mut self, id: ConnId, reason: String) {
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.state = ConnState::FallingBack { reason };
            self.slots.fall_back(id);
        }
    }

    fn violation(&mut self, id: ConnId, what: &str) {
        warn!(conn = %id, what, "protocol violation; closing the connection");
        self.ipc.send(id, Outbound::Close);
        self.forget(id);
    }

    /// The connection is gone: release its slot and cancel its work.
    fn forget(&mut self, id: ConnId) {
        if let Some(conn) = self.conns.remove(&id) {
            if let ConnState::Compiling { task, .. } = conn.state {
                task.abort();
            }
            debug!(conn = %id, pid = conn.pid, "connection closed");
        }
        self.slots.release(id);
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

fn bump(counter: &AtomicU64) {
    // Relaxed: a display counter.
    counter.fetch_add(1, Ordering::Relaxed);
}

fn name(msg: &WrapperMsg) -> &'static str {
    match msg {
        WrapperMsg::Job(_) => "job",
        WrapperMsg::Abandon { .. } => "abandon",
        WrapperMsg::Source(_) => "source",
    }
}
