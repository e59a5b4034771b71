//! No unit waits without end: the remote path hung on purpose — an agent
//! frozen with SIGSTOP while it holds units, a scheduler frozen while units
//! wait on it, a consumerd frozen while wrappers wait on it — and the build
//! still finishes, every object identical to a plain build's, each unit
//! answered once (locally or remotely, never both).

#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::project::{self, Shape};
use common::{assert_same_objects, ccroute, make, objects, Cluster};

fn build_args(build: &str, cc: &str, cxx: &str) -> Vec<String> {
    vec![
        "-j4".into(),
        format!("BUILD={build}"),
        format!("CC={cc}"),
        format!("CXX={cxx}"),
        "CFLAGS=-O2 -g".into(),
        "CXXFLAGS=-O2 -g".into(),
        "check".into(),
    ]
}

fn wrapped(compiler: &str) -> String {
    format!("{} {compiler}", ccroute().display())
}

fn signal(pid: u32, sig: &str) {
    assert!(Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().unwrap().success());
}

/// Builds a project through the cluster, freezes the daemon `freeze` picks
/// once an agent holds a unit, and checks that the build still finishes with
/// the plain build's objects.
fn build_with_a_frozen(c: &mut Cluster, freeze: impl FnOnce(&Cluster) -> u32) {
    let dir = tempfile::tempdir().unwrap();
    project::generate(dir.path(), Shape { c: 4, cxx: 2 });
    project::add_slow_units(dir.path(), 3, 1500);
    let plain = make(dir.path(), &build_args("local", "gcc", "g++"), &[]);
    assert!(plain.status.success(), "{}", String::from_utf8_lossy(&plain.stderr));
    let env = c.wrapper_env();
    let root = dir.path().to_path_buf();
    let started = Instant::now();
    let builder =
        std::thread::spawn(move || make(&root, &build_args("remote", &wrapped("gcc"), &wrapped("g++")), &env));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = c.status();
        let busy = s["agents"].as_array().unwrap().iter().any(|a| a["tokens_in_use"].as_u64() > Some(0));
        if busy {
            break;
        }
        assert!(Instant::now() < deadline, "no agent ever got work\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = freeze(c);
    signal(pid, "STOP");
    let out = builder.join().unwrap();
    signal(pid, "CONT");
    assert!(
        out.status.success(),
        "the build failed with a frozen daemon: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        c.logs()
    );
    assert_same_objects(&objects(&dir.path().join("local")), &objects(&dir.path().join("remote")));
    println!("build with a frozen daemon finished in {:?}", started.elapsed());
}

#[test]
fn a_frozen_agent_does_not_hold_the_build() {
    let mut c = Cluster::new();
    c.start_scheduler(&["--no-optimizer", "--no-cache"]);
    c.start_agent(&["--jobs", "3"]);
    // Deadlines short enough for a test; the default floor is 30 s.
    c.start_consumerd_with(1, true, &["--remote-deadline-floor", "2", "--remote-timeout", "4"]);
    c.wait_ready(1);
    build_with_a_frozen(&mut c, |c| c.agents[0].child.id());
    c.assert_each_task_ended_once();
}

#[test]
fn a_frozen_scheduler_does_not_hold_the_build() {
    let mut c = Cluster::new();
    c.start_scheduler(&["--no-optimizer", "--no-cache"]);
    c.start_agent(&["--jobs", "3"]);
    c.start_consumerd_with(1, true, &["--remote-deadline-floor", "2", "--remote-timeout", "4"]);
    c.wait_ready(1);
    build_with_a_frozen(&mut c, |c| c.scheduler.as_ref().unwrap().child.id());
}

#[test]
fn a_frozen_consumerd_does_not_hold_the_build() {
    let mut c = Cluster::new();
    c.start_scheduler(&["--no-optimizer", "--no-cache"]);
    c.start_agent(&["--jobs", "3"]);
    c.start_consumerd(1, true);
    c.wait_ready(1);
    // Each wrapper waiting on it gives up after its silence limit and compiles here.
    build_with_a_frozen(&mut c, |c| c.consumerd.as_ref().unwrap().child.id());
}
