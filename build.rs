//! Puts the git commit this binary is built from into `CCROUTE_COMMIT`, for
//! `ccroute --version`: `git rev-parse --short HEAD` when the package is its
//! own git checkout, else `CCROUTE_COMMIT` from the environment (a packager
//! that knows it), else "unknown" (a tarball, `cargo install` of a crate).
//!
//! It reruns when HEAD moves: on a checkout (`.git/HEAD`), and on a commit
//! to the branch HEAD names (its loose ref, or the directory it would be
//! made in, and `packed-refs`). No dependencies.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CCROUTE_COMMIT");
    let commit = std::env::var("CCROUTE_COMMIT").ok().filter(|c| !c.is_empty()).or_else(own_checkout_commit);
    println!("cargo:rustc-env=CCROUTE_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
}

/// The short commit of the checkout the package is the top of, watching the
/// files that change with it; `None` outside git, or when the package sits
/// inside some other repository (whose commit says nothing about it).
fn own_checkout_commit() -> Option<String> {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").ok()?;
    let top = git(&["rev-parse", "--show-toplevel"])?;
    if Path::new(&top).canonicalize().ok()? != Path::new(&manifest).canonicalize().ok()? {
        return None;
    }
    let head = git(&["rev-parse", "--git-path", "HEAD"])?;
    let mut watched = vec![head.clone(), git(&["rev-parse", "--git-path", "packed-refs"])?];
    let branch = std::fs::read_to_string(&head).ok().and_then(|h| h.strip_prefix("ref: ").map(|r| r.trim().to_owned()));
    if let Some(branch) = branch {
        let path = git(&["rev-parse", "--git-path", &branch])?;
        // A branch only in packed-refs gets its loose file back on the next
        // commit: its directory changes then.
        match Path::new(&path).parent() {
            Some(dir) if !Path::new(&path).exists() => watched.push(dir.display().to_string()),
            _ => watched.push(path),
        }
    }
    // A missing file would make cargo rerun this on every build.
    for path in watched.iter().filter(|p| Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={path}");
    }
    git(&["rev-parse", "--short", "HEAD"])
}
