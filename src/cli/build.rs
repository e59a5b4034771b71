//! `ccroute make …` and `ccroute ninja …`: a build through ccroute without
//! guessing `-j`. The build gets a jobserver of its own ([`crate::jobserver`])
//! sized to this machine's local slots plus its consumerd's remote window
//! (its share of the farm; builds at once on one consumerd each get an even
//! part), resized whenever the consumerd reports it moving; and `cc`, `c++`, `gcc`, `g++`, `clang` and `clang++` lead to ccroute
//! (a directory of symlinks put first in `PATH`; a build that names its
//! compiler by absolute path, as CMake's do, uses
//! `CMAKE_<LANG>_COMPILER_LAUNCHER=ccroute` instead).
//!
//! How the jobserver reaches the tool:
//!
//! | tool                    | form                                                          |
//! |-------------------------|---------------------------------------------------------------|
//! | GNU make 4.4 and later  | `MAKEFLAGS=-j --jobserver-auth=fifo:PATH`                     |
//! | GNU make before 4.4     | two inherited descriptors of the pipe, `--jobserver-auth=R,W` |
//! | ninja 1.13 and later    | `MAKEFLAGS=-j --jobserver-auth=fifo:PATH`                     |
//! | older ninja, other make | `-j N`, N the size when the build starts                      |
//!
//! A `-j` given on the command line, or a jobserver the environment already
//! names (a build inside another make's job), is left alone. With no
//! consumerd to ask, the build runs with `-j` as many as this machine's CPUs
//! and a warning. Without a jobserver to hold, the tool replaces this process;
//! with one, this process waits for it, passes on the signals it gets, removes
//! the pipe and exits as the tool did.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use ccroute_wire::local::{ConsumerdMsg, JobserverSize, Query, WrapperMsg};
use tokio::sync::watch;

use super::BoxError;
use crate::jobserver::Jobserver;
use crate::wrapper::session::Session;

/// The compiler names `ccroute make` leads to ccroute (those found in `PATH`).
pub const MASQUERADE_NAMES: &[&str] = &["cc", "c++", "gcc", "g++", "clang", "clang++"];

/// Which build tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// make (GNU make gets the jobserver).
    Make,
    /// ninja (1.13 and later get the jobserver).
    Ninja,
}

impl Tool {
    fn program(self) -> &'static str {
        match self {
            Tool::Make => "make",
            Tool::Ninja => "ninja",
        }
    }
}

/// How the jobserver is handed to the tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hand {
    /// The user chose the parallelism (or an outer jobserver did): nothing added.
    Nothing,
    /// `MAKEFLAGS` naming the pipe.
    Fifo,
    /// `MAKEFLAGS` naming two inherited descriptors of the pipe.
    Descriptors,
    /// `-j N` in front of the arguments.
    Jobs(u32),
}

/// Runs the build and exits as the tool did; returns only if it could not be started.
///
/// # Errors
/// When the tool cannot be run.
pub fn run(tool: Tool, args: &[OsString]) -> Result<(), BoxError> {
    let config = crate::wrapper::Config::from_env();
    let outer = std::env::var_os("MAKEFLAGS").is_some_and(|f| f.to_string_lossy().contains("--jobserver-"));
    let version = tool_version(tool);
    let asked = if gives_jobs(args) || outer { None } else { Some(follow_size(&config)) };
    let (hand, feed) = match asked {
        None => (Hand::Nothing, None),
        Some(Ok((first, rx))) => (choose(tool, version.as_ref(), first.total()), Some((first, rx))),
        Some(Err(e)) => {
            let n = crate::host::online_cpus();
            eprintln!("ccroute: no consumerd to size a jobserver ({e}); {} runs with -j{n}", tool.program());
            (Hand::Jobs(n), None)
        }
    };
    let mut cmd = Command::new(tool.program());
    match masquerade(&config) {
        Ok(dir) => {
            let mut path = OsString::from(&dir);
            if let Some(old) = &config.path_var {
                path.push(":");
                path.push(old);
            }
            cmd.env("PATH", path);
        }
        Err(e) => eprintln!("ccroute: compilers by name will not go through ccroute: {e}"),
    }
    let flags = |ours: String| {
        let mut f = OsString::from(ours);
        if let Some(old) = std::env::var_os("MAKEFLAGS").filter(|o| !o.is_empty()) {
            f.push(" ");
            f.push(old);
        }
        f
    };
    let mut jobserver = None;
    match (&hand, feed) {
        (Hand::Fifo | Hand::Descriptors, Some((first, rx))) => {
            let path = config.socket.jobserver_path(std::process::id());
            let mut js =
                Jobserver::create(&path).map_err(|e| format!("cannot make the jobserver {}: {e}", path.display()))?;
            js.resize(first.total())?;
            if hand == Hand::Fifo {
                cmd.env("MAKEFLAGS", flags(format!("-j --jobserver-auth=fifo:{}", path.display())));
            } else {
                let (r, w) = inheritable_pair(&path)?;
                cmd.env("MAKEFLAGS", flags(format!("-j --jobserver-fds={r},{w} --jobserver-auth={r},{w}")));
            }
            jobserver = Some((js, rx));
        }
        (Hand::Jobs(n), _) => {
            cmd.arg(format!("-j{n}"));
        }
        _ => {}
    }
    if config.verbose {
        let size = jobserver.as_ref().map(|(js, _)| format!(" of {}", js.issued() + 1)).unwrap_or_default();
        eprintln!(
            "ccroute: {} {} with {hand:?}{size}",
            tool.program(),
            version.map_or_else(|| "(version unknown)".into(), |v| format!("{}.{}", v.0, v.1)),
        );
    }
    cmd.args(args);
    let Some((js, rx)) = jobserver else {
        let e = cmd.exec();
        return Err(format!("cannot run {}: {e}", tool.program()).into());
    };
    let child = cmd.spawn().map_err(|e| format!("cannot run {}: {e}", tool.program()))?;
    let code = tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(supervise(
        child,
        js,
        rx,
        config.verbose,
    ));
    std::process::exit(code);
}

/// Keeps the jobserver at the size the consumerd reports until the tool
/// exits, passing on the signals this process gets; the tool's exit code
/// (128 + the signal that ended it). The pipe goes with `js`.
async fn supervise(
    mut child: std::process::Child,
    mut js: Jobserver,
    mut sizes: watch::Receiver<u32>,
    verbose: bool,
) -> i32 {
    use tokio::signal::unix::{signal, SignalKind};
    // Handled, not ignored: the tool starts with the default dispositions.
    let on = |k: SignalKind| signal(k).ok();
    let (mut int, mut term, mut hup, mut quit) =
        (on(SignalKind::interrupt()), on(SignalKind::terminate()), on(SignalKind::hangup()), on(SignalKind::quit()));
    async fn next(s: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
        match s {
            Some(s) => s.recv().await,
            None => std::future::pending().await,
        }
    }
    let pid = child.id();
    let mut tick = tokio::time::interval(crate::jobserver::RECLAIM_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut following = true;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if let Ok(Some(status)) = child.try_wait() {
                    drop(js);
                    return status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
                }
            }
            changed = sizes.changed(), if following => match changed {
                Ok(()) => {
                    let size = *sizes.borrow_and_update();
                    match js.resize(size) {
                        Ok(()) if verbose => eprintln!("ccroute: the jobserver now holds {size}"),
                        Ok(()) => {}
                        Err(e) => eprintln!("ccroute: the jobserver stays at its size: {e}"),
                    }
                }
                Err(_) => following = false,
            },
            Some(()) = next(&mut int) => send_signal(pid, libc::SIGINT),
            Some(()) = next(&mut term) => send_signal(pid, libc::SIGTERM),
            Some(()) = next(&mut hup) => send_signal(pid, libc::SIGHUP),
            Some(()) = next(&mut quit) => send_signal(pid, libc::SIGQUIT),
        }
        if js.debt() > 0 {
            let _ = js.reclaim();
        }
    }
}

/// Sends signal `n` to process `pid`.
#[allow(unsafe_code)]
fn send_signal(pid: u32, n: i32) {
    let Ok(pid) = i32::try_from(pid) else { return };
    // SAFETY: kill takes no pointer; a process gone meanwhile only makes it fail.
    unsafe {
        libc::kill(pid, n);
    }
}

/// Asks the consumerd (starting one if none runs) for the jobserver size and
/// follows it: the first answer, and a channel of later sizes fed by a thread
/// that reads the connection (a consumerd lost is looked for again every
/// second, not started; meanwhile the size stays).
fn follow_size(config: &crate::wrapper::Config) -> Result<(JobserverSize, watch::Receiver<u32>), BoxError> {
    fn ask(
        socket: &crate::local_socket::SocketPath,
        starter: Option<&crate::wrapper::connect::Starter>,
    ) -> Result<(Session, JobserverSize), BoxError> {
        let stream = crate::wrapper::connect::connect(socket, starter)?;
        let mut session = Session::new(stream);
        session.send(&WrapperMsg::Query(Query::Jobserver), b"")?;
        match session.recv()?.message {
            ConsumerdMsg::Jobserver(size) => Ok((session, size)),
            other => Err(format!("the consumerd answered {other:?} (an older consumerd: restart it)").into()),
        }
    }
    let (mut session, first) = ask(&config.socket, config.starter.as_ref())?;
    let (tx, rx) = watch::channel(first.total());
    let socket = config.socket.clone();
    std::thread::spawn(move || loop {
        match session.recv().map(|f| f.message) {
            Ok(ConsumerdMsg::Jobserver(size)) => {
                if tx.send(size.total()).is_err() {
                    return;
                }
            }
            Ok(_) => {}
            Err(_) => loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
                if tx.is_closed() {
                    return;
                }
                if let Ok((s, size)) = ask(&socket, None) {
                    session = s;
                    let _ = tx.send(size.total());
                    break;
                }
            },
        }
    });
    Ok((first, rx))
}

/// The form for `tool` at `version` with a jobserver of `size`.
pub fn choose(tool: Tool, version: Option<&(u32, u32, bool)>, size: u32) -> Hand {
    match (tool, version) {
        (Tool::Make, Some(&(major, minor, true))) if (major, minor) >= (4, 4) => Hand::Fifo,
        (Tool::Make, Some(&(_, _, true))) => Hand::Descriptors,
        (Tool::Ninja, Some(&(major, minor, _))) if (major, minor) >= (1, 13) => Hand::Fifo,
        _ => Hand::Jobs(size),
    }
}

/// Whether the arguments set the parallelism: `-j`, `-jN`, `--jobs`, `--jobs=N`.
pub fn gives_jobs(args: &[OsString]) -> bool {
    args.iter()
        .map(|a| a.to_string_lossy())
        .take_while(|a| a != "--")
        .any(|a| a.starts_with("-j") || a == "--jobs" || a.starts_with("--jobs="))
}

/// `(major, minor, is GNU make)` from the tool's `--version`.
fn tool_version(tool: Tool) -> Option<(u32, u32, bool)> {
    let out = Command::new(tool.program()).arg("--version").output().ok()?;
    parse_version(&String::from_utf8_lossy(&out.stdout))
}

/// `(major, minor, is GNU make)` from a `--version` text: "GNU Make 4.3", "1.13.2.git".
pub fn parse_version(text: &str) -> Option<(u32, u32, bool)> {
    let line = text.lines().next()?;
    let gnu = line.starts_with("GNU Make");
    let word = line.split_whitespace().find(|w| w.starts_with(|c: char| c.is_ascii_digit()))?;
    let mut parts = word.split('.').map(|p| p.chars().take_while(char::is_ascii_digit).collect::<String>());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor, gnu))
}

/// Two descriptors of the pipe that survive exec: make reads tokens from the
/// first and writes them back to the second. Read and write both, so that
/// opening never waits for a writer.
fn inheritable_pair(path: &Path) -> std::io::Result<(i32, i32)> {
    let open = || {
        let f = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
        keep_across_exec(&f)?;
        Ok::<_, std::io::Error>(f.into_raw_fd())
    };
    Ok((open()?, open()?))
}

/// Clears close-on-exec on `f`.
#[allow(unsafe_code)]
fn keep_across_exec(f: &std::fs::File) -> std::io::Result<()> {
    // SAFETY: F_SETFD on a descriptor `f` owns and keeps open through the call.
    if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFD, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The directory of compiler names leading to ccroute, made or brought up to
/// date: a symlink for each of [`MASQUERADE_NAMES`] that `PATH` has, to the
/// wrapper alone ([`crate::wrapper::LEAN_NAME`]) when it is beside this
/// executable (it starts faster), else to this executable.
fn masquerade(config: &crate::wrapper::Config) -> Result<PathBuf, BoxError> {
    config.socket.prepare_dir()?;
    let dir = config.socket.masquerade_dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let this = std::fs::canonicalize(&config.self_exe)?;
    let lean = this.with_file_name(crate::wrapper::LEAN_NAME);
    let me = if crate::cc::resolve::is_executable(&lean) { lean } else { this.clone() };
    for name in MASQUERADE_NAMES {
        let link = dir.join(name);
        let found = crate::cc::resolve::path_candidates(OsStr::new(name), config.path_var.as_deref())
            .any(|p| !p.starts_with(&dir) && std::fs::canonicalize(&p).is_ok_and(|c| c != me && c != this));
        if !found {
            let _ = std::fs::remove_file(&link);
            continue;
        }
        if std::fs::read_link(&link).is_ok_and(|to| to == me) {
            continue;
        }
        // Made aside and renamed over: a build running beside never sees it missing.
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&me, &tmp)
            .and_then(|()| std::fs::rename(&tmp, &link))
            .map_err(|e| format!("cannot link {} to {}: {e}", link.display(), me.display()))?;
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn versions_are_read_from_make_and_ninja() {
        assert_eq!(parse_version("GNU Make 4.3\nBuilt for x86_64-pc-linux-gnu\n"), Some((4, 3, true)));
        assert_eq!(parse_version("GNU Make 4.4.1\n"), Some((4, 4, true)));
        assert_eq!(parse_version("1.13.2.git.kitware.jobserver-pipe-1\n"), Some((1, 13, false)));
        assert_eq!(parse_version("1.11.1\n"), Some((1, 11, false)));
        assert_eq!(parse_version("bmake: unknown option\n"), None);
    }

    #[test]
    fn each_tool_gets_the_form_it_reads() {
        assert_eq!(choose(Tool::Make, Some(&(4, 4, true)), 9), Hand::Fifo);
        assert_eq!(choose(Tool::Make, Some(&(4, 3, true)), 9), Hand::Descriptors);
        assert_eq!(choose(Tool::Make, Some(&(3, 81, true)), 9), Hand::Descriptors);
        assert_eq!(choose(Tool::Make, None, 9), Hand::Jobs(9), "not GNU make: a plain -j");
        assert_eq!(choose(Tool::Ninja, Some(&(1, 13, false)), 9), Hand::Fifo);
        assert_eq!(choose(Tool::Ninja, Some(&(1, 11, false)), 9), Hand::Jobs(9));
    }

    #[test]
    fn a_jobs_flag_given_is_seen_and_a_target_is_not_one() {
        for given in [&["-j"][..], &["-j8"], &["--jobs"], &["--jobs=3"], &["-C", "dir", "-j", "4"]] {
            assert!(gives_jobs(&os(given)), "{given:?}");
        }
        for not in [&["all"][..], &["-C", "dir"], &["--", "-j"], &["JOBS=-j4"], &["--keep-going"]] {
            assert!(!gives_jobs(&os(not)), "{not:?}");
        }
    }
}
