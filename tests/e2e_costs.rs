//! The scheduler's cost model on a real build of the bundled sample: the
//! first build teaches it every unit that went remote (each expected from
//! its size or cold); a restarted scheduler reads them back from the cache
//! directory; the second build expects each unit from its own history, and
//! `ccroute status` says how far off it was.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::{ccroute, make, Cluster};

fn build(c: &Cluster, build: &Path) {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample");
    let args = [
        format!("BUILD={}", build.display()),
        "-j8".into(),
        format!("CC={} gcc", ccroute().display()),
        format!("CXX={} g++", ccroute().display()),
    ];
    let out = make(&sample, &args, &c.wrapper_env());
    assert!(out.status.success(), "build: {}\n{}", String::from_utf8_lossy(&out.stderr), c.logs());
}

#[test]
fn the_cost_model_learns_units_keeps_them_across_a_restart_and_predicts_from_history() {
    let mut c = Cluster::new();
    let dir = c.dir.path().join("cache");
    let dir_s = dir.display().to_string();
    // No result cache (the second build must compile again), but its
    // directory, where the model is kept.
    let sched = ["--no-cache", "--no-optimizer", "--cache-dir", dir_s.as_str()];
    let addr = c.start_scheduler(&sched);
    c.start_agent(&["--jobs", "8"]);
    // No direct-mode cache either: every unit goes to the scheduler.
    c.start_consumerd_with(1, true, &["--remote-only", "--no-local-cache"]);
    c.wait_ready(1);

    let out = c.dir.path().join("build");
    build(&c, &out);
    let s = c.status();
    let completed = s["totals"]["completed"].as_u64().unwrap();
    assert!(completed >= 10, "the sample went remote: {s}");
    let costs = &s["costs"];
    assert_eq!(costs["units"].as_u64(), Some(completed), "every unit compiled remotely is known: {costs}");
    assert_eq!(costs["predictions"].as_u64(), Some(completed), "{costs}");
    assert_eq!(costs["from_history"].as_u64(), Some(0), "a first build has no history: {costs}");
    assert!(costs["median_error"].is_null(), "no error without history: {costs}");

    // A clean restart writes the model; the next scheduler reads it.
    c.scheduler.as_mut().unwrap().stop();
    assert!(dir.join("cost-model").is_file(), "no cost model in {}", dir.display());
    c.start_scheduler_as("scheduler2", &addr.to_string(), &sched);
    c.wait_ready(1);
    assert_eq!(c.status()["costs"]["units"].as_u64(), Some(completed), "the model was not read back");

    std::fs::remove_dir_all(&out).unwrap();
    build(&c, &out);
    let s = c.status();
    let again = s["totals"]["completed"].as_u64().unwrap();
    let costs = &s["costs"];
    assert_eq!(costs["units"].as_u64(), Some(completed), "the same units, not new ones: {costs}");
    assert_eq!(costs["predictions"].as_u64(), Some(again), "{costs}");
    assert_eq!(costs["from_history"].as_u64(), Some(again), "every unit expected from its history: {costs}");
    let error =
        costs["median_error"].as_f64().unwrap_or_else(|| panic!("no median error once history was used: {costs}"));
    eprintln!("cost model: {completed} units; second build's median error {:.0} %", error * 100.0);

    // The text report says it too.
    let text = c.command(ccroute()).args(["status", "--scheduler", &addr.to_string()]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("cost model: {completed} units")), "{text}");
}

/// Agents' speeds: one pinned (`--speed 2.5`) keeps it; the other's is learnt
/// from its results (units whose history the pinned agent wrote count 2.5 times
/// its own time, so it is learnt fast), kept by host name beside the cost
/// model, and given back to it by a restarted scheduler before any task.
#[test]
fn agents_speeds_are_pinned_or_learnt_and_kept_across_a_restart() {
    let mut c = Cluster::new();
    let dir = c.dir.path().join("cache");
    let dir_s = dir.display().to_string();
    let sched = ["--no-cache", "--no-optimizer", "--cache-dir", dir_s.as_str()];
    let addr = c.start_scheduler(&sched);
    c.start_agent(&["--jobs", "4", "--name", "pinned-agent", "--speed", "2.5"]);
    c.start_agent(&["--jobs", "4", "--name", "learning-agent"]);
    c.start_consumerd_with(1, true, &["--remote-only", "--no-local-cache"]);
    c.wait_ready(2);
    let speed = |s: &serde_json::Value, host: &str| {
        s["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["host_name"] == host)
            .unwrap_or_else(|| panic!("no agent {host}: {s}"))["speed_milli"]
            .as_u64()
            .unwrap()
    };
    let out = c.dir.path().join("build");
    for _ in 0..2 {
        let _ = std::fs::remove_dir_all(&out);
        build(&c, &out);
    }
    let s = c.status();
    assert_eq!(speed(&s, "pinned-agent"), 2500, "a pinned speed is not learnt over");
    let learnt = speed(&s, "learning-agent");
    assert!(learnt > 1000, "nothing learnt of the other agent's speed: {}", s["agents"]);

    c.scheduler.as_mut().unwrap().stop();
    let kept = std::fs::read_to_string(dir.join("agent-speeds")).unwrap();
    assert!(kept.lines().any(|l| l == format!("{learnt} learning-agent")), "{kept}");
    c.start_scheduler_as("scheduler2", &addr.to_string(), &sched);
    c.wait_ready(2);
    let s = c.status();
    assert_eq!(speed(&s, "learning-agent"), learnt, "the learnt speed was not given back");
    assert_eq!(speed(&s, "pinned-agent"), 2500);
    assert_eq!(s["totals"]["requests"].as_u64(), Some(0), "before any task");
}

/// An agent nobody has seen measures its speed when it starts (its own
/// toolchain on a fixed unit; here the test toolchain, whose replayed units
/// take their time ÷ `--replay-speed`), and the scheduler gives placement
/// that speed before any result: `ccroute status` shows it. (What placement
/// does with a speed is the core's tests'.)
#[test]
fn a_new_agent_starts_at_the_speed_it_measured_before_any_result() {
    let mut c = Cluster::new();
    c.start_scheduler(&["--no-cache", "--no-optimizer"]);
    for (name, replay_speed, probe) in
        [("slow-host", "0.4", None), ("fast-host", "2", None), ("unprobed-host", "0.4", Some("--no-speed-probe"))]
    {
        let mut args = vec!["--jobs", "2", "--no-discover", "--test-toolchain", "--replay-speed", replay_speed];
        args.extend(["--name", name]);
        args.extend(probe);
        c.start_agent(&args);
    }
    c.wait_ready(3);
    let s = c.status();
    let speed = |host: &str| {
        s["agents"].as_array().unwrap().iter().find(|a| a["host_name"] == host).unwrap_or_else(|| panic!("{s}"))
            ["speed_milli"]
            .as_u64()
            .unwrap()
    };
    // Nominal ÷ measured, the replay's path included: never above the
    // replay's speed, and — however loaded the machine, whose stalls only
    // lower a reading — clearly apart from nominal on each side.
    assert!((200..=400).contains(&speed("slow-host")), "{}", s["agents"]);
    assert!((1100..=2000).contains(&speed("fast-host")), "{}", s["agents"]);
    assert_eq!(speed("unprobed-host"), 1000, "an agent that did not measure starts nominal: {}", s["agents"]);
    assert_eq!(s["totals"]["requests"].as_u64(), Some(0), "before any task");
}
