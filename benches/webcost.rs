//! What the metrics listener and the web view cost the scheduler: its CPU
//! per task at about 1,000 tasks/s, without `--metrics` (A) and with it,
//! a headless Chromium attached to the live page and `/metrics` scraped
//! every 5 s (B), in alternating pairs on the same machine; printed as the
//! ratio B/A of scheduler CPU seconds per task, pair by pair, and their
//! median (the goal: at most 1.02).
//!
//! Real processes on 127.0.0.1: a `ccroute scheduler`, one `ccroute agent`
//! with the built-in test toolchain (a no-op compile), and this program as
//! the consumerd's link, paced to 1,000 tasks/s. The scheduler's CPU is read
//! from `/proc/<pid>/stat` over the same window in both runs.
//!
//! On a machine of two or more CPUs the scheduler runs alone on CPU 0 and
//! everything else (the agent, this program, the browser, curl) on the
//! others (`taskset`): the browser's rendering then cannot preempt the
//! scheduler's threads, which on a shared core changes how often they sleep
//! and wake — on two shared cores that interference moved single pairs by
//! ±30 % either way, far more than the web view's own code costs. Pairs
//! alternate their order (AB, BA, …) so that a drift of the machine
//! cancels.
//!
//! `cargo bench --bench webcost` (needs `chromium`); under `cargo test` it
//! runs one short pair and checks only that every task was answered.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ccroute::consumerd::link::{Link, LinkConfig};
use ccroute::consumerd::{Remote, RemoteJob, Stats};
use ccroute::net::tls::{self, CertRole};
use ccroute::toolchain::test_toolchain;
use ccroute_wire::TaskSpec;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const CCROUTE: &str = env!("CARGO_BIN_EXE_ccroute");
const RATE: u64 = 1_000;

/// A child process, killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    let Some(rest) = stat.rsplit(')').next() else { return 0.0 };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// The CPU the scheduler runs on alone, and the list the rest run on;
/// `None` on a machine of one CPU (nothing is pinned).
fn cpu_split() -> Option<(String, String)> {
    let n = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    (n >= 2).then(|| ("0".to_owned(), format!("1-{}", n - 1)))
}

/// `program args…`, run on `cpus` when given.
fn pinned(cpus: Option<&str>, program: &str) -> Command {
    match cpus {
        Some(list) => {
            let mut c = Command::new("taskset");
            c.args(["-c", list, program]);
            c
        }
        None => Command::new(program),
    }
}

/// The metrics address the scheduler logged (it was given port 0: one
/// picked here and passed down could be taken by another process between).
async fn logged_metrics_addr(log: &Path) -> Result<String, BoxError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(addr) = text.split("metrics on http://").nth(1).and_then(|rest| rest.split("/metrics").next()) {
            return Ok(addr.to_owned());
        }
        if Instant::now() > deadline {
            return Err(format!("the scheduler logged no metrics address in 20 s: {text}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One run: the scheduler's CPU seconds and the tasks answered in the
/// measured window.
async fn run(tls: &Path, web: bool, secs: u64) -> Result<(f64, u64), BoxError> {
    let mut args = vec!["scheduler", "--listen", "127.0.0.1:0", "--no-cache", "--no-optimizer"];
    if web {
        args.extend(["--metrics", "127.0.0.1:0"]);
    }
    let log = tls.with_file_name(format!("scheduler-{}.log", if web { "b" } else { "a" }));
    let tls_s = tls.to_string_lossy().into_owned();
    let split = cpu_split();
    let (own, rest) = (split.as_ref().map(|s| s.0.as_str()), split.as_ref().map(|s| s.1.as_str()));
    let mut sched = pinned(own, CCROUTE)
        .args(&args)
        .args(["--tls-dir", &tls_s])
        // Info from the command line's module only: the metrics address.
        .env("RUST_LOG", "warn,ccroute::cli=info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log)?)
        .spawn()?;
    let mut line = String::new();
    BufReader::new(sched.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
    let sched = Proc(sched);
    let addr: std::net::SocketAddr = line.trim().rsplit(' ').next().ok_or("no address")?.parse()?;
    let metrics = if web { logged_metrics_addr(&log).await? } else { String::new() };
    let _agent = Proc(
        pinned(rest, CCROUTE)
            .args(["agent", "--scheduler", &addr.to_string(), "--tls-dir", &tls_s])
            .args(["--test-toolchain", "--no-discover", "--no-shipping", "--jobs", "256"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let shutdown = CancellationToken::new();
    let tasks = TaskTracker::new();
    let identity = tls::load(tls, CertRole::Consumerd)?;
    let link = Link::start(LinkConfig::new(addr, identity), Arc::new(Stats::default()), shutdown.clone(), &tasks);
    let window = link.window();
    let deadline = Instant::now() + Duration::from_secs(30);
    while *window.borrow() == 0 {
        if Instant::now() > deadline {
            return Err("the link never got a remote window (no agent?)".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _browser = if web {
        let url = format!("http://{metrics}/");
        Some(Proc(
            pinned(rest, "chromium")
                .args(["--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0", &url])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("chromium: {e} (apt-get install chromium)"))?,
        ))
    } else {
        None
    };
    let answered = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let spec = TaskSpec { args: vec!["-O2".into()], input_path: "cost.c".into(), cwd: None, env: vec![], inputs: None };
    let toolchain = Arc::new(test_toolchain());
    let mut pace = tokio::time::interval(Duration::from_micros(1_000_000 / RATE));
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let warmup = Duration::from_secs(2);
    let started = Instant::now();
    let mut measured: Option<(f64, u64)> = None;
    let mut scraped = Instant::now();
    let mut seq = 0u64;
    let mut inflight = tokio::task::JoinSet::new();
    while started.elapsed() < warmup + Duration::from_secs(secs) {
        pace.tick().await;
        if measured.is_none() && started.elapsed() >= warmup {
            measured = Some((cpu_seconds(sched.0.id()), answered.load(Ordering::Relaxed)));
        }
        if web && scraped.elapsed() >= Duration::from_secs(5) {
            scraped = Instant::now();
            let url = format!("http://{metrics}/metrics");
            let rest = rest.map(str::to_owned);
            inflight.spawn(async move {
                let _ = tokio::process::Command::from(pinned(rest.as_deref(), "curl"))
                    .args(["-sf", "-o", "/dev/null", &url])
                    .status()
                    .await;
            });
        }
        seq += 1;
        let job = RemoteJob {
            package: None,
            compiler: PathBuf::from("/usr/bin/ccroute-test"),
            toolchain: toolchain.clone(),
            spec: spec.clone(),
            text: Bytes::from(format!("int cost_{seq}(void) {{ return {seq}; }}\n")),
            cacheable: false,
            inputs: None,
        };
        let (link, answered, failed) = (link.clone(), answered.clone(), failed.clone());
        inflight.spawn(async move {
            match link.compile(job).await {
                Ok(c) if c.exit_status == 0 => answered.fetch_add(1, Ordering::Relaxed),
                _ => failed.fetch_add(1, Ordering::Relaxed),
            };
        });
        while inflight.try_join_next().is_some() {}
    }
    let (cpu0, done0) = measured.ok_or("no measured window")?;
    let cpu = cpu_seconds(sched.0.id()) - cpu0;
    let done = answered.load(Ordering::Relaxed) - done0;
    while inflight.join_next().await.is_some() {}
    shutdown.cancel();
    tasks.close();
    let failed = failed.load(Ordering::Relaxed);
    if failed > 0 {
        return Err(format!("{failed} tasks were not answered by the agent").into());
    }
    Ok((cpu, done))
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let full = std::env::args().any(|a| a == "--bench");
    let (pairs, secs) = if full { (8, 12) } else { (1, 2) };
    let dir = tempfile::tempdir()?;
    let tls = dir.path().join("tls");
    let out = Command::new(CCROUTE).args(["certs", "init"]).arg(&tls).output()?;
    if !out.status.success() {
        return Err(format!("certs init: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    if !full {
        // Under `cargo test`: one short run without the browser.
        let (_, done) = run(&tls, false, secs).await?;
        println!("webcost: {done} tasks answered in {secs} s (run `cargo bench --bench webcost` to measure)");
        return Ok(());
    }
    println!("scheduler CPU per task at {RATE} tasks/s: A without --metrics, B with --metrics, a browser on the page and a scrape every 5 s");
    if let Some((own, rest)) = cpu_split() {
        // This program (every thread of it) off the scheduler's CPU.
        let me = std::process::id().to_string();
        let ok = Command::new("taskset").args(["-a", "-p", "-c", &rest, &me]).stdout(Stdio::null()).status()?;
        if !ok.success() {
            return Err("taskset could not pin this program (util-linux's taskset is needed)".into());
        }
        println!("the scheduler alone on CPU {own}; the agent, this program, the browser and curl on CPUs {rest}");
    }
    let mut ratios = Vec::new();
    for pair in 1..=pairs {
        // AB, then BA: a drift of the machine during a pair cancels over two.
        let (a, b) = if pair % 2 == 1 {
            let a = run(&tls, false, secs).await?;
            (a, run(&tls, true, secs).await?)
        } else {
            let b = run(&tls, true, secs).await?;
            (run(&tls, false, secs).await?, b)
        };
        let ((a_cpu, a_done), (b_cpu, b_done)) = (a, b);
        let a = a_cpu / a_done.max(1) as f64;
        let b = b_cpu / b_done.max(1) as f64;
        let ratio = b / a;
        println!(
            "  pair {pair}: A {a_done} tasks, {:.1} µs CPU/task   B {b_done} tasks, {:.1} µs CPU/task   B/A {ratio:.3}",
            a * 1e6,
            b * 1e6
        );
        ratios.push(ratio);
    }
    let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    let (lo, hi) = ratios.iter().fold((f64::MAX, f64::MIN), |(l, h), r| (l.min(*r), h.max(*r)));
    let m = median(ratios);
    println!(
        "median B/A {m:.3} (mean {mean:.3}, pairs {lo:.3}–{hi:.3}): the web view and metrics cost {:+.1} % of the scheduler's CPU (goal ≤ +2 %)",
        (m - 1.0) * 100.0
    );
    Ok(())
}
