//! The consumerd: one per developer machine or CI runner, started on demand
//! by the wrapper. Its local side arbitrates: each wrapper connection gets a
//! local slot (compile here) or a slot of the remote window (preprocess here,
//! compile on the farm), in arrival order; the wrappers do all file work.
//!
//! - [`ipc`]: the Unix-socket server (mio, its own thread).
//! - [`slots`]: the arbitration, a plain state machine.
//! - `dispatch`: the tokio task that connects the two with the [`Remote`].
//! - [`Remote`]: the boundary to the scheduler side; [`NoRemote`] for a
//!   consumerd without a scheduler (window 0: everything local).
//!
//! - [`link`]: the [`Remote`] that talks to a scheduler over QUIC.
//! - [`direct`]: the direct-mode cache and local tier, consulted before any
//!   slot is taken.
//!
//! Main items: [`Config`], [`Consumerd`] (bind, then serve), [`Remote`],
//! [`RemoteError`], [`RemoteJob`], [`Compiled`], [`Stats`]. Left out: the
//! command line.

pub mod direct;
mod dispatch;
pub mod ipc;
pub mod link;
pub mod metrics;
pub mod slots;
mod supply;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ccroute_wire::local::CompiledParts;
use ccroute_wire::{TaskSpec, Toolchain};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::local_socket::SocketPath;
use ipc::IpcError;

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// How long a consumerd a wrapper started waits without connections before it exits.
pub const SPAWNED_IDLE_EXIT: Duration = Duration::from_secs(600);

/// A compile the local side hands to the remote side.
#[derive(Debug, Clone)]
pub struct RemoteJob {
    /// The compiler the wrapper resolved (absolute).
    pub compiler: PathBuf,
    /// Its identity ([`crate::toolchain::ToolchainMemo`]).
    pub toolchain: Arc<Toolchain>,
    /// Its files, for agents that do not have it installed.
    pub package: Option<Arc<crate::toolchain::Package>>,
    /// What the agent compiles with.
    pub spec: TaskSpec,
    /// The preprocessed text.
    pub text: Bytes,
    /// The result may be cached (no `__DATE__`/`__TIME__`).
    pub cacheable: bool,
    /// The unit as its inputs, sent before (and instead of) the text.
    pub inputs: Option<InputsJob>,
}

/// A unit sent as its inputs ([`ccroute_wire::inputs`]).
#[derive(Debug, Clone)]
pub struct InputsJob {
    /// The spec, its inputs listed.
    pub spec: TaskSpec,
    /// Where each digest can be read again, for the agent's fetch.
    pub sources: Arc<std::collections::HashMap<[u8; 32], PathBuf>>,
    /// Whether the text may go instead when no agent takes the inputs
    /// (no: the text would not compile as the source does).
    pub text_allowed: bool,
}

/// A remote compile's outcome, success or compile error alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compiled {
    /// The compiler's exit status.
    pub exit_status: i32,
    /// Its output (stderr with warnings, as a local compile would print
    /// it) and the object (empty unless `exit_status` is 0).
    pub parts: CompiledParts,
    /// The scheduler's result cache answered it.
    pub cached: bool,
    /// Compiled from the unit's inputs at their real paths.
    pub from_inputs: bool,
    /// Sent as inputs first and then as text: why.
    pub text_because: Option<&'static str>,
}

/// The remote side of a consumerd, as its local side sees it.
pub trait Remote: Send + Sync + 'static {
    /// Compiles remotely; `Err(reason)` means "run it locally". Dropping the
    /// future means the result is no longer wanted (the wrapper went away).
    fn compile(&self, job: RemoteJob) -> BoxFuture<Result<Compiled, RemoteError>>;

    /// The current remote window (the scheduler's preferred remote limit).
    /// Changes are watched; a shrink applies to new grants. A closed channel
    /// counts as a window of 0.
    fn window(&self) -> watch::Receiver<u32>;
}

/// No scheduler: the window stays 0 and every compile runs locally.
#[derive(Debug)]
pub struct NoRemote {
    window: watch::Sender<u32>,
}

impl NoRemote {
    /// A remote side that never takes anything.
    pub fn new() -> NoRemote {
        NoRemote { window: watch::Sender::new(0) }
    }
}

impl Default for NoRemote {
    fn default() -> Self {
        Self::new()
    }
}

impl Remote for NoRemote {
    fn compile(&self, _job: RemoteJob) -> BoxFuture<Result<Compiled, RemoteError>> {
        Box::pin(async { Err(RemoteError::NoScheduler) })
    }

    fn window(&self) -> watch::Receiver<u32> {
        self.window.subscribe()
    }
}

/// Why a remote compile gave no result. Every one means the same to the
/// wrapper — compile here — and its text is the reason it is told.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// No scheduler is configured.
    #[error("no scheduler")]
    NoScheduler,
    /// A scheduler is configured but not connected now.
    #[error("not connected to a scheduler")]
    NotConnected,
    /// The connection broke before the answer came.
    #[error("the scheduler connection was lost")]
    ConnectionLost,
    /// Sending the task failed.
    #[error("sending the task failed: {0}")]
    Send(#[source] crate::net::NetError),
    /// Compressing the text or decompressing the object failed (its worker
    /// thread died).
    #[error("compression failed: {0}")]
    Compress(String),
    /// The object that came back does not decode.
    #[error("bad object: {0}")]
    BadObject(#[source] ccroute_wire::DecodeError),
    /// The agent could not run the compiler.
    #[error("the agent could not compile it: {0}")]
    Agent(String),
    /// The agent running it was lost for good.
    #[error("the agent was lost")]
    AgentLost,
    /// The scheduler sent it back (no agent, over budget, shutting down ...).
    #[error("{0}")]
    SentBack(ccroute_wire::RetryReason),
    /// No result within the unit's deadline; the remote attempt is cancelled.
    #[error("no remote result within its deadline of {0:?}")]
    Deadline(Duration),
    /// The task that waited for the result failed.
    #[error("the remote compile failed")]
    Failed,
}

impl RemoteError {
    /// Whether the link to the scheduler failed (not the unit's agent, its
    /// deadline, or the scheduler's refusal): the link may come back.
    pub fn is_the_links(&self) -> bool {
        matches!(self, RemoteError::NotConnected | RemoteError::ConnectionLost | RemoteError::Send(_))
    }
}

/// The local side's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen.
    pub socket: SocketPath,
    /// Local slots: compiles run on this machine at once (at least 1).
    pub local_slots: u32,
    /// Wrappers told to preprocess at once (at least 1); the others that
    /// hold a remote slot wait their turn. A window of hundreds of remote
    /// slots would otherwise run as many preprocessors here at once.
    pub preprocess_slots: u32,
    /// Exit after this long without connections; zero: never.
    pub idle_exit: Duration,
    /// Wrapper connections open at once; past it a connection is closed at
    /// once and its wrapper compiles locally.
    pub max_connections: usize,
    /// The longest any remote compile may take before it is given up and the
    /// unit compiles here; each unit's own deadline comes from its expected
    /// cost, between `remote_deadline_floor` and this.
    pub remote_timeout: Duration,
    /// The shortest deadline a remote compile gets.
    pub remote_deadline_floor: Duration,
    /// Grant remote slots before local ones.
    pub prefer_remote: bool,
    /// Local slots only for what cannot go remote (while a window is open).
    pub remote_only: bool,
    /// Where the direct-mode cache and local tier live; `None`: no cache here.
    pub cache_dir: Option<PathBuf>,
    /// The local tier's size cap.
    pub cache_max_bytes: u64,
}

impl Config {
    /// Defaults: a local slot per available CPU, two preprocessors per CPU, no idle exit, 4096
    /// connections, remote deadlines between 30 s and 10 minutes, the
    /// direct-mode cache in the user's cache directory (`consumerd/`), 5 GiB.
    pub fn new(socket: SocketPath) -> Config {
        let cpus = crate::host::online_cpus();
        Config {
            socket,
            local_slots: cpus,
            preprocess_slots: cpus.saturating_mul(2).max(2),
            idle_exit: Duration::ZERO,
            max_connections: 4096,
            remote_timeout: Duration::from_secs(600),
            remote_deadline_floor: Duration::from_secs(30),
            prefer_remote: false,
            remote_only: false,
            cache_dir: default_cache_dir(),
            cache_max_bytes: direct::DEFAULT_MAX_BYTES,
        }
    }
}

/// Where a consumerd keeps its direct-mode cache and local tier by default:
/// `consumerd/` in the user's cache directory ([`crate::cache::default_dir`]).
pub fn default_cache_dir() -> Option<PathBuf> {
    crate::cache::default_dir().map(|d| d.join("consumerd"))
}

/// Why the consumerd could not run.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerdError {
    /// The socket could not be set up.
    #[error(transparent)]
    Ipc(#[from] IpcError),
}

/// Why [`Consumerd::serve`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The shutdown future completed.
    Shutdown,
    /// No connections for the configured idle time.
    Idle,
    /// The socket thread stopped.
    SocketClosed,
}

/// Counters of the local side. One writer (the dispatcher); readers may see
/// them a moment late, never torn.
#[derive(Debug, Default)]
pub struct Stats {
    local: AtomicU64,
    remote: AtomicU64,
    fallbacks: AtomicU64,
    in_flight: AtomicU64,
    local_running: AtomicU64,
    remote_running: AtomicU64,
    waiting: AtomicU64,
    peak_local: AtomicU64,
    peak_remote: AtomicU64,
    direct_hits: AtomicU64,
    preprocessed_hits: AtomicU64,
    remote_inputs: AtomicU64,
    remote_text: AtomicU64,
    /// Bytes of task frames sent: units as inputs (their lists), as text.
    inputs_task_bytes: AtomicU64,
    text_task_bytes: AtomicU64,
    /// Bytes of inputs agents fetched from this consumerd, as sent (compressed).
    inputs_blob_bytes: AtomicU64,
    stray_results: AtomicU64,
    text_reasons: std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>>,
}

/// A copy of [`Stats`] at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatsSnapshot {
    /// Compiles told to run locally at once (no remote attempt).
    pub local: u64,
    /// Compiles answered with a remote result.
    pub remote: u64,
    /// Compiles that tried remote and then ran locally.
    pub fallbacks: u64,
    /// Wrapper connections with a job.
    pub in_flight: u64,
    /// Local slots held now.
    pub local_running: u64,
    /// Remote slots held now.
    pub remote_running: u64,
    /// Jobs waiting for a slot now.
    pub waiting: u64,
    /// Most local slots ever held at once.
    pub peak_local: u64,
    /// Most remote slots ever held at once.
    pub peak_remote: u64,
    /// Compiles answered by the direct-mode cache.
    pub direct_hits: u64,
    /// Remote compiles the scheduler's cache answered (after preprocessing here).
    pub preprocessed_hits: u64,
    /// Remote compiles answered from the unit's inputs.
    pub remote_inputs: u64,
    /// Remote compiles answered from its text.
    pub remote_text: u64,
    /// Bytes of tasks sent as inputs (header and list of digests).
    pub inputs_task_bytes: u64,
    /// Bytes of tasks sent as text (header and compressed text).
    pub text_task_bytes: u64,
    /// Bytes of inputs agents fetched (compressed, as sent).
    pub inputs_blob_bytes: u64,
    /// Results from the scheduler for no compile waiting here: given up on
    /// before they came (a wrapper that left, a deadline passed), or
    /// answered twice (which the scheduler never does).
    pub stray_results: u64,
}

impl Stats {
    /// The counters now.
    pub fn snapshot(&self) -> StatsSnapshot {
        // Relaxed: counters for display; nothing is synchronized through them.
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            local: get(&self.local),
            remote: get(&self.remote),
            fallbacks: get(&self.fallbacks),
            in_flight: get(&self.in_flight),
            local_running: get(&self.local_running),
            remote_running: get(&self.remote_running),
            waiting: get(&self.waiting),
            peak_local: get(&self.peak_local),
            peak_remote: get(&self.peak_remote),
            direct_hits: get(&self.direct_hits),
            preprocessed_hits: get(&self.preprocessed_hits),
            remote_inputs: get(&self.remote_inputs),
            remote_text: get(&self.remote_text),
            inputs_task_bytes: get(&self.inputs_task_bytes),
            text_task_bytes: get(&self.text_task_bytes),
            inputs_blob_bytes: get(&self.inputs_blob_bytes),
            stray_results: get(&self.stray_results),
        }
    }

    fn text_because(&self, why: &'static str) {
        *self.text_reasons.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(why).or_default() += 1;
    }

    /// Why units went remote as text rather than as their inputs, with counts.
    pub fn text_reasons(&self) -> Vec<(&'static str, u64)> {
        let reasons = self.text_reasons.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        reasons.iter().map(|(k, v)| (*k, *v)).collect()
    }
}

/// A bound consumerd, ready to serve.
#[derive(Debug)]
pub struct Consumerd {
    config: Config,
    ipc: ipc::IpcHandle,
    inbound: flume::Receiver<(ipc::ConnId, ipc::IpcEvent)>,
    stats: Arc<Stats>,
    direct: Option<Arc<direct::DirectCache>>,
}

impl Consumerd {
    /// Binds the socket and starts the socket thread; wrappers may connect
    /// as soon as this returns (they wait until [`Self::serve`] answers).
    ///
    /// # Errors
    /// [`ConsumerdError::Ipc`], e.g. "a consumerd is already running at PATH".
    pub fn bind(config: Config) -> Result<Consumerd, ConsumerdError> {
        let bound = ipc::bind(&config.socket)?;
        let (ipc, inbound) = ipc::spawn(bound, config.max_connections)?;
        let direct = config.cache_dir.as_deref().and_then(|dir| match direct::DirectCache::open(dir, config.cache_max_bytes) {
            Ok(c) => Some(Arc::new(c)),
            Err(e) => {
                tracing::warn!(error = %e, "no direct-mode cache: every compile preprocesses or compiles (check the directory, or pass --cache-dir)");
                None
            }
        });
        Ok(Consumerd { config, ipc, inbound, stats: Arc::default(), direct })
    }

    /// The socket it listens on.
    pub fn socket_path(&self) -> &Path {
        &self.config.socket.path
    }

    /// Its counters.
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// Serves wrappers until `shutdown` completes or it has been idle for
    /// [`Config::idle_exit`]. Remote compiles in flight are dropped and their
    /// wrappers compile locally.
    pub async fn serve(self, remote: Arc<dyn Remote>, shutdown: CancellationToken) -> Ended {
        let Consumerd { config, ipc, inbound, stats, direct } = self;
        let dispatcher = dispatch::Dispatcher::new(&config, remote.clone(), ipc, stats, direct);
        dispatcher.run(inbound, remote.window(), config.idle_exit, shutdown.cancelled_owned()).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
