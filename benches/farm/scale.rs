//! `scale`: the scheduler itself at 1,000 agents × 16 tokens and 200
//! consumerds. The scheduler is a process of its own on loopback; the agents
//! (the real agent daemon, `ccroute::agent::daemon::run`) and the
//! consumerds' links (`ccroute::consumerd::link::Link`) run in this process,
//! over real QUIC. Three phases:
//!
//! 1. RSS of the idle scheduler, then with every agent connected;
//! 2. throughput: each consumerd keeps `in_flight` replayed units of no
//!    time and 64-byte payloads outstanding for `seconds`; tasks per second
//!    and the scheduler's CPU per task (`/proc/PID/stat`), dispatch latency;
//! 3. waiting tasks: every token held by a long unit, then `waiting` more
//!    units submitted; the scheduler's RSS per waiting task by difference.
//!    Then every unit is cancelled (the futures dropped: the link cancels).

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ccroute::agent::daemon::AgentConfig;
use ccroute::agent::executor::replay::{ReplayArg, ReplayStamp};
use ccroute::consumerd::link::{Link, LinkConfig};
use ccroute::consumerd::{Remote, RemoteJob, Stats};
use ccroute::host::monotonic_ns;
use ccroute::net::{tls, CertRole};
use ccroute::toolchain::test_toolchain;
use ccroute_wire::TaskSpec;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::{cpu_seconds, rss_bytes, CCROUTE};

#[derive(Debug, Clone)]
pub struct ScaleConfig {
    pub agents: usize,
    pub tokens: u32,
    pub consumerds: usize,
    pub in_flight: usize,
    pub seconds: f64,
    pub waiting: usize,
}

impl ScaleConfig {
    pub fn preset() -> ScaleConfig {
        ScaleConfig { agents: 1000, tokens: 16, consumerds: 200, in_flight: 40, seconds: 10.0, waiting: 20_000 }
    }
}

#[derive(Debug, Clone, Default)]
pub struct ScaleReport {
    pub config: Option<ScaleConfig>,
    pub join_s: f64,
    pub tasks: u64,
    pub tasks_per_s: f64,
    pub sched_cpu_s: f64,
    pub dispatch_ms: (f64, f64, f64),
    pub rss_idle: u64,
    pub rss_agents: u64,
    pub rss_held: u64,
    pub rss_waiting: u64,
    pub waiting_seen: u64,
    pub held_seen: u64,
    pub harness_cpu_s: f64,
}

impl ScaleReport {
    pub fn render(&self) -> String {
        let Some(c) = &self.config else { return String::new() };
        let us_per_task = self.sched_cpu_s * 1e6 / self.tasks.max(1) as f64;
        format!(
            "| agents × tokens | consumerds | tasks | tasks/s | scheduler CPU µs/task | ⇒ tasks/s per scheduler core | dispatch p50 / p99 / max ms | RSS idle MiB | per agent KiB | per waiting task B |\n\
             |---|---|---|---|---|---|---|---|---|---|\n\
             | {} × {} | {} | {} | {:.0} | {:.1} | {:.0} | {:.2} / {:.2} / {:.2} | {:.1} | {:.1} | {:.0} |\n\n\
             Throughput: each consumerd kept {} units of no time and 64-byte payloads outstanding for {} s; \
             the agents and consumerds (this process) used {:.1} CPU s of the two cores meanwhile, the scheduler {:.1}. \
             All {} agents joined in {:.1} s. Waiting tasks: {} tokens held by long units, then {} more units waited \
             (the status said {} queued); RSS {:.1} MiB → {:.1} MiB.\n",
            c.agents,
            c.tokens,
            c.consumerds,
            self.tasks,
            self.tasks_per_s,
            us_per_task,
            1e6 / us_per_task.max(1e-9),
            self.dispatch_ms.0,
            self.dispatch_ms.1,
            self.dispatch_ms.2,
            self.rss_idle as f64 / 1048576.0,
            self.rss_agents.saturating_sub(self.rss_idle) as f64 / 1024.0 / c.agents as f64,
            self.rss_waiting.saturating_sub(self.rss_held) as f64 / self.waiting_seen.max(1) as f64,
            c.in_flight,
            c.seconds,
            self.harness_cpu_s,
            self.sched_cpu_s,
            c.agents,
            self.join_s,
            self.held_seen,
            c.waiting,
            self.waiting_seen,
            self.rss_held as f64 / 1048576.0,
            self.rss_waiting as f64 / 1048576.0,
        )
    }
}

/// Kills the scheduler when dropped.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn run(config: &ScaleConfig) -> Result<ScaleReport, String> {
    let work = tempfile::Builder::new()
        .prefix(&format!("ccfarm-work-{}-", std::process::id()))
        .tempdir()
        .map_err(|e| e.to_string())?;
    let tls_dir = work.path().join("tls");
    crate::netns::run(CCROUTE, &["certs", "init", &tls_dir.to_string_lossy()])?;
    let log = std::fs::File::create(work.path().join("scheduler.log")).map_err(|e| e.to_string())?;
    let mut child = Command::new(CCROUTE)
        .args(["scheduler", "--listen", "127.0.0.1:0", "--no-cache", "--no-optimizer", "--tls-dir"])
        .arg(&tls_dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start the scheduler: {e}"))?;
    let out = child.stdout.take().ok_or("no stdout")?;
    let sched = Killed(child);
    let line = std::io::BufRead::lines(std::io::BufReader::new(out))
        .map_while(Result::ok)
        .find(|l| l.starts_with("ccroute scheduler listening on"))
        .ok_or("the scheduler did not start")?;
    let addr: std::net::SocketAddr =
        line.rsplit(' ').next().unwrap_or("").parse().map_err(|e| format!("scheduler address: {e}"))?;
    let pid = sched.0.id();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(64)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let scratch = work.path().join("scratch");
    std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
    let report = rt.block_on(phases(config, addr, pid, &tls_dir, &scratch));
    drop(sched);
    rt.shutdown_timeout(Duration::from_secs(10));
    report
}

/// The scheduler's status, asked again (after a pause) until `deadline`
/// when a fetch fails: while a thousand agents join, the scheduler may not
/// answer one handshake within its 5 s, which is not the figure measured.
async fn status(
    addr: std::net::SocketAddr,
    admin: &ccroute::net::Identity,
    deadline: Instant,
) -> Result<ccroute_wire::StatusReport, String> {
    loop {
        match ccroute::cli::status::fetch(addr, admin).await {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() > deadline => return Err(format!("scale: status: {e}")),
            Err(e) => {
                eprintln!("scale: status: {e} (asking again)");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

fn job(micros: u64, seq: u64) -> RemoteJob {
    let arg = ReplayArg { micros, object_bytes: 64, wire_bytes: 64 };
    RemoteJob {
        compiler: "/usr/bin/ccroute-test".into(),
        toolchain: Arc::new(test_toolchain()),
        package: None,
        spec: TaskSpec { args: vec![arg.to_arg()], input_path: "u.c".into(), cwd: None, env: vec![], inputs: None },
        text: Bytes::from(format!("{seq:064}")),
        cacheable: false,
        inputs: None,
    }
}

async fn phases(
    c: &ScaleConfig,
    addr: std::net::SocketAddr,
    pid: u32,
    tls_dir: &std::path::Path,
    scratch: &std::path::Path,
) -> Result<ScaleReport, String> {
    let mut r = ScaleReport { config: Some(c.clone()), ..ScaleReport::default() };
    let admin = tls::load(tls_dir, CertRole::Admin).map_err(|e| e.to_string())?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    r.rss_idle = rss_bytes(pid);
    let stop = CancellationToken::new();
    let tasks = TaskTracker::new();
    let agent_id = Arc::new(tls::load(tls_dir, CertRole::Agent).map_err(|e| e.to_string())?);
    let joined = Instant::now();
    for i in 0..c.agents {
        let mut a = AgentConfig::new(addr, agent_id.clone());
        a.jobs = c.tokens;
        a.discover = false;
        a.test_toolchain = true;
        a.shipping = None;
        a.scratch_parent = scratch.to_owned();
        a.host_name = format!("scale-a{i}");
        let stop = stop.clone();
        tasks.spawn(async move {
            if let Err(e) = ccroute::agent::daemon::run(a, stop).await {
                eprintln!("scale: agent {i}: {e}");
            }
        });
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let s = status(addr, &admin, deadline).await?;
        if s.agents.len() == c.agents {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("scale: {} of {} agents joined in 180 s", s.agents.len(), c.agents));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    r.join_s = joined.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    r.rss_agents = rss_bytes(pid);

    let consumerd_id = tls::load(tls_dir, CertRole::Consumerd).map_err(|e| e.to_string())?;
    let mut links = Vec::with_capacity(c.consumerds);
    for i in 0..c.consumerds {
        let mut lc = LinkConfig::new(addr, consumerd_id.clone());
        lc.host_name = format!("scale-c{i}");
        links.push(Link::start(lc, Arc::new(Stats::default()), stop.clone(), &tasks));
    }
    for l in &links {
        let mut w = l.window();
        tokio::time::timeout(Duration::from_secs(120), w.wait_for(|v| *v > 0))
            .await
            .map_err(|_| "scale: a consumerd did not connect in 120 s")?
            .map_err(|_| "scale: a link ended")?;
    }

    // Throughput.
    let done = Arc::new(AtomicU64::new(0));
    let lat = Arc::new(Mutex::new(Vec::<u64>::new()));
    let seq = Arc::new(AtomicU64::new(0));
    let harness_before = crate::cpu_seconds(std::process::id());
    let cpu_before = cpu_seconds(pid);
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(c.seconds);
    let mut drivers = JoinSet::new();
    for l in &links {
        for _ in 0..c.in_flight {
            let (l, done, lat, seq) = (l.clone(), done.clone(), lat.clone(), seq.clone());
            drivers.spawn(async move {
                let mut mine = Vec::new();
                while Instant::now() < until {
                    let n = seq.fetch_add(1, Ordering::Relaxed);
                    let submitted = monotonic_ns();
                    if let Ok(c) = l.compile(job(0, n)).await {
                        if let Some(s) = ReplayStamp::read(&c.parts.object) {
                            mine.push(s.started_ns.saturating_sub(submitted));
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                if let Ok(mut v) = lat.lock() {
                    v.extend(mine);
                }
            });
        }
    }
    while drivers.join_next().await.is_some() {}
    if done.load(Ordering::Relaxed) == 0 {
        return Err("scale: no unit came back from an agent".into());
    }
    let took = started.elapsed().as_secs_f64();
    r.sched_cpu_s = cpu_seconds(pid) - cpu_before;
    r.harness_cpu_s = crate::cpu_seconds(std::process::id()) - harness_before;
    r.tasks = done.load(Ordering::Relaxed);
    r.tasks_per_s = r.tasks as f64 / took;
    let mut v = lat.lock().map(|v| v.clone()).unwrap_or_default();
    v.sort_unstable();
    let q = |p: f64| v.get(((v.len().saturating_sub(1)) as f64 * p) as usize).copied().unwrap_or(0) as f64 / 1e6;
    r.dispatch_ms = (q(0.5), q(0.99), v.last().copied().unwrap_or(0) as f64 / 1e6);

    // Waiting tasks: hold every token, then queue more.
    let total_tokens = c.agents * c.tokens as usize;
    let mut holders = JoinSet::new();
    for i in 0..total_tokens {
        let l = links[i % links.len()].clone();
        holders.spawn(async move { l.compile(job(600_000_000, i as u64)).await.is_ok() });
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = status(addr, &admin, deadline).await?;
        r.held_seen = s.agents.iter().map(|a| u64::from(a.tokens_in_use)).sum();
        if r.held_seen as usize >= total_tokens || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    r.rss_held = rss_bytes(pid);
    for i in 0..c.waiting {
        let l = links[i % links.len()].clone();
        holders.spawn(async move { l.compile(job(1, (total_tokens + i) as u64)).await.is_ok() });
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = status(addr, &admin, deadline).await?;
        r.waiting_seen = s.routes.iter().map(|x| x.queued).sum();
        if r.waiting_seen as usize >= c.waiting || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    r.rss_waiting = rss_bytes(pid);
    holders.abort_all();
    while holders.join_next().await.is_some() {}
    stop.cancel();
    tasks.close();
    let _ = tokio::time::timeout(Duration::from_secs(20), tasks.wait()).await;
    Ok(r)
}
