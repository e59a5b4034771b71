//! The agent's compile executor: runs one received task and produces the
//! [`ResultHeader`] and object payload to send back.
//!
//! [`Executor::run`] takes an [`ExecTask`] (toolchain key, encoded
//! [`TaskSpec`], compressed source) and returns an [`ExecResult`]. In order:
//! decode the spec; look up the toolchain (installed here, or shipped:
//! leased from the agent's store, fetched if need be, and run in its
//! sandbox — [`crate::agent::shipped`]); check the spec against
//! [`cc::validate`] — a refusal is an [`Outcome::InternalError`] with the
//! refusal's message, and nothing has been written or run; decompress the
//! source within [`ExecLimits::max_source_bytes`]; lay the compile out in a
//! fresh task directory under the scratch root ([`cc::agent_command`]); run
//! the compiler in its own process group (module `process`); read back the
//! object within [`ExecLimits::max_object_bytes`]; remove the task
//! directory, on every path. Exit 0 is [`Outcome::Success`], another exit status
//! [`Outcome::CompileFailed`] with the compiler's output (its scratch paths
//! turned back into the user's), anything else — a signal, a limit, a
//! cancel, the time limit, a failure that may be this machine's rather than
//! the source's ([`crate::cc::failure`]; the scratch filesystem under
//! [`SCRATCH_LOW`] free) — an [`Outcome::InternalError`] saying what, after
//! which the consumerd compiles locally.
//!
//! The compiler's environment is `PATH` (the agent's), `TMPDIR` (inside
//! the task directory, so that gcc's temporary files go away with it; its
//! output names them under `/tmp/`, as a local compile's does), and
//! the variables the [`TaskSpec`] carries, which [`cc::validate`] allows only
//! among those that shape diagnostics (the consumerd's locale and
//! `GCC_COLORS`), so that warnings read as a local compile prints them.
//!
//! The built-in test toolchain ([`crate::toolchain::test_toolchain`])
//! runs no process: its object is [`test_object`] of the source, after
//! `-sleep=<ms>` in the spec's arguments (waited, cancellable) if there is
//! one; with `-replay=…` it stands in for a recorded unit instead
//! ([`replay`]: its token held for the recorded time ÷ the agent's speed, an
//! object of the recorded size).
//!
//! Concurrency: [`Executor::run`] is called from many tasks at once; it
//! takes no lock shared between tasks; the toolchain table is fixed when the
//! executor is made. [`Executor::running`] counts the tasks inside `run`. Each
//! running compiler holds one thread of tokio's blocking pool (waiting for
//! it), so the runtime's `max_blocking_threads` (512 by default) must stay
//! above the agent's task limit.
//!
//! Left out: the network (the caller sends the result and fills in
//! `task_id`), resource limits other than time and sizes, and per-task
//! cgroups.

mod inputs;
mod process;
pub mod replay;
mod scratch;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{self, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ccroute_wire::codec::decode_spec;
use ccroute_wire::payload::{compress, decompress};
use ccroute_wire::{DecodeError, Outcome, PayloadInfo, ResultHeader, TaskSpec, Toolchain, ToolchainKey};
use tempfile::TempDir;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::agent::shipped::Shipping;
use crate::cc::{self, AgentCommand, AgentSetupError, RefusedArg};
use crate::toolchain::{test_toolchain, Package};

pub use scratch::{default_parent as default_scratch_parent, ROOT_PREFIX};

/// First line of every test-toolchain object.
pub const TEST_OBJECT_MAGIC: &[u8] = b"ccroute-test-object\n";

/// Sources up to this size are decompressed on the runtime thread; larger
/// ones on the blocking pool.
const INLINE_DECOMPRESS: u64 = 64 << 10;

/// Size and time bounds of one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecLimits {
    /// Largest decompressed source accepted.
    pub max_source_bytes: u64,
    /// Largest object read back.
    pub max_object_bytes: u64,
    /// Longest a task may take, from the call to `run` to its result.
    pub time_limit: Duration,
    /// Most bytes kept of each of the compiler's stdout and stderr; a
    /// compiler that writes more is killed and the task is an internal
    /// error (the consumerd then compiles locally and shows all of it).
    pub max_output_bytes: u64,
}

impl Default for ExecLimits {
    fn default() -> Self {
        ExecLimits {
            max_source_bytes: 256 << 20,
            max_object_bytes: 256 << 20,
            time_limit: Duration::from_secs(10 * 60),
            max_output_bytes: 4 << 20,
        }
    }
}

/// How to build an [`Executor`].
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// The directory the scratch root is made in (created if missing).
    pub scratch_parent: PathBuf,
    /// The compilers offered, by toolchain key.
    pub toolchains: HashMap<ToolchainKey, PathBuf>,
    /// Whether the built-in test toolchain is offered too.
    pub offer_test_toolchain: bool,
    /// Bounds of each task.
    pub limits: ExecLimits,
    /// The sandbox and store for toolchains shipped to this agent, if it
    /// runs them.
    pub shipping: Option<Shipping>,
    /// The installed compilers' identities and files, by toolchain key: a
    /// unit sent as its inputs compiles in a sandbox built from them.
    pub packages: HashMap<ToolchainKey, (Toolchain, Arc<Package>)>,
    /// The test toolchain's replayed units hold their token for their
    /// recorded time ÷ this ([`replay`]).
    pub replay_speed: f64,
}

impl Default for ExecutorConfig {
    /// The default scratch parent, no compilers, the test toolchain, default limits.
    fn default() -> Self {
        ExecutorConfig {
            scratch_parent: default_scratch_parent(),
            toolchains: HashMap::new(),
            offer_test_toolchain: true,
            limits: ExecLimits::default(),
            shipping: None,
            packages: HashMap::new(),
            replay_speed: 1.0,
        }
    }
}

impl ExecutorConfig {
    /// Adds a compiler, offered under `key`.
    pub fn with_toolchain(mut self, key: ToolchainKey, compiler: impl Into<PathBuf>) -> Self {
        self.toolchains.insert(key, compiler.into());
        self
    }

    /// Replaces the limits.
    pub fn with_limits(mut self, limits: ExecLimits) -> Self {
        self.limits = limits;
        self
    }
}

/// Why an executor could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// The scratch root could not be created.
    #[error("cannot create a scratch root in {parent}: {source}")]
    Scratch {
        /// The directory it was to be made in.
        parent: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The scratch root's path cannot be used in a compiler's prefix map.
    #[error("scratch root {0:?} must be an absolute UTF-8 path without '='")]
    BadScratch(PathBuf),
}

/// One task as the agent received it.
#[derive(Debug, Clone)]
pub struct ExecTask {
    /// Which compiler.
    pub toolchain: ToolchainKey,
    /// The task's id as the scheduler gave it (its inputs are fetched by it).
    pub task_id: u64,
    /// The connection a toolchain this agent lacks is fetched over.
    pub fetch: Option<quinn::Connection>,
    /// An encoded [`TaskSpec`].
    pub spec: Bytes,
    /// Describes `source`.
    pub payload: PayloadInfo,
    /// The preprocessed source, as it came off the wire.
    pub source: Bytes,
}

/// What to send back for a task.
#[derive(Debug, Clone)]
pub struct ExecResult {
    /// The result; `task_id` is 0, for the caller to fill in.
    pub header: ResultHeader,
    /// The object, compressed as `header.payload` says (empty unless the
    /// outcome is [`Outcome::Success`]).
    pub object: Bytes,
}

impl ExecResult {
    fn internal_error(why: String) -> Self {
        ExecResult { header: ResultHeader::bare(0, Outcome::InternalError(why)), object: Bytes::new() }
    }
}

/// Why a task was not compiled; its message becomes the
/// [`Outcome::InternalError`] the consumerd logs.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TaskError {
    #[error("malformed task spec: {0}")]
    MalformedSpec(String),
    #[error("toolchain {0} is not offered by this agent")]
    UnknownToolchain(ToolchainKey),
    #[error("{0}")]
    Shipped(crate::agent::shipped::StoreError),
    #[error("sandbox: {0}")]
    Sandbox(String),
    #[error("{0}")]
    Refused(RefusedArg),
    #[error("invalid test-toolchain argument {0:?}: expected -sleep=<milliseconds>")]
    BadSleep(String),
    #[error(
        "invalid test-toolchain argument {0:?}: expected -replay=<micros>,<object bytes>,<wire bytes ≤ object bytes>"
    )]
    BadReplay(String),
    #[error("source payload: {0}")]
    Source(DecodeError),
    #[error("cannot create a task directory in {root}: {source}")]
    TaskDir { root: PathBuf, source: io::Error },
    #[error("{0}")]
    Setup(AgentSetupError),
    #[error("cannot start compiler {path}: {source}")]
    Spawn { path: PathBuf, source: io::Error },
    #[error("waiting for the compiler: {0}")]
    Wait(io::Error),
    #[error("reading the compiler's {stream}: {source}")]
    Read { stream: &'static str, source: io::Error },
    #[error("compiler {stream} exceeds the limit of {max} bytes")]
    OutputTooLarge { stream: &'static str, max: u64 },
    #[error("compiler killed by signal {signal} ({name})")]
    Signaled { signal: i32, name: &'static str },
    #[error("the compile failed in a way that may be this agent's, not its source's: {0}")]
    MachineFailure(String),
    #[error("compiler exited 0 but its object cannot be read: {0}")]
    NoObject(io::Error),
    #[error("object of {len} bytes exceeds limit {max}")]
    ObjectTooLarge { len: u64, max: u64 },
    #[error("cancelled")]
    Cancelled,
    #[error("timed out after {0:?}")]
    TimedOut(Duration),
    #[error("executor task failed: {0}")]
    Join(tokio::task::JoinError),
}

impl TaskError {
    fn malformed(e: DecodeError) -> Self {
        TaskError::MalformedSpec(match e {
            DecodeError::Malformed { detail, .. } => detail,
            other => other.to_string(),
        })
    }
}

/// Runs compiles for the agent. See the module docs.
#[derive(Debug)]
pub struct Executor {
    root: scratch::Root,
    toolchains: HashMap<ToolchainKey, PathBuf>,
    test_key: Option<ToolchainKey>,
    limits: ExecLimits,
    shipping: Option<Shipping>,
    packages: HashMap<ToolchainKey, (Toolchain, Arc<Package>)>,
    path_env: Option<OsString>,
    replay_speed: f64,
    running: AtomicU32,
    started: AtomicU64,
    /// Tasks ended, by [`Executor::OUTCOMES`].
    ended: [AtomicU64; 3],
    /// Each task's time in [`Executor::run`].
    durations: crate::net::exposition::Histogram,
}

impl Executor {
    /// Creates the scratch root (removing those of dead agents next to it).
    ///
    /// # Errors
    /// When the scratch root cannot be created or used.
    pub fn new(config: ExecutorConfig) -> Result<Executor, ExecutorError> {
        let root = scratch::create_root(&config.scratch_parent)?;
        tracing::info!(scratch = %root.path.display(), toolchains = config.toolchains.len(), "executor ready");
        Ok(Executor {
            root,
            toolchains: config.toolchains,
            test_key: config.offer_test_toolchain.then(|| test_toolchain().key()),
            limits: config.limits,
            shipping: config.shipping,
            packages: config.packages,
            path_env: std::env::var_os("PATH"),
            replay_speed: config.replay_speed,
            running: AtomicU32::new(0),
            started: AtomicU64::new(0),
            ended: std::array::from_fn(|_| AtomicU64::new(0)),
            durations: crate::net::exposition::Histogram::new(&crate::net::exposition::COMPILE_BUCKETS),
        })
    }

    /// The directory task directories are made in; removed when the executor drops.
    pub fn scratch_root(&self) -> &Path {
        &self.root.path
    }

    /// Tasks that entered [`Executor::run`] since the executor was made.
    pub fn started(&self) -> u64 {
        // Relaxed: a counter for the CPU sampler; nothing is published through it.
        self.started.load(Ordering::Relaxed)
    }

    /// How tasks end, for [`Executor::ended`]: compiled, the compiler
    /// failed, or not compiled here (refused, cancelled, over a limit, …).
    pub const OUTCOMES: [&'static str; 3] = ["success", "compile_failed", "not_compiled"];

    /// Tasks ended since the executor was made, per [`Executor::OUTCOMES`].
    pub fn ended(&self) -> [u64; 3] {
        // Relaxed: display counters.
        std::array::from_fn(|i| self.ended[i].load(Ordering::Relaxed))
    }

    /// How long tasks took in [`Executor::run`].
    pub fn durations(&self) -> &crate::net::exposition::Histogram {
        &self.durations
    }

    /// Tasks inside [`Executor::run`] now.
    pub fn running(&self) -> u32 {
        // Relaxed: a gauge for the CPU sampler; nothing is published through it.
        self.running.load(Ordering::Relaxed)
    }

    /// Runs one task to its result. Never fails: whatever stops the compile
    /// is an [`Outcome::InternalError`] naming it. `cancel` ends it early
    /// with `InternalError("cancelled")`, after the compiler's process
    /// group is killed and its task directory removed.
    pub async fn run(&self, task: ExecTask, cancel: CancellationToken) -> ExecResult {
        let _running = RunningGuard::enter(&self.running);
        // Relaxed: a counter for the CPU sampler, like `running`.
        self.started.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let result = self.run_uncounted(task, &cancel).await;
        let kind = match result.header.outcome {
            Outcome::Success => 0,
            Outcome::CompileFailed => 1,
            _ => 2,
        };
        // Relaxed: a display counter.
        self.ended[kind].fetch_add(1, Ordering::Relaxed);
        self.durations.observe(now.elapsed());
        result
    }

    /// As [`Executor::run`], but left out of the counts of compiles (and
    /// of the CPU sampler's): for a task the agent made itself, its speed
    /// probe ([`crate::agent::speed_probe`]).
    pub async fn run_uncounted(&self, task: ExecTask, cancel: &CancellationToken) -> ExecResult {
        let limit = self.limits.time_limit;
        let now = Instant::now();
        // A limit too large to add is as good as none: thirty years.
        let deadline = now.checked_add(limit).unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 86_400));
        let stop = Stop { cancel, deadline, limit };
        let toolchain = task.toolchain;
        match self.execute(task, &stop).await {
            Ok(result) => {
                tracing::debug!(%toolchain, outcome = ?result.header.outcome, cpu_us = result.header.cpu_time_us, "task done");
                result
            }
            Err(e) => {
                tracing::debug!(%toolchain, error = %e, "task not compiled");
                if let TaskError::MachineFailure(why) = &e {
                    warn_machine_failure(why);
                }
                ExecResult::internal_error(e.to_string())
            }
        }
    }

    async fn execute(&self, task: ExecTask, stop: &Stop<'_>) -> Result<ExecResult, TaskError> {
        let spec = decode_spec(&task.spec).map_err(TaskError::malformed)?;
        if self.test_key == Some(task.toolchain) {
            return self.run_test(spec, &task, stop).await;
        }
        if spec.inputs.is_some() {
            return self.run_inputs(spec, &task, stop).await;
        }
        // Before anything is fetched or run.
        cc::validate(&spec).map_err(TaskError::Refused)?;
        // Installed here, or shipped: leased from the store (fetched if
        // need be) and run in the sandbox.
        let (compiler, shipped) = match self.toolchains.get(&task.toolchain) {
            Some(path) => (path.clone(), None),
            None => {
                let (Some(shipping), Some(conn)) = (&self.shipping, &task.fetch) else {
                    return Err(TaskError::UnknownToolchain(task.toolchain));
                };
                let lease = tokio::select! {
                    biased;
                    e = stop.fired() => return Err(e),
                    lease = shipping.store.lease(task.toolchain, conn) => lease.map_err(TaskError::Shipped)?,
                };
                (lease.ready.driver.clone(), Some((lease, &shipping.sandbox)))
            }
        };
        stop.check()?;

        // Validated above: only the locale and GCC_COLORS.
        let spec_env: Vec<(OsString, OsString)> = spec.env.iter().map(|(k, v)| (k.into(), v.into())).collect();
        let root = self.root.path.clone();
        let max_source = self.limits.max_source_bytes;
        let prepared = tokio::task::spawn_blocking(move || {
            prepare(&root, &spec, &compiler, &task.payload, &task.source, max_source)
        })
        .await
        .map_err(TaskError::Join)??;

        let mut env = vec![(OsString::from("TMPDIR"), prepared.tmp.clone().into_os_string())];
        match &shipped {
            Some((l, _)) => env.push(("PATH".into(), l.ready.path_env.clone().into())),
            None => env.extend(self.path_env.iter().map(|p| (OsString::from("PATH"), p.clone()))),
        }
        env.extend(spec_env);
        let (program, args) = match &shipped {
            Some((l, sandbox)) => {
                let (bwrap, mut args) = sandbox
                    .command(&l.ready.root, &l.ready.top, prepared.dir.path(), &prepared.cmd.cwd)
                    .map_err(TaskError::Sandbox)?;
                args.push(prepared.cmd.program.clone().into_os_string());
                args.extend(prepared.cmd.args.iter().cloned());
                (bwrap, args)
            }
            None => (prepared.cmd.program.clone(), prepared.cmd.args.clone()),
        };
        let launch = process::Launch {
            program: &program,
            args: &args,
            cwd: &prepared.cmd.cwd,
            env: &env,
            max_output: self.limits.max_output_bytes,
        };
        let finished = match stop.check() {
            Ok(()) => process::run(&launch, stop.fired()).await,
            Err(e) => Err(e),
        };
        let finished = if shipped.is_some() { finished.and_then(sandbox_set_up) } else { finished };
        let max_object = self.limits.max_object_bytes;
        tokio::task::spawn_blocking(move || {
            let result = finished.and_then(|f| conclude(&prepared.cmd, f, max_object));
            if let Err(e) = prepared.dir.close() {
                tracing::warn!(error = %e, "cannot remove a task directory");
            }
            result
        })
        .await
        .map_err(TaskError::Join)?
    }

    /// The test toolchain: no process, no files.
    async fn run_test(&self, spec: TaskSpec, task: &ExecTask, stop: &Stop<'_>) -> Result<ExecResult, TaskError> {
        let mut sleep = None;
        let mut replayed = None;
        let mut args = Vec::with_capacity(spec.args.len());
        for arg in spec.args {
            if let Some(ms) = arg.strip_prefix("-sleep=") {
                sleep = Some(ms.parse::<u64>().map_err(|_| TaskError::BadSleep(arg.clone()))?);
            } else if let Some(value) = arg.strip_prefix("-replay=") {
                replayed = Some(replay::check(value, self.limits.max_object_bytes)?);
            } else {
                args.push(arg);
            }
        }
        // Checked although nothing runs, so that it costs what a real task costs.
        cc::validate(&TaskSpec { args, ..spec }).map_err(TaskError::Refused)?;
        let max = self.limits.max_source_bytes;
        let source = if task.payload.raw_len <= INLINE_DECOMPRESS {
            decompress(&task.payload, &task.source, max).map_err(TaskError::Source)?
        } else {
            let (info, wire) = (task.payload, task.source.clone());
            tokio::task::spawn_blocking(move || decompress(&info, &wire, max))
                .await
                .map_err(TaskError::Join)?
                .map_err(TaskError::Source)?
        };
        if let Some(ms) = sleep {
            tokio::select! {
                biased;
                e = stop.fired() => return Err(e),
                () = tokio::time::sleep(Duration::from_millis(ms)) => {}
            }
        }
        let object = match replayed {
            Some(arg) => {
                let held = replay::hold(arg.micros, self.replay_speed);
                let started_ns = crate::host::monotonic_ns();
                tokio::select! {
                    biased;
                    e = stop.fired() => return Err(e),
                    () = tokio::time::sleep(held) => {}
                }
                let held_micros = u64::try_from(held.as_micros()).unwrap_or(u64::MAX);
                let stamp = replay::ReplayStamp {
                    started_ns,
                    finished_ns: crate::host::monotonic_ns(),
                    asked_micros: arg.micros,
                    held_micros,
                    speed_milli: (self.replay_speed * 1000.0).round() as u64,
                };
                drop(source);
                replay::object(arg, stamp)
            }
            None => test_object(&source),
        };
        let (wire, info) = if object.len() as u64 <= INLINE_DECOMPRESS {
            compress(&object)
        } else {
            tokio::task::spawn_blocking(move || compress(&object)).await.map_err(TaskError::Join)?
        };
        let header = ResultHeader {
            task_id: 0,
            outcome: Outcome::Success,
            exit_status: 0,
            stdout: Bytes::new(),
            stderr: Bytes::new(),
            cpu_time_us: 0,
            wall_us: 0,
            payload: info,
            cached: false,
        };
        Ok(ExecResult { header, object: wire.into() })
    }
}

/// The object the test toolchain produces for `source`: [`TEST_OBJECT_MAGIC`],
/// then the blake3 of the source in hex and a newline.
pub fn test_object(source: &[u8]) -> Vec<u8> {
    let mut out = TEST_OBJECT_MAGIC.to_vec();
    out.extend_from_slice(blake3::hash(source).to_hex().as_bytes());
    out.push(b'\n');
    out
}

/// A compile laid out in its task directory.
#[derive(Debug)]
struct Prepared {
    dir: TempDir,
    cmd: AgentCommand,
    tmp: PathBuf,
}

/// Decompresses the source, makes the task directory and writes the inputs
/// into it. Blocking.
fn prepare(
    root: &Path,
    spec: &TaskSpec,
    compiler: &Path,
    payload: &PayloadInfo,
    wire: &[u8],
    max_source: u64,
) -> Result<Prepared, TaskError> {
    let source = decompress(payload, wire, max_source).map_err(TaskError::Source)?;
    let dir = scratch::task_dir(root).map_err(|source| TaskError::TaskDir { root: root.to_owned(), source })?;
    let cmd = cc::agent_command(spec, compiler, dir.path()).map_err(TaskError::Setup)?;
    cmd.write_inputs(&source).map_err(TaskError::Setup)?;
    // Not a name the layout uses (`i`, `c`, `r`, `out.o`).
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp)
        .map_err(|source| TaskError::Setup(AgentSetupError::Write { path: tmp.clone(), source }))?;
    Ok(Prepared { dir, cmd, tmp })
}

/// Turns a finished compiler run into the result, the compiler's scratch
/// paths turned back into the user's. Blocking (reads the object).
fn conclude(cmd: &AgentCommand, f: process::Finished, max_object: u64) -> Result<ExecResult, TaskError> {
    let out = |bytes: &[u8]| Bytes::from(cmd.rewrite_output(bytes));
    let scratch = cmd.object_path.parent().unwrap_or(&cmd.object_path);
    finish(f, &cmd.object_path, scratch, max_object, out)
}

/// The result of a finished compiler run: its output through `out`, and
/// the object at `object` when it exited 0. A failure that may be the
/// machine's rather than the source's ([`crate::cc::failure::suspect`], or
/// `scratch`'s filesystem under [`SCRATCH_LOW`] free) is an error, so that
/// the unit is compiled locally and its failure never cached. Blocking
/// (reads the object).
fn finish(
    f: process::Finished,
    object: &Path,
    scratch: &Path,
    max_object: u64,
    out: impl Fn(&[u8]) -> Bytes,
) -> Result<ExecResult, TaskError> {
    let code = match (f.status.code(), f.status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => return Err(TaskError::Signaled { signal, name: process::signal_name(signal) }),
        (None, None) => return Err(TaskError::Wait(io::Error::other(format!("unexpected wait status {}", f.status)))),
    };
    if code != 0 {
        if let Some(why) = crate::cc::failure::suspect(code, &f.stderr) {
            return Err(TaskError::MachineFailure(why));
        }
        if let Some(free) = free_bytes(scratch).filter(|free| *free < SCRATCH_LOW) {
            return Err(TaskError::MachineFailure(format!(
                "exit status {code} with {} KiB free on the scratch filesystem of {}: give it room",
                free >> 10,
                scratch.display()
            )));
        }
    }
    let tmp = local_tmp(scratch);
    let mut header = ResultHeader {
        task_id: 0,
        outcome: Outcome::CompileFailed,
        exit_status: code,
        stdout: out(&tmp.rewrite(&f.stdout)),
        stderr: out(&tmp.rewrite(&f.stderr)),
        cpu_time_us: f.cpu_time_us,
        wall_us: 0,
        payload: PayloadInfo::EMPTY,
        cached: false,
    };
    if code != 0 {
        return Ok(ExecResult { header, object: Bytes::new() });
    }
    let object = read_object(object, max_object)?;
    let (wire, info) = compress(&object);
    header.outcome = Outcome::Success;
    header.payload = info;
    Ok(ExecResult { header, object: wire.into() })
}

/// The task's `TMPDIR` (`<task dir>/tmp/`) as a local compile names its
/// temporary files: gcc's default, `/tmp/` (an assembler error names the
/// `.s` it assembled: `/tmp/ccXXXXXX.s: Assembler messages:`, as locally,
/// not the agent's scratch path).
struct LocalTmp {
    finder: memchr::memmem::Finder<'static>,
}

fn local_tmp(scratch: &Path) -> LocalTmp {
    let mut prefix = scratch.join("tmp").into_os_string().into_encoded_bytes();
    prefix.push(b'/');
    LocalTmp { finder: memchr::memmem::Finder::new(&prefix).into_owned() }
}

impl LocalTmp {
    fn rewrite<'a>(&self, bytes: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
        let mut found = self.finder.find_iter(bytes).peekable();
        if found.peek().is_none() {
            return std::borrow::Cow::Borrowed(bytes);
        }
        let mut out = Vec::with_capacity(bytes.len());
        let mut from = 0;
        for at in found {
            out.extend_from_slice(&bytes[from..at]);
            out.extend_from_slice(b"/tmp/");
            from = at + self.finder.needle().len();
        }
        out.extend_from_slice(&bytes[from..]);
        std::borrow::Cow::Owned(out)
    }
}

/// A compile that fails with less than this free where it ran is taken
/// for the machine's failure, whatever its output says (which may be in
/// the user's language).
pub const SCRATCH_LOW: u64 = 16 << 20;

/// Bytes an unprivileged process may still write on `path`'s filesystem,
/// or `None` when it cannot be asked.
pub(crate) fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    #[allow(unsafe_code)]
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call,
    // and `stat` points to writable memory of the struct's size, which
    // statvfs fills entirely when it returns 0 (and is read only then).
    let stat = unsafe {
        if libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) != 0 {
            return None;
        }
        stat.assume_init()
    };
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// Reads the object, refusing one past `max` bytes without reading it all.
/// Not through a link and only a regular file: a shipped compiler is not
/// trusted, and a link to one of the agent's own files (its key) or a FIFO
/// must not become "the object".
fn read_object(path: &Path, max: u64) -> Result<Vec<u8>, TaskError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(TaskError::NoObject)?;
    let meta = file.metadata().map_err(TaskError::NoObject)?;
    if !meta.is_file() {
        return Err(TaskError::NoObject(io::Error::other("the object is not a regular file")));
    }
    let len = meta.len();
    if len > max {
        return Err(TaskError::ObjectTooLarge { len, max });
    }
    let mut object = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    // A file that grows after the size check is still cut at one byte past max.
    file.take(max.saturating_add(1)).read_to_end(&mut object).map_err(TaskError::NoObject)?;
    if object.len() as u64 > max {
        return Err(TaskError::ObjectTooLarge { len: object.len() as u64, max });
    }
    Ok(object)
}

/// What ends a task early: its cancel token or its deadline.
#[derive(Debug)]
struct Stop<'a> {
    cancel: &'a CancellationToken,
    deadline: Instant,
    limit: Duration,
}

impl Stop<'_> {
    /// Resolves when the task is cancelled or out of time.
    async fn fired(&self) -> TaskError {
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => TaskError::Cancelled,
            () = tokio::time::sleep_until(self.deadline) => TaskError::TimedOut(self.limit),
        }
    }

    /// An error if the task is already cancelled or out of time.
    fn check(&self) -> Result<(), TaskError> {
        if self.cancel.is_cancelled() {
            Err(TaskError::Cancelled)
        } else if Instant::now() >= self.deadline {
            Err(TaskError::TimedOut(self.limit))
        } else {
            Ok(())
        }
    }
}

/// Counts a task in [`Executor::running`] while it lives.
#[derive(Debug)]
struct RunningGuard<'a>(&'a AtomicU32);

impl<'a> RunningGuard<'a> {
    fn enter(count: &'a AtomicU32) -> Self {
        // Relaxed: see `Executor::running`.
        count.fetch_add(1, Ordering::Relaxed);
        RunningGuard(count)
    }
}

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A run inside the sandbox that bwrap itself could not set up (it prints
/// `bwrap: ...` and exits 1 before the compiler starts) is the agent's
/// failure, not the compile's: the consumerd then compiles the unit itself
/// instead of printing bwrap's words as the compiler's and failing the build.
fn sandbox_set_up(f: process::Finished) -> Result<process::Finished, TaskError> {
    if !f.status.success() && f.stderr.starts_with(b"bwrap: ") {
        let why = String::from_utf8_lossy(&f.stderr);
        warn_sandbox(why.trim());
        return Err(TaskError::Sandbox(format!("the sandbox could not be made: {}", why.trim())));
    }
    Ok(f)
}

/// Says, at most once a minute, that compiles here fail in ways that may be
/// this machine's: their units are compiled by their consumerds instead,
/// so nothing fails, but the farm does not get them.
fn warn_machine_failure(why: &str) {
    static SAID: crate::said::Every = crate::said::Every::new(crate::said::A_MINUTE);
    let Some(times) = SAID.due() else { return };
    tracing::warn!(
        times,
        last = why,
        "compiles failed here in a way that may be this machine's, not their sources': their consumerds compile them \
         instead; look at the scratch filesystem's free space (--scratch-dir), memory, and the toolchains' programs \
         (said at most once a minute)"
    );
}

/// Says, at most once a minute (every unit that needs the sandbox fails the
/// same way until the agent's setup is mended), that units needing it go
/// back to their consumerds (which compile them from text or locally:
/// nothing fails, but the farm does not get them).
fn warn_sandbox(bwrap_said: &str) {
    static SAID: crate::said::Every = crate::said::Every::new(crate::said::A_MINUTE);
    if SAID.due().is_none() {
        return;
    }
    tracing::warn!(
        bwrap = bwrap_said,
        "the sandbox could not be made: units sent as their inputs or with a shipped toolchain go back to their \
         consumerds; check that --store-dir and --scratch-dir exist and are readable (said at most once a minute)"
    );
}
