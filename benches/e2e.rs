//! End-to-end bench: the whole system in one process on 127.0.0.1 — an
//! in-process scheduler, one agent and a consumerd's link to the scheduler,
//! over QUIC with throw-away certificates — measured three ways in one run:
//!
//! 1. `sample`: the bundled sample project built with `make -j8` plainly
//!    (local gcc/g++) and through ccroute (the wrapper, a consumerd, one
//!    agent with real gcc/g++), local-first and prefer-remote; median of 3
//!    paired runs with `make clean` between, printed as ccroute/local. Every
//!    object is compared with the local build's, byte for byte.
//! 2. `noop`: no-op tasks per second (the agent's built-in test toolchain:
//!    nothing is compiled, the object is a digest of the source), driven
//!    straight through the consumerd's [`Link`] with 1 and 256 tasks in
//!    flight; tasks/s and per-task latency (submit → answer) p50/p99.
//! 3. `payload`: MB/s of 8 MiB incompressible sources delivered from the
//!    consumerd through the scheduler to the agent.
//!
//! `cargo bench --bench e2e [-- sample|noop|payload ...]` runs the named parts
//! (all by default) at full size. Under `cargo test` (no `--bench` argument)
//! each part runs with a few tasks, checking answers and bytes, not speed.
//!
//! Left out: object bytes coming back in bulk (the test toolchain's objects
//! are 85 bytes), several consumerds or agents, the result cache (the
//! scheduler here has no hooks, and every no-op source is distinct).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ccroute::agent::executor::test_object;
use ccroute::cli::bundled_sample;
use ccroute::cluster::{wait_for, ClusterConfig, LocalCluster};
use ccroute::consumerd::link::Link;
use ccroute::consumerd::{Config as ConsumerdConfig, Consumerd, Remote, RemoteJob, Stats};
use ccroute::host::online_cpus;
use ccroute::local_socket::SocketPath;
use ccroute::net::CertRole;
use ccroute::scheduler::NetJob;
use ccroute::toolchain::test_toolchain;
use ccroute_core::Scheduler;
use ccroute_wire::{TaskSpec, Toolchain};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The targets on a 2-core machine.
const TARGET_TASKS_PER_SEC: f64 = 50_000.0;
const TARGET_P50_AT_1: Duration = Duration::from_micros(300);
const TARGET_PAYLOAD_MB_PER_SEC: f64 = 80.0;

/// How big each part is: full under `--bench`, a smoke test otherwise.
#[derive(Debug, Clone, Copy)]
struct Size {
    full: bool,
    sample_rounds: usize,
    noop_warmup: usize,
    noop_at_1: usize,
    noop_at_256: usize,
    /// Runs of each no-op and payload measurement.
    runs: usize,
    payload_bytes: usize,
    payload_tasks: usize,
}

impl Size {
    fn new(full: bool) -> Size {
        if full {
            Size {
                full,
                sample_rounds: 3,
                noop_warmup: 2_000,
                noop_at_1: 3_000,
                noop_at_256: 40_000,
                runs: 3,
                payload_bytes: 8 << 20,
                payload_tasks: 32,
            }
        } else {
            Size {
                full,
                sample_rounds: 1,
                noop_warmup: 4,
                noop_at_1: 5,
                noop_at_256: 300,
                runs: 1,
                payload_bytes: 1 << 20,
                payload_tasks: 3,
            }
        }
    }
}

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let full = args.iter().any(|a| a == "--bench");
    let named: Vec<&str> = args.iter().map(String::as_str).filter(|a| !a.starts_with('-')).collect();
    let wanted = |part: &str| named.is_empty() || named.contains(&part);
    let size = Size::new(full);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        println!(
            "e2e: scheduler, one agent and a consumerd in this process on 127.0.0.1 ({} CPUs){}",
            online_cpus(),
            if full { "" } else { "; smoke sizes (run with --bench for numbers)" }
        );
        if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
            let load: Vec<&str> = load.split_whitespace().take(3).collect();
            println!("load average before the run: {} (other work on this machine skews every figure)", load.join(" "));
        }
        if wanted("sample") {
            sample_part(size).await?;
        }
        if wanted("noop") || wanted("payload") {
            let cluster = Cluster::start(512, true).await?;
            let result = remote_parts(&cluster, size, wanted("noop"), wanted("payload")).await;
            cluster.stop().await;
            result?;
        }
        Ok::<(), BoxError>(())
    })?;
    // The runtime's blocking threads may still hold an agent's idle work.
    runtime.shutdown_timeout(Duration::from_secs(5));
    Ok(())
}

// ---------------------------------------------------------------------------
// The cluster

/// A scheduler and one agent on 127.0.0.1 (`ccroute::cluster`, without its
/// consumerd: each build mode starts its own).
struct Cluster {
    inner: LocalCluster,
    tmp: PathBuf,
    scheduler: Scheduler<NetJob>,
}

impl Cluster {
    /// Starts both; the agent offers the compilers in `PATH`, or only the
    /// no-op test toolchain.
    async fn start(jobs: u32, test_toolchain: bool) -> Result<Cluster, BoxError> {
        let inner = LocalCluster::start(ClusterConfig {
            agents: 1,
            agent_jobs: jobs,
            discover: !test_toolchain,
            test_toolchain,
            cache_dir: None,
            consumerd: false,
            ..ClusterConfig::default()
        })
        .await?;
        let tmp = inner.dir.path().to_path_buf();
        let scheduler = inner.scheduler.clone();
        Ok(Cluster { inner, tmp, scheduler })
    }

    /// A consumerd's link to this scheduler.
    fn link(&self, stats: Arc<Stats>) -> Result<Link, BoxError> {
        self.inner.link(stats)
    }

    /// The one agent's token limit.
    fn agent_limit(&self) -> u32 {
        self.scheduler.agents().first().map_or(0, |a| a.token_limit)
    }

    /// The optimizer's last decision on the agent, as `ccroute status` shows it.
    async fn last_decision(&self) -> Result<String, BoxError> {
        let report = ccroute::cli::status::fetch(self.inner.addr, &self.inner.identity(CertRole::Admin)?).await?;
        Ok(report.agents.first().map(|a| a.last_decision.clone()).unwrap_or_default())
    }

    async fn stop(self) {
        self.inner.shutdown().await;
    }
}

// ---------------------------------------------------------------------------
// Part 1: the sample project

/// How one build ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Mode {
    Local,
    LocalFirst,
    PreferRemote,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Local, Mode::LocalFirst, Mode::PreferRemote];

    fn name(self) -> &'static str {
        match self {
            Mode::Local => "local (plain gcc/g++)",
            Mode::LocalFirst => "ccroute, local-first",
            Mode::PreferRemote => "ccroute, prefer-remote",
        }
    }
}

/// One build's wall time and where its compiles ran.
#[derive(Debug, Clone, Copy, Default)]
struct Build {
    secs: f64,
    remote: u64,
    local: u64,
    fallbacks: u64,
    agent_limit: u32,
    window: u32,
}

async fn sample_part(size: Size) -> Result<(), BoxError> {
    let sample = bundled_sample().ok_or("the bundled sample project is missing")?;
    let cpus = online_cpus();
    let cluster = Cluster::start(cpus, false).await?;
    let result = sample_builds(&cluster, &sample, size).await;
    cluster.stop().await;
    let builds = result?;

    println!(
        "\n[1] sample project, make -j8, one agent ({cpus} jobs) on loopback, median of {} paired runs",
        size.sample_rounds
    );
    for mode in Mode::ALL {
        let runs = &builds[&mode];
        let secs = median(runs.iter().map(|b| b.secs).collect());
        let paired: Vec<f64> =
            runs.iter().zip(&builds[&Mode::Local]).map(|(b, l)| b.secs / l.secs.max(f64::EPSILON)).collect();
        let each: Vec<String> = runs.iter().map(|b| format!("{:.2}", b.secs)).collect();
        if mode == Mode::Local {
            println!("    {:<24} {secs:>6.2} s                 (runs: {} s)", mode.name(), each.join(", "));
            continue;
        }
        let ratios: Vec<String> = paired.iter().map(|r| format!("{r:.2}")).collect();
        println!(
            "    {:<24} {secs:>6.2} s  {:.2}x local     (runs: {} s; paired ratios {})",
            mode.name(),
            median(paired.clone()),
            each.join(", "),
            ratios.join(", ")
        );
        for b in runs {
            println!(
                "        {} compiles remote, {} local, {} fell back; agent token limit at the end {}, remote window {}",
                b.remote, b.local, b.fallbacks, b.agent_limit, b.window
            );
        }
    }
    println!(
        "    ({cpus} cores: the agent competes with the local compiles for the same CPUs, so the ratio is ccroute's \
         overhead, not a speed-up)"
    );
    Ok(())
}

/// Runs the paired builds; every object must match the local build's.
async fn sample_builds(cluster: &Cluster, sample: &Path, size: Size) -> Result<BTreeMap<Mode, Vec<Build>>, BoxError> {
    let mut builds: BTreeMap<Mode, Vec<Build>> = BTreeMap::new();
    // The full build, or two objects (one C, one C++) for the smoke test.
    let targets: Vec<String> =
        if size.full { vec!["all".into()] } else { vec!["src/core/check.o".into(), "src/cxx/num/rational.o".into()] };
    for round in 0..size.sample_rounds {
        let mut dirs = BTreeMap::new();
        for mode in Mode::ALL {
            let build_dir = cluster.tmp.as_path().join(format!("build-{mode:?}-{round}"));
            let goals: Vec<String> = targets
                .iter()
                .map(|t| if t == "all" { t.clone() } else { build_dir.join(t).display().to_string() })
                .collect();
            let build = match mode {
                Mode::Local => {
                    let t0 = Instant::now();
                    make(sample, &build_dir, &goals, None, cluster.tmp.as_path()).await?;
                    Build { secs: t0.elapsed().as_secs_f64(), ..Build::default() }
                }
                Mode::LocalFirst | Mode::PreferRemote => {
                    let socket = cluster.tmp.as_path().join(format!("cd-{round}-{mode:?}"));
                    ccroute_build(cluster, sample, &build_dir, &goals, socket, mode == Mode::PreferRemote).await?
                }
            };
            builds.entry(mode).or_default().push(build);
            dirs.insert(mode, build_dir);
        }
        let compared = compare_objects(&dirs[&Mode::Local], &[&dirs[&Mode::LocalFirst], &dirs[&Mode::PreferRemote]])?;
        if !size.full {
            let remote = builds[&Mode::PreferRemote].iter().map(|b| b.remote).sum::<u64>();
            assert_eq!(compared, 2 * 2, "two objects in each of two ccroute builds");
            assert!(remote > 0, "prefer-remote sent nothing to the agent");
        }
        for dir in dirs.values() {
            make_clean(sample, dir).await?;
        }
    }
    Ok(builds)
}

/// One build through the wrapper and a fresh consumerd (local slots = CPUs)
/// linked to the cluster.
async fn ccroute_build(
    cluster: &Cluster,
    sample: &Path,
    build_dir: &Path,
    goals: &[String],
    socket: PathBuf,
    prefer_remote: bool,
) -> Result<Build, BoxError> {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_ccroute"));
    let mut config = ConsumerdConfig::new(SocketPath::explicit(socket));
    config.local_slots = online_cpus();
    config.prefer_remote = prefer_remote;
    // This bench measures the remote path: no direct-mode cache answers it.
    config.cache_dir = None;
    let stop = CancellationToken::new();
    let daemon = Consumerd::bind(config)?;
    let socket = daemon.socket_path().to_path_buf();
    let stats = daemon.stats();
    let link = cluster.link(stats.clone())?;
    let window = link.window();
    let serving = tokio::spawn(daemon.serve(Arc::new(link), stop.clone()));
    wait_for("the consumerd to connect", || *window.borrow() > 0).await?;
    let t0 = Instant::now();
    let made = make(sample, build_dir, goals, Some((&exe, &socket)), cluster.tmp.as_path()).await;
    let secs = t0.elapsed().as_secs_f64();
    let s = stats.snapshot();
    let window_then = *window.borrow();
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), serving).await;
    made?;
    Ok(Build {
        secs,
        remote: s.remote,
        local: s.local,
        fallbacks: s.fallbacks,
        agent_limit: cluster.agent_limit(),
        window: window_then,
    })
}

/// Compares every object under `reference` with the same path under each
/// of `others`; returns how many were compared.
fn compare_objects(reference: &Path, others: &[&PathBuf]) -> Result<usize, BoxError> {
    let mut objects = Vec::new();
    collect_objects(reference, &mut objects)?;
    if objects.is_empty() {
        return Err(format!("no objects under {}", reference.display()).into());
    }
    let mut compared = 0;
    for path in &objects {
        let want = std::fs::read(path)?;
        let rel = path.strip_prefix(reference)?;
        for other in others {
            let got = std::fs::read(other.join(rel)).map_err(|e| format!("{}: {e}", other.join(rel).display()))?;
            if got != want {
                return Err(format!(
                    "{} differs from the local build's ({} vs {} bytes)",
                    rel.display(),
                    got.len(),
                    want.len()
                )
                .into());
            }
            compared += 1;
        }
    }
    Ok(compared)
}

fn collect_objects(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), BoxError> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_objects(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "o") {
            out.push(path);
        }
    }
    Ok(())
}

/// `make -j8 <goals>` of the sample into `build`, through `ccroute` (at its
/// consumerd's socket) when `wrapper` is given.
async fn make(
    sample: &Path,
    build: &Path,
    goals: &[String],
    wrapper: Option<(&PathBuf, &PathBuf)>,
    scratch: &Path,
) -> Result<(), BoxError> {
    let mut cmd = tokio::process::Command::new("make");
    cmd.arg("-C").arg(sample).arg(format!("BUILD={}", build.display())).arg("-j8").args(goals);
    // No user configuration file, and no consumerd but ours.
    cmd.env("XDG_CONFIG_HOME", scratch.join("config")).env_remove("CCROUTE_SCHEDULER");
    match wrapper {
        Some((exe, socket)) => {
            cmd.arg(format!("CC={} gcc", exe.display())).arg(format!("CXX={} g++", exe.display()));
            cmd.env("CCROUTE_SOCKET", socket);
        }
        None => {
            cmd.env_remove("CCROUTE_SOCKET");
        }
    }
    let out = cmd.output().await.map_err(|e| format!("cannot run make: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "make failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(())
}

async fn make_clean(sample: &Path, build: &Path) -> Result<(), BoxError> {
    let out = tokio::process::Command::new("make")
        .arg("-C")
        .arg(sample)
        .arg(format!("BUILD={}", build.display()))
        .arg("clean")
        .output()
        .await?;
    if !out.status.success() {
        return Err(format!("make clean failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Parts 2 and 3: tasks through the link

/// Makes jobs for the test toolchain; every source is distinct.
struct Jobs {
    toolchain: Arc<Toolchain>,
    spec: TaskSpec,
    seq: AtomicU64,
}

impl Jobs {
    fn new() -> Jobs {
        let spec =
            TaskSpec { args: vec!["-O2".into()], input_path: "bench.c".into(), cwd: None, env: vec![], inputs: None };
        Jobs { toolchain: Arc::new(test_toolchain()), spec, seq: AtomicU64::new(0) }
    }

    fn job(&self, text: Bytes) -> RemoteJob {
        RemoteJob {
            package: None,
            compiler: PathBuf::from("/usr/bin/ccroute-test"),
            toolchain: self.toolchain.clone(),
            spec: self.spec.clone(),
            text,
            cacheable: true,
            inputs: None,
        }
    }

    fn tiny(&self) -> Bytes {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        Bytes::from(format!("int bench_{n}(void) {{ return {n}; }}\n"))
    }
}

/// A run's figures.
#[derive(Debug)]
struct RunReport {
    tasks: usize,
    secs: f64,
    /// Sorted.
    latencies: Vec<Duration>,
    /// Most tokens the agent held at once, least window seen, most tasks
    /// waiting at the scheduler.
    peak_tokens: u32,
    least_window: u32,
    peak_waiting: usize,
}

impl RunReport {
    fn per_sec(&self) -> f64 {
        self.tasks as f64 / self.secs.max(f64::EPSILON)
    }

    fn quantile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let i = ((self.latencies.len() - 1) as f64 * q).round() as usize;
        self.latencies[i.min(self.latencies.len() - 1)]
    }
}

/// What a run sends: tiny no-op sources, or these large ones in turn (with
/// the object each must come back as).
#[derive(Clone)]
enum Sources {
    Tiny,
    Large(Arc<Vec<(Bytes, Vec<u8>)>>),
}

/// Keeps `in_flight` tasks going until `count` have been answered; every
/// answer must be the test toolchain's object for its source.
async fn drive(
    cluster: &Cluster,
    link: &Link,
    jobs: &Arc<Jobs>,
    sources: Sources,
    in_flight: usize,
    count: usize,
) -> Result<RunReport, BoxError> {
    let window = link.window();
    let (watch_stop, mut watched) = watch::channel(false);
    let watcher = {
        let scheduler = cluster.scheduler.clone();
        let window = window.clone();
        tokio::spawn(async move {
            let (mut peak_tokens, mut least_window, mut peak_waiting) = (0, u32::MAX, 0);
            loop {
                if let Some(a) = scheduler.agents().first() {
                    peak_tokens = peak_tokens.max(a.tokens_in_use);
                    peak_waiting = peak_waiting.max(a.waiting);
                }
                least_window = least_window.min(*window.borrow());
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                    _ = watched.changed() => break,
                }
            }
            (peak_tokens, least_window, peak_waiting)
        })
    };
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = JoinSet::new();
    let t0 = Instant::now();
    for _ in 0..in_flight {
        let (link, jobs, sources, next) = (link.clone(), jobs.clone(), sources.clone(), next.clone());
        workers.spawn(async move {
            let mut latencies = Vec::with_capacity(count / in_flight + 1);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    break;
                }
                let (text, want) = match &sources {
                    Sources::Tiny => {
                        let text = jobs.tiny();
                        let want = test_object(&text);
                        (text, want)
                    }
                    Sources::Large(list) => {
                        let (text, want) = &list[i % list.len()];
                        (text.clone(), want.clone())
                    }
                };
                let job = jobs.job(text);
                let started = Instant::now();
                let answer = link.compile(job).await;
                latencies.push(started.elapsed());
                match answer {
                    Ok(c) if c.exit_status == 0 && c.parts.object == want => {}
                    Ok(c) => {
                        return Err(format!(
                            "task {i}: exit status {}, {} object bytes, not the expected {}",
                            c.exit_status,
                            c.parts.object.len(),
                            want.len()
                        ))
                    }
                    Err(why) => return Err(format!("task {i} came back to run locally: {why}")),
                }
            }
            Ok(latencies)
        });
    }
    let mut latencies = Vec::with_capacity(count);
    let mut failure = None;
    while let Some(done) = workers.join_next().await {
        match done {
            Ok(Ok(l)) => latencies.extend(l),
            Ok(Err(why)) => {
                failure.get_or_insert(why);
                // The others would go on for nothing.
                workers.abort_all();
            }
            Err(e) if e.is_cancelled() => {}
            Err(e) => {
                failure.get_or_insert(format!("a worker panicked: {e}"));
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let _ = watch_stop.send(true);
    let (peak_tokens, least_window, peak_waiting) = watcher.await?;
    if let Some(why) = failure {
        return Err(why.into());
    }
    latencies.sort_unstable();
    Ok(RunReport { tasks: latencies.len(), secs, latencies, peak_tokens, least_window, peak_waiting })
}

async fn remote_parts(cluster: &Cluster, size: Size, noop: bool, payload: bool) -> Result<(), BoxError> {
    // Driven directly: no local side, so its counters stay at zero. The
    // link stops with the cluster.
    let link = cluster.link(Arc::new(Stats::default()))?;
    let window = link.window();
    wait_for("the link to connect", || *window.borrow() > 0).await?;
    let jobs = Arc::new(Jobs::new());
    let result = async {
        if noop {
            noop_part(cluster, &link, &jobs, size).await?;
        }
        if payload {
            payload_part(cluster, &link, &jobs, size).await?;
        }
        Ok::<(), BoxError>(())
    }
    .await;
    result
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

async fn noop_part(cluster: &Cluster, link: &Link, jobs: &Arc<Jobs>, size: Size) -> Result<(), BoxError> {
    let limit = cluster.agent_limit();
    println!(
        "\n[2] no-op tasks, consumerd link → scheduler → agent (test toolchain, --jobs 512) over QUIC; \
         agent token limit {limit}, remote window {}; {} runs each",
        *link.window().borrow(),
        size.runs
    );
    drive(cluster, link, jobs, Sources::Tiny, 64.min(size.noop_warmup), size.noop_warmup).await?;
    for (in_flight, count) in [(1, size.noop_at_1), (256, size.noop_at_256)] {
        let mut runs = Vec::new();
        for _ in 0..size.runs {
            let r = drive(cluster, link, jobs, Sources::Tiny, in_flight, count).await?;
            let limit = cluster.agent_limit();
            println!(
                "    {in_flight:>3} in flight: {:>6} tasks in {:>5.2} s = {:>7.0} tasks/s   p50 {:>6.0} µs  p99 {:>6.0} µs   \
                 (peak {} tokens held, {} waiting; least window {}; token limit after {limit})",
                r.tasks,
                r.secs,
                r.per_sec(),
                us(r.quantile(0.5)),
                us(r.quantile(0.99)),
                r.peak_tokens,
                r.peak_waiting,
                r.least_window,
            );
            runs.push(r);
        }
        if !size.full {
            continue;
        }
        if in_flight == 1 {
            let p50 = Duration::from_secs_f64(median(runs.iter().map(|r| r.quantile(0.5).as_secs_f64()).collect()));
            println!(
                "        target p50 ≤ {:.0} µs at 1 in flight: {} (median of runs {:.0} µs, {:.2}x the target)",
                us(TARGET_P50_AT_1),
                verdict(p50 <= TARGET_P50_AT_1),
                us(p50),
                p50.as_secs_f64() / TARGET_P50_AT_1.as_secs_f64()
            );
        } else {
            let rate = median(runs.iter().map(RunReport::per_sec).collect());
            println!(
                "        target ≥ {TARGET_TASKS_PER_SEC:.0} tasks/s at 256 in flight: {} (median of runs {rate:.0}, \
                 {:.2}x the target)",
                verdict(rate >= TARGET_TASKS_PER_SEC),
                rate / TARGET_TASKS_PER_SEC
            );
            let least_window = runs.iter().map(|r| r.least_window).min().unwrap_or(0);
            if cluster.agent_limit() < 512 {
                println!("        the optimizer's last word on the agent: {}", cluster.last_decision().await?);
            }
            if least_window < 256 {
                println!(
                    "        note: the remote window fell to {least_window}: a consumerd's dispatcher would have kept \
                     no more than that in flight (driven here through the link, which does not enforce it)"
                );
            }
        }
    }
    Ok(())
}

/// `len` pseudo-random (incompressible) bytes from `seed`.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut hasher = blake3::Hasher::new();
    hasher.update(&seed.to_le_bytes());
    hasher.finalize_xof().fill(&mut out);
    out
}

async fn payload_part(cluster: &Cluster, link: &Link, jobs: &Arc<Jobs>, size: Size) -> Result<(), BoxError> {
    let mb = size.payload_bytes as f64 / 1e6;
    let sources: Vec<(Bytes, Vec<u8>)> = (0..4u64)
        .map(|seed| {
            let text = noise(seed, size.payload_bytes);
            let want = test_object(&text);
            (Bytes::from(text), want)
        })
        .collect();

    // What the payload costs in CPU, end to end, without the network: the
    // consumerd's compression attempt, the agent's copy out and its digest.
    let t0 = Instant::now();
    for (text, want) in &sources {
        let (wire, info) = ccroute_wire::payload::compress(text);
        let raw = ccroute_wire::payload::decompress(&info, &wire, u64::MAX)?;
        if test_object(&raw) != *want {
            return Err("the payload did not survive compression".into());
        }
    }
    let floor = mb * sources.len() as f64 / t0.elapsed().as_secs_f64();

    println!(
        "\n[3] payload: {} MiB incompressible sources, consumerd link → scheduler → agent (source direction only: \
         the test toolchain's objects are {} bytes); {} runs each",
        size.payload_bytes >> 20,
        sources.first().map_or(0, |s| s.1.len()),
        size.runs
    );
    let sources = Sources::Large(Arc::new(sources));
    let mut best: f64 = 0.0;
    for in_flight in [1, 4] {
        let mut rates = Vec::new();
        for _ in 0..size.runs {
            let r = drive(cluster, link, jobs, sources.clone(), in_flight, size.payload_tasks).await?;
            let rate = mb * r.tasks as f64 / r.secs.max(f64::EPSILON);
            println!(
                "    {in_flight} in flight: {:>3} sources in {:>5.2} s = {rate:>6.1} MB/s   p50 {:>6.1} ms per source",
                r.tasks,
                r.secs,
                r.quantile(0.5).as_secs_f64() * 1e3
            );
            rates.push(rate);
        }
        best = best.max(median(rates));
    }
    println!(
        "        (the same bytes through compress + decompress + digest on one core, no network: {floor:.0} MB/s)"
    );
    if size.full {
        println!(
            "        target ≥ {TARGET_PAYLOAD_MB_PER_SEC:.0} MB/s: {} (median of runs at the better depth {best:.0} MB/s, \
             {:.2}x the target)",
            verdict(best >= TARGET_PAYLOAD_MB_PER_SEC),
            best / TARGET_PAYLOAD_MB_PER_SEC
        );
    }
    Ok(())
}

fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(f64::total_cmp);
    let mid = xs.len() / 2;
    if xs.len() % 2 == 1 {
        xs[mid]
    } else {
        (xs[mid - 1] + xs[mid]) / 2.0
    }
}
