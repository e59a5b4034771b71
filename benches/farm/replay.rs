//! The replay client: drives one consumerd's link to the scheduler (the
//! consumerd's own [`Link`]: its QUIC connection, task registration,
//! payload streaming and answers) as `make -jN` drives a build: at most N
//! units outstanding — or, when asked, the remote window the scheduler
//! gives it if that is larger (as `ccroute make`'s jobserver follows the
//! window) — each submitted as soon as a slot frees and its dependencies
//! are done, in the trace's order. A unit is the test
//! toolchain with `-replay=` (its recorded time × the dilation) and a
//! preprocessed text of its recorded size that compresses to about its
//! recorded wire size. A unit the scheduler sends back is "compiled here":
//! its time slept at speed 1.0 on one of the client's local slots (at most
//! `--local-slots` at once), as a consumerd compiles it on its machine's
//! cores; one whose link failed waits for a local slot or the link back,
//! whichever is first, and goes remote again in the second case (once), as
//! a consumerd's does.
//!
//! One line per unit goes to the output: seq, how it was answered
//! (`remote`, `local:<why>`), submitted / agent start / agent end / answered
//! (`CLOCK_MONOTONIC`, ns), the hold asked and made (µs), the agent's speed
//! (‰), and whether the object arrived with its recorded size.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ccroute::agent::executor::replay::{fill_noise, hold, ReplayArg, ReplayStamp, STAMP_LEN};
use ccroute::consumerd::link::{Link, LinkConfig};
use ccroute::consumerd::{Remote, RemoteError, RemoteJob, Stats};
use ccroute::host::monotonic_ns;
use ccroute::net::{tls, CertRole};
use ccroute::toolchain::test_toolchain;
use ccroute_wire::TaskSpec;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::trace::{Trace, Unit};

/// What one client runs.
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    pub scheduler: SocketAddr,
    pub tls_dir: PathBuf,
    pub trace: Trace,
    pub jobs: usize,
    /// Submit up to the scheduler's window when it is larger than `jobs`.
    pub follow_window: bool,
    /// Units compiled here at once, at most (the consumerd's local slots).
    pub local_slots: usize,
    pub dilate: f64,
    /// `CLOCK_MONOTONIC` ns to start at (0: at once, once connected).
    pub start_at: u64,
    pub name: String,
    /// Where the link keeps its cost model across runs.
    pub costs_file: Option<PathBuf>,
    /// The link sends its waiting tasks in the order they came.
    pub send_in_order: bool,
}

/// One unit's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub seq: u32,
    pub how: String,
    pub submitted_ns: u64,
    pub started_ns: u64,
    pub finished_ns: u64,
    pub answered_ns: u64,
    pub asked_us: u64,
    pub held_us: u64,
    pub speed_milli: u64,
    pub size_ok: bool,
}

impl Answer {
    pub fn line(&self) -> String {
        format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.seq,
            self.how,
            self.submitted_ns,
            self.started_ns,
            self.finished_ns,
            self.answered_ns,
            self.asked_us,
            self.held_us,
            self.speed_milli,
            u8::from(self.size_ok)
        )
    }

    pub fn parse(line: &str) -> Option<Answer> {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() != 10 {
            return None;
        }
        let n = |i: usize| f[i].parse::<u64>().ok();
        Some(Answer {
            seq: f[0].parse().ok()?,
            how: f[1].to_owned(),
            submitted_ns: n(2)?,
            started_ns: n(3)?,
            finished_ns: n(4)?,
            answered_ns: n(5)?,
            asked_us: n(6)?,
            held_us: n(7)?,
            speed_milli: n(8)?,
            size_ok: f[9] == "1",
        })
    }
}

/// Bytes of noise the payloads are cut from.
const POOL: usize = 16 << 20;
/// Zeros after the noise: a text whose zeros fit here is a window of the
/// pool, not a copy.
const ZEROS: usize = 4 << 20;

/// Connects, waits for the start time, replays the trace; the answers in
/// the order they came.
pub async fn run(config: ReplayConfig) -> Result<Vec<Answer>, String> {
    let identity = tls::load(&config.tls_dir, CertRole::Consumerd).map_err(|e| e.to_string())?;
    let mut link_config = LinkConfig::new(config.scheduler, identity);
    link_config.host_name.clone_from(&config.name);
    link_config.costs_file.clone_from(&config.costs_file);
    link_config.longest_first = !config.send_in_order;
    let stop = CancellationToken::new();
    let tasks = TaskTracker::new();
    let link = Link::start(link_config, Arc::new(Stats::default()), stop.clone(), &tasks);
    let mut window = link.window();
    // The guard `wait_for` returns holds the window's lock: dropped at once.
    let connected =
        matches!(tokio::time::timeout(Duration::from_secs(60), window.wait_for(|w| *w > 0)).await, Ok(Ok(_)));
    if !connected {
        return Err(format!("{}: no connection to the scheduler at {} within 60 s", config.name, config.scheduler));
    }
    println!("replay connected");
    let now = monotonic_ns();
    if config.start_at > now {
        tokio::time::sleep(Duration::from_nanos(config.start_at - now)).await;
    }
    let mut pool = vec![0u8; POOL + ZEROS];
    fill_noise(&mut pool[..POOL], 0x9e37_79b9_7f4a_7c15 ^ u64::from(config.name.len() as u32));
    let pool: Bytes = pool.into();
    let answers = drive(&link, &config, &pool).await;
    if let Some(t) = link.transport_stats() {
        eprintln!(
            "replay transport: rtt {:?}, cwnd {} B, congestion events {}, lost packets {} ({} B), sent {} packets ({} B), black holes {}",
            t.path.rtt,
            t.path.cwnd,
            t.path.congestion_events,
            t.path.lost_packets,
            t.path.lost_bytes,
            t.path.sent_packets,
            t.udp_tx.bytes,
            t.path.black_holes_detected
        );
    }
    stop.cancel();
    tasks.close();
    let _ = tokio::time::timeout(Duration::from_secs(5), tasks.wait()).await;
    Ok(answers)
}

/// `make -jN` over the trace's units.
async fn drive(link: &Link, config: &ReplayConfig, pool: &Bytes) -> Vec<Answer> {
    let units = &config.trace.units;
    let mut waiting_on: Vec<usize> = units.iter().map(|u| u.after.len()).collect();
    let mut dependents: Vec<Vec<u32>> = vec![Vec::new(); units.len()];
    for u in units {
        for &a in &u.after {
            dependents[a as usize].push(u.seq);
        }
    }
    let mut ready: VecDeque<u32> = units.iter().filter(|u| u.after.is_empty()).map(|u| u.seq).collect();
    let mut running = JoinSet::new();
    let mut answers = Vec::with_capacity(units.len());
    let toolchain = Arc::new(test_toolchain());
    let local = Arc::new(tokio::sync::Semaphore::new(config.local_slots.max(1)));
    let mut offset = 0usize;
    let window = link.window();
    loop {
        let given = if config.follow_window { *window.borrow() as usize } else { 0 };
        let jobs = config.jobs.max(given).max(1);
        while running.len() < jobs {
            let Some(seq) = ready.pop_front() else { break };
            let unit = units[seq as usize].clone();
            let text = payload(pool, &mut offset, &unit);
            let link = link.clone();
            let toolchain = toolchain.clone();
            let dilate = config.dilate;
            let local = local.clone();
            running.spawn(async move { one(&link, toolchain, unit, text, dilate, &local).await });
        }
        let Some(done) = running.join_next().await else { break };
        let Ok(answer) = done else { continue };
        for &d in &dependents[answer.seq as usize] {
            waiting_on[d as usize] -= 1;
            if waiting_on[d as usize] == 0 {
                ready.push_back(d);
            }
        }
        answers.push(answer);
    }
    answers
}

/// A text of the unit's size: noise for its wire size, zeros after. Most
/// are a window of the pool ending in its zeros (the same noise each
/// time, which nothing here dedupes: no cache, no inputs), so that making
/// them costs the replay nothing: a copy of each, 1.7 GB in all for 5,000
/// units of the large projects, had the replay's make submit them over
/// seconds of the two cores, in make's order, as no `make -j` does.
fn payload(pool: &Bytes, offset: &mut usize, unit: &Unit) -> Bytes {
    let len = usize::try_from(unit.pp_bytes).unwrap_or(usize::MAX);
    let noisy = usize::try_from(unit.pp_wire).unwrap_or(usize::MAX).min(len).min(POOL / 2);
    if len - noisy <= ZEROS {
        return pool.slice(POOL - noisy..POOL - noisy + len);
    }
    let mut out = vec![0u8; len];
    if *offset + noisy > POOL {
        *offset = 0;
    }
    out[..noisy].copy_from_slice(&pool[*offset..*offset + noisy]);
    *offset += noisy + 4099;
    out.into()
}

async fn one(
    link: &Link,
    toolchain: Arc<ccroute_wire::Toolchain>,
    unit: Unit,
    text: Bytes,
    dilate: f64,
    local: &tokio::sync::Semaphore,
) -> Answer {
    let asked_us = (unit.cpu_us as f64 * dilate).round() as u64;
    let arg = ReplayArg { micros: asked_us, object_bytes: unit.obj_bytes, wire_bytes: unit.obj_wire };
    // The input's file name only: the agent names its files itself.
    let object_name = unit.name.rsplit('/').next().unwrap_or("unit.c").to_owned();
    let spec = TaskSpec {
        args: vec![arg.to_arg(), "-O2".into()],
        input_path: object_name,
        cwd: None,
        env: vec![],
        inputs: None,
    };
    let job = RemoteJob {
        compiler: PathBuf::from("/usr/bin/ccroute-test"),
        toolchain,
        package: None,
        spec,
        text,
        cacheable: false,
        inputs: None,
    };
    let submitted_ns = monotonic_ns();
    let answer = |how: String, stamp: Option<ReplayStamp>, size_ok: bool| {
        let s = stamp.unwrap_or(ReplayStamp {
            started_ns: 0,
            finished_ns: 0,
            asked_micros: 0,
            held_micros: 0,
            speed_milli: 0,
        });
        Answer {
            seq: unit.seq,
            how,
            submitted_ns,
            started_ns: s.started_ns,
            finished_ns: s.finished_ns,
            answered_ns: monotonic_ns(),
            asked_us: s.asked_micros,
            held_us: s.held_micros,
            speed_milli: s.speed_milli,
            size_ok,
        }
    };
    let mut got = link.compile(job.clone()).await;
    let mut slot = None;
    if got.as_ref().is_err_and(RemoteError::is_the_links) {
        let mut window = link.window();
        let back = async {
            // The guard `wait_for` returns holds the window's lock: dropped at once.
            window.wait_for(|w| *w > 0).await.is_ok()
        };
        tokio::select! {
            held = local.acquire() => slot = held.ok(),
            true = back => got = link.compile(job).await,
        }
    }
    match got {
        Ok(c) if c.exit_status == 0 => {
            let stamp = ReplayStamp::read(&c.parts.object);
            let want = usize::try_from(unit.obj_bytes).unwrap_or(usize::MAX).max(STAMP_LEN);
            let size_ok = stamp.is_some() && c.parts.object.len() == want;
            answer(if c.cached { "cached".into() } else { "remote".into() }, stamp, size_ok)
        }
        Ok(c) => answer(format!("failed:{}", c.exit_status), None, false),
        Err(e) => {
            // Compiled here, at speed 1.0, once a local slot is free.
            let _slot = match slot {
                Some(held) => Some(held),
                None => local.acquire().await.ok(),
            };
            let started_ns = monotonic_ns();
            let held = hold(asked_us, 1.0);
            tokio::time::sleep(held).await;
            let why: String = e.to_string().chars().map(|c| if c.is_whitespace() { '_' } else { c }).take(60).collect();
            let stamp = ReplayStamp {
                started_ns,
                finished_ns: monotonic_ns(),
                asked_micros: asked_us,
                held_micros: held.as_micros() as u64,
                speed_milli: 1000,
            };
            answer(format!("local:{why}"), Some(stamp), true)
        }
    }
}

/// Writes the answers, one line each.
pub fn render(answers: &[Answer]) -> String {
    let mut out = String::new();
    for a in answers {
        let _ = writeln!(out, "{}", a.line());
    }
    out
}
