//! The command line as a user meets it: `--version` names the build's
//! commit, `ccroute completions` prints scripts the shells accept, and
//! `ccroute man` prints a page `man` renders, or one page per command.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Command, Output, Stdio};

use common::ccroute;

fn run(args: &[&str]) -> Output {
    let out = Command::new(ccroute()).args(args).output().unwrap();
    assert!(out.status.success(), "ccroute {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// Whether `program` runs here.
fn have(program: &str) -> bool {
    Command::new(program).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

/// The commands a user types after `ccroute`.
const SUBCOMMANDS: &[&str] =
    &["certs", "scheduler", "agent", "consumerd", "status", "stats", "cache", "demo", "completions", "man"];

#[test]
fn version_names_the_package_version_and_a_commit() {
    let out = String::from_utf8(run(&["--version"]).stdout).unwrap();
    let line = out.trim();
    assert!(line.starts_with(&format!("ccroute {} ", env!("CARGO_PKG_VERSION"))), "{line}");
    let commit =
        line.rsplit_once("(commit ").and_then(|(_, c)| c.strip_suffix(')')).unwrap_or_else(|| panic!("{line}"));
    // A short hash in a checkout, "unknown" from a tarball.
    let hash_like = commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit());
    assert!(hash_like || commit == "unknown", "{line}");
    // When the tests run in a git checkout of this package, it is its HEAD
    // (or the commit before, when one landed since the build).
    let head = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success());
    if let Some(head) = head {
        let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
        assert!(hash_like, "built in a checkout at {head}, yet: {line}");
        // Each separately: a shallow clone may lack the older ones.
        let recent: Vec<String> = ["HEAD", "HEAD~1", "HEAD~2"]
            .iter()
            .filter_map(|rev| {
                let out = Command::new("git")
                    .args(["rev-parse", "--short", rev])
                    .current_dir(env!("CARGO_MANIFEST_DIR"))
                    .output()
                    .ok()?;
                out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
            })
            .collect();
        assert!(
            recent.iter().any(|h| h.starts_with(commit) || commit.starts_with(h.as_str())),
            "{line}, not one of {recent:?}"
        );
    }
}

#[test]
fn the_bash_completion_parses_and_knows_every_subcommand() {
    let script = String::from_utf8(run(&["completions", "bash"]).stdout).unwrap();
    let check = Command::new("bash")
        .arg("-n")
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut bash| {
            use std::io::Write;
            bash.stdin.take().unwrap().write_all(script.as_bytes())?;
            bash.wait_with_output()
        })
        .unwrap();
    assert!(check.status.success(), "bash -n: {}", String::from_utf8_lossy(&check.stderr));
    for sub in SUBCOMMANDS {
        assert!(script.contains(&format!("ccroute,{sub})")), "no case for {sub} in the bash script");
    }
    assert!(script.contains("--watch"), "status --watch is not completed");
    // Sourced in a shell, it completes `ccroute sta` to the two commands that start so.
    let complete = Command::new("bash")
        .args([
            "-c",
            r#"eval "$1"; COMP_WORDS=(ccroute sta); COMP_CWORD=1; _ccroute ccroute sta ccroute; printf '%s\n' "${COMPREPLY[@]}""#,
            "complete",
            &script,
        ])
        .output()
        .unwrap();
    let mut offered: Vec<String> = String::from_utf8_lossy(&complete.stdout).lines().map(str::to_owned).collect();
    offered.sort();
    assert_eq!(offered, ["stats", "status"], "{}", String::from_utf8_lossy(&complete.stderr));
}

#[test]
fn zsh_and_fish_completions_are_scripts_for_them() {
    let zsh = String::from_utf8(run(&["completions", "zsh"]).stdout).unwrap();
    assert!(zsh.starts_with("#compdef ccroute"), "{}", &zsh[..zsh.len().min(200)]);
    {
        assert!(have("zsh"), "zsh is not installed (./scripts/test installs it)");
        let out = Command::new("zsh").args(["-n", "-c", &zsh]).output().unwrap();
        assert!(out.status.success(), "zsh -n: {}", String::from_utf8_lossy(&out.stderr));
    }
    let fish = String::from_utf8(run(&["completions", "fish"]).stdout).unwrap();
    assert!(fish.contains("complete -c ccroute") && fish.contains("-a \"status\""), "{fish}");
    {
        assert!(have("fish"), "fish is not installed (./scripts/test installs it)");
        let out = Command::new("fish").args(["--no-execute", "-c", &fish]).output().unwrap();
        assert!(out.status.success(), "fish --no-execute: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn an_unknown_shell_is_a_usage_error() {
    let out = Command::new(ccroute()).args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid value 'tcsh'") && err.contains("bash"), "{err}");
}

#[test]
fn the_man_page_renders() {
    let page = run(&["man"]).stdout;
    let text = String::from_utf8(page.clone()).unwrap();
    assert!(text.contains(".TH ccroute 1"), "{}", &text[..text.len().min(400)]);
    // Rendered as man would; groff comes with man-db on most systems.
    let rendered = if have("groff") {
        let mut groff = Command::new("groff")
            .args(["-man", "-Tutf8", "-P", "-c", "-ww"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            groff.stdin.take().unwrap().write_all(&page).unwrap();
        }
        let out = groff.wait_with_output().unwrap();
        assert!(out.status.success(), "groff: {}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stderr.is_empty(), "groff warns: {}", String::from_utf8_lossy(&out.stderr));
        // Bold and underline come as overstrikes on a plain terminal.
        strip_overstrike(&String::from_utf8_lossy(&out.stdout))
    } else {
        eprintln!("no groff: checking the roff source only");
        text.clone()
    };
    for section in ["NAME", "SYNOPSIS", "OPTIONS", "SUBCOMMANDS", "COMPILING", "FILES", "ENVIRONMENT", "VERSION"] {
        assert!(rendered.contains(section), "no {section} section:\n{rendered}");
    }
    for sub in SUBCOMMANDS {
        assert!(rendered.contains(&format!("ccroute-{sub}(1)")), "ccroute-{sub}(1) not listed:\n{rendered}");
    }
    assert!(rendered.contains("CC=\"ccroute gcc\""), "the wrapper's use is not shown:\n{rendered}");
}

#[test]
fn man_dir_writes_a_page_per_command() {
    let dir = tempfile::tempdir().unwrap();
    let pages = dir.path().join("man1");
    let out = run(&["man", "--dir", pages.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stdout);
    let mut names: Vec<String> =
        std::fs::read_dir(&pages).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert!(said.contains(&format!("wrote {} man pages", names.len())), "{said}");
    for sub in SUBCOMMANDS {
        assert!(names.contains(&format!("ccroute-{sub}.1")), "no page for {sub}: {names:?}");
    }
    assert!(names.contains(&"ccroute.1".to_owned()) && names.contains(&"ccroute-certs-init.1".to_owned()), "{names:?}");
    let status = std::fs::read_to_string(pages.join("ccroute-status.1")).unwrap();
    assert!(status.contains(".TH ccroute-status 1") && status.contains("watch"), "{status}");
}

/// Text without the backspace overstrikes a terminal renderer makes bold with.
fn strip_overstrike(s: &str) -> String {
    let mut out: Vec<char> = Vec::with_capacity(s.len());
    for c in s.chars() {
        if c == '\u{8}' {
            out.pop();
        } else {
            out.push(c);
        }
    }
    // "x\bx" leaves the second x.
    out.into_iter().collect()
}
