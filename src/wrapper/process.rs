//! The wrapper's local work: running the compiler (by `exec`, or as a child
//! while a slot is held), the preprocess run, and writing a remote object
//! where the command asked for it.
//!
//! Main items: [`exec_compiler`], [`run_compiler`], [`preprocess`],
//! [`write_object`]. Left out: deciding which of these to do (`super`).

use std::ffi::{OsStr, OsString};
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

use crate::cc::{find_unsafe_pragma, Family, LocalReason, RemotePlan};

/// The exit code a shell gives a command it cannot find.
pub const NOT_FOUND: i32 = 127;

/// Replaces this process with the compiler; returns only if that failed,
/// with the exit code to use.
pub fn exec_compiler(compiler: &Path, argv0: &OsStr, args: &[OsString]) -> i32 {
    let err = Command::new(compiler).arg0(argv0).args(args).exec();
    eprintln!("ccroute: cannot run {}: {err}", compiler.display());
    NOT_FOUND
}

/// Runs the compiler as a child with this process's stdio and returns its
/// exit code (a child killed by a signal kills this process the same way).
pub fn run_compiler(compiler: &Path, argv0: &OsStr, args: &[OsString]) -> i32 {
    match Command::new(compiler).arg0(argv0).args(args).status() {
        Ok(status) => exit_code(status),
        Err(err) => {
            eprintln!("ccroute: cannot run {}: {err}", compiler.display());
            NOT_FOUND
        }
    }
}

/// The code to exit with for a child's status. A child killed by a signal
/// is passed on as the same signal, so that make reports it as it would
/// for the compiler itself.
pub(super) fn exit_code(status: ExitStatus) -> i32 {
    if let Some(code) = status.code() {
        return code;
    }
    let Some(signal) = status.signal() else {
        return 1;
    };
    #[allow(unsafe_code)]
    // SAFETY: resetting a signal's disposition and raising it have no memory
    // preconditions; the process is about to end either way.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
    128 + signal
}

/// The preprocessed text, ready to send.
#[derive(Debug)]
pub struct Ready {
    /// The cleaned text.
    pub text: Vec<u8>,
    /// No `__DATE__`/`__TIME__`: its result may be cached.
    pub cacheable: bool,
    /// Whether the agent's diagnostics read as gcc's would here. When not
    /// (`-g3` with gcc, a `#line` naming another file), a remote result that
    /// printed anything is not used: the compile runs here instead.
    pub trusted_diagnostics: bool,
    /// The files the text came from, as its line markers name them.
    pub files: Vec<Vec<u8>>,
    /// Only the unit's inputs may go remote, not this text (why).
    pub text_refused: Option<String>,
}

/// Runs the preprocess step of `plan` (which also writes any dependency
/// file) and checks that its text can go remote; `Err` says why not.
pub fn preprocess(compiler: &Path, plan: &RemotePlan, cwd: &Path) -> Result<Ready, String> {
    let out = Command::new(compiler)
        .args(&plan.preprocess_args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", compiler.display()))?;
    if !out.status.success() {
        return Err(format!("the preprocessor failed ({})", out.status));
    }
    // The local compile prints these once, in their place among the
    // compiler's own; an agent compiling the text could only add them before
    // or after its own, and repeats some (a macro defined twice on the
    // command line). One compiling the unit's inputs prints them as here.
    let mut text_refused = None;
    if !out.stderr.is_empty() {
        if plan.inputs_args.is_none() {
            return Err("the preprocessor printed diagnostics".to_owned());
        }
        text_refused = Some("the preprocessor printed diagnostics".to_owned());
    }
    let pp = plan.postprocess(&out.stdout);
    if pp.timestamp_macro {
        return Err("the source uses __TIMESTAMP__".to_owned());
    }
    if plan.family == Family::Gnu {
        for file in &pp.files {
            let path = cwd.join(OsStr::from_bytes(file));
            // Unreadable names (`<stdin>`, a vanished file) cannot hold a pragma we could see.
            let Ok(bytes) = std::fs::read(&path) else { continue };
            if let Some(pragma) = find_unsafe_pragma(&bytes) {
                let reason = LocalReason::UnsafePragma { pragma, file: path.display().to_string() };
                return Err(reason.to_string());
            }
        }
    }
    let trusted_diagnostics = plan.diagnostics_trusted(&pp);
    Ok(Ready { text: pp.text, cacheable: !pp.time_macros, trusted_diagnostics, files: pp.files, text_refused })
}

/// Writes `object` to `path` the way a compiler would leave it — mode
/// `0666 & !umask`, a new inode — but atomically: a temporary file in the
/// same directory, renamed over the target.
///
/// # Errors
/// When the directory is not writable or the disk fails; nothing is left behind.
pub fn write_object(path: &Path, object: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or(OsStr::new("out"));
    let mut tmp_name = OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".ccroute-{}.tmp", std::process::id()));
    let tmp = dir.join(tmp_name);
    // The kernel applies the umask to 0666, as it does for the compiler's own open().
    let mut file = OpenOptions::new().write(true).create(true).truncate(true).mode(0o666).open(&tmp)?;
    let written = file.write_all(object).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn objects_replace_the_target_with_the_umask_mode() {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("a.o");
        std::fs::write(&out, "old").unwrap();
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o600)).unwrap();
        write_object(&out, b"new object").unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"new object");
        // What gcc would create, read from a file the kernel just made with 0666.
        let probe = t.path().join("probe");
        OpenOptions::new().write(true).create(true).truncate(true).mode(0o666).open(&probe).unwrap();
        let expected = std::fs::metadata(&probe).unwrap().permissions().mode() & 0o777;
        assert_eq!(std::fs::metadata(&out).unwrap().permissions().mode() & 0o777, expected);
        let names: Vec<_> = std::fs::read_dir(t.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn an_unwritable_target_is_an_error_and_leaves_nothing() {
        let t = tempfile::tempdir().unwrap();
        assert!(write_object(&t.path().join("missing/a.o"), b"x").is_err());
        std::fs::create_dir(t.path().join("a.o")).unwrap();
        std::fs::write(t.path().join("a.o/keep"), "").unwrap();
        assert!(write_object(&t.path().join("a.o"), b"x").is_err());
        assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 1);
    }

    #[test]
    fn exit_codes_pass_through() {
        assert_eq!(run_compiler(Path::new("/bin/sh"), OsStr::new("sh"), &["-c".into(), "exit 3".into()]), 3);
        assert_eq!(run_compiler(Path::new("/nonexistent/cc"), OsStr::new("cc"), &[]), NOT_FOUND);
    }
}
