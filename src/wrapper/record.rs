//! The wrapper's part in the consumerd's direct-mode cache: saying what a
//! lookup needs, writing a hit out as the compile would have, and running a
//! local compile so that what it read and made can be recorded.
//!
//! A local compile learns the files it read from its dependency output: the
//! command's own (`-MD`, `-Wp,-MD,file`), else one added for the purpose
//! (gcc: `SUNPRO_DEPENDENCIES`, which the driver reads only when the command
//! names no dependency output; clang: `-MD -MF` to a temporary file). A
//! command with `-MMD` leaves system headers out of its list: the record
//! says so, and the consumerd completes the list itself, later.
//!
//! Main items: [`direct_job`], [`write_hit`], [`compile_recording`]. Left
//! out: the conversation (`super`), reading dependency files
//! ([`crate::cc::depfile`]).

use std::ffi::{OsStr, OsString};
use std::io::IsTerminal;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use bytes::Bytes;
use ccroute_wire::local::{DirectJob, RecordHeader, WrapperMsg};

use super::process::{exit_code, write_object, NOT_FOUND};
use super::session::Session;
use crate::cc::depfile::dep_files;
use crate::cc::{Family, RemotePlan};

/// Environment variables a hit's output depends on besides the include
/// path: the locale (diagnostics' language and quotes) and gcc's colors.
const OUTPUT_ENV: &[&str] = &["LANG", "LC_ALL", "LC_MESSAGES", "LC_CTYPE", "LANGUAGE", "GCC_COLORS", "TERM"];

/// Whether the compile's diagnostics are colored: stderr is a terminal and
/// the command does not choose.
pub fn colors(args: &[OsString]) -> bool {
    let chosen = args.iter().any(|a| {
        let a = a.as_bytes();
        a.starts_with(b"-fdiagnostics-color") || a == b"-fno-diagnostics-color" || a.starts_with(b"-fcolor-diagnostics")
    });
    !chosen && std::io::stderr().is_terminal()
}

/// What the consumerd's lookup needs; `None` when the paths are not text it can key on.
pub fn direct_job(plan: &RemotePlan, args: &[OsString], cwd: &Path, colors: bool) -> Option<DirectJob> {
    let bytes = |p: &Path| p.as_os_str().as_bytes().to_vec();
    let mut env: Vec<(String, Vec<u8>)> =
        plan.direct.include_env.iter().map(|(k, v)| (k.clone(), v.as_bytes().to_vec())).collect();
    for k in OUTPUT_ENV {
        if let Some(v) = std::env::var_os(k) {
            env.push(((*k).to_owned(), v.as_bytes().to_vec()));
        }
    }
    let started_ns = crate::host::file_stamp_clock_ns()?;
    Some(DirectJob {
        cwd: bytes(cwd),
        args: args.iter().map(|a| a.as_bytes().to_vec()).collect(),
        input: bytes(&plan.input),
        dep_file: plan.direct.dep_file.as_deref().map(bytes),
        deps_user_only: plan.direct.deps_user_only,
        include_dirs: plan.direct.include_dirs.iter().map(|d| bytes(d)).collect(),
        env,
        colors,
        cxx: plan.language.is_cxx(),
        started_ns,
    })
}

/// Writes a hit's object and dependency file where the compile would have.
///
/// # Errors
/// When either cannot be written (the caller then compiles locally).
pub fn write_hit(plan: &RemotePlan, object: &[u8], deps: &[u8]) -> std::io::Result<()> {
    write_object(&plan.output, object)?;
    if let Some(dep) = &plan.direct.dep_file {
        write_object(dep, deps)?;
    }
    Ok(())
}

/// How a local compile tells what it read.
enum Listing {
    /// The command's own dependency file; `true`: it leaves system headers out.
    Own(std::path::PathBuf, bool),
    /// A temporary one of ours.
    Ours(tempfile::TempPath),
}

/// Runs the compile here with its output captured, prints it as the
/// compiler would have, and — when it succeeded and says what it read —
/// sends the consumerd a `Record`. Returns the exit code.
pub fn compile_recording(
    compiler: &Path,
    argv0: &OsStr,
    args: &[OsString],
    plan: &RemotePlan,
    colors: bool,
    mut session: Session,
) -> i32 {
    let listing = match (&plan.direct.dep_file, plan.direct.deps_user_only) {
        (Some(own), user_only) => Some(Listing::Own(own.clone(), user_only)),
        (None, _) => tempfile::Builder::new()
            .prefix("ccroute-deps-")
            .tempfile()
            .ok()
            .map(|f| Listing::Ours(f.into_temp_path()))
            .filter(|l| matches!(l, Listing::Ours(p) if !p.as_os_str().as_bytes().contains(&b' '))),
    };
    let mut cmd = Command::new(compiler);
    cmd.arg0(argv0).args(args).stdin(Stdio::inherit());
    if colors {
        cmd.arg("-fdiagnostics-color=always");
    }
    if let Some(Listing::Ours(p)) = &listing {
        match plan.family {
            Family::Gnu => {
                cmd.env("SUNPRO_DEPENDENCIES", p.as_os_str());
            }
            Family::Clang => {
                cmd.arg("-MD").arg("-MF").arg(p.as_os_str());
            }
        }
    }
    let out = match cmd.output() {
        Ok(o) => o,
        Err(err) => {
            eprintln!("ccroute: cannot run {}: {err}", compiler.display());
            return NOT_FOUND;
        }
    };
    super::print(&out.stdout, &out.stderr);
    if out.status.success() {
        if let Some(listing) = &listing {
            send_record(&mut session, plan, listing, out.stdout, out.stderr);
        }
    }
    drop(session);
    exit_code(out.status)
}

fn send_record(session: &mut Session, plan: &RemotePlan, listing: &Listing, stdout: Vec<u8>, stderr: Vec<u8>) {
    let Ok(object) = std::fs::read(&plan.output) else { return };
    let (listed, deps, user_only) = match listing {
        Listing::Own(p, user_only) => {
            let Ok(text) = std::fs::read(p) else { return };
            (dep_files(&text), text, *user_only)
        }
        Listing::Ours(p) => {
            let Ok(text) = std::fs::read(p) else { return };
            (dep_files(&text), Vec::new(), false)
        }
    };
    let parts = [Bytes::from(stdout), Bytes::from(stderr), Bytes::from(object), Bytes::from(deps)];
    let lens = parts.each_ref().map(|p| p.len() as u64);
    let payload = parts.concat();
    // Best effort: a record that does not arrive only costs a miss next time.
    let _ = session.send(&WrapperMsg::Record(RecordHeader { files: listed, user_only, lens }), &payload);
}
