//! One probe of a compiler: run it with a clean environment, a time limit and
//! bounded output.
//!
//! [`Probe::run`] starts the compiler in its own process group with only
//! `PATH` and `LC_ALL=C` set, reads stdout and stderr on two threads (so that
//! neither pipe can fill up and stall it), and kills the whole group when
//! the time limit passes: a hung `cc1` under a killed `gcc` must not linger.
//! Left out: stdin (always `/dev/null`), resource limits, output beyond
//! [`MAX_OUTPUT`] per stream (read and dropped).

use std::ffi::OsString;
use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::ToolchainError;

/// Bytes kept of each of stdout and stderr.
pub(super) const MAX_OUTPUT: u64 = 1 << 20;

/// Bytes of stderr quoted in an error.
const STDERR_QUOTE: usize = 500;

/// How to run one compiler.
#[derive(Debug)]
pub(super) struct Probe<'a> {
    program: &'a Path,
    limit: Duration,
    path_env: Option<OsString>,
}

/// What a successful probe printed.
#[derive(Debug)]
pub(super) struct ProbeOutput {
    program: PathBuf,
    args: String,
    /// Standard output, lossily decoded.
    pub(super) stdout: String,
    /// Standard error, lossily decoded.
    pub(super) stderr: String,
}

impl ProbeOutput {
    /// The output if it is one word (a triple, a version, a path).
    pub(super) fn single_word(&self) -> Option<String> {
        let t = self.stdout.trim();
        (!t.is_empty() && !t.contains(char::is_whitespace)).then(|| t.to_owned())
    }

    /// An error saying why this output was not understood.
    pub(super) fn unparsable(&self, reason: &str) -> ToolchainError {
        let shown: String = self.stdout.chars().take(120).collect();
        ToolchainError::Unparsable {
            path: self.program.clone(),
            probe: self.args.clone(),
            reason: format!("{reason}, got {shown:?}"),
        }
    }
}

impl<'a> Probe<'a> {
    /// Probes of `program`, each killed after `limit`; `PATH` is this process's.
    pub(super) fn new(program: &'a Path, limit: Duration) -> Self {
        Probe { program, limit, path_env: std::env::var_os("PATH") }
    }

    /// Runs the program with `args` and returns its output if it exits 0.
    pub(super) fn run(&self, args: &[&str]) -> Result<ProbeOutput, ToolchainError> {
        let shown = args.join(" ");
        let mut child = self.spawn(args).map_err(|source| ToolchainError::Spawn {
            path: self.program.to_owned(),
            probe: shown.clone(),
            source,
        })?;
        let deadline = Instant::now() + self.limit;
        let (tx, rx) = mpsc::channel();
        for (stream, reader) in [
            (Stream::Out, child.stdout.take().map(|r| Box::new(r) as Box<dyn Read + Send>)),
            (Stream::Err, child.stderr.take().map(|r| Box::new(r) as Box<dyn Read + Send>)),
        ] {
            let tx = tx.clone();
            if let Some(reader) = reader {
                thread::spawn(move || {
                    let _ = tx.send((stream, read_bounded(reader)));
                });
            }
        }
        drop(tx);
        let timed_out = || ToolchainError::TimedOut {
            path: self.program.to_owned(),
            probe: shown.clone(),
            limit_ms: self.limit.as_millis(),
        };

        let status = match wait_until(&mut child, deadline) {
            Ok(Some(status)) => status,
            Ok(None) => {
                kill_group(&mut child);
                return Err(timed_out());
            }
            Err(source) => {
                kill_group(&mut child);
                return Err(ToolchainError::Spawn { path: self.program.to_owned(), probe: shown, source });
            }
        };

        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        for _ in 0..2 {
            // A descendant that outlives the driver may hold the pipes open.
            let wait = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
            match rx.recv_timeout(wait) {
                Ok((Stream::Out, bytes)) => stdout = bytes,
                Ok((Stream::Err, bytes)) => stderr = bytes,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    kill_group(&mut child);
                    return Err(timed_out());
                }
            }
        }
        if !status.success() {
            let text = String::from_utf8_lossy(&stderr);
            let text = text.trim();
            let quoted = match text.char_indices().nth(STDERR_QUOTE) {
                Some((i, _)) => format!("{}…", &text[..i]),
                None => text.to_owned(),
            };
            return Err(ToolchainError::Failed { path: self.program.to_owned(), probe: shown, status, stderr: quoted });
        }
        Ok(ProbeOutput {
            program: self.program.to_owned(),
            args: shown,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        })
    }

    fn spawn(&self, args: &[&str]) -> io::Result<Child> {
        let mut cmd = Command::new(self.program);
        cmd.args(args)
            .env_clear()
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(path) = &self.path_env {
            cmd.env("PATH", path);
        }
        let mut attempt = 0;
        loop {
            match cmd.spawn() {
                // A binary that was just written is busy while any process
                // forked meanwhile still holds the writer's descriptor.
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempt < 5 => {
                    attempt += 1;
                    thread::sleep(Duration::from_millis(10 * attempt));
                }
                other => return other,
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Stream {
    Out,
    Err,
}

/// Reads up to [`MAX_OUTPUT`] bytes and drains the rest, so that the writer
/// never blocks on a full pipe.
fn read_bounded(reader: Box<dyn Read + Send>) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut limited = reader.take(MAX_OUTPUT);
    let _ = limited.read_to_end(&mut kept);
    let _ = io::copy(&mut limited.into_inner(), &mut io::sink());
    kept
}

/// Waits for the child until `deadline`; `None` if it is still running.
fn wait_until(child: &mut Child, deadline: Instant) -> io::Result<Option<std::process::ExitStatus>> {
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Kills the child's process group (it leads one, see [`Probe::spawn`]) and
/// reaps the child.
#[allow(unsafe_code)]
fn kill_group(child: &mut Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) has no memory-safety preconditions. The child has
        // not been reaped yet, so its pid still names its own process group.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn environment_is_clean_but_keeps_path() {
        let tmp = tempfile::tempdir().unwrap();
        let p = script(tmp.path(), "env-dump", "env | sort");
        let out = Probe::new(&p, Duration::from_secs(10)).run(&[]).unwrap();
        let names: Vec<&str> = out.stdout.lines().filter_map(|l| l.split('=').next()).collect();
        // sh itself may add PWD, SHLVL, _ ; nothing of ours leaks through.
        assert!(names.contains(&"LC_ALL") && names.contains(&"PATH"), "{names:?}");
        assert!(!names.contains(&"HOME") && !names.contains(&"CARGO"), "{names:?}");
        assert!(out.stdout.contains("LC_ALL=C\n"));
    }

    #[test]
    fn failure_quotes_status_and_stderr() {
        let tmp = tempfile::tempdir().unwrap();
        let p = script(tmp.path(), "fails", "echo 'cc1: fatal error: boom' >&2; exit 3");
        let err = Probe::new(&p, Duration::from_secs(10)).run(&["-dumpmachine"]).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, ToolchainError::Failed { ref status, .. } if status.code() == Some(3)), "{msg}");
        assert!(msg.contains("boom") && msg.contains("-dumpmachine") && msg.contains("fails"), "{msg}");
    }

    #[test]
    fn large_output_is_bounded_and_does_not_stall() {
        let tmp = tempfile::tempdir().unwrap();
        // 4 MiB on stdout and stderr each: more than any pipe buffer.
        let p = script(tmp.path(), "chatty", "head -c 4194304 /dev/zero; head -c 4194304 /dev/zero >&2");
        let out = Probe::new(&p, Duration::from_secs(30)).run(&[]).unwrap();
        assert_eq!(out.stdout.len() as u64, MAX_OUTPUT);
    }

    #[test]
    fn hung_compiler_is_killed_with_its_children() {
        let tmp = tempfile::tempdir().unwrap();
        let pidfile = tmp.path().join("grandchild.pid");
        let body = format!("sleep 60 & echo $! > {}; wait", pidfile.display());
        let p = script(tmp.path(), "hangs", &body);
        // Long enough for the script to have forked and written the pid on
        // a loaded machine.
        let err = Probe::new(&p, Duration::from_secs(2)).run(&["-E"]).unwrap_err();
        assert!(matches!(err, ToolchainError::TimedOut { limit_ms: 2000, .. }), "{err}");
        let pid = fs::read_to_string(&pidfile).unwrap().trim().to_owned();
        // The grandchild is gone, or a zombie waiting for its new parent.
        let stat = PathBuf::from(format!("/proc/{pid}/stat"));
        for _ in 0..100 {
            match fs::read_to_string(&stat) {
                Err(_) => return,
                Ok(s) if s.rsplit(") ").next().is_some_and(|rest| rest.starts_with('Z')) => return,
                Ok(_) => thread::sleep(Duration::from_millis(20)),
            }
        }
        panic!("grandchild {pid} of a killed probe still runs");
    }
}
