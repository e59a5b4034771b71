//! Inputs that travel, end to end: units go remote as the digests of the
//! files they read, the agent fetches what it lacks and compiles the
//! unmodified command in its sandbox at the real paths, and every object is
//! byte-identical to plain gcc's or clang's at the same path — C and C++,
//! with and without `-g`, clang `-g` and gcc `-pedantic` included (which
//! the preprocessed text could not reproduce). The consumerd's counters
//! show each unit went this way, not as text; a header changed between
//! builds is compiled from its new bytes; a unit whose inputs cannot be
//! vouched for goes as text, counted with its reason.
//!
//! Needs gcc, g++, clang and bubblewrap (`scripts/test` installs them as root).

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{ccroute, Cluster};

fn require(program: &str) {
    let found =
        Command::new("sh").args(["-c", &format!("command -v {program}")]).output().is_ok_and(|o| o.status.success());
    assert!(found, "{program} is needed; install it (scripts/test does, as root)");
}

/// A scheduler, an agent that can make the sandbox (its own store, named
/// relative to where it started, as an operator may type it), and a
/// consumerd that sends every unit remote.
fn cluster() -> Cluster {
    for p in ["gcc", "g++", "clang", "clang++", "bwrap"] {
        require(p);
    }
    let mut c = Cluster::new();
    c.start_scheduler(&[]);
    c.start_agent_in_cluster_dir(&["--jobs", "2", "--store-dir", "agent-store", "--scratch-dir", "."]);
    c.start_consumerd(1, true);
    c.wait_ready(1);
    let s = c.status();
    assert!(
        s["agents"][0]["shipping"].to_string().contains("Ready"),
        "the agent cannot make the sandbox: {s}\n{}",
        c.logs()
    );
    c
}

/// The consumerd's counters (`ccroute stats --json`).
fn counters(c: &Cluster) -> serde_json::Value {
    let out = c.command(ccroute()).args(["stats", "--json"]).output().unwrap();
    assert!(out.status.success(), "stats: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["counters"].clone()
}

fn count(v: &serde_json::Value, name: &str) -> u64 {
    v[name].as_u64().unwrap_or(0)
}

/// A small project: C and C++ units that read a project header (through
/// `-I`), a header beside them, system and standard library headers, and a
/// header found through `__has_include`.
fn project(dir: &Path) {
    let w = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w(
        "include/proj/config.h",
        "#pragma once\n#define PROJ_SCALE 3\nstatic inline int proj_scale(int x) { return x * PROJ_SCALE; }\n",
    );
    w("src/local.h", "#pragma once\nstruct point { int x, y; };\n");
    w(
        "src/a.c",
        "#include <stdio.h>\n#include <string.h>\n#include \"local.h\"\n#include <proj/config.h>\n\
         #if __has_include(<proj/optional.h>)\n#include <proj/optional.h>\n#else\n#define OPTIONAL 0\n#endif\n\
         int area(struct point p) { return proj_scale(p.x * p.y) + OPTIONAL; }\n\
         int say(const char *s) { return printf(\"%s %zu\\n\", s, strlen(s)); }\n",
    );
    w("include/proj/optional.h", "#define OPTIONAL 7\n");
    w(
        "src/b.cc",
        "#include <iostream>\n#include <vector>\n#include <string>\n#include <proj/config.h>\n\
         int total(const std::vector<int>& v) { int t = 0; for (int x : v) t += proj_scale(x); return t; }\n\
         void hello(const std::string& who) { std::cout << \"hello \" << who << '\\n'; }\n",
    );
}

/// Compiles `src` to `out` in `dir` with `compiler` (plain, or through
/// ccroute) and returns the object.
fn compile(c: &Cluster, dir: &Path, through: bool, compiler: &str, flags: &[&str], src: &str, out: &str) -> Vec<u8> {
    let mut cmd = if through {
        let mut cmd = c.command(ccroute());
        cmd.arg(compiler);
        cmd
    } else {
        Command::new(compiler)
    };
    let o = cmd
        .current_dir(dir)
        .args(flags)
        .args(["-Iinclude", "-c", src, "-o", out])
        .env("CCROUTE_SOCKET", &c.socket)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{compiler} {flags:?} {src} (through ccroute: {through}): {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        c.logs()
    );
    let object = std::fs::read(dir.join(out)).unwrap();
    std::fs::remove_file(dir.join(out)).unwrap();
    object
}

fn age(dir: &Path) {
    let out = Command::new("find")
        .arg(dir)
        .args(["-type", "f", "-exec", "touch", "-d", "-1 hour", "{}", "+"])
        .output()
        .unwrap();
    assert!(out.status.success());
    std::thread::sleep(Duration::from_millis(150));
}

#[test]
fn units_sent_as_inputs_come_back_identical_for_gcc_and_clang_c_and_cxx_with_and_without_g() {
    let c = cluster();
    let dir: PathBuf = c.dir.path().join("p");
    project(&dir);
    age(&dir);
    let cases: &[(&str, &[&str], &str)] = &[
        ("gcc", &["-O2"], "src/a.c"),
        ("gcc", &["-O2", "-g"], "src/a.c"),
        ("gcc", &["-O1", "-g3", "-Wall", "-pedantic"], "src/a.c"),
        ("g++", &["-O2"], "src/b.cc"),
        ("g++", &["-O2", "-g"], "src/b.cc"),
        ("clang", &["-O2"], "src/a.c"),
        ("clang", &["-O2", "-g"], "src/a.c"),
        ("clang++", &["-O2", "-g"], "src/b.cc"),
        ("clang++", &["-O0"], "src/b.cc"),
    ];
    let before = counters(&c);
    for (compiler, flags, src) in cases {
        let local = compile(&c, &dir, false, compiler, flags, src, "out.o");
        let remote = compile(&c, &dir, true, compiler, flags, src, "out.o");
        if local != remote {
            // Kept for a look: `cmp`, `readelf -wi`.
            let keep = std::env::temp_dir().join("ccroute-inputs-mismatch");
            std::fs::create_dir_all(&keep).unwrap();
            std::fs::write(keep.join("local.o"), &local).unwrap();
            std::fs::write(keep.join("remote.o"), &remote).unwrap();
            panic!(
                "{compiler} {flags:?} {src}: the object from the inputs differs (both in {})\n{}",
                keep.display(),
                c.logs()
            );
        }
    }
    let after = counters(&c);
    let sent = count(&after, "remote_inputs") - count(&before, "remote_inputs");
    assert_eq!(sent, cases.len() as u64, "every unit compiled from its inputs, none as text: {after}\n{}", c.logs());
    assert_eq!(count(&after, "remote_text"), 0, "{after}");
    let totals = c.assert_each_task_ended_once();
    assert!(totals["completed"].as_u64().unwrap() >= cases.len() as u64, "{totals}");
}

#[test]
fn a_header_changed_between_builds_is_compiled_from_its_new_bytes() {
    let c = cluster();
    let dir: PathBuf = c.dir.path().join("p");
    project(&dir);
    age(&dir);
    let first = compile(&c, &dir, true, "gcc", &["-O2"], "src/a.c", "a.o");
    assert_eq!(first, compile(&c, &dir, false, "gcc", &["-O2"], "src/a.c", "a.o"));
    // Same size, other bytes: only the digest tells them apart.
    let header = dir.join("include/proj/config.h");
    let text = std::fs::read_to_string(&header).unwrap().replace("PROJ_SCALE 3", "PROJ_SCALE 5");
    std::fs::write(&header, text).unwrap();
    age(&dir);
    let second = compile(&c, &dir, true, "gcc", &["-O2"], "src/a.c", "a.o");
    assert_ne!(first, second, "the new header changes the object");
    assert_eq!(second, compile(&c, &dir, false, "gcc", &["-O2"], "src/a.c", "a.o"), "{}", c.logs());
    let n = counters(&c);
    assert_eq!(count(&n, "remote_inputs"), 2, "both builds went as inputs: {n}");
}

#[test]
fn a_unit_whose_inputs_cannot_be_vouched_for_goes_as_text_and_is_counted() {
    let c = cluster();
    let dir: PathBuf = c.dir.path().join("p");
    project(&dir);
    // `__has_include` through a macro: only the preprocessor knows the name.
    std::fs::write(
        dir.join("src/computed.c"),
        "#define WANT <proj/optional.h>\n#if __has_include(WANT)\n#include WANT\n#else\n#define OPTIONAL 0\n#endif\n\
         int optional(void) { return OPTIONAL; }\n",
    )
    .unwrap();
    age(&dir);
    let local = compile(&c, &dir, false, "gcc", &["-O2"], "src/computed.c", "c.o");
    let remote = compile(&c, &dir, true, "gcc", &["-O2"], "src/computed.c", "c.o");
    assert_eq!(local, remote, "{}", c.logs());
    let n = counters(&c);
    assert_eq!(count(&n, "remote_inputs"), 0, "{n}");
    assert_eq!(count(&n, "remote_text"), 1, "it went remote as text: {n}");
    assert_eq!(count(&n, "text_because: __has_include names its file through a macro"), 1, "{n}");
}

/// An agent that fails the units it is given as inputs (its store taken
/// away under it): each unit still comes back identical (sent again as
/// text), counted with its reason, and the consumerd says so once, with the
/// agent's words, not at every unit; after three such failures in a row it
/// sends the toolchain's units as text at once for a while. The agent logs,
/// once, that its store is gone.
#[test]
fn an_agent_that_fails_units_sent_as_inputs_is_said_once_and_the_units_go_as_text() {
    let c = cluster();
    let dir: PathBuf = c.dir.path().join("p");
    project(&dir);
    age(&dir);
    let local = compile(&c, &dir, false, "gcc", &["-O2"], "src/a.c", "a.o");
    assert_eq!(local, compile(&c, &dir, true, "gcc", &["-O2"], "src/a.c", "a.o"), "{}", c.logs());
    assert_eq!(count(&counters(&c), "remote_inputs"), 1, "{}", c.logs());
    std::fs::remove_dir_all(c.dir.path().join("agent-store")).unwrap();
    for flags in [&["-O1"][..], &["-O2", "-g"], &["-Os"], &["-O3"]] {
        let local = compile(&c, &dir, false, "gcc", flags, "src/a.c", "a.o");
        assert_eq!(local, compile(&c, &dir, true, "gcc", flags, "src/a.c", "a.o"), "{flags:?}: {}", c.logs());
    }
    let n = counters(&c);
    assert_eq!(count(&n, "remote_inputs"), 1, "{n}");
    assert_eq!(count(&n, "remote_text"), 4, "{n}");
    assert_eq!(count(&n, "text_because: the agent could not compile the unit from its inputs"), 3, "{n}");
    // The fourth is not tried as inputs: three failed in a row.
    assert_eq!(count(&n, "text_because: no agent took this toolchain's inputs lately"), 1, "{n}");
    let log = c.consumerd.as_ref().unwrap().log_text();
    let said = log.lines().filter(|l| l.contains("an agent could not compile a unit from its inputs")).count();
    assert_eq!(said, 1, "said once: {log}");
    // The agent says what is wrong, once, and not a line for each unit.
    let agent = c.agents[0].log_text();
    assert_eq!(agent.lines().filter(|l| l.contains("the toolchain store is gone")).count(), 1, "{agent}");
    assert!(!agent.contains("cannot remove a unit's tree"), "{agent}");
}

#[test]
fn an_agent_without_compilers_gets_the_toolchain_and_the_inputs_and_compiles_them_identically() {
    for p in ["gcc", "clang", "bwrap"] {
        require(p);
    }
    let mut c = Cluster::new();
    c.start_scheduler(&[]);
    let store = c.dir.path().join("agent-store");
    // No compiler of its own: each toolchain is shipped, then each unit's inputs.
    c.start_agent(&["--no-discover", "--jobs", "2", "--store-dir", store.to_str().unwrap()]);
    c.start_consumerd(1, true);
    c.wait_ready(1);
    let dir: PathBuf = c.dir.path().join("p");
    project(&dir);
    age(&dir);
    for (compiler, flags, src) in [("gcc", &["-O2", "-g"][..], "src/a.c"), ("clang", &["-O1", "-g"], "src/a.c")] {
        let local = compile(&c, &dir, false, compiler, flags, src, "out.o");
        let remote = compile(&c, &dir, true, compiler, flags, src, "out.o");
        assert!(local == remote, "{compiler} {flags:?}: the object differs\n{}", c.logs());
    }
    let n = counters(&c);
    assert_eq!(count(&n, "remote_inputs"), 2, "{n}\n{}", c.logs());
    let s = c.status();
    let shipped =
        s["routes"].as_array().unwrap().iter().filter(|r| r["shipped_to"].as_array().is_some_and(|a| !a.is_empty()));
    assert!(shipped.count() >= 2, "the toolchains were shipped: {s}");
}
