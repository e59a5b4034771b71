//! Every message a ccroute connection carries after its handshake.
//!
//! One [`Message`] enum serves every role; a session rejects the variants its
//! role may not send. Two messages carry a payload — a [`TaskHeader`] is
//! followed by the (compressed) preprocessed source, a [`ResultHeader`] by the
//! (compressed) object — and the payload travels as raw bytes after its header
//! frame (see [`crate::frame`]), so that a relay can forward it untouched.
//!
//! Left out on purpose: anything about transport (streams, addresses) and any
//! cryptography; those belong to the daemon.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::toolchain::{Toolchain, ToolchainKey};

/// A message on an established connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Message {
    /// consumerd → scheduler, scheduler → agent: compile this. Payload: source.
    Task(TaskHeader),
    /// agent → scheduler, scheduler → consumerd: the outcome. Payload: object.
    TaskResult(ResultHeader),
    /// consumerd → scheduler, scheduler → agent: the task is no longer wanted.
    Cancel(Cancel),
    /// agent or consumerd → scheduler: the toolchains it has now, replacing the
    /// ones it announced before.
    ToolchainUpdate(ToolchainUpdate),
    /// agent → scheduler: one CPU sample, sent every second.
    CpuSample(CpuSample),
    /// agent → scheduler: its own maximum changed; scheduler → agent: the token
    /// limit the scheduler applies now.
    UsageLimit(UsageLimit),
    /// scheduler → consumerd: how many tasks it may have remote at once.
    PreferredRemoteLimit(PreferredRemoteLimit),
    /// consumerd → scheduler: how many tasks it would send remote now if it
    /// could (in flight plus waiting for a remote slot).
    Demand(Demand),
    /// agent → scheduler → consumerd, on a fetch stream of its own: send me
    /// a toolchain's manifest, or its blobs (see [`crate::manifest`]).
    Fetch(Fetch),
    /// consumerd → agent on a fetch stream: the toolchain asked for.
    Package(Box<Package>),
    /// consumerd → agent on a fetch stream: one file's contents. Payload: the
    /// (compressed) bytes.
    Blob(BlobHeader),
    /// admin → scheduler.
    Query(Query),
    /// scheduler → admin.
    Reply(Box<Reply>),
    /// scheduler → agent: a task the agent still ran for an earlier
    /// scheduler (announced in its hello) is wanted again, under a new id.
    Adopt(Adopt),
}

impl Message {
    /// Bytes of payload that follow this message's header frame.
    pub fn payload_len(&self) -> u64 {
        match self {
            Message::Task(t) => t.payload.len,
            Message::TaskResult(r) => r.payload.len,
            Message::Blob(b) => b.payload.len,
            _ => 0,
        }
    }

    /// A short name for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Message::Task(_) => "task",
            Message::TaskResult(_) => "task result",
            Message::Cancel(_) => "cancel",
            Message::ToolchainUpdate(_) => "toolchain update",
            Message::CpuSample(_) => "cpu sample",
            Message::UsageLimit(_) => "usage limit",
            Message::PreferredRemoteLimit(_) => "preferred remote limit",
            Message::Demand(_) => "demand",
            Message::Fetch(_) => "fetch",
            Message::Package(_) => "package",
            Message::Blob(_) => "blob",
            Message::Query(_) => "query",
            Message::Reply(_) => "reply",
            Message::Adopt(_) => "adopt",
        }
    }
}

/// How a payload is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Compression {
    /// Raw bytes.
    None,
    /// zstd, uncompressed size known from [`PayloadInfo::raw_len`].
    Zstd,
}

/// Describes the payload that follows a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayloadInfo {
    /// Bytes on the wire.
    pub len: u64,
    /// Bytes once decompressed.
    pub raw_len: u64,
    /// How the wire bytes are compressed.
    pub compression: Compression,
}

impl PayloadInfo {
    /// No payload.
    pub const EMPTY: PayloadInfo = PayloadInfo { len: 0, raw_len: 0, compression: Compression::None };
}

/// A 256-bit result-cache key (blake3), computed by the consumerd.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CacheKey(pub [u8; 32]);

impl std::fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CacheKey(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "…)")
    }
}

/// The header of a task: everything but the source bytes.
///
/// The scheduler routes on `toolchain` and `cache_key` alone; `spec` is an
/// encoded [`TaskSpec`] that it forwards to the agent without decoding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskHeader {
    /// Chosen by the sender, unique among its open tasks on this connection.
    /// scheduler → agent: an id the agent still runs (a copy it was told to
    /// cancel, the task since placed on it again) replaces that run, which
    /// then answers nothing.
    pub task_id: u64,
    /// Route key.
    pub toolchain: ToolchainKey,
    /// Result-cache key, if the sender wants the cache consulted.
    pub cache_key: Option<CacheKey>,
    /// An encoded [`TaskSpec`] (see [`crate::codec::encode_spec`]).
    pub spec: Bytes,
    /// The preprocessed source that follows (none for a unit sent as its inputs).
    pub payload: PayloadInfo,
    /// The unit travels as its inputs (the spec lists them): the agent
    /// fetches them through the scheduler from the sender.
    pub inputs: bool,
    /// scheduler → agent: whose task this is, which the agent names when it
    /// announces the task to a later scheduler (`None` from a consumerd).
    pub origin: Option<Origin>,
    /// consumerd → scheduler: the task was sent to an earlier scheduler and
    /// is sent again after a reconnection; an agent may still be running it.
    pub resumed: bool,
}

/// A task's identity across schedulers: the consumerd that sent it and that
/// consumerd's id for it. Both outlive any one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Origin {
    /// The consumerd's node id.
    pub consumerd: u128,
    /// The consumerd's id for the task.
    pub task_id: u64,
}

/// A task an agent still runs (or has finished) for a scheduler it lost,
/// announced in its hello to the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumedTask {
    /// The agent's id for it until it is adopted (or cancelled).
    pub handle: u64,
    /// Whose it is.
    pub origin: Origin,
    /// Its route.
    pub toolchain: ToolchainKey,
}

impl ResumedTask {
    /// Set in every handle, never in a scheduler's task id: an agent's
    /// results and a scheduler's cancels name either without confusion.
    pub const HANDLE_BIT: u64 = 1 << 63;
}

/// The task the agent holds as `handle` is now the scheduler's `task_id`:
/// its result goes out under that id (at once, if it has finished).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Adopt {
    /// The agent's id for the task, from its hello.
    pub handle: u64,
    /// The scheduler's id for it from now on.
    pub task_id: u64,
}

/// What the agent needs to know to run a compile.
///
/// The source was preprocessed on the consumerd with includes expanded but
/// macros left alone (gcc `-fdirectives-only`, clang `-frewrite-includes`),
/// so the agent's compiler sees the same text, at the same columns, as a
/// local compile would: that is what makes the objects byte-identical.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// Compiler flags, without argv\[0\], the input, `-c` or `-o`: the agent
    /// adds those itself for its scratch directory, after checking every flag
    /// against its allow-list.
    pub args: Vec<String>,
    /// The input path exactly as the command line named it (relative to the
    /// command's working directory, or absolute). The agent recreates it
    /// inside its scratch directory so that file names in diagnostics and
    /// debug info come out as they would locally.
    pub input_path: String,
    /// The command's working directory, when the object records it (debug
    /// info): the agent maps its scratch directory to it. `None` keeps the
    /// result — and the cache key — independent of where the build ran.
    pub cwd: Option<String>,
    /// The few environment variables that change what the compiler prints
    /// (the locale: quotes and translations; `GCC_COLORS`), as the command
    /// had them, so that remote diagnostics read like local ones. The agent
    /// accepts only those names. A unit sent as its inputs carries the
    /// include-path variables too (`CPATH` and its kin).
    pub env: Vec<(String, String)>,
    /// Set: the unit travels as its inputs, not as text ([`crate::inputs`]),
    /// and `args` is the command's own, preprocessor options included.
    pub inputs: Option<crate::inputs::Inputs>,
}

/// The outcome of a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The compiler exited 0; the payload is the object.
    Success,
    /// The compiler exited non-zero; stderr says why. Not retried: a local run
    /// would fail the same way.
    CompileFailed,
    /// The agent could not run the compiler (its reason); the consumerd
    /// compiles locally.
    InternalError(String),
    /// The agent was lost and the task could not be placed again.
    Defunct,
    /// The scheduler did not run it; the action says what the consumerd does.
    Retry(RetryAction, RetryReason),
}

impl Outcome {
    /// Whether a consumerd should compile this task itself.
    pub fn runs_locally(&self) -> bool {
        !matches!(self, Outcome::Success | Outcome::CompileFailed)
    }
}

/// What the consumerd does with a task the scheduler did not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RetryAction {
    /// Submit it again later.
    RetryRemote,
    /// Compile it locally now.
    RunLocally,
}

/// Why the scheduler did not run a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RetryReason {
    /// No connected agent has the task's toolchain.
    NoAgents,
    /// The route's waiting queue is full.
    QueueFull,
    /// Accepting it would pass the scheduler's payload budget.
    OverBudget,
    /// It was placed the maximum number of times and every agent was lost.
    AttemptsExhausted,
    /// A hook rejected it, with the hook's reason.
    Rejected(String),
    /// The scheduler is shutting down.
    ShuttingDown,
}

impl std::fmt::Display for RetryReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RetryReason::NoAgents => f.write_str("no available agents can run this task"),
            RetryReason::QueueFull => f.write_str("the route's queue is full"),
            RetryReason::OverBudget => f.write_str("the scheduler's payload budget is spent"),
            RetryReason::AttemptsExhausted => f.write_str("every agent it was placed on was lost"),
            RetryReason::Rejected(why) => write!(f, "rejected by the scheduler: {why}"),
            RetryReason::ShuttingDown => f.write_str("the scheduler is shutting down"),
        }
    }
}

/// The header of a task's result: everything but the object bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultHeader {
    /// The id of the task this answers, as the receiver of the result knows it.
    pub task_id: u64,
    /// What happened.
    pub outcome: Outcome,
    /// The compiler's exit status (0 on success).
    pub exit_status: i32,
    /// The compiler's standard output, unchanged.
    pub stdout: Bytes,
    /// The compiler's standard error, unchanged (warnings included).
    pub stderr: Bytes,
    /// CPU time the compile used on the agent, in microseconds.
    pub cpu_time_us: u64,
    /// Wall time the agent spent on the task, from its arrival to its result
    /// (fetching inputs included), in microseconds; 0 when not measured.
    pub wall_us: u64,
    /// The object that follows.
    pub payload: PayloadInfo,
    /// The scheduler's result cache answered it (no agent compiled it now).
    pub cached: bool,
}

impl ResultHeader {
    /// A result with no compiler output, for outcomes the scheduler decides.
    pub fn bare(task_id: u64, outcome: Outcome) -> Self {
        ResultHeader {
            task_id,
            outcome,
            exit_status: 0,
            stdout: Bytes::new(),
            stderr: Bytes::new(),
            cpu_time_us: 0,
            wall_us: 0,
            payload: PayloadInfo::EMPTY,
            cached: false,
        }
    }

    /// "Compile it yourself", for `reason`.
    pub fn run_locally(task_id: u64, reason: RetryReason) -> Self {
        ResultHeader::bare(task_id, Outcome::Retry(RetryAction::RunLocally, reason))
    }
}

/// The task is no longer wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancel {
    /// The id of the task, as the receiver knows it.
    pub task_id: u64,
}

/// The complete set of toolchains a peer has now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolchainUpdate {
    /// Replaces the previously announced set.
    pub toolchains: Vec<Toolchain>,
}

/// What an agent asks on a fetch stream. The stream opens with
/// [`Fetch::Toolchain`], which the scheduler reads to pick a consumerd that
/// supplies the key; everything after it is relayed as bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fetch {
    /// The toolchain with this route key: answered by a [`Package`].
    Toolchain(ToolchainKey),
    /// These contents of it, by blake3: answered by one [`BlobHeader`] each,
    /// in order.
    Blobs(Vec<[u8; 32]>),
    /// The inputs of a task this agent runs, by the task id the scheduler
    /// gave it (the scheduler relays the stream to the task's consumerd and
    /// rewrites the id to the consumerd's); no answer of its own, blobs are
    /// then asked for with [`Fetch::Blobs`].
    Inputs(u64),
}

/// A consumerd's answer to [`Fetch::Toolchain`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Package {
    /// The toolchain and its files; `toolchain.binary_hash` is `manifest.id()`
    /// and `toolchain.key()` the key asked for, which the agent checks.
    Found {
        /// Its identity.
        toolchain: Toolchain,
        /// Its files.
        manifest: crate::manifest::Manifest,
    },
    /// This consumerd cannot supply it, and why.
    Unavailable(String),
}

/// One blob on a fetch stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobHeader {
    /// blake3 of the uncompressed bytes, which the receiver checks.
    pub digest: [u8; 32],
    /// The bytes that follow; `len` 0 and `raw_len` 0 with `Compression::None`
    /// for a blob the sender could not read (the fetch then fails).
    pub payload: PayloadInfo,
    /// The sender could read it and its bytes still had this digest.
    pub available: bool,
}

/// One CPU sample of an agent. Counters are cumulative since an arbitrary
/// origin; the scheduler works with differences and tolerates resets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CpuSample {
    /// Monotonic clock, nanoseconds.
    pub wall_ns: u64,
    /// CPU time used by the agent and its compilers, nanoseconds.
    pub usage_ns: u64,
    /// CFS quota in microseconds per period; `None` when unlimited.
    pub quota_us: Option<u64>,
    /// CFS period in microseconds (0 when unknown).
    pub period_us: u64,
    /// Enforcement periods elapsed.
    pub nr_periods: u64,
    /// Periods in which the group was throttled.
    pub nr_throttled: u64,
    /// Total time throttled, nanoseconds.
    pub throttled_ns: u64,
    /// PSI `some` total stall time of the agent's cgroup or host, microseconds,
    /// when the host exposes pressure information.
    pub pressure_some_us: Option<u64>,
    /// CPUs online on the host.
    pub online_cpus: u32,
    /// Compiles running when the sample was taken.
    pub tasks_running: u32,
    /// Compiles started since the agent started, whatever their end
    /// (finished, failed, killed): a count that outlives its connections.
    pub tasks_started: u64,
}

/// A concurrency limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageLimit {
    /// Tasks at once.
    pub limit: u32,
}

/// How many tasks a consumerd should keep remote at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreferredRemoteLimit {
    /// Tasks at once (0: send nothing remote).
    pub limit: u32,
}

/// How many tasks a consumerd wants remote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Demand {
    /// In flight plus waiting for a remote slot.
    pub wanted: u32,
}

/// An admin question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Query {
    /// Routes, agents, consumerds, totals, cache and optimizer state.
    Status,
}

/// An admin answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// The answer to [`Query::Status`].
    Status(StatusReport),
}

/// A snapshot of the scheduler.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct StatusReport {
    /// Scheduler node id.
    pub scheduler_id: u128,
    /// Seconds since the scheduler started.
    pub uptime_s: u64,
    /// One entry per route.
    pub routes: Vec<RouteStatus>,
    /// One entry per connected agent.
    pub agents: Vec<AgentStatus>,
    /// One entry per connected consumerd.
    pub consumerds: Vec<ConsumerdStatus>,
    /// Scheduler-wide counters.
    pub totals: Totals,
    /// The result cache, when one is configured.
    pub cache: Option<CacheStatus>,
    /// Payload bytes held in memory now, and the budget.
    pub payload_bytes: u64,
    /// The payload budget.
    pub payload_budget: u64,
    /// The cost model's units and how good its predictions have been.
    pub costs: CostStatus,
}

/// The scheduler's cost model in a [`StatusReport`].
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct CostStatus {
    /// Units whose cost it knows.
    pub units: u64,
    /// Results checked against what was expected of them.
    pub predictions: u64,
    /// Of those, expected from the unit's own history (the rest from its size).
    pub from_history: u64,
    /// Median of |expected − took| ÷ took over recent results expected from
    /// history; `None` before any.
    pub median_error: Option<f32>,
}

/// One route in a [`StatusReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteStatus {
    /// The route's key.
    pub toolchain: ToolchainKey,
    /// A toolchain with that key, when a peer announced one.
    pub description: Option<Toolchain>,
    /// Node ids of the agents that serve it.
    pub agents: Vec<u128>,
    /// Of those, the agents that serve it with a toolchain shipped to them
    /// (the others have it installed).
    pub shipped_to: Vec<u128>,
    /// Node ids of the consumerds that announced it (and supply its files).
    pub consumerds: Vec<u128>,
    /// Tasks waiting for a token.
    pub queued: u64,
}

/// One agent in a [`StatusReport`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentStatus {
    /// Node id.
    pub node_id: u128,
    /// Host name it announced.
    pub host_name: String,
    /// Tokens held now.
    pub tokens_in_use: u32,
    /// Current token limit.
    pub token_limit: u32,
    /// The most the agent allows (its `--jobs`).
    pub max_limit: u32,
    /// Tasks assigned to it.
    pub assigned: u64,
    /// Results it reported.
    pub completed: u64,
    /// Of those, compile failures.
    pub failed: u64,
    /// CPU use relative to its limit over the last interval, 0..=1 (or more).
    pub cpu_use: f32,
    /// Fraction of the last interval spent throttled.
    pub throttled: f32,
    /// The optimizer's last decision and its reason.
    pub last_decision: String,
    /// Whether it runs toolchains shipped to it, and in what sandbox.
    pub shipping: crate::handshake::Shipping,
    /// Compiles it started since it started (from its CPU samples): unlike
    /// `completed`, counted across its connections to any scheduler.
    pub tasks_started: u64,
    /// Its speed for placement, thousandths of the nominal: pinned by its
    /// configuration or learnt from its results.
    pub speed_milli: u32,
    /// Copies of its tasks started on other agents (straggler hedging).
    pub copies_started: u64,
    /// Copies of other agents' tasks it ran that answered first.
    pub copies_won: u64,
}

/// One consumerd in a [`StatusReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerdStatus {
    /// Node id.
    pub node_id: u128,
    /// Host name it announced.
    pub host_name: String,
    /// Tasks it submitted.
    pub submitted: u64,
    /// Tasks in flight now.
    pub in_flight: u64,
    /// Its share of the cluster: preferred remote limit.
    pub remote_limit: u32,
    /// Of its tasks, those a hook answered (the scheduler's cache).
    pub intercepted: u64,
}

/// Scheduler-wide counters. Each submitted task ends exactly once, so
/// `requests = completed + failed + retried + intercepted + cancelled + in flight`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Totals {
    /// Tasks submitted.
    pub requests: u64,
    /// Answered with an agent's successful compile.
    pub completed: u64,
    /// Answered with an agent's compile failure, or an agent's internal error.
    pub failed: u64,
    /// Answered "run it locally" (no agent, queue full, attempts exhausted, ...).
    pub retried: u64,
    /// Answered by a hook (cache hits, deduplicated work).
    pub intercepted: u64,
    /// Cancelled by their consumerd.
    pub cancelled: u64,
    /// Times a task was placed again because its agent was lost.
    pub requeued: u64,
    /// Tasks sent again after a scheduler restart that went to the agent
    /// still running them, and tasks placed again whose run an agent
    /// back from a cut held and that run as their copy (also counted as
    /// completed or failed when they answered).
    pub adopted: u64,
    /// Results agents returned that answered their task (the agents'
    /// `completed` + `failed`, over every session, ended ones included: an
    /// agent that reconnected keeps what it returned before). Equals
    /// `completed + failed` once every answer has been delivered.
    pub agent_results: u64,
}

/// The result cache in a [`StatusReport`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CacheStatus {
    /// One entry per tier, fastest first.
    pub tiers: Vec<CacheTierStatus>,
    /// Hits over lookups since start (0 when idle).
    pub hit_ratio: f32,
    /// Results refused because their source did not match the claimed key.
    pub poison_rejected: u64,
    /// Tasks that waited on identical work in flight instead of compiling.
    pub deduplicated: u64,
}

/// One cache tier.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CacheTierStatus {
    /// `memory`, `disk`, `redis`.
    pub name: String,
    /// Lookups that found an entry.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Bytes stored.
    pub bytes: u64,
    /// Entries stored.
    pub entries: u64,
    /// Entries evicted to stay under the size cap.
    pub evictions: u64,
    /// Errors that degraded to a miss.
    pub errors: u64,
}
