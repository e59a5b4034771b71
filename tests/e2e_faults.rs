//! The scheduler dies and comes back: its peers learn it at once and are
//! back within about half a second of it listening again.
//!
//! - Restarted at once (`kill -9`, then a new process on the same address):
//!   the new scheduler answers the old connections' packets with stateless
//!   resets its peers recognise (the reset key is derived from its
//!   certificate's key), so they drop the dead connection on its next packet
//!   instead of waiting out their idle timeout.
//! - Down for longer than the idle timeout: the peers knock every 0.5 s while
//!   nothing answers, instead of backing off or waiting on a retransmission
//!   timer.
//!
//! The times are printed, not asserted (this machine is shared); what is
//! asserted is the mechanism, from the peers' own log lines.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{assert_same_objects, Cluster};

#[test]
fn a_restarted_scheduler_has_its_agents_and_consumerds_back_at_once() {
    let mut c = Cluster::new();
    let addr = c.start_scheduler(&["--no-cache"]);
    c.start_agent(&["--test-toolchain", "--no-discover"]);
    c.start_consumerd(2, false);
    c.wait_ready(1);
    let listen = addr.to_string();
    // Connections that have worked a while are dialled again at once.
    std::thread::sleep(Duration::from_secs(2));

    // Killed and restarted at once.
    c.scheduler.as_mut().unwrap().kill();
    let t = Instant::now();
    c.start_scheduler_as("scheduler-2", &listen, &["--no-cache"]);
    let listening = t.elapsed();
    c.wait_ready(1);
    let at_once = t.elapsed() - listening;
    let agent_log = c.agents[0].log_text();
    let consumerd_log = c.consumerd.as_ref().unwrap().log_text();
    for (who, log) in [("agent", &agent_log), ("consumerd", &consumerd_log)] {
        let lost = log.lines().find(|l| l.contains("connection lost") || l.contains("connection ended"));
        let lost = lost.unwrap_or_else(|| panic!("the {who} never noticed the restart\n{}", c.logs()));
        assert!(
            lost.contains("reset by peer"),
            "the {who} learnt of the restart otherwise than from the new scheduler's reset: {lost}\n{}",
            c.logs()
        );
    }

    // Down for 12 s, past every idle timeout and the 5 s after which a
    // knocking peer says so: the peers knock until it is back.
    std::thread::sleep(Duration::from_secs(2));
    c.scheduler.as_mut().unwrap().kill();
    std::thread::sleep(Duration::from_secs(12));
    let t = Instant::now();
    c.start_scheduler_as("scheduler-3", &listen, &["--no-cache"]);
    let listening = t.elapsed();
    c.wait_ready(1);
    let after_down = t.elapsed() - listening;
    for (who, daemon) in [("agent", &c.agents[0]), ("consumerd", c.consumerd.as_ref().unwrap())] {
        let log = daemon.log_text();
        assert!(
            log.contains("no answer from the scheduler; knocking"),
            "the {who} did not knock while the scheduler was down\n{}",
            c.logs()
        );
    }
    eprintln!(
        "both peers back (status lists them), after the new scheduler listened: restarted at once {:.0} ms, \
         after 12 s down {:.0} ms",
        at_once.as_secs_f64() * 1e3,
        after_down.as_secs_f64() * 1e3
    );
}

/// Units of the generated project for the restart test: each takes gcc
/// about half a second at -O2, so that a kill finds many of them running.
const UNITS: usize = 24;

/// Compiles the agents started, from their own log lines: each ends in
/// one of two lines, finished or not (killed, failed to start).
fn agent_compiles(c: &Cluster) -> usize {
    c.agents
        .iter()
        .map(|a| a.log_text().lines().filter(|l| l.contains("task done") || l.contains("task not compiled")).count())
        .sum()
}

/// Units this cluster's consumerd compiled itself (by choice or falling back).
fn local_compiles(c: &Cluster) -> u64 {
    let out = c.command(common::ccroute()).args(["stats", "--json"]).output().unwrap();
    assert!(out.status.success(), "stats: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let get = |k: &str| v["counters"][k].as_u64().unwrap_or_else(|| panic!("no counter {k} in {v}"));
    get("local") + get("fallback")
}

/// Copies of stragglers the running scheduler has started (hedging), from
/// its log.
fn copies(c: &Cluster) -> usize {
    c.scheduler.as_ref().map_or(0, |s| s.log_text().matches("straggler copied to an idle agent").count())
}

/// The scheduler is `kill -9`ed at 25 %, 50 % and 90 % of a real build
/// and a new one started on its address at once: the agents keep compiling
/// through the gap, the consumerd sends its tasks in flight again, and the
/// new scheduler gives each to the agent that still runs it. Every object is
/// the local build's, and no unit is compiled twice by the fault: the
/// agents' compiles and the consumerd's own add up to the units, plus at
/// most the copies of stragglers the schedulers started on purpose
/// (hedging is on, as it is by default: on two busy cores a unit often runs
/// past twice its expected time near a build's end, and a restarted
/// scheduler judges adopted units by a model up to 30 s old). After each
/// build every agent's tokens are back (a task held through the restart and
/// not adopted is dropped, its reserved token with it). Build times
/// are printed against the same build without a fault (not asserted:
/// shared machine).
#[test]
fn a_scheduler_killed_mid_build_costs_no_unit_a_second_compile() {
    let dir = tempfile::tempdir().unwrap();
    common::slow_project(dir.path(), UNITS);
    let local = common::make(dir.path(), &["-j4".into(), "BUILD=local".into(), "CC=gcc".into()], &[]);
    assert!(local.status.success(), "local build: {}", String::from_utf8_lossy(&local.stderr));
    let expected = common::objects(&dir.path().join("local"));
    assert_eq!(expected.len(), UNITS);

    let mut c = Cluster::new();
    let addr = c.start_scheduler(&["--no-cache"]);
    let listen = addr.to_string();
    for _ in 0..2 {
        c.start_agent_logged(&["--jobs", "3", "--no-shipping"], Some("info,ccroute::agent::executor=debug"));
    }
    c.start_consumerd_with(1, true, &["--no-local-cache"]);
    c.wait_ready(2);
    let cc = format!("CC={} gcc", common::ccroute().display());
    let mut restarts = 0;
    let mut build = |c: &mut Cluster, name: &str, kill_at: Option<usize>| -> Duration {
        let (compiled_before, local_before, copies_before) = (agent_compiles(c), local_compiles(c), copies(c));
        // The copies made by the schedulers killed during this build.
        let mut copies_of_killed = 0;
        let out_dir = dir.path().join(name);
        let mut make = Command::new("make");
        make.current_dir(dir.path()).args(["-j6", &format!("BUILD={name}"), &cc]);
        for (k, v) in c.wrapper_env() {
            make.env(k, v);
        }
        let started = Instant::now();
        let child = make.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        if let Some(at) = kill_at {
            let deadline = Instant::now() + Duration::from_secs(120);
            // At the mark, and with compiles running on the agents.
            loop {
                let busy =
                    c.status()["agents"].as_array().unwrap().iter().any(|a| a["tokens_in_use"].as_u64() > Some(0));
                if busy && common::files(&out_dir, common::is_object).len() >= at {
                    break;
                }
                assert!(Instant::now() < deadline, "the build never reached {at} objects\n{}", c.logs());
                std::thread::sleep(Duration::from_millis(10));
            }
            c.scheduler.as_mut().unwrap().kill();
            copies_of_killed = copies(c) - copies_before;
            restarts += 1;
            c.start_scheduler_as(&format!("scheduler-{restarts}"), &listen, &["--no-cache"]);
        }
        let out = child.wait_with_output().unwrap();
        let took = started.elapsed();
        assert!(out.status.success(), "build {name} failed: {}\n{}", String::from_utf8_lossy(&out.stderr), c.logs());
        assert_same_objects(&expected, &common::objects(&out_dir));
        // Every token comes back: each task an agent held through a restart
        // is adopted, or dropped as unclaimed (its consumerd compiled it, or
        // it was one of a hedged task's two copies and the other was adopted).
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status = c.status();
            if status["agents"].as_array().unwrap().iter().all(|a| a["tokens_in_use"].as_u64() == Some(0)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: a token is still held 30 s after the build: {status}\n{}",
                c.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let compiled = agent_compiles(c) - compiled_before;
        let local = usize::try_from(local_compiles(c) - local_before).unwrap();
        let copied = if kill_at.is_some() { copies_of_killed + copies(c) } else { copies(c) - copies_before };
        // A copy its agent had not started when the other answered is no compile.
        assert!(
            (UNITS..=UNITS + copied).contains(&(compiled + local)),
            "{name}: the agents compiled {compiled} units and the consumerd {local}, for {UNITS} units and \
             {copied} copies of stragglers\n{}",
            c.logs()
        );
        eprintln!(
            "{name}: {:.2} s, {compiled} units compiled on agents, {local} here; {copied} copies of stragglers started",
            took.as_secs_f64()
        );
        took
    };
    let fault_free = build(&mut c, "fault-free", None);
    let mut adopted_in_all = 0;
    for pct in [25, 50, 90] {
        let took = build(&mut c, &format!("killed-at-{pct}"), Some(UNITS * pct / 100));
        eprintln!(
            "  scheduler killed at {pct} %: {:+.2} s against the fault-free build",
            (took.as_secs_f64() - fault_free.as_secs_f64())
        );
        // The new scheduler gave the agents what they still held.
        let adopted = c.status()["totals"]["adopted"].as_u64().unwrap();
        eprintln!("  tasks adopted by the agents that held them: {adopted}");
        adopted_in_all += adopted;
    }
    // Each kill found compiles running: some of them, at least, were still
    // wanted and went on where they ran (the count above says none ran twice).
    assert!(adopted_in_all > 0, "no task was adopted after three restarts\n{}", c.logs());
    if std::env::var_os("CCROUTE_TEST_SHOW_LOGS").is_some() {
        eprintln!("{}", c.logs());
    }
}

/// An agent cut off in the middle of a build — frozen (`SIGSTOP`) past the
/// scheduler's idle timeout, so that the scheduler loses it and places its
/// two long units again on the other agent — comes back (`SIGCONT`) holding
/// its runs of them: its compilers went on meanwhile. The scheduler has
/// neither restarted nor been sent the tasks again; each unit still running
/// on the other agent takes the held run as its copy, and the first answer
/// of the two wins. Before, the held runs were dropped and each unit was
/// compiled again from the start. Checked: the copies were made (the
/// scheduler counts them as adopted), every object is the local build's,
/// every task ended once, and every token comes back. Which copy won is
/// printed (the held run started seconds earlier, but this machine is
/// shared).
#[test]
fn an_agent_back_from_a_cut_has_its_held_runs_taken_as_copies() {
    const UNITS: usize = 2;
    let dir = tempfile::tempdir().unwrap();
    common::slow_project_of(dir.path(), UNITS, 1500);
    let local = common::make(dir.path(), &["-j2".into(), "BUILD=local".into(), "CC=gcc".into()], &[]);
    assert!(local.status.success(), "local build: {}", String::from_utf8_lossy(&local.stderr));
    let expected = common::objects(&dir.path().join("local"));

    let mut c = Cluster::new();
    c.start_scheduler(&["--no-cache", "--no-optimizer", "--idle-timeout", "1"]);
    let cut = c.start_agent_logged(&["--jobs", "2", "--no-shipping"], Some("info"));
    c.start_consumerd_with(1, true, &["--no-local-cache"]);
    c.wait_ready(1);
    let cc = format!("CC={} gcc", common::ccroute().display());
    let mut make = Command::new("make");
    make.current_dir(dir.path()).args(["-j2", "BUILD=remote", &cc]);
    for (k, v) in c.wrapper_env() {
        make.env(k, v);
    }
    let child = make.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    // Both units run on the only agent; then a second one joins.
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.status()["agents"][0]["tokens_in_use"].as_u64() != Some(UNITS as u64) {
        assert!(Instant::now() < deadline, "the units never both ran on the agent\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(20));
    }
    // It offers gcc alone: digesting every compiler of the host (a debug
    // build, beside the two long compiles on two cores) took 5.4 s here,
    // and the units had ended before the agent was frozen.
    c.start_agent(&["--jobs", "2", "--no-shipping", "--no-discover", "--compiler", "/usr/bin/gcc"]);
    c.wait_ready(2);
    let pid = c.agents[cut].child.id().to_string();
    assert!(Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    std::thread::sleep(Duration::from_secs(3));
    assert!(Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());

    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the build failed: {}\n{}", String::from_utf8_lossy(&out.stderr), c.logs());
    assert_same_objects(&expected, &common::objects(&dir.path().join("remote")));
    let log = c.scheduler.as_ref().unwrap().log_text();
    assert!(log.contains("agent disconnected"), "the scheduler never lost the frozen agent\n{}", c.logs());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = c.status();
        if status["agents"].as_array().unwrap().iter().all(|a| a["tokens_in_use"].as_u64() == Some(0)) {
            break;
        }
        assert!(Instant::now() < deadline, "a token is still held 30 s after the build: {status}\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    let totals = c.assert_each_task_ended_once();
    let adopted = totals["adopted"].as_u64().unwrap();
    assert!(adopted >= 1, "no held run was taken as a copy: {totals}\n{}", c.logs());
    let won: u64 = c.status()["agents"].as_array().unwrap().iter().map(|a| a["copies_won"].as_u64().unwrap()).sum();
    eprintln!("held runs taken as copies: {adopted}; copies that answered first: {won}");
}

/// An agent whose scratch disk fills up fails gcc as a source error would
/// (exit 1, "No space left on device" from the assembler). That failure is
/// the agent's, not the unit's: the build gets gcc's own object, compiled
/// locally, and the agent says what to look at (before, the build failed).
/// Nearly full (under 16 MiB free while it compiles nothing), the agent
/// leaves the scheduler rather than fail every unit it would be given, and
/// joins again once it has room.
#[test]
fn an_agent_whose_scratch_disk_fills_fails_no_build_and_leaves_until_it_has_room() {
    let scratch = tempfile::tempdir().unwrap();
    let mounted = Command::new("mount").args(["-t", "tmpfs", "-o", "size=64m", "tmpfs"]).arg(scratch.path()).status();
    assert!(mounted.is_ok_and(|s| s.success()), "this test mounts a tmpfs: run it as root");
    struct Unmount<'a>(&'a std::path::Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(self.0).status();
        }
    }
    let _unmount = Unmount(scratch.path());
    let fill = |left_mib: u64| {
        let path = scratch.path().join("fill");
        let _ = std::fs::remove_file(&path);
        let out = Command::new("df").args(["--output=avail", "-B1"]).arg(scratch.path()).output().unwrap();
        let avail: u64 = String::from_utf8_lossy(&out.stdout).lines().nth(1).unwrap().trim().parse().unwrap();
        std::fs::write(path, vec![1u8; (avail - (left_mib << 20)) as usize]).unwrap();
    };
    let mut c = Cluster::new();
    c.start_scheduler(&["--no-hedging", "--no-cache"]);
    let dir = scratch.path().to_str().unwrap().to_owned();
    c.start_agent(&["--no-speed-probe", "--scratch-dir", &dir]);
    c.start_consumerd(1, true);
    c.wait_ready(1);
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("big.c"), "char big[24000000] = {1};\nint g(int i) { return big[i]; }\n").unwrap();
    std::fs::write(src.path().join("small.c"), "int s(int i) { return i * 7; }\n").unwrap();
    // Another unit: big.c compiled here is answered from the consumerd's own cache.
    std::fs::write(src.path().join("big2.c"), "char big2[24000000] = {2};\nint h(int i) { return big2[i]; }\n")
        .unwrap();
    let compile = |unit: &str| {
        let plain = Command::new("gcc").args(["-O2", "-c", unit, "-o", "plain.o"]).current_dir(src.path()).status();
        assert!(plain.unwrap().success());
        let out = c
            .command(common::ccroute())
            .args(["gcc", "-O2", "-c", unit, "-o", "through.o"])
            .current_dir(src.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "the build failed: {}\n{}", String::from_utf8_lossy(&out.stderr), c.logs());
        let read = |name: &str| std::fs::read(src.path().join(name)).unwrap();
        assert!(read("through.o") == read("plain.o"), "{unit}: not gcc's object");
    };
    let agents = |n: usize, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while c.status()["agents"].as_array().unwrap().len() != n {
            assert!(Instant::now() < deadline, "{what}: {}\n{}", c.status(), c.logs());
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let completed = || c.status()["totals"]["completed"].as_u64().unwrap();

    // Room for the source and gcc's temporary files, none for a 24 MB object.
    fill(20);
    compile("big.c");
    assert_eq!(completed(), 0, "the agent's failure was an answer");
    let agent = c.agents[0].log_text();
    assert!(agent.contains("compiles failed here in a way that may be this machine's"), "{agent}");
    assert!(agent.contains("No space left on device"), "{agent}");

    // Nearly full: the agent leaves; units compile locally meanwhile.
    fill(8);
    agents(0, "the agent never left");
    assert!(c.agents[0].log_text().contains("out of the scheduler until it has 32 MiB free"), "{}", c.logs());
    compile("small.c");

    // Room again: it joins, and compiles.
    std::fs::remove_file(scratch.path().join("fill")).unwrap();
    agents(1, "the agent never came back");
    c.wait_ready(1);
    compile("big2.c");
    assert_eq!(completed(), 1, "{}", c.status());
}
