//! End to end: real daemons on 127.0.0.1, real gcc and g++, a generated C
//! and C++ project built with `make -j` through the wrapper — and through
//! CMake's launcher variable and masquerade symlinks — compared byte for
//! byte with a plain local build.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::project::{self, Shape};
use common::{assert_same_objects, ccroute, make, objects, Cluster};

fn build_args(build: &str, flags: &str, cc: &str, cxx: &str) -> Vec<String> {
    vec![
        "-j8".into(),
        format!("BUILD={build}"),
        format!("CC={cc}"),
        format!("CXX={cxx}"),
        format!("CFLAGS={flags}"),
        format!("CXXFLAGS={flags}"),
        "check".into(),
    ]
}

fn assert_ok(out: &std::process::Output, cluster: Option<&Cluster>) {
    assert!(
        out.status.success(),
        "build failed: {}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        cluster.map(Cluster::logs).unwrap_or_default()
    );
}

fn wrapped(compiler: &str) -> String {
    format!("{} {compiler}", ccroute().display())
}

fn remote_answers(c: &Cluster) -> u64 {
    let t = &c.status()["totals"];
    t["completed"].as_u64().unwrap() + t["failed"].as_u64().unwrap()
}

/// The main case, with and without debug info: every object identical to a
/// local build's, and the program they link to gives the right answer.
#[test]
fn make_through_the_wrapper_gives_byte_identical_objects() {
    let dir = tempfile::tempdir().unwrap();
    project::generate(dir.path(), Shape::default());
    let mut c = Cluster::new();
    c.start_scheduler(&[]);
    c.start_agent(&["--jobs", "4"]);
    c.start_agent(&["--jobs", "4"]);
    c.start_consumerd(1, true);
    c.wait_ready(2);
    for (i, flags) in ["-O2 -Wall", "-O2 -g -Wall"].into_iter().enumerate() {
        let local = format!("local{i}");
        let remote = format!("remote{i}");
        assert_ok(&make(dir.path(), &build_args(&local, flags, "gcc", "g++"), &[]), None);
        let before = remote_answers(&c);
        let out = make(dir.path(), &build_args(&remote, flags, &wrapped("gcc"), &wrapped("g++")), &c.wrapper_env());
        assert_ok(&out, Some(&c));
        assert_same_objects(&objects(&dir.path().join(&local)), &objects(&dir.path().join(&remote)));
        let went_remote = remote_answers(&c) - before;
        assert!(went_remote >= 5, "only {went_remote} of 19 compiles went remote with {flags}\n{}", c.logs());
    }
}

/// clang and clang++ too (clang keeps `-g` compiles local:
/// its debug info records a checksum of the source file as it read it).
#[test]
fn clang_builds_through_the_wrapper_are_byte_identical() {
    let have_clang = Command::new("clang").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(have_clang, "clang is not installed (./scripts/test installs it)");
    let dir = tempfile::tempdir().unwrap();
    project::generate(dir.path(), Shape { c: 8, cxx: 3 });
    let mut c = Cluster::new();
    c.start_scheduler(&["--no-cache"]);
    c.start_agent(&["--jobs", "4"]);
    c.start_consumerd(1, true);
    c.wait_ready(1);
    assert_ok(&make(dir.path(), &build_args("local", "-O2 -Wall", "clang", "clang++"), &[]), None);
    let before = remote_answers(&c);
    let out =
        make(dir.path(), &build_args("remote", "-O2 -Wall", &wrapped("clang"), &wrapped("clang++")), &c.wrapper_env());
    assert_ok(&out, Some(&c));
    assert_same_objects(&objects(&dir.path().join("local")), &objects(&dir.path().join("remote")));
    assert!(remote_answers(&c) - before >= 3, "clang compiles did not go remote\n{}", c.logs());
}

#[test]
fn cmake_launcher_and_masquerade_symlinks_build_the_same_objects() {
    let have_cmake = Command::new("cmake").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(have_cmake, "cmake is not installed (./scripts/test installs it)");
    let dir = tempfile::tempdir().unwrap();
    project::generate(dir.path(), Shape { c: 8, cxx: 3 });
    let mut c = Cluster::new();
    c.start_scheduler(&[]);
    c.start_agent(&["--jobs", "4"]);
    c.start_consumerd(1, true);
    c.wait_ready(1);

    // CMake with the launcher, against CMake without it, in the same build
    // directory path (CMake compiles from the build dir, which -g records).
    let cmake_build = |launcher: bool| {
        let build = dir.path().join("cmake-build");
        let _ = std::fs::remove_dir_all(&build);
        let mut cfg = Command::new("cmake");
        cfg.arg("-S")
            .arg(dir.path())
            .arg("-B")
            .arg(&build)
            .arg("-DCMAKE_C_FLAGS=-O2 -g")
            .arg("-DCMAKE_CXX_FLAGS=-O2 -g");
        if launcher {
            cfg.arg(format!("-DCMAKE_C_COMPILER_LAUNCHER={}", ccroute().display()));
            cfg.arg(format!("-DCMAKE_CXX_COMPILER_LAUNCHER={}", ccroute().display()));
        }
        let out = cfg.output().unwrap();
        assert_ok(&out, Some(&c));
        let mut b = Command::new("cmake");
        b.arg("--build").arg(&build).arg("-j8");
        for (k, v) in c.wrapper_env() {
            b.env(k, v);
        }
        assert_ok(&b.output().unwrap(), Some(&c));
        objects(&build)
    };
    let local = cmake_build(false);
    let before = remote_answers(&c);
    let launched = cmake_build(true);
    assert_same_objects(&local, &launched);
    assert!(remote_answers(&c) > before, "nothing went remote through the CMake launcher\n{}", c.logs());

    // Masquerade: gcc and g++ early in PATH are links to ccroute.
    let bin = dir.path().join("masquerade");
    std::fs::create_dir(&bin).unwrap();
    for name in ["gcc", "g++", "cc", "c++"] {
        std::os::unix::fs::symlink(ccroute(), bin.join(name)).unwrap();
    }
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut env = c.wrapper_env();
    env.push(("PATH".into(), path));
    assert_ok(&make(dir.path(), &build_args("plain", "-O2 -g", "gcc", "g++"), &[]), None);
    let before = remote_answers(&c);
    let out = make(dir.path(), &build_args("masq", "-O2 -g", "gcc", "g++"), &env);
    assert_ok(&out, Some(&c));
    assert_same_objects(&objects(&dir.path().join("plain")), &objects(&dir.path().join("masq")));
    assert!(remote_answers(&c) > before, "nothing went remote through the masquerade\n{}", c.logs());
}

fn sample_extra(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("sample/extra").join(name)
}

/// A warning reaches the terminal; a compile error keeps its exit status
/// and message — both compiled remotely.
#[test]
fn warnings_and_errors_pass_through_unchanged() {
    let mut c = Cluster::new();
    c.start_scheduler(&[]);
    c.start_agent(&["--jobs", "2"]);
    c.start_consumerd(1, true);
    c.wait_ready(1);
    let work = tempfile::tempdir().unwrap();
    for (file, expect_fail) in [("warns.c", false), ("broken.c", true)] {
        std::fs::copy(sample_extra(file), work.path().join(file)).unwrap();
        let (local_o, remote_o) = (format!("{file}.local.o"), format!("{file}.remote.o"));
        let local = Command::new("gcc")
            .current_dir(work.path())
            .args(["-Wall", "-O2", "-c", file, "-o", &local_o])
            .output()
            .unwrap();
        let before = remote_answers(&c);
        let mut cmd = Command::new(ccroute());
        cmd.current_dir(work.path()).args(["gcc", "-Wall", "-O2", "-c", file, "-o", &remote_o]);
        for (k, v) in c.wrapper_env() {
            cmd.env(k, v);
        }
        let remote = cmd.output().unwrap();
        assert_eq!(remote.status.code(), local.status.code(), "{file}: exit status");
        assert_eq!(String::from_utf8_lossy(&remote.stderr), String::from_utf8_lossy(&local.stderr), "{file}: stderr");
        assert_eq!(remote.stdout, local.stdout);
        assert!(!local.stderr.is_empty(), "{file}: the local compile said nothing");
        assert_eq!(remote_answers(&c), before + 1, "{file} did not go remote\n{}", c.logs());
        if expect_fail {
            assert!(!work.path().join(&remote_o).exists(), "an object after a failed compile");
        } else {
            assert_eq!(
                std::fs::read(work.path().join(&remote_o)).unwrap(),
                std::fs::read(work.path().join(&local_o)).unwrap()
            );
        }
    }
}

/// No agent, then no scheduler at all: the build succeeds, locally.
#[test]
fn without_agents_or_scheduler_the_build_still_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    project::generate(dir.path(), Shape { c: 6, cxx: 2 });
    assert_ok(&make(dir.path(), &build_args("local", "-O2 -g", "gcc", "g++"), &[]), None);

    // A scheduler with no agent.
    let mut c = Cluster::new();
    c.start_scheduler(&[]);
    c.start_consumerd(1, true);
    let out = make(dir.path(), &build_args("no-agent", "-O2 -g", &wrapped("gcc"), &wrapped("g++")), &c.wrapper_env());
    assert_ok(&out, Some(&c));
    assert_same_objects(&objects(&dir.path().join("local")), &objects(&dir.path().join("no-agent")));

    // A consumerd whose scheduler does not exist (nothing listens there).
    let mut lonely = Cluster::new();
    lonely.addr = Some("127.0.0.1:9".parse().unwrap());
    lonely.start_consumerd(2, true);
    let out = make(
        dir.path(),
        &build_args("no-scheduler", "-O2 -g", &wrapped("gcc"), &wrapped("g++")),
        &lonely.wrapper_env(),
    );
    assert_ok(&out, Some(&lonely));
    assert_same_objects(&objects(&dir.path().join("local")), &objects(&dir.path().join("no-scheduler")));

    // No consumerd at all, and none can be started (its socket would live
    // under a regular file).
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"").unwrap();
    let env = vec![("CCROUTE_SOCKET".to_string(), blocker.join("consumerd.sock").display().to_string())];
    let out = make(dir.path(), &build_args("no-consumerd", "-O2 -g", &wrapped("gcc"), &wrapped("g++")), &env);
    assert_ok(&out, None);
    assert_same_objects(&objects(&dir.path().join("local")), &objects(&dir.path().join("no-consumerd")));
}

/// An agent killed with SIGKILL while it compiles: the build succeeds, every
/// task is answered once, and the killed agent's tasks ran elsewhere.
#[test]
fn an_agent_killed_mid_build_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    project::generate(dir.path(), Shape { c: 4, cxx: 2 });
    project::add_slow_units(dir.path(), 4, 1500);
    assert_ok(&make(dir.path(), &build_args("local", "-O2", "gcc", "g++"), &[]), None);
    let mut c = Cluster::new();
    c.start_scheduler(&["--no-optimizer"]);
    c.start_agent(&["--jobs", "3", "--name", "agent0"]);
    c.start_agent(&["--jobs", "3", "--name", "agent1"]);
    c.start_consumerd(1, true);
    c.wait_ready(2);
    let env = c.wrapper_env();
    let root = dir.path().to_path_buf();
    let builder =
        std::thread::spawn(move || make(&root, &build_args("remote", "-O2", &wrapped("gcc"), &wrapped("g++")), &env));
    // Kill the first agent once it is running something.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = c.status();
        let busy = s["agents"].as_array().unwrap().iter().find(|a| a["tokens_in_use"].as_u64() > Some(0)).cloned();
        if let Some(busy) = busy {
            let name = busy["host_name"].as_str().unwrap();
            let victim: usize = name.trim_start_matches("agent").parse().unwrap();
            c.agents[victim].kill();
            break;
        }
        assert!(Instant::now() < deadline, "no agent ever got work\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = builder.join().unwrap();
    assert_ok(&out, Some(&c));
    assert_same_objects(&objects(&dir.path().join("local")), &objects(&dir.path().join("remote")));
    let t = c.assert_each_task_ended_once();
    assert!(t["requeued"].as_u64() >= Some(1), "the killed agent held tasks that were placed again: {t}\n{}", c.logs());
}
