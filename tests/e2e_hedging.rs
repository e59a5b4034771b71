//! Straggler hedging, end to end: one of three agents is made 20 times
//! slower in the middle of a build (its process moved into a CPU cgroup with
//! a twentieth of a CPU, so every compiler it starts is throttled too). The
//! scheduler copies its long-running units to the idle agents at the end of
//! the build; the first answer wins and the slow compile is stopped. Checked:
//! every object is byte-identical to a plain local build's, no unit is
//! answered twice (counted at the consumerd: no result arrives for a compile
//! not waiting), every task ended once at the scheduler, no token stays held,
//! copies were made, and the slowed agent's stopped run lowered its learnt
//! speed (so that it is not given the next unit as a healthy agent's). The
//! build's time against the same build on the two healthy agents alone is
//! printed (a ratio, not asserted: this machine is shared): the two run in
//! turns, three rounds, each round's ratio and their median; and once with
//! `--no-hedging`.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ccroute::agent::cgroup::CpuLimitedCgroup;
use common::{assert_same_objects, ccroute, is_object, objects, Cluster};

const UNITS: usize = 24;

/// Builds the slow project in `dir/out` with `ccroute make` (its jobserver
/// sizes the build), throttling agent `slow` (if any) to a twentieth of a
/// CPU once a few objects are written. Returns the build's time, and the
/// cgroup (kept until the agent is gone).
fn build(c: &Cluster, dir: &Path, slow: Option<usize>) -> (Duration, Option<CpuLimitedCgroup>) {
    let out = dir.join("out");
    let _ = std::fs::remove_dir_all(&out);
    let start = Instant::now();
    let mut child = c
        .command(ccroute())
        .args(["make", "BUILD=out"])
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut cgroup = None;
    if let Some(i) = slow {
        while common::files(&out, is_object).len() < 3 {
            assert!(start.elapsed() < Duration::from_secs(120), "the build made no progress\n{}", c.logs());
            std::thread::sleep(Duration::from_millis(20));
        }
        // A name per build: were one left behind, the next would not be refused.
        static BUILDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("ccroute-hedge-test-{}-{n}", std::process::id());
        let g = CpuLimitedCgroup::create(&name, 0.05).expect("a CPU cgroup (this test runs as root)");
        g.add_pid(c.agents[i].child.id()).unwrap();
        cgroup = Some(g);
    }
    let status = child.wait().unwrap();
    let took = start.elapsed();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(status.success(), "the build failed:\n{err}\n{}", c.logs());
    assert_eq!(common::files(&out, is_object).len(), UNITS);
    (took, cgroup)
}

fn counters(c: &Cluster) -> serde_json::Value {
    let out = c.command(ccroute()).args(["stats", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["counters"].clone()
}

/// A farm of `agents` agents of one token, a consumerd of one local slot
/// preferring remote; `extra` for the scheduler.
fn farm(agents: usize, extra: &[&str]) -> Cluster {
    let mut c = Cluster::new();
    let mut args = vec!["--no-optimizer"];
    args.extend_from_slice(extra);
    c.start_scheduler(&args);
    for _ in 0..agents {
        c.start_agent(&["-j", "1", "--no-shipping"]);
    }
    c.start_consumerd_with(1, true, &["--no-local-cache"]);
    c.wait_ready(agents);
    c
}

/// Rounds of the two builds the ratio compares, run in turns: one pair
/// alone reads the machine as much as the rule (the two-agent build took
/// 5.7-7.8 s across runs of one day), the median of paired ratios reads
/// the rule.
const ROUNDS: usize = 3;

#[test]
fn an_agent_slowed_mid_build_has_its_units_copied_and_nothing_is_answered_twice() {
    let project = tempfile::tempdir().unwrap();
    common::slow_project(project.path(), UNITS);
    // The reference: a plain local build.
    let local = common::make(project.path(), &["-j2".into(), "BUILD=out".into()], &[]);
    assert!(local.status.success());
    let reference = objects(&project.path().join("out"));

    let unhedged = farm(3, &["--no-hedging"]);
    let (t_unhedged, g) = build(&unhedged, project.path(), Some(2));
    drop(unhedged);
    drop(g);

    let mut rounds = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let alone = farm(2, &[]);
        let (t_alone, _) = build(&alone, project.path(), None);
        drop(alone);
        let c = farm(3, &[]);
        let (t_hedged, g) = build(&c, project.path(), Some(2));
        let copies = check_hedged_build(&c, &reference, project.path());
        drop(c);
        drop(g);
        rounds.push((t_alone.as_secs_f64(), t_hedged.as_secs_f64(), copies));
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let median_ratio = median(rounds.iter().map(|(alone, hedged, _)| hedged / alone).collect());
    let median_alone = median(rounds.iter().map(|r| r.0).collect());
    let each: Vec<String> = rounds
        .iter()
        .map(|(alone, hedged, copies)| {
            format!("{alone:.2} s / {hedged:.2} s = {:.2}x ({copies} copied)", hedged / alone)
        })
        .collect();
    eprintln!(
        "{UNITS} units, two healthy agents alone against a third slowed 20x mid-build, in turns: {}; \
         median {:.2}x with hedging; without hedging (once) {:.2} s, {:.2}x the median alone",
        each.join(", "),
        median_ratio,
        t_unhedged.as_secs_f64(),
        t_unhedged.as_secs_f64() / median_alone,
    );
}

/// The checks of a hedged build: byte-identical objects, no unit answered
/// twice or compiled twice at the consumerd, each task ended once at the
/// scheduler, every token back, and at least one copy made. Returns the
/// copies.
fn check_hedged_build(c: &Cluster, reference: &BTreeMap<PathBuf, Vec<u8>>, project: &Path) -> usize {
    assert_same_objects(reference, &objects(&project.join("out")));
    let counts = counters(c);
    let n = |k: &str| counts[k].as_u64().unwrap_or(0);
    assert_eq!(n("stray_results"), 0, "a result came for a compile not waiting (answered twice?): {counts}");
    assert_eq!(
        n("remote") + n("local") + n("fallback"),
        UNITS as u64,
        "each unit compiled once, here or remote: {counts}"
    );
    c.assert_each_task_ended_once();
    // The slow agent answers the cancel of its losing compile at its own
    // pace (a twentieth of a CPU): its token comes back then.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = c.status();
        let agents = status["agents"].as_array().unwrap();
        if agents.iter().all(|a| a["tokens_in_use"].as_u64() == Some(0)) {
            break;
        }
        assert!(Instant::now() < deadline, "a token is still held a minute after the build: {status}\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = c.scheduler.as_ref().unwrap().log_text();
    let copies = log.matches("straggler copied to an idle agent").count();
    assert!(copies > 0, "no straggler was copied\n{}", c.logs());
    // The copy answered first (the slowed agent runs at a twentieth): the
    // time its run had taken lowered that agent's speed (logged in the
    // session of the agent whose unit was copied), so that it is not given
    // the next unit as if it were healthy.
    let session = |l: &str| l.find("peer").and_then(|a| l[a..].find("ccroute::").map(|b| l[a..a + b].to_owned()));
    let copied_from: Vec<String> =
        log.lines().filter(|l| l.contains("straggler copied to an idle agent")).filter_map(session).collect();
    assert!(
        log.lines()
            .filter(|l| l.contains("a copied run stopped unanswered: this agent is slower than learnt"))
            .filter_map(session)
            .any(|s| copied_from.contains(&s)),
        "the slowed agent's stopped run did not lower its speed\n{}",
        c.logs()
    );
    copies
}
