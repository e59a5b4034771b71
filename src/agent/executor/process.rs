//! One compiler process: started in its own process group with a clean
//! environment, its output captured up to a bound, its CPU time measured,
//! and every process of its group gone before [`run`] returns.
//!
//! A blocking thread waits for the group leader with `waitid(WNOWAIT)`, so
//! that the leader stays a zombie — and its pid, which is the group's id,
//! cannot be reused — while the rest of the group is killed; only then does
//! `wait4` reap it, with its rusage (its own CPU time plus that of the
//! children it waited for: `cc1`, `as`). A kill from the async side (cancel,
//! time limit, output past its bound, the future dropped) goes through the
//! same lock, so a group is never signalled after its leader was reaped.
//!
//! Left out: resource limits (memory, files), other cgroups than the agent's
//! own, and descendants that leave the group (`setsid`): they are not killed,
//! and one that holds an output pipe open keeps the task waiting until its
//! stop fires. One blocking-pool thread per running compile waits for it, so
//! the runtime's `max_blocking_threads` must exceed the agent's task limit.

use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};

use super::TaskError;

/// How long the members of a killed group may take to die before the
/// executor gives up waiting for them (and logs it).
const GROUP_EXIT_WAIT: Duration = Duration::from_secs(5);

/// How long output pipes may stay open once the group was killed on a stop:
/// only a process that left the group can hold them that long.
const PIPE_GRACE: Duration = Duration::from_secs(5);

/// Bytes read from a pipe at a time.
const CHUNK: usize = 64 << 10;

/// What to run.
#[derive(Debug)]
pub(super) struct Launch<'a> {
    /// The program.
    pub program: &'a Path,
    /// Its arguments.
    pub args: &'a [OsString],
    /// Its working directory.
    pub cwd: &'a Path,
    /// Its whole environment.
    pub env: &'a [(OsString, OsString)],
    /// Bytes kept of each of stdout and stderr; more is an error.
    pub max_output: u64,
}

/// A process that ran to its end.
#[derive(Debug)]
pub(super) struct Finished {
    /// How it ended.
    pub status: ExitStatus,
    /// Its standard output.
    pub stdout: Vec<u8>,
    /// Its standard error.
    pub stderr: Vec<u8>,
    /// User plus system CPU time of it and the children it waited for, microseconds.
    pub cpu_time_us: u64,
}

/// Runs `launch` until it ends or `stop` resolves; on a stop the whole
/// process group is killed and reaped before the stop's error is returned.
///
/// # Errors
/// The stop's error, [`TaskError::Spawn`], [`TaskError::Wait`],
/// [`TaskError::Read`], or [`TaskError::OutputTooLarge`] (the group is
/// killed as soon as a stream passes the bound).
pub(super) async fn run(launch: &Launch<'_>, stop: impl Future<Output = TaskError>) -> Result<Finished, TaskError> {
    let mut child = Command::new(launch.program)
        .args(launch.args)
        .current_dir(launch.cwd)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|source| TaskError::Spawn { path: launch.program.to_owned(), source })?;
    let group = Arc::new(ProcessGroup::new(child.id()));
    let _kill_on_drop = KillOnDrop(Arc::clone(&group));
    // The reaper starts before anything else can fail, so that the child is
    // always reaped.
    let reaper = tokio::task::spawn_blocking({
        let group = Arc::clone(&group);
        move || group.wait()
    });
    let pipes = match (child.stdout.take(), child.stderr.take()) {
        (Some(out), Some(err)) => tokio::process::ChildStdout::from_std(out)
            .and_then(|out| Ok((out, tokio::process::ChildStderr::from_std(err)?))),
        _ => Err(io::Error::other("output pipes missing")),
    };
    let (out, err) = match pipes {
        Ok(p) => p,
        Err(source) => {
            group.kill();
            let _ = reaper.await;
            return Err(TaskError::Read { stream: "output", source });
        }
    };

    let collect = async {
        tokio::join!(
            reaper,
            read_bounded(out, launch.max_output, &group, "stdout"),
            read_bounded(err, launch.max_output, &group, "stderr"),
        )
    };
    tokio::pin!(collect);
    let ended = tokio::select! {
        biased;
        r = &mut collect => Ok(r),
        e = stop => Err(e),
    };
    let (reaped, stdout, stderr) = match ended {
        Ok(r) => r,
        Err(e) => {
            group.kill();
            if tokio::time::timeout(PIPE_GRACE, collect).await.is_err() {
                tracing::warn!(pid = group.pid, "a process outside the compiler's group holds its output open");
            }
            return Err(e);
        }
    };
    let (stdout, stderr) = (stdout?, stderr?);
    let reaped = reaped.map_err(|e| TaskError::Wait(io::Error::other(e)))?.map_err(TaskError::Wait)?;
    Ok(Finished { status: ExitStatus::from_raw(reaped.status), stdout, stderr, cpu_time_us: reaped.cpu_time_us })
}

/// Reads a pipe to its end, keeping at most `max` bytes; past that it kills
/// the group (the result is an error anyway) and drains what is left.
async fn read_bounded(
    mut pipe: impl AsyncRead + Unpin,
    max: u64,
    group: &ProcessGroup,
    stream: &'static str,
) -> Result<Vec<u8>, TaskError> {
    let mut kept = Vec::new();
    let mut total: u64 = 0;
    let mut chunk = vec![0u8; CHUNK];
    loop {
        let n = pipe.read(&mut chunk).await.map_err(|source| TaskError::Read { stream, source })?;
        if n == 0 {
            break;
        }
        let was_over = total > max;
        total = total.saturating_add(n as u64);
        if total <= max {
            kept.extend_from_slice(&chunk[..n]);
        } else if !was_over {
            group.kill();
            kept = Vec::new();
        }
    }
    if total > max {
        return Err(TaskError::OutputTooLarge { stream, max });
    }
    Ok(kept)
}

/// What `wait4` reported for the leader.
#[derive(Debug, Clone, Copy)]
struct Reaped {
    status: i32,
    cpu_time_us: u64,
}

/// A started process that leads its own group, and whether it was reaped.
#[derive(Debug)]
struct ProcessGroup {
    pid: libc::pid_t,
    /// Taken for every signal to the group and for the reap, so that no
    /// signal goes to a group id whose leader was reaped (and whose pid may
    /// then name someone else).
    reaped: Mutex<bool>,
}

impl ProcessGroup {
    fn new(pid: u32) -> Self {
        // Linux pids fit in pid_t (pid_max ≤ 2^22); the fallback only keeps
        // `kill` and `wait` away from every pid if that ever changes.
        let pid = libc::pid_t::try_from(pid).unwrap_or(libc::pid_t::MAX);
        ProcessGroup { pid, reaped: Mutex::new(false) }
    }

    /// Sends SIGKILL to every process of the group, unless the leader was reaped.
    fn kill(&self) {
        let reaped = self.reaped.lock().unwrap_or_else(PoisonError::into_inner);
        if !*reaped {
            let _ = sys::signal_group(self.pid, libc::SIGKILL);
        }
    }

    /// Blocks until the leader ends, kills what is left of its group, reaps
    /// the leader and waits until no process of the group runs.
    fn wait(&self) -> io::Result<Reaped> {
        let exited = sys::wait_exited(self.pid);
        let reaped = {
            let mut reaped = self.reaped.lock().unwrap_or_else(PoisonError::into_inner);
            let result = exited.and_then(|()| {
                // The leader is a zombie: its pid still names this group.
                let _ = sys::signal_group(self.pid, libc::SIGKILL);
                sys::reap(self.pid)
            });
            // Also on an error: a pid we cannot wait for is no longer ours to signal.
            *reaped = true;
            result
        };
        if !wait_group_gone(self.pid, GROUP_EXIT_WAIT) {
            tracing::warn!(pgid = self.pid, "processes of a killed compiler group are still alive");
        }
        reaped
    }
}

/// Kills the group when the run is abandoned (its future dropped).
#[derive(Debug)]
struct KillOnDrop(Arc<ProcessGroup>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.0.kill();
    }
}

/// Polls until no live process has group id `pgid`, reaping those that
/// were handed to us (when this process is a subreaper or pid 1); false if
/// some still run after `limit`.
fn wait_group_gone(pgid: libc::pid_t, limit: Duration) -> bool {
    let start = Instant::now();
    let mut pause = Duration::from_micros(100);
    loop {
        while sys::reap_group_member(pgid) {}
        if !group_alive(pgid) {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Whether a process of group `pgid` still runs. Zombies do not count: they
/// hold no files and run nothing, and their parent (not us) reaps them.
pub(super) fn group_alive(pgid: libc::pid_t) -> bool {
    match sys::signal_group(pgid, 0) {
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => false,
        _ => has_live_member(pgid),
    }
}

/// Whether `/proc` lists a process of group `pgid` that is not a zombie;
/// true when `/proc` cannot be read, which is the safe answer.
fn has_live_member(pgid: libc::pid_t) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return true };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        if let Some((state, group)) = parse_stat(&stat) {
            if group == pgid && !matches!(state, 'Z' | 'X') {
                return true;
            }
        }
    }
    false
}

/// State and process group from a `/proc/<pid>/stat` line. The command name
/// is in parentheses and may itself contain `)` and spaces, so the fields
/// are found after the last `)`.
fn parse_stat(stat: &str) -> Option<(char, libc::pid_t)> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// A name for a signal number, for error messages.
pub(super) fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => "unnamed signal",
    }
}

/// The system calls `std` does not offer: group signals, waits without
/// reaping, and `wait4` for the rusage.
mod sys {
    use std::io;
    use std::mem::MaybeUninit;

    /// `kill(-pgid, signal)`; signal 0 only checks that the group exists.
    #[allow(unsafe_code)]
    pub(super) fn signal_group(pgid: libc::pid_t, signal: libc::c_int) -> io::Result<()> {
        if pgid <= 1 {
            // -1 and -0 would mean "every process" and "our own group".
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        // SAFETY: kill(2) takes two integers and touches no memory of ours.
        let r = unsafe { libc::kill(-pgid, signal) };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Blocks until child `pid` has exited, leaving it a zombie.
    #[allow(unsafe_code)]
    pub(super) fn wait_exited(pid: libc::pid_t) -> io::Result<()> {
        let id = libc::id_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ECHILD))?;
        loop {
            let mut info = MaybeUninit::<libc::siginfo_t>::zeroed();
            // SAFETY: `info` is valid for writes of one siginfo_t for the
            // whole call, and nothing reads it afterwards.
            let r = unsafe { libc::waitid(libc::P_PID, id, info.as_mut_ptr(), libc::WEXITED | libc::WNOWAIT) };
            if r == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Reaps child `pid`: its raw wait status and its user + system CPU time.
    #[allow(unsafe_code)]
    pub(super) fn reap(pid: libc::pid_t) -> io::Result<super::Reaped> {
        loop {
            let mut status: libc::c_int = 0;
            // SAFETY: rusage is plain integers, for which all-zero is a valid value.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: both pointers are to live locals, valid for writes
            // for the whole call.
            let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
            if r == pid {
                let us = |t: libc::timeval| {
                    u64::try_from(t.tv_sec).unwrap_or(0).saturating_mul(1_000_000)
                        + u64::try_from(t.tv_usec).unwrap_or(0)
                };
                return Ok(super::Reaped { status, cpu_time_us: us(usage.ru_utime) + us(usage.ru_stime) });
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Reaps one exited child of ours in group `pgid`, if there is one.
    #[allow(unsafe_code)]
    pub(super) fn reap_group_member(pgid: libc::pid_t) -> bool {
        if pgid <= 1 {
            return false;
        }
        let mut status: libc::c_int = 0;
        // SAFETY: `status` is a live local, valid for writes for the whole call.
        let r = unsafe { libc::waitpid(-pgid, &mut status, libc::WNOHANG) };
        r > 0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(super) mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    use super::*;

    fn script(dir: &Path, body: &str) -> PathBuf {
        let path = dir.join("prog");
        fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn env() -> Vec<(OsString, OsString)> {
        vec![("PATH".into(), std::env::var_os("PATH").unwrap())]
    }

    async fn never() -> TaskError {
        std::future::pending().await
    }

    #[test]
    fn stat_lines_parse_past_odd_command_names() {
        assert_eq!(parse_stat("123 (cc1) R 100 120 120 0"), Some(('R', 120)));
        assert_eq!(parse_stat("7 (a) b) (c) Z 1 7 7"), Some(('Z', 7)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 0 notanumber"), None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn captures_output_status_and_cpu_time() {
        let tmp = tempfile::tempdir().unwrap();
        // Some CPU work in a child the script waits for, then output on both streams.
        let prog = script(
            tmp.path(),
            "sh -c 'i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done'; echo out; echo err >&2; exit 3",
        );
        let launch = Launch { program: &prog, args: &[], cwd: tmp.path(), env: &env(), max_output: 100 };
        let f = run(&launch, never()).await.unwrap();
        assert_eq!(
            (f.status.code(), f.stdout.as_slice(), f.stderr.as_slice()),
            (Some(3), &b"out\n"[..], &b"err\n"[..])
        );
        // The loop's child is counted (it costs ~150 ms of CPU; the script
        // itself, a few ms).
        assert!(f.cpu_time_us > 20_000, "{} µs", f.cpu_time_us);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn output_past_the_bound_kills_the_group() {
        let tmp = tempfile::tempdir().unwrap();
        let pidfile = tmp.path().join("pid");
        let body = format!("sleep 60 & echo $! > {}; head -c 100000 /dev/zero >&2; wait", pidfile.display());
        let prog = script(tmp.path(), &body);
        let launch = Launch { program: &prog, args: &[], cwd: tmp.path(), env: &env(), max_output: 1000 };
        let e = run(&launch, never()).await.unwrap_err();
        assert!(matches!(e, TaskError::OutputTooLarge { stream: "stderr", max: 1000 }), "{e}");
        let pid: libc::pid_t = fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        assert!(!pid_alive(pid), "the background child {pid} survived");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_background_child_is_killed_when_the_leader_exits() {
        let tmp = tempfile::tempdir().unwrap();
        let pidfile = tmp.path().join("pid");
        // The child does not hold the pipes, so only the group kill ends it.
        let body = format!("sleep 60 >/dev/null 2>&1 & echo $! > {}; exit 0", pidfile.display());
        let prog = script(tmp.path(), &body);
        let launch = Launch { program: &prog, args: &[], cwd: tmp.path(), env: &env(), max_output: 1000 };
        let f = run(&launch, never()).await.unwrap();
        assert_eq!(f.status.code(), Some(0));
        let pid: libc::pid_t = fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        assert!(!pid_alive(pid), "the background child {pid} survived");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_missing_program_is_a_spawn_error() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("no-such-compiler");
        let launch = Launch { program: &missing, args: &[], cwd: tmp.path(), env: &env(), max_output: 10 };
        let e = run(&launch, never()).await.unwrap_err();
        assert!(matches!(e, TaskError::Spawn { .. }) && e.to_string().contains("no-such-compiler"), "{e}");
    }

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(libc::SIGSEGV), "SIGSEGV");
        assert_eq!(signal_name(libc::SIGKILL), "SIGKILL");
        assert_eq!(signal_name(1000), "unnamed signal");
    }

    #[test]
    fn no_signal_reaches_every_process_or_our_own_group() {
        assert!(sys::signal_group(0, 0).is_err());
        assert!(sys::signal_group(1, 0).is_err());
        assert!(!sys::reap_group_member(0));
    }

    /// Whether `pid` runs (a zombie does not).
    pub(crate) fn pid_alive(pid: libc::pid_t) -> bool {
        match fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => parse_stat(&stat).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X')),
            Err(_) => false,
        }
    }
}
