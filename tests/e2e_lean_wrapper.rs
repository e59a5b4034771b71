//! `ccroute-cc`, the wrapper alone, as a build meets it: it starts the
//! `ccroute consumerd` beside it when none answers, compiles what plain gcc
//! compiles byte for byte, is answered from the direct-mode cache the next
//! time, works as a masquerade symlink (finding the real compiler further
//! down `PATH`), and says how to use it when given no compiler.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use common::ccroute;

fn lean() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ccroute-cc"))
}

/// A user of their own: home, runtime and cache directories in `home`.
fn as_user(mut c: Command, home: &Path) -> Command {
    c.env("HOME", home)
        .env("XDG_RUNTIME_DIR", home.join("run"))
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env_remove("CCROUTE_SOCKET")
        .env_remove("CCROUTE_SCHEDULER");
    c
}

fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The consumerds of this user (their `XDG_RUNTIME_DIR` is `run`), stopped
/// when dropped: the one a wrapper starts outlives it by design.
struct Consumerds(PathBuf);

impl Consumerds {
    fn pids(&self) -> Vec<u32> {
        let wanted = format!("XDG_RUNTIME_DIR={}", self.0.display()).into_bytes();
        let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
        entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
                cmd.split(|b| *b == 0).any(|a| a == b"consumerd") && env.split(|b| *b == 0).any(|v| v == wanted)
            })
            .collect()
    }
}

impl Drop for Consumerds {
    fn drop(&mut self) {
        for pid in self.pids() {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
    }
}

/// The counter `name` of this user's consumerd (`ccroute stats --json`).
fn counter(home: &Path, name: &str) -> u64 {
    let mut c = Command::new(ccroute());
    c.args(["stats", "--json"]);
    let out = ok(as_user(c, home).output().unwrap(), "ccroute stats --json");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["counters"][name].as_u64().unwrap_or_else(|| panic!("no counters.{name} in {v}"))
}

fn direct_hits(home: &Path) -> u64 {
    counter(home, "direct_hit")
}

/// Waits until the consumerd has recorded `n` compiles (it records after
/// the wrapper has exited).
fn wait_recorded(home: &Path, n: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let recorded = counter(home, "recorded");
        if recorded >= n {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{recorded} of {n} compiles recorded after 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_wrapper_alone_starts_a_consumerd_compiles_and_is_answered_from_its_cache() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().join("home");
    std::fs::create_dir_all(home.join("run")).unwrap();
    let consumerds = Consumerds(home.join("run"));
    let src = t.path().join("a.c");
    std::fs::write(&src, "#include <stdio.h>\nint twice(int x) { return 2 * x; }\n").unwrap();
    // Older than any compile: a source written just now is not cached.
    let past = SystemTime::now() - Duration::from_secs(60);
    std::fs::File::options().write(true).open(&src).unwrap().set_modified(past).unwrap();

    let plain = t.path().join("plain.o");
    ok(Command::new("gcc").args(["-O2", "-c"]).arg(&src).arg("-o").arg(&plain).output().unwrap(), "gcc");
    // The output's path is part of the command, so each compile writes the
    // same one, removed before.
    let out = t.path().join("a.o");
    let compile = |mut c: Command, what: &str| {
        let _ = std::fs::remove_file(&out);
        c.args(["-O2", "-c"]).arg(&src).arg("-o").arg(&out).current_dir(t.path());
        ok(as_user(c, &home).output().unwrap(), what);
        std::fs::read(&out).unwrap()
    };
    let through_lean = || {
        let mut c = Command::new(lean());
        c.arg("gcc");
        c
    };
    // No consumerd yet: this one starts `ccroute consumerd`, and compiles.
    assert_eq!(compile(through_lean(), "ccroute-cc gcc -c"), std::fs::read(&plain).unwrap());
    assert!(!consumerds.pids().is_empty(), "no consumerd was started for the wrapper");
    assert_eq!(direct_hits(&home), 0);
    wait_recorded(&home, 1);
    // The same compile again: the consumerd's direct-mode cache answers.
    assert_eq!(compile(through_lean(), "ccroute-cc gcc -c, again"), std::fs::read(&plain).unwrap());
    assert_eq!(direct_hits(&home), 1);

    // As a masquerade symlink named gcc, early in PATH: the real gcc is
    // found further down, and the cache answers again.
    let masq = t.path().join("masquerade");
    std::fs::create_dir(&masq).unwrap();
    std::os::unix::fs::symlink(lean(), masq.join("gcc")).unwrap();
    let path = std::env::join_paths(
        std::iter::once(masq.clone()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();
    let mut c = Command::new(masq.join("gcc"));
    c.env("PATH", &path);
    assert_eq!(compile(c, "gcc through a masquerade symlink to ccroute-cc"), std::fs::read(&plain).unwrap());
    assert_eq!(direct_hits(&home), 2);
}

#[test]
fn without_a_compiler_it_says_how_to_use_it() {
    let out = Command::new(lean()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("usage: ccroute-cc COMPILER ARGS..."), "{err}");
    let out = ok(Command::new(lean()).arg("--version").output().unwrap(), "ccroute-cc --version");
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(line.starts_with(&format!("ccroute-cc {} (commit ", env!("CARGO_PKG_VERSION"))), "{line}");
}
