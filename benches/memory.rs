//! Memory that comes back: the scheduler's RSS idle, at the peak of a
//! 10,000-unit run, and a while after the run ends, as a ratio to idle.
//!
//! The scheduler is a process of its own (this package's `ccroute`
//! binary) on 127.0.0.1, without its optimizer; 4 agents × 64 tokens (the
//! real agent daemon with the no-op test toolchain, nothing compiled) and 8
//! consumerds' links run in this process, over real QUIC. The run submits
//! `units` units of 32 KiB of incompressible text each, at most 2,000 at
//! once, so that the scheduler holds up to ~64 MiB of payloads and ~1,700
//! waiting tasks at its peak; every unit must come back from an agent.
//! Then nothing happens; the RSS is read 2 s and 15 s after the last
//! answer, with every peer still connected, as after a build.
//!
//! `cargo bench --bench memory` runs 20,000 units without the result cache
//! and prints idle, peak and after in MiB and after ÷ idle against the
//! target (≤ 1.20). It also reads idle once more after a warm-up (one
//! window of 2,000 units, then 15 s of rest, before the run): after ÷ that
//! figure tells whether what stays grows with the load (a leak, a table
//! that keeps its largest size) or is reached by any load at all (buffers
//! and tables at their working size); the target is against the first
//! idle (the cache run has no warm-up). `-- cache` runs it again with the
//! cache's memory tier on (objects of 16 KiB, cached): that tier is bounded on purpose
//! (`--cache-memory`, 256 MiB by default) and is shown apart: its bytes are
//! taken off "after" for the ratio. Under `cargo test` (no `--bench`
//! argument) it runs 300 units and checks that every one was answered, not
//! the memory.
//!
//! A second line splits idle, 15 s after, and 27 s after once every peer
//! has disconnected into anonymous memory (heap, stacks: what the
//! scheduler allocated) and file-backed pages (its binary's and libraries'
//! code read in, most of the idle figure), from `/proc/PID/status`.
//!
//! What holds the rest: `MEMORY_HEAPTRACK=idle` (or `after`) runs the
//! scheduler under heaptrack (Debian's `heaptrack`) and kills it at that
//! point of the run, leaving `target/memory-heaptrack-idle.zst` (or
//! `-after`): its "leaked" allocations are those live at that moment, and
//! the two records' stacks, diffed, are what the load left
//! (`heaptrack_print -f FILE --flamegraph-cost-type leaked -F STACKS`). No
//! figures are printed then (the process measured would be heaptrack's).
//!
//! Left out: the scheduler's CPU (the farm's `scale` preset measures it),
//! shipped toolchains and inputs (units here are text).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ccroute::agent::daemon::AgentConfig;
use ccroute::agent::executor::replay::{fill_noise, ReplayArg};
use ccroute::consumerd::link::{Link, LinkConfig};
use ccroute::consumerd::{Remote, RemoteJob, Stats};
use ccroute::net::{tls, CertRole, Identity};
use ccroute::toolchain::test_toolchain;
use ccroute_wire::{StatusReport, TaskSpec};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const CCROUTE: &str = env!("CARGO_BIN_EXE_ccroute");
const AGENTS: usize = 4;
const TOKENS: u32 = 64;
const LINKS: usize = 8;
const WINDOW: usize = 2_000;
const TEXT_BYTES: usize = 32 << 10;
/// After ÷ idle the issue asks for.
const TARGET_RATIO: f64 = 1.20;

/// Where `MEMORY_HEAPTRACK` stops the scheduler to record what is live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Snapshot {
    Idle,
    After,
}

impl Snapshot {
    fn from_env() -> Result<Option<Snapshot>, BoxError> {
        match std::env::var("MEMORY_HEAPTRACK").as_deref() {
            Err(_) => Ok(None),
            Ok("idle") => Ok(Some(Snapshot::Idle)),
            Ok("after") => Ok(Some(Snapshot::After)),
            Ok(other) => Err(format!("MEMORY_HEAPTRACK={other:?}: \"idle\" or \"after\"").into()),
        }
    }

    /// heaptrack's output, less the `.zst` it adds.
    fn output(self) -> String {
        format!("target/memory-heaptrack-{}", if self == Snapshot::Idle { "idle" } else { "after" })
    }
}

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let full = args.iter().any(|a| a == "--bench");
    let with_cache = args.iter().any(|a| a == "cache");
    let units = if full { 20_000 } else { 300 };
    let snapshot = Snapshot::from_env()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    println!(
        "memory: the scheduler's RSS around a run of {units} units ({AGENTS} agents × {TOKENS} tokens, {LINKS} consumerds, \
         {WINDOW} units at once, {} KiB of text each){}",
        TEXT_BYTES >> 10,
        if full { "" } else { "; smoke size, answers checked only (run with --bench for figures)" }
    );
    let mut runs = vec![false];
    if with_cache {
        runs.push(true);
    }
    let mut missed = false;
    for cache in runs {
        // The warm-up only without the cache: with it, the window's objects
        // would stay in the memory tier and in the warmed idle.
        let Some(r) = runtime.block_on(run(units, cache, full && !cache, full, snapshot))? else {
            let out = snapshot.map(Snapshot::output).unwrap_or_default();
            println!("memory: heaptrack's record of the scheduler up to that point: {out}.zst");
            break;
        };
        println!("{}", r.line());
        if full && r.ratio() > TARGET_RATIO {
            missed = true;
        }
    }
    runtime.shutdown_timeout(Duration::from_secs(5));
    if missed {
        println!("memory: the RSS after the run is above {TARGET_RATIO:.2} × idle");
    }
    Ok(())
}

/// What one run measured, in bytes.
#[derive(Debug, Default)]
struct Figures {
    cache: bool,
    start: u64,
    idle: u64,
    /// Idle again after a warm-up of one window of units, when there was one.
    warm_idle: Option<u64>,
    peak: u64,
    after_2s: u64,
    after_15s: u64,
    /// Of idle and of 15 s after: (anonymous, file-backed) resident bytes.
    idle_parts: (u64, u64),
    after_parts: (u64, u64),
    /// The same once every peer has disconnected, when measured.
    alone_parts: Option<(u64, u64)>,
    /// The cache's memory tier after the run.
    tier: u64,
    took: Duration,
    /// The scheduler's CPU time (user and system) over the run.
    cpu: Duration,
    units: usize,
}

impl Figures {
    /// RSS 15 s after, less the cache's memory tier.
    fn after(&self) -> u64 {
        self.after_15s.saturating_sub(self.tier)
    }

    /// [`Figures::after`] over idle.
    fn ratio(&self) -> f64 {
        self.after() as f64 / self.idle.max(1) as f64
    }

    fn line(&self) -> String {
        let m = |b: u64| b as f64 / 1048576.0;
        format!(
            "memory ({}): start {:.1} MiB, idle {:.1}{}, peak {:.1}, 2 s after {:.1}, 15 s after {:.1}{}; \
             after ÷ idle = {:.2} (target ≤ {TARGET_RATIO:.2}: {}){}; the run took {:.1} s, the scheduler's CPU \
             {:.1} µs a unit",
            if self.cache { "cache on" } else { "no cache" },
            m(self.start),
            m(self.idle),
            self.warm_idle.map_or(String::new(), |w| format!(", idle after a warm-up of {WINDOW} units {:.1}", m(w))),
            m(self.peak),
            m(self.after_2s),
            m(self.after_15s),
            if self.cache { format!(" (of which the memory tier holds {:.1})", m(self.tier)) } else { String::new() },
            self.ratio(),
            if self.ratio() <= TARGET_RATIO { "met" } else { "missed" },
            self.warm_idle.map_or(String::new(), |w| format!(
                "; after ÷ idle after the warm-up = {:.2}",
                self.after() as f64 / w.max(1) as f64
            )),
            self.took.as_secs_f64(),
            self.cpu.as_secs_f64() * 1e6 / self.units.max(1) as f64,
        ) + &format!(
            "\n  of which anonymous (heap, stacks) / file-backed (the binary's and libraries' pages read in): \
             idle {:.1} / {:.1} MiB, 15 s after {:.1} / {:.1} MiB{}",
            m(self.idle_parts.0),
            m(self.idle_parts.1),
            m(self.after_parts.0),
            m(self.after_parts.1),
            self.alone_parts.map_or(String::new(), |(anon, file)| format!(
                ", once every peer has left {:.1} / {:.1} MiB",
                m(anon),
                m(file)
            )),
        )
    }
}

fn rss_bytes(pid: u32) -> u64 {
    status_kb(pid, "VmRSS:") * 1024
}

/// Resident bytes (anonymous, file-backed).
fn rss_parts(pid: u32) -> (u64, u64) {
    (status_kb(pid, "RssAnon:") * 1024, status_kb(pid, "RssFile:") * 1024)
}

/// The user and system CPU time `pid` has used, from `/proc/PID/stat`
/// (in clock ticks of 10 ms); zero when it cannot be read.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis: state is the first,
    // utime and stime the 12th and 13th.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: u64 = after_name.split_whitespace().skip(11).take(2).filter_map(|t| t.parse::<u64>().ok()).sum();
    Duration::from_millis(ticks * 10)
}

/// A `kB` field of `/proc/PID/status`; 0 when it cannot be read.
fn status_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
        .unwrap_or(0)
}

/// The scheduler process; killed when dropped.
struct SchedulerProcess(Child);

impl Drop for SchedulerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_scheduler(
    work: &Path,
    tls_dir: &Path,
    (cache, snapshot): (bool, Option<Snapshot>),
) -> Result<(SchedulerProcess, std::net::SocketAddr), BoxError> {
    let log = std::fs::File::create(work.join("scheduler.log"))?;
    let mut cmd = match snapshot {
        Some(at) => {
            let mut c = Command::new("heaptrack");
            c.arg("-o").arg(at.output()).arg(CCROUTE);
            c
        }
        None => Command::new(CCROUTE),
    };
    cmd.args(["scheduler", "--listen", "127.0.0.1:0", "--no-optimizer", "--tls-dir"]).arg(tls_dir);
    if cache {
        cmd.arg("--cache-dir").arg(work.join("cache"));
    } else {
        cmd.arg("--no-cache");
    }
    let mut child =
        cmd.env("RUST_LOG", "warn").stdout(Stdio::piped()).stderr(log).spawn().map_err(|e| match snapshot {
            Some(_) => format!("heaptrack: {e} (MEMORY_HEAPTRACK needs it: apt-get install heaptrack)"),
            None => e.to_string(),
        })?;
    let out = child.stdout.take().ok_or("no stdout")?;
    let process = SchedulerProcess(child);
    let line = std::io::BufRead::lines(std::io::BufReader::new(out))
        .map_while(Result::ok)
        .find(|l| l.starts_with("ccroute scheduler listening on"))
        .ok_or("the scheduler did not start")?;
    let addr = line.rsplit(' ').next().unwrap_or("").parse()?;
    Ok((process, addr))
}

async fn status(addr: std::net::SocketAddr, admin: &Identity) -> Result<StatusReport, BoxError> {
    ccroute::cli::status::fetch(addr, admin).await
}

/// A unit: no compile time, `seq` first so that no two texts are alike.
fn job(seq: u64, pool: &Bytes, cache: bool) -> RemoteJob {
    let object = if cache { 16 << 10 } else { 64 };
    let arg = ReplayArg { micros: 0, object_bytes: object, wire_bytes: object };
    let at = (seq as usize * 4099) % (pool.len() - TEXT_BYTES);
    let mut text = Vec::with_capacity(TEXT_BYTES);
    text.extend_from_slice(format!("{seq:020}\n").as_bytes());
    text.extend_from_slice(&pool[at..at + TEXT_BYTES - text.len()]);
    RemoteJob {
        compiler: "/usr/bin/ccroute-test".into(),
        toolchain: Arc::new(test_toolchain()),
        package: None,
        spec: TaskSpec { args: vec![arg.to_arg()], input_path: "u.c".into(), cwd: None, env: vec![], inputs: None },
        text: Bytes::from(text),
        cacheable: cache,
        inputs: None,
    }
}

/// One run's figures; `None` when `snapshot` stopped the scheduler.
async fn run(
    units: usize,
    cache: bool,
    warm_up: bool,
    alone: bool,
    snapshot: Option<Snapshot>,
) -> Result<Option<Figures>, BoxError> {
    let work = tempfile::Builder::new().prefix("ccroute-memory-").tempdir()?;
    let tls_dir = work.path().join("tls");
    let out = Command::new(CCROUTE).args(["certs", "init"]).arg(&tls_dir).output()?;
    if !out.status.success() {
        return Err(format!("certs init: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let (mut scheduler, addr) = start_scheduler(work.path(), &tls_dir, (cache, snapshot))?;
    // Under heaptrack, the scheduler is a child of its script.
    let pid = if snapshot.is_some() { launched_by(scheduler.0.id())? } else { scheduler.0.id() };
    let admin = tls::load(&tls_dir, CertRole::Admin)?;
    let mut f = Figures { cache, units, ..Figures::default() };
    tokio::time::sleep(Duration::from_millis(500)).await;
    f.start = rss_bytes(pid);

    let stop = CancellationToken::new();
    let tasks = TaskTracker::new();
    let agent_id = Arc::new(tls::load(&tls_dir, CertRole::Agent)?);
    let scratch = work.path().join("scratch");
    std::fs::create_dir_all(&scratch)?;
    for i in 0..AGENTS {
        let mut a = AgentConfig::new(addr, agent_id.clone());
        a.jobs = TOKENS;
        a.discover = false;
        a.test_toolchain = true;
        a.shipping = None;
        a.scratch_parent.clone_from(&scratch);
        a.host_name = format!("memory-a{i}");
        let stop = stop.clone();
        tasks.spawn(async move {
            if let Err(e) = ccroute::agent::daemon::run(a, stop).await {
                eprintln!("memory: agent {i}: {e}");
            }
        });
    }
    let consumerd_id = tls::load(&tls_dir, CertRole::Consumerd)?;
    let mut links = Vec::with_capacity(LINKS);
    for i in 0..LINKS {
        let mut lc = LinkConfig::new(addr, consumerd_id.clone());
        lc.host_name = format!("memory-c{i}");
        links.push(Link::start(lc, Arc::new(Stats::default()), stop.clone(), &tasks));
    }
    for l in &links {
        let mut w = l.window();
        tokio::time::timeout(Duration::from_secs(60), w.wait_for(|v| *v > 0))
            .await
            .map_err(|_| "memory: a consumerd did not connect in 60 s")?
            .map_err(|_| "memory: a link ended")?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while status(addr, &admin).await?.agents.len() < AGENTS {
        if Instant::now() > deadline {
            return Err("memory: the agents did not join in 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    f.idle = rss_bytes(pid);
    f.idle_parts = rss_parts(pid);
    if snapshot == Some(Snapshot::Idle) {
        return stop_for_heaptrack(pid, &mut scheduler, (&stop, &tasks));
    }

    let mut pool = vec![0u8; 4 << 20];
    fill_noise(&mut pool, 0x5eed);
    let pool = Bytes::from(pool);
    if warm_up {
        // One window of units, then as long a rest as after the run: what
        // the scheduler keeps once it has worked at all (buffers and tables
        // at their working size) apart from what a long run adds.
        submit(&links, &pool, units as u64..(units + WINDOW) as u64, cache).await?;
        tokio::time::sleep(Duration::from_secs(15)).await;
        f.warm_idle = Some(rss_bytes(pid));
    }

    // The peak: sampled every 20 ms while the run lasts.
    let peak = Arc::new(AtomicU64::new(0));
    let running = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, running) = (peak.clone(), running.clone());
        tokio::spawn(async move {
            while running.load(Ordering::Relaxed) {
                peak.fetch_max(rss_bytes(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let started = Instant::now();
    let cpu_before = cpu_time(pid);
    let submitted = submit(&links, &pool, 0..units as u64, cache).await;
    f.took = started.elapsed();
    f.cpu = cpu_time(pid).saturating_sub(cpu_before);
    running.store(false, Ordering::Relaxed);
    let _ = sampler.await;
    f.peak = peak.load(Ordering::Relaxed);
    submitted?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    f.after_2s = rss_bytes(pid);
    tokio::time::sleep(Duration::from_secs(13)).await;
    f.after_15s = rss_bytes(pid);
    f.after_parts = rss_parts(pid);
    if snapshot == Some(Snapshot::After) {
        return stop_for_heaptrack(pid, &mut scheduler, (&stop, &tasks));
    }
    let s = status(addr, &admin).await?;
    f.tier = s.cache.iter().flat_map(|c| c.tiers.iter()).filter(|t| t.name == "memory").map(|t| t.bytes).sum();
    stop.cancel();
    tasks.close();
    let _ = tokio::time::timeout(Duration::from_secs(10), tasks.wait()).await;
    if alone {
        // Every peer gone: what their connections held is freed, and the
        // scheduler's next trim (at 24 s of quiet) gives it back.
        tokio::time::sleep(Duration::from_secs(27).saturating_sub(started.elapsed().saturating_sub(f.took))).await;
        f.alone_parts = Some(rss_parts(pid));
    }
    drop(scheduler);
    Ok(Some(f))
}

/// The `ccroute` process `launcher` (heaptrack's script) started.
fn launched_by(launcher: u32) -> Result<u32, BoxError> {
    let ours = std::fs::canonicalize(CCROUTE)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let children =
            std::fs::read_to_string(format!("/proc/{launcher}/task/{launcher}/children")).unwrap_or_default();
        let found = children
            .split_whitespace()
            .filter_map(|c| c.parse::<u32>().ok())
            .find(|c| std::fs::read_link(format!("/proc/{c}/exe")).is_ok_and(|exe| exe == ours));
        if let Some(pid) = found {
            return Ok(pid);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err("memory: heaptrack started no scheduler in 10 s".into())
}

/// Kills the scheduler under heaptrack (what it holds now stays "leaked"
/// in the record), stops the peers, and waits for heaptrack to finish
/// writing.
fn stop_for_heaptrack(
    pid: u32,
    heaptrack: &mut SchedulerProcess,
    (stop, tasks): (&CancellationToken, &TaskTracker),
) -> Result<Option<Figures>, BoxError> {
    let killed = Command::new("kill").args(["-KILL", &pid.to_string()]).status()?;
    if !killed.success() {
        return Err(format!("memory: kill -KILL {pid} failed").into());
    }
    stop.cancel();
    tasks.close();
    heaptrack.0.wait()?;
    Ok(None)
}

/// Submits units `seqs` across the links, at most [`WINDOW`] at once, and
/// waits for every answer: an error unless each came back from an agent.
async fn submit(links: &[Link], pool: &Bytes, seqs: std::ops::Range<u64>, cache: bool) -> Result<(), BoxError> {
    let units = seqs.end - seqs.start;
    let mut running_units = JoinSet::new();
    let (mut answered, mut failed) = (0usize, Vec::new());
    for seq in seqs {
        while running_units.len() >= WINDOW {
            tally(running_units.join_next().await, &mut answered, &mut failed);
        }
        let l = links[seq as usize % links.len()].clone();
        let j = job(seq, pool, cache);
        running_units.spawn(async move { l.compile(j).await.map(|_| ()).map_err(|e| e.to_string()) });
    }
    while let Some(done) = running_units.join_next().await {
        tally(Some(done), &mut answered, &mut failed);
    }
    if answered as u64 != units {
        return Err(format!(
            "memory: {answered} of {units} units came back from an agent; the first failures: {:?}",
            &failed[..failed.len().min(3)]
        )
        .into());
    }
    Ok(())
}

fn tally(
    done: Option<Result<Result<(), String>, tokio::task::JoinError>>,
    answered: &mut usize,
    failed: &mut Vec<String>,
) {
    match done {
        Some(Ok(Ok(()))) => *answered += 1,
        Some(Ok(Err(e))) => failed.push(e),
        Some(Err(e)) => failed.push(e.to_string()),
        None => {}
    }
}
