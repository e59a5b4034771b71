//! End to end: the optimizer against real load — real daemons on 127.0.0.1,
//! real gcc, `make -j16` through the wrapper, everything read back through
//! `ccroute status --json`, as an operator would.
//!
//! - An agent inside a cgroup limited to one CPU, started with `--jobs 8`,
//!   gets more compiles than that CPU can run: the scheduler lowers its
//!   token limit, and its samples show the cgroup's throttling.
//! - Two consumerds, each with a backlog, share the cluster evenly, and
//!   their shares add up to the agents' limits raised by the headroom.
//!
//! The first test needs a CPU cgroup it can create (root, with the v1 `cpu`
//! controller, or v2 with `cpu` delegable); elsewhere it prints why and
//! passes without checking anything. The two tests load the CPUs on
//! purpose, so they take turns rather than run at once.
//!
//! To run them by hand, as root, and see what they saw (the series of token
//! limits with the optimizer's reasons; the consumerds' shares as the builds
//! go):
//!
//! ```text
//! cargo test --test e2e_optimizer -- --nocapture
//! ```
//!
//! The first one by hand, without the test (v1; on v2 write `100000 100000`
//! to `cpu.max` instead of the two files):
//!
//! ```text
//! mkdir /sys/fs/cgroup/cpu/agent1cpu
//! echo 100000 > /sys/fs/cgroup/cpu/agent1cpu/cpu.cfs_period_us
//! echo 100000 > /sys/fs/cgroup/cpu/agent1cpu/cpu.cfs_quota_us
//! sh -c 'echo $$ > /sys/fs/cgroup/cpu/agent1cpu/cgroup.procs;
//!        exec ccroute agent --jobs 8 --name limited --scheduler HOST:PORT'
//! # make -j16 CC="ccroute gcc" through a consumerd started with --prefer-remote
//! ccroute status    # LIMIT/MAX drops below 8/8; THROTTLED goes above 0%
//! ```
//!
//! Left out: raising a limit (an idle agent keeps its own), more than one
//! limited agent, and per-cgroup pressure (v1 has none: agents there read
//! the host's).

#![allow(clippy::unwrap_used)]

mod common;

use std::fs::File;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use ccroute::agent::cgroup::{CgroupError, CpuLimitedCgroup};
use ccroute_core::optimizer::Params;
use common::project::{self, Shape};
use common::{ccroute, Cluster, Daemon};

/// Held by each test for its whole run: both load the machine's CPUs, and
/// one's load must not decide the other's outcome.
static CPU_TURN: Mutex<()> = Mutex::new(());

/// A `make -j16` in its own process group, so that stopping it also stops
/// every wrapper and compiler it started.
struct Build {
    name: String,
    dir: PathBuf,
    child: Child,
    log: PathBuf,
    units: usize,
}

impl Build {
    /// Starts `make -j16` in `dir` with compiles through the wrapper; its
    /// output goes to `<dir>/make.log`.
    fn start(name: &str, dir: &Path, units: usize, env: &[(String, String)]) -> Build {
        let log = dir.join("make.log");
        let out = File::create(&log).unwrap();
        let wrapped = |compiler: &str| format!("{} {compiler}", ccroute().display());
        let child = Command::new("make")
            .current_dir(dir)
            .args(["-j16", "BUILD=build", "CFLAGS=-O2", "CXXFLAGS=-O2"])
            .arg(format!("CC={}", wrapped("gcc")))
            .arg(format!("CXX={}", wrapped("g++")))
            .envs(env.iter().map(|(k, v)| (k, v)))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        Build { name: name.into(), dir: dir.to_path_buf(), child, log, units }
    }

    /// Compiles without an object yet: queued in make, waiting in the
    /// consumerd, or running.
    fn remaining(&self) -> usize {
        self.units.saturating_sub(count_objects(&self.dir.join("build")))
    }

    /// What make has printed so far, for a failure message.
    fn output(&self) -> String {
        format!("----- {} -----\n{}", self.name, std::fs::read_to_string(&self.log).unwrap_or_default())
    }

    /// Panics with make's output if make has ended with a failure.
    fn assert_not_failed(&mut self, cluster: &Cluster) {
        if let Some(status) = self.child.try_wait().unwrap() {
            assert!(status.success(), "{} failed ({status}):\n{}\n{}", self.name, self.output(), cluster.logs());
        }
    }

    /// Whether make is still running.
    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills make's whole process group, if make has not ended. Only while
    /// make is unreaped is its pid (the group's id) certain to be ours.
    fn stop(&mut self) {
        if self.running() {
            let group = format!("-{}", self.child.id());
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        }
        let _ = self.child.wait();
    }
}

/// Every `.o` under `dir`.
fn count_objects(dir: &Path) -> usize {
    common::files(dir, common::is_object).len()
}

/// Everything a test started, stopped in an order that leaves nothing
/// behind, also when the test fails: builds first, then agents gently (an
/// agent that is told to stop kills its compilers; one that is killed
/// leaves them running), then whatever is left in the cgroup, then the
/// daemons, then the cgroup itself.
struct Run {
    builds: Vec<Build>,
    clusters: Vec<Cluster>,
    cgroup: Option<CpuLimitedCgroup>,
}

impl Drop for Run {
    fn drop(&mut self) {
        for b in &mut self.builds {
            b.stop();
        }
        for c in &mut self.clusters {
            for a in &mut c.agents {
                a.stop();
            }
        }
        if let Some(cg) = &self.cgroup {
            kill_members(cg.path());
        }
    }
}

/// SIGKILLs every process left in the cgroup at `dir` (all started by the
/// test: the agent and its compilers) and waits, briefly, for it to empty.
fn kill_members(dir: &Path) {
    let procs = dir.join("cgroup.procs");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pids = std::fs::read_to_string(&procs).unwrap_or_default();
        let pids: Vec<&str> = pids.split_whitespace().collect();
        if pids.is_empty() || Instant::now() > deadline {
            return;
        }
        for pid in pids {
            let _ = Command::new("kill").args(["-KILL", pid]).status();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Gives the cgroup at `dir` the largest CPU weight there is. A cgroup
/// competes with the host's other work as one entity: at the default weight,
/// on a busy host, eight compiles inside it share what one process outside
/// gets, never reach the quota, and are never throttled. With the weight,
/// the quota is what holds them back, as on a build machine that does
/// nothing else.
fn give_full_weight(dir: &Path) {
    for (file, value) in [("cpu.shares", "262144"), ("cpu.weight", "10000")] {
        let path = dir.join(file);
        if path.exists() {
            std::fs::write(&path, value).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
            return;
        }
    }
    panic!("{} has neither cpu.shares nor cpu.weight", dir.display());
}

/// Starts `ccroute agent` with `args` inside `cgroup`: the shell that will
/// become the agent waits on its stdin until it has been moved, so the
/// agent finds its cgroup from its first instruction (its sampler looks
/// once, at start).
fn start_agent_in(c: &mut Cluster, cgroup: &CpuLimitedCgroup, name: &str, args: &[&str]) {
    let log = c.dir.path().join(format!("{name}.log"));
    let mut child = c
        .command("sh")
        .arg("-c")
        .arg(r#"read -r go && exec "$0" "$@""#)
        .arg(ccroute())
        .args(["agent", "--scheduler", &c.addr.unwrap().to_string(), "--name", name])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut go = child.stdin.take().unwrap();
    let pid = child.id();
    // Pushed first, so that a failure below still kills it.
    c.agents.push(Daemon { name: name.into(), child, log });
    cgroup.add_pid(pid).unwrap_or_else(|e| panic!("cannot move the agent (pid {pid}) into its cgroup: {e}"));
    let membership = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let leaf = cgroup.path().file_name().unwrap().to_str().unwrap();
    assert!(membership.contains(leaf), "pid {pid} is not in {leaf}:\n{membership}");
    writeln!(go, "go").unwrap();
}

/// One status report taken while both consumerds had backlogs.
struct Busy {
    /// Seconds since the builds started.
    t: f64,
    /// Each consumerd's preferred remote limit.
    limits: [u64; 2],
    /// Each consumerd's tasks at the scheduler.
    in_flight: [u64; 2],
    /// The same, one sample earlier.
    before: [u64; 2],
    /// The agents' token limits, summed.
    tokens: u64,
    /// Each build's compiles without an object yet.
    left: [usize; 2],
}

/// The agent called `name` in a status report.
fn agent<'a>(status: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    status["agents"].as_array()?.iter().find(|a| a["host_name"] == name)
}

fn num(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a whole number: {v}"))
}

/// A unique, plain cgroup name.
fn cgroup_name() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("ccroute-e2e-{}-{nanos}", std::process::id())
}

/// Whether `e` means this host or user cannot make CPU cgroups, rather
/// than that making one went wrong.
fn cannot_create_here(e: &CgroupError) -> bool {
    match e {
        CgroupError::Unavailable(_) => true,
        CgroupError::Io { source, .. } => {
            matches!(source.kind(), std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem)
        }
        _ => false,
    }
}

/// One CPU, eight tokens, sixteen compiles of a few CPU-seconds each: the
/// cgroup throttles, the optimizer sees it, and within 20 s of the build
/// starting the scheduler takes tokens away.
#[test]
fn an_agent_limited_to_one_cpu_gets_its_token_limit_lowered() {
    let _turn = CPU_TURN.lock().unwrap_or_else(PoisonError::into_inner);
    let cgroup = match CpuLimitedCgroup::create(&cgroup_name(), 1.0) {
        Ok(cg) => cg,
        Err(e) if cannot_create_here(&e) => {
            ccroute::test_env::lacking(
                "cgroups",
                &format!("cannot create a cpu cgroup here ({e}); run as root on a host with the cpu controller"),
            );
            return;
        }
        Err(e) => panic!("creating a cpu cgroup failed: {e}"),
    };
    give_full_weight(cgroup.path());
    println!("agent cgroup: {} (1 cpu)", cgroup.path().display());
    let mut run = Run { builds: vec![], clusters: vec![Cluster::new()], cgroup: Some(cgroup) };

    let dir = tempfile::tempdir().unwrap();
    let shape = Shape { c: 2, cxx: 0 };
    let slow = 16;
    project::generate(dir.path(), shape);
    project::add_slow_units(dir.path(), slow, 1500);
    let units = shape.c + shape.cxx + 1 + slow;

    // The build starts first and waits at the consumerd (one local slot, no
    // agent yet), so that the agent has a backlog from the moment it joins
    // at its full limit, and compiles reach it before the optimizer has two
    // of its samples to act on.
    //
    // But not before the optimizer's first tick has closed the consumerd's
    // window: until then a consumerd is given a remote limit of 1 even with
    // no agent at all, and each compile sent through it is answered "no
    // agents", falls back, and stays local for good, so that a whole backlog
    // can drain into the one local slot in the second before the agent joins.
    let c = &mut run.clusters[0];
    c.start_scheduler(&[]);
    c.start_consumerd(1, true);
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.status()["consumerds"][0]["remote_limit"].as_u64() != Some(0) {
        assert!(Instant::now() < deadline, "the consumerd's window never closed: {}\n{}", c.status(), c.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    // The scheduler passes a new limit on within 100 ms.
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let env = c.wrapper_env();
    run.builds.push(Build::start("make", dir.path(), units, &env));
    let c = &mut run.clusters[0];
    start_agent_in(c, run.cgroup.as_ref().unwrap(), "limited", &["--jobs", "8"]);
    let c = &run.clusters[0];

    // Times count from the start of the build: a little before the load
    // reaches the agent, so the 20 s allowed are, if anything, fewer.
    let mut loaded: Option<Duration> = None;
    let mut lowered: Option<(Duration, u64, String)> = None;
    let mut limits: Vec<(Duration, u64)> = vec![];
    let mut decisions: Vec<String> = vec![];
    let mut max_throttled = 0.0_f64;
    let mut max_cpu_use = 0.0_f64;
    let mut last_status: serde_json::Value;
    loop {
        run.builds[0].assert_not_failed(c);
        let status = c.status();
        let t = started.elapsed();
        let Some(a) = agent(&status, "limited") else {
            assert!(t < Duration::from_secs(60), "the agent never joined: {status}\n{}", c.logs());
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        assert_eq!(num(&a["max_limit"]), 8, "--jobs is the agent's maximum: {a}");
        if loaded.is_none() && num(&a["tokens_in_use"]) > 0 {
            loaded = Some(t);
        }
        let limit = num(&a["token_limit"]);
        if limits.last().is_none_or(|l| l.1 != limit) {
            limits.push((t, limit));
        }
        let decision = a["last_decision"].as_str().unwrap_or_default().to_string();
        if !decision.is_empty() && decisions.last() != Some(&decision) {
            decisions.push(decision.clone());
        }
        max_throttled = max_throttled.max(a["throttled"].as_f64().unwrap_or(0.0));
        max_cpu_use = max_cpu_use.max(a["cpu_use"].as_f64().unwrap_or(0.0));
        if lowered.is_none() && limit < 8 {
            lowered = Some((t, limit, decision));
        }
        let named = decisions.iter().any(|d| d.contains("throttled in"));
        last_status = status;
        if (lowered.is_some() && max_throttled > 0.0 && named) || t > Duration::from_secs(45) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }

    let c = &run.clusters[0];
    let series: Vec<String> = limits.iter().map(|(t, l)| format!("{l} at {:.1}s", t.as_secs_f64())).collect();
    let Some(loaded) = loaded else {
        panic!(
            "no compile reached the agent in 45 s: {}\n{last_status:#}\n{}\n{}",
            series.join(" -> "),
            c.logs(),
            run.builds[0].output()
        )
    };
    println!("first compile seen on the agent {:.1} s after make started", loaded.as_secs_f64());
    println!("token limits since make started: {}", series.join(" -> "));
    println!("optimizer decisions, in order:");
    for d in &decisions {
        println!("  {d}");
    }
    println!(
        "most throttled: {:.0}% of periods; most cpu use: {:.0}% of capacity",
        max_throttled * 100.0,
        max_cpu_use * 100.0
    );
    let (after, limit, why) = lowered.unwrap_or_else(|| {
        panic!("the limit was not lowered in 45 s: {}\n{last_status:#}\n{}", series.join(" -> "), c.logs())
    });
    println!("lowered to {limit} {:.1} s after make started: {why}", after.as_secs_f64());
    assert!(
        after <= Duration::from_secs(20),
        "lowered only after {:.1} s: {}",
        after.as_secs_f64(),
        series.join(" -> ")
    );
    assert!(max_throttled > 0.0, "never throttled: the sampler did not read the cgroup\n{}", decisions.join("\n"));
    // Host-wide pressure (all a v1 host offers) may cut the limit too, even
    // before any load; the cgroup's own throttling must be what the
    // optimizer saw as the overload.
    assert!(
        decisions.iter().any(|d| d.contains("throttled in")),
        "no decision named the cgroup's throttling:\n{}",
        decisions.join("\n")
    );
    // A cut names the capacity it cut to: the quota's one CPU, not the host's.
    for d in decisions.iter().filter(|d| d.starts_with("lower:")) {
        assert!(d.contains("on 1.0 cpus"), "a cut against a capacity other than the cgroup's one cpu: {d}");
    }
}

/// Two consumerds with backlogs against one scheduler: while both are busy,
/// their remote limits are within one of each other and add up to the
/// agents' limits raised by the optimizer's headroom.
///
/// The scheduler runs with `--no-optimizer`: agents keep their own limits
/// while the optimizer thread still computes the consumerds' shares. With
/// agent tuning on, agents sharing this small, busy host with everything
/// else would be cut to one token each, and shares of one and one would say
/// little about fairness.
#[test]
fn two_consumerds_with_backlogs_share_the_cluster_evenly() {
    let _turn = CPU_TURN.lock().unwrap_or_else(PoisonError::into_inner);
    let mut run = Run { builds: vec![], clusters: vec![Cluster::new(), Cluster::new()], cgroup: None };
    {
        let [a, b] = &mut run.clusters[..] else { unreachable!() };
        // No cache: the two builds are of identical generated projects, and
        // one's hits would widen its share (as they should) and skew the split.
        a.start_scheduler(&["--no-optimizer", "--no-cache"]);
        a.start_agent(&["--jobs", "4", "--name", "agent0"]);
        a.start_agent(&["--jobs", "4", "--name", "agent1"]);
        a.start_consumerd(1, true);
        a.wait_ready(2);
        // The second consumerd: its own socket, the first one's scheduler
        // and certificates.
        b.tls = a.tls.clone();
        b.addr = a.addr;
        b.start_consumerd(1, true);
    }
    // Until the optimizer's first tick with both, the first keeps the
    // share it had alone; a build started then would take all of it, and
    // hold it until those compiles end.
    let c = &run.clusters[0];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = c.status();
        let limits: Vec<u64> = s["consumerds"].as_array().unwrap().iter().map(|x| num(&x["remote_limit"])).collect();
        if limits.len() == 2 && limits[0] == limits[1] && limits[0] > 0 {
            println!("idle shares {} and {}", limits[0], limits[1]);
            break;
        }
        assert!(Instant::now() < deadline, "the two consumerds never got even idle shares: {s}\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(100));
    }

    // Far more compiles than the cluster's 8 tokens, of about half a
    // CPU-second each, so that tasks end and others take their place while
    // we watch; slow ones first in make's order. Each consumerd wants about
    // 15 compiles remote for as long as 12 remain.
    let shape = Shape { c: 2, cxx: 0 };
    let slow = 48;
    let units = shape.c + shape.cxx + 1 + slow;
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    for d in &dirs {
        project::generate(d.path(), shape);
        project::add_slow_units(d.path(), slow, 500);
    }
    let started = Instant::now();
    for (i, d) in dirs.iter().enumerate() {
        let env = run.clusters[i].wrapper_env();
        run.builds.push(Build::start(&format!("build{i}"), d.path(), units, &env));
    }

    const BUSY_LEFT: usize = 12;
    let headroom = Params::default().remote_headroom;
    let c = &run.clusters[0];
    // When both consumerds had first sent tasks: their demand had reached
    // the scheduler.
    let mut both_submitting: Option<Instant> = None;
    let mut busy: Vec<Busy> = vec![];
    let mut first_busy: Option<Instant> = None;
    let mut before = [0, 0];
    loop {
        for b in &mut run.builds {
            b.assert_not_failed(c);
        }
        let s = c.status();
        let now = Instant::now();
        let t = (now - started).as_secs_f64();
        let cds = s["consumerds"].as_array().unwrap();
        assert_eq!(cds.len(), 2, "a consumerd left: {s}\n{}", c.logs());
        let (la, lb) = (num(&cds[0]["remote_limit"]), num(&cds[1]["remote_limit"]));
        let (fa, fb) = (num(&cds[0]["in_flight"]), num(&cds[1]["in_flight"]));
        let total: u64 = s["agents"].as_array().unwrap().iter().map(|a| num(&a["token_limit"])).sum();
        let left: Vec<usize> = run.builds.iter().map(Build::remaining).collect();
        let all_running = run.builds.iter_mut().all(Build::running);
        println!(
            "{t:5.1}s  remote limits {la:>2} + {lb:>2} = {:>2}  agents' tokens {total:>2}  in flight {:>2} {:>2}  compiles left {:>2} {:>2}",
            la + lb,
            fa,
            fb,
            left[0],
            left[1]
        );
        if both_submitting.is_none() && cds.iter().all(|x| num(&x["submitted"]) > 0) {
            both_submitting = Some(now);
        }
        let backlogged = all_running && left.iter().all(|l| *l >= BUSY_LEFT);
        // Two optimizer intervals after both had demand: the shares now
        // were computed from both backlogs.
        let settled = both_submitting.is_some_and(|since| now - since >= Duration::from_millis(2500));
        if backlogged && settled {
            busy.push(Busy {
                t,
                limits: [la, lb],
                in_flight: [fa, fb],
                before,
                tokens: total,
                left: [left[0], left[1]],
            });
            first_busy.get_or_insert(now);
        }
        before = [fa, fb];
        let seen_enough = first_busy.is_some_and(|f| now - f >= Duration::from_secs(8)) && busy.len() >= 8;
        if (!backlogged && both_submitting.is_some()) || seen_enough {
            break;
        }
        assert!(now - started < Duration::from_secs(120), "the builds never got going\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(250));
    }

    println!("{} samples with both consumerds backlogged", busy.len());
    assert!(busy.len() >= 4, "too few samples with both consumerds backlogged ({}) to judge\n{}", busy.len(), c.logs());
    for b in &busy {
        let ([la, lb], t, tokens) = (b.limits, b.t, b.tokens);
        assert!(la.abs_diff(lb) <= 1, "at {t:.1}s the shares were {la} and {lb}\n{}", c.logs());
        let expected = (tokens as f64 * headroom).floor() as u64;
        assert_eq!(la + lb, expected, "at {t:.1}s: shares {la} + {lb} against {tokens} tokens x {headroom} headroom");
        // A share that shrank does not preempt: tasks granted under a wider
        // one (while the other consumerd's demand was still arriving) run to
        // their end, but no new task is granted past the share.
        for i in 0..2 {
            let (limit, now, before) = (b.limits[i], b.in_flight[i], b.before[i]);
            assert!(
                now <= limit.max(before),
                "at {t:.1}s a consumerd went from {before} to {now} tasks remote with a share of {limit}"
            );
        }
    }
    for i in 0..2 {
        assert!(
            busy.iter().any(|b| b.in_flight[i] <= b.limits[i]),
            "consumerd {i} stayed above its share while backlogged: {:?}",
            busy.iter().map(|b| (b.in_flight[i], b.limits[i])).collect::<Vec<_>>()
        );
    }
    let most = |i: usize| busy.iter().map(|b| b.in_flight[i]).max().unwrap_or(0);
    let ended = |i: usize| busy[0].left[i] - busy[busy.len() - 1].left[i];
    let b = &busy[busy.len() / 2];
    println!(
        "shares {} and {} of {} ({} tokens x {headroom} headroom); at most {} and {} tasks remote; {} and {} compiles ended meanwhile",
        b.limits[0],
        b.limits[1],
        b.limits[0] + b.limits[1],
        b.tokens,
        most(0),
        most(1),
        ended(0),
        ended(1)
    );
}
