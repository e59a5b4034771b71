//! `ccroute make` and `ccroute ninja` with no `-j`: the build gets a
//! jobserver sized to the local slots plus the consumerd's remote window,
//! and resized as the window moves. Real daemons on 127.0.0.1, real gcc;
//! what runs where is read from /proc (compilers under the agents' process
//! trees against those under the build's), not from ccroute's own counters.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{ccroute, is_object, Cluster};

/// One farm at a time: the figures are of one build on this machine's cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One look at the machine: compilers running under the agents, under the
/// build, and the objects written so far.
#[derive(Debug, Clone, Copy)]
struct Sample {
    remote: usize,
    local: usize,
    done: usize,
}

/// A process's parent, from /proc.
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": the name may hold spaces and parentheses.
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `pid` is a compiler proper (cc1, cc1plus) compiling, not preprocessing.
fn is_compiling(pid: u32) -> bool {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    if !exe.file_name().is_some_and(|n| n.to_string_lossy().starts_with("cc1")) {
        return false;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    !cmdline.split(|b| *b == 0).any(|a| a == b"-E")
}

fn under(mut pid: u32, roots: &[u32]) -> bool {
    for _ in 0..64 {
        if roots.contains(&pid) {
            return true;
        }
        match parent(pid) {
            Some(p) if p > 1 => pid = p,
            _ => return false,
        }
    }
    false
}

/// Compilers running under the agents and under the build. /proc is not read
/// at one instant: one compile ending while the next starts could both be
/// seen, so a compiler counts only if it still runs once all are classified
/// (a real excess lasts a compile, and is seen by many samples).
fn sample(agents: &[u32], build: u32, out: &Path) -> Sample {
    let compiling: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| is_compiling(*pid))
        .collect();
    let placed: Vec<(u32, bool, bool)> =
        compiling.into_iter().map(|pid| (pid, under(pid, agents), under(pid, &[build]))).collect();
    let still = |pid: u32| is_compiling(pid);
    let remote = placed.iter().filter(|(pid, a, _)| *a && still(*pid)).count();
    let local = placed.iter().filter(|(pid, a, b)| !*a && *b && still(*pid)).count();
    Sample { remote, local, done: common::files(out, is_object).len() }
}

/// Samples every 20 ms until told to stop.
struct Sampler {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(agents: Vec<u32>, build: u32, out: PathBuf) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (s, v) = (stop.clone(), samples.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let one = sample(&agents, build, &out);
                v.lock().unwrap().push(one);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Sampler { stop, samples, thread: Some(thread) }
    }

    fn finish(mut self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        let v = self.samples.lock().unwrap().clone();
        v
    }
}

/// A cluster: a scheduler keeping agents at their own limits, agents with
/// `jobs` each, a consumerd with one local slot; waits until its window opens
/// and returns it.
fn farm(jobs: &[u32]) -> (Cluster, u32) {
    let mut c = Cluster::new();
    c.start_scheduler(&["--no-optimizer"]);
    for j in jobs {
        c.start_agent(&["-j", &j.to_string(), "--no-shipping"]);
    }
    c.start_consumerd_with(1, false, &["--no-local-cache"]);
    c.wait_ready(jobs.len());
    let window = window(&c);
    (c, window)
}

fn window(c: &Cluster) -> u32 {
    let s = c.status();
    s["consumerds"][0]["remote_limit"].as_u64().unwrap() as u32
}

/// The farm's tokens: every agent's limit.
fn tokens(c: &Cluster) -> u32 {
    let s = c.status();
    s["agents"].as_array().unwrap().iter().map(|a| a["token_limit"].as_u64().unwrap() as u32).sum()
}

fn agent_pids(c: &Cluster) -> Vec<u32> {
    c.agents.iter().map(|a| a.child.id()).collect()
}

/// `ccroute <tool> BUILD=out` (make) or `ccroute ninja` in `dir`, with the
/// cluster's environment and `path` first in PATH.
fn start_build(c: &Cluster, tool: &str, dir: &Path, path_first: Option<&Path>) -> Child {
    let mut cmd = c.command(ccroute());
    cmd.arg(tool).current_dir(dir).env("CCROUTE_VERBOSE", "1");
    if tool == "make" {
        cmd.arg("BUILD=out");
    }
    if let Some(p) = path_first {
        cmd.env("PATH", format!("{}:{}", p.display(), std::env::var("PATH").unwrap_or_default()));
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

/// `ccroute make` of a slow project of `units` in the cluster's dir, sampled
/// from its start: where its objects go, the build, the sampler.
fn make_slow_project(c: &Cluster, units: usize) -> (PathBuf, Child, Sampler) {
    let dir = c.dir.path().join("proj");
    std::fs::create_dir_all(&dir).unwrap();
    common::slow_project(&dir, units);
    let out = dir.join("out");
    let build = start_build(c, "make", &dir, None);
    let sampler = Sampler::start(agent_pids(c), build.id(), out.clone());
    (out, build, sampler)
}

fn finish_build(c: &Cluster, child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the build failed:\n{text}\n{}", c.logs());
    text
}

fn leftover_pipes(c: &Cluster) -> Vec<String> {
    std::fs::read_dir(c.socket.parent().unwrap())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".jobserver"))
        .collect()
}

#[test]
fn make_without_j_keeps_the_farms_share_busy_and_local_compiles_within_the_slots() {
    let _serial = serial();
    let (c, window) = farm(&[3, 3]);
    // The window has headroom for a short queue at the scheduler; the share
    // the farm can run at once is its tokens (this consumerd is alone).
    let share = window.min(tokens(&c));
    assert!(share >= 4, "two agents of 3 should give a share of several: window {window}, tokens {}", tokens(&c));
    let units = 40;
    let (out, build, sampler) = make_slow_project(&c, units);
    let text = finish_build(&c, build);
    let samples = sampler.finish();
    assert!(text.contains("with Descriptors") || text.contains("with Fifo"), "no jobserver was handed over:\n{text}");
    assert_eq!(common::files(&out, is_object).len(), units, "every unit built");

    // While enough units are left to fill the share, from the first remote compile on.
    let size = window as usize + 1;
    let start = samples.iter().position(|s| s.remote > 0).expect("nothing ever compiled on the farm");
    let busy: Vec<&Sample> = samples[start..].iter().filter(|s| units - s.done > size).collect();
    assert!(busy.len() >= 20, "too few samples while units waited: {}", busy.len());
    let mean = busy.iter().map(|s| s.remote).sum::<usize>() as f64 / busy.len() as f64;
    let full = busy.iter().filter(|s| s.remote as u32 >= share).count();
    let peak_local = samples.iter().map(|s| s.local).max().unwrap();
    let peak_remote = samples.iter().map(|s| s.remote).max().unwrap();
    eprintln!(
        "window {window}, share {share}: farm compiles while units waited: mean {mean:.2} ({:.1} % of the share), \
         the whole share in {:.1} % of {} samples; peak remote {peak_remote}, peak local {peak_local}",
        100.0 * mean / f64::from(share),
        100.0 * full as f64 / busy.len() as f64,
        busy.len()
    );
    assert!(mean >= 0.9 * f64::from(share), "the farm's share idled while units waited: mean {mean:.2} of {share}");
    assert!(peak_remote as u32 <= share, "more compiles on the farm ({peak_remote}) than its tokens ({share})");
    assert!(peak_local <= 1, "more local compiles ({peak_local}) than the one local slot");
    assert!(leftover_pipes(&c).is_empty(), "the build's pipe was left behind: {:?}", leftover_pipes(&c));
    c.assert_each_task_ended_once();
}

#[test]
fn the_jobserver_grows_when_the_farm_does() {
    let _serial = serial();
    let (mut c, before) = farm(&[2]);
    // Enough units that many are left when the second agent joins: its
    // start (finding and digesting this host's compilers, a debug build,
    // beside the build's compiles on two cores) took 5.5 s on a machine
    // where 40 units were all done in 5.
    let units = 100;
    let (out, build, sampler) = make_slow_project(&c, units);
    // Once a few units are done, a second agent joins: the window grows.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while common::files(&out, is_object).len() < 4 {
        assert!(std::time::Instant::now() < deadline, "the build made no progress\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    let early = sampler.samples.lock().unwrap().iter().map(|s| s.remote).max().unwrap_or(0);
    c.start_agent(&["-j", "4", "--no-shipping"]);
    let after = loop {
        let w = window(&c);
        if w > before {
            let left = units - common::files(&out, is_object).len();
            eprintln!("the window grew with {left} of {units} units left");
            break w;
        }
        assert!(std::time::Instant::now() < deadline, "the window never grew\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(50));
    };
    // The sampler only knows the agents it started with: count all of them now.
    let late_sampler = Sampler::start(agent_pids(&c), build.id(), out.clone());
    finish_build(&c, build);
    let late = late_sampler.finish();
    drop(sampler.finish());
    let peak_late = late.iter().map(|s| s.remote).max().unwrap();
    eprintln!("window {before} -> {after}: farm compiles at most {early} before, {peak_late} after");
    assert!(early as u32 <= before, "more on the farm ({early}) than its first window ({before})");
    assert!(
        peak_late as u32 > before,
        "the build never used more than the first window ({before}) after it grew to {after}\n{}",
        c.logs()
    );
    assert!(leftover_pipes(&c).is_empty());
}

/// ninja 1.13 or later (its jobserver client reads the fifo form): from
/// `CCROUTE_TEST_NINJA` (a directory holding it) or PATH.
fn ninja_with_jobserver() -> Option<PathBuf> {
    let dirs: Vec<PathBuf> = std::env::var_os("CCROUTE_TEST_NINJA")
        .map(PathBuf::from)
        .into_iter()
        .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()))
        .collect();
    dirs.into_iter().find(|d| {
        let out = std::process::Command::new(d.join("ninja")).arg("--version").output();
        out.ok()
            .and_then(|o| ccroute::cli::build::parse_version(&String::from_utf8_lossy(&o.stdout)))
            .is_some_and(|(major, minor, _)| (major, minor) >= (1, 13))
    })
}

#[test]
fn ninja_1_13_takes_the_fifo_form() {
    let Some(ninja_dir) = ninja_with_jobserver() else {
        panic!(
            "this test needs ninja 1.13 or later (its jobserver client): 'pip install --target DIR ninja' and \
             CCROUTE_TEST_NINJA=DIR/bin (scripts/test does this)"
        );
    };
    let _serial = serial();
    let (c, window) = farm(&[3, 3]);
    let units = 24;
    let dir = c.dir.path().join("proj");
    std::fs::create_dir_all(&dir).unwrap();
    common::slow_project(&dir, units);
    let mut rules = String::from("rule cc\n  command = cc -O2 -c $in -o $out\n");
    for u in 0..units {
        rules.push_str(&format!("build out/u{u}.o: cc u{u}.c\n"));
    }
    std::fs::write(dir.join("build.ninja"), rules).unwrap();
    let out = dir.join("out");
    let build = start_build(&c, "ninja", &dir, Some(&ninja_dir));
    let sampler = Sampler::start(agent_pids(&c), build.id(), out.clone());
    let text = finish_build(&c, build);
    let samples = sampler.finish();
    assert!(text.contains("with Fifo"), "ninja 1.13 should get the fifo form:\n{text}");
    assert!(text.contains("Jobserver mode detected"), "ninja did not take the jobserver:\n{text}");
    assert_eq!(common::files(&out, is_object).len(), units);
    let peak_remote = samples.iter().map(|s| s.remote).max().unwrap();
    let peak_local = samples.iter().map(|s| s.local).max().unwrap();
    eprintln!("window {window}: peak remote {peak_remote}, peak local {peak_local}");
    assert!(peak_remote >= 2 && peak_remote as u32 <= window, "farm compiles at once: {peak_remote} (window {window})");
    assert!(peak_local <= 1);
    assert!(leftover_pipes(&c).is_empty());
}

#[test]
fn a_jobs_flag_given_wins_and_a_build_cut_short_leaves_no_pipe() {
    let _serial = serial();
    let (c, _) = farm(&[2]);
    let dir = c.dir.path().join("proj");
    std::fs::create_dir_all(&dir).unwrap();
    common::slow_project(&dir, 6);
    let mut cmd = c.command(ccroute());
    let out = cmd.args(["make", "-j2", "BUILD=out"]).current_dir(&dir).env("CCROUTE_VERBOSE", "1").output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("with Nothing"), "a -j given is the user's choice:\n{text}");
    // Cut short: SIGTERM to ccroute reaches make, the pipe goes, the exit says so.
    std::fs::remove_dir_all(dir.join("out")).unwrap();
    let build = start_build(&c, "make", &dir, None);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while leftover_pipes(&c).is_empty() {
        assert!(std::time::Instant::now() < deadline, "no pipe was made\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    std::process::Command::new("kill").arg("-TERM").arg(build.id().to_string()).status().unwrap();
    let out = build.wait_with_output().unwrap();
    assert!(!out.status.success(), "a build cut short does not succeed");
    assert!(leftover_pipes(&c).is_empty(), "the pipe was left behind: {:?}", leftover_pipes(&c));
}

/// The size a build's jobserver started at, from its verbose line.
fn first_size(text: &str) -> u32 {
    let line = text.lines().find(|l| l.contains(" with Fifo of ") || l.contains(" with Descriptors of "));
    let line = line.unwrap_or_else(|| panic!("no jobserver was handed over:\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn two_builds_at_once_share_the_size_and_the_first_gets_it_back() {
    let _serial = serial();
    let (c, _) = farm(&[4, 4]);
    let dir = c.dir.path().join("proj");
    std::fs::create_dir_all(&dir).unwrap();
    common::slow_project(&dir, 40);
    let first = start_build(&c, "make", &dir, None);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while common::files(&dir.join("out"), is_object).len() < 2 {
        assert!(std::time::Instant::now() < deadline, "the first build made no progress\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    let dir2 = c.dir.path().join("proj2");
    std::fs::create_dir_all(&dir2).unwrap();
    common::slow_project(&dir2, 4);
    let second = start_build(&c, "make", &dir2, None);
    let text2 = finish_build(&c, second);
    let text1 = finish_build(&c, first);
    let (whole, part) = (first_size(&text1), first_size(&text2));
    // The first build's sizes as the consumerd told them (the window itself
    // may move meanwhile, as the farm's tokens are counted).
    let sizes: Vec<u32> = text1
        .lines()
        .filter_map(|l| l.strip_prefix("ccroute: the jobserver now holds "))
        .map(|n| n.parse().unwrap())
        .collect();
    eprintln!("alone {whole}; the second build's part {part}; the first build's sizes {sizes:?}");
    assert!(part < whole, "the second build got the whole size ({part} of {whole}), not a part");
    let least = sizes.iter().copied().min().unwrap_or(whole);
    assert!(least <= part + 1, "the first build was not shrunk to about its part ({part}): {sizes:?}\n{text1}");
    assert!(
        sizes.last().is_some_and(|&last| last > least + 1),
        "the first build did not get the second's part back once the second ended: {sizes:?}\n{text1}"
    );
    assert!(leftover_pipes(&c).is_empty());
}
