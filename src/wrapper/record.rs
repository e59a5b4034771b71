//! The wrapper's part in the consumerd's direct-mode cache: saying what a
//! lookup needs, writing a hit out as the compile would have, and running a
//! local compile so that what it read and made can be recorded.
//!
//! A local compile learns the files it read from its dependency output: the
//! command's own (`-MD`, `-Wp,-MD,file`), else one added for the purpose
//! (gcc: `SUNPRO_DEPENDENCIES`, which the driver reads only when the command
//! names no dependency output; clang: `-MD -MF` to a temporary file). A
//! command with `-MMD` leaves system headers out of its list and is not
//! recorded when it compiles locally.
//!
//! Main items: [`direct_job`], [`write_hit`], [`compile_recording`],
//! [`dep_files`]. Left out: the conversation (`super`).

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
    let started_ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
    Some(DirectJob {
        cwd: bytes(cwd),
        args: args.iter().map(|a| a.as_bytes().to_vec()).collect(),
        input: bytes(&plan.input),
        dep_file: plan.direct.dep_file.as_deref().map(bytes),
        deps_user_only: plan.direct.deps_user_only,
        include_dirs: plan.direct.include_dirs.iter().map(|d| bytes(d)).collect(),
        env,
        colors,
        started_ns: u64::try_from(started_ns).ok()?,
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

/// The prerequisites of the first rule of a make-syntax dependency file
/// (as gcc and clang write them: `\`-newline continues a line, `\ ` is a
/// space, `$$` a dollar, `\#` a hash).
pub fn dep_files(text: &[u8]) -> Vec<Vec<u8>> {
    let mut files = Vec::new();
    let mut word = Vec::new();
    let mut in_targets = true;
    let mut i = 0;
    let flush = |word: &mut Vec<u8>, files: &mut Vec<Vec<u8>>, in_targets: bool| {
        if !word.is_empty() && !in_targets {
            files.push(std::mem::take(word));
        }
        word.clear();
    };
    while i < text.len() {
        let c = text[i];
        match c {
            b'\\' if text.get(i + 1) == Some(&b'\n') => {
                flush(&mut word, &mut files, in_targets);
                i += 2;
                continue;
            }
            b'\\' if matches!(text.get(i + 1), Some(b' ' | b'#' | b'\\')) => {
                word.push(text[i + 1]);
                i += 2;
                continue;
            }
            b'$' if text.get(i + 1) == Some(&b'$') => {
                word.push(b'$');
                i += 2;
                continue;
            }
            b':' if in_targets && matches!(text.get(i + 1), None | Some(b' ' | b'\t' | b'\n' | b'\\')) => {
                word.clear();
                in_targets = false;
            }
            b' ' | b'\t' => flush(&mut word, &mut files, in_targets),
            b'\n' => {
                flush(&mut word, &mut files, in_targets);
                if !in_targets {
                    break;
                }
            }
            _ => word.push(c),
        }
        i += 1;
    }
    flush(&mut word, &mut files, in_targets);
    files
}

/// How a local compile tells what it read.
enum Listing {
    /// The command's own dependency file.
    Own(std::path::PathBuf),
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
        (Some(_), true) => None,
        (Some(own), false) => Some(Listing::Own(own.clone())),
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
    let (listed, deps) = match listing {
        Listing::Own(p) => {
            let Ok(text) = std::fs::read(p) else { return };
            (dep_files(&text), text)
        }
        Listing::Ours(p) => {
            let Ok(text) = std::fs::read(p) else { return };
            (dep_files(&text), Vec::new())
        }
    };
    let parts = [Bytes::from(stdout), Bytes::from(stderr), Bytes::from(object), Bytes::from(deps)];
    let lens = parts.each_ref().map(|p| p.len() as u64);
    let payload = parts.concat();
    // Best effort: a record that does not arrive only costs a miss next time.
    let _ = session.send(&WrapperMsg::Record(RecordHeader { files: listed, lens }), &payload);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn dependency_files_read_as_make_reads_them() {
        let text = b"a.o: a.c /usr/include/stdio.h \\\n sub\\ dir/x.h $$HOME/y.h \\\n  b.h\n\nb.h:\nx.h:\n";
        let files: Vec<String> = dep_files(text).into_iter().map(|f| String::from_utf8(f).unwrap()).collect();
        assert_eq!(files, ["a.c", "/usr/include/stdio.h", "sub dir/x.h", "$HOME/y.h", "b.h"]);
        // Several targets, and a target named like a path with a colon inside.
        let files = dep_files(b"a.o a.d: a.c\n");
        assert_eq!(files, [b"a.c".to_vec()]);
        assert_eq!(
            dep_files(b"m.o: /usr/include/stdc-predef.h a.h"),
            [b"/usr/include/stdc-predef.h".to_vec(), b"a.h".to_vec()]
        );
    }
}
