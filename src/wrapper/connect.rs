//! How a wrapper reaches — or starts — the consumerd of a socket
//! ([`crate::local_socket`]).
//!
//! Main items: [`Starter`], [`connect`].

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::local_socket::{InstanceLock, SocketDirError, SocketPath, SOCKET_ENV, SPAWNED_ENV};

/// A log this large is truncated when the next consumerd starts.
const MAX_LOG_BYTES: u64 = 8 << 20;

/// How to start a consumerd in the background.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Starter {
    /// The program (normally ccroute itself).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// How long to keep trying to connect after starting it.
    pub wait: Duration,
}

impl Starter {
    /// `<this executable> consumerd`, waiting up to 3 s; `None` when the
    /// executable cannot be named. Run as [`super::LEAN_NAME`] (the wrapper
    /// alone, no daemons in it), the `ccroute` beside it.
    pub fn this_executable() -> Option<Starter> {
        let program = daemon_program(std::env::current_exe().ok()?);
        Some(Starter { program, args: vec!["consumerd".into()], wait: Duration::from_secs(3) })
    }
}

/// The executable that runs the daemons, given the running one: itself,
/// or the `ccroute` in its directory when it is [`super::LEAN_NAME`].
pub fn daemon_program(exe: PathBuf) -> PathBuf {
    if exe.file_name() == Some(std::ffi::OsStr::new(super::LEAN_NAME)) {
        exe.with_file_name("ccroute")
    } else {
        exe
    }
}

/// Why no consumerd could be reached.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Connecting failed in a way starting a consumerd would not fix.
    #[error("cannot connect to {path}: {source}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Nothing listens, and starting is not configured.
    #[error("no consumerd at {0}")]
    NotRunning(PathBuf),
    /// The directory for the socket and log is unusable.
    #[error(transparent)]
    Dir(#[from] SocketDirError),
    /// The consumerd could not be started.
    #[error("cannot start {program}: {source}")]
    Start {
        /// The program.
        program: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// It was started but exited, and no other consumerd holds the lock.
    #[error("the consumerd exited at once (see {0})")]
    Exited(PathBuf),
    /// It did not answer in time.
    #[error("no consumerd answered at {path} within {waited:?}")]
    Timeout {
        /// The socket.
        path: PathBuf,
        /// How long the wrapper waited.
        waited: Duration,
    },
}

/// A connection to the consumerd at `path`; `None` while nothing listens there.
fn try_connect(path: &Path) -> Result<Option<UnixStream>, ConnectError> {
    match UnixStream::connect(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused) => Ok(None),
        Err(source) => Err(ConnectError::Connect { path: path.to_owned(), source }),
    }
}

/// Connects to the consumerd at `socket`, starting one with `starter` when
/// nothing listens there.
///
/// # Errors
/// [`ConnectError`]: the caller compiles locally.
pub fn connect(socket: &SocketPath, starter: Option<&Starter>) -> Result<UnixStream, ConnectError> {
    if let Some(s) = try_connect(&socket.path)? {
        return Ok(s);
    }
    let Some(starter) = starter else {
        return Err(ConnectError::NotRunning(socket.path.clone()));
    };
    socket.prepare_dir()?;
    let lock_path = socket.lock_path();
    // Whoever gets the lock first starts one; the others only wait for the
    // socket. The lock is let go right after the start, for the consumerd to take.
    let mut child = match InstanceLock::try_acquire(&lock_path) {
        Ok(Some(lock)) => {
            let child = spawn(socket, starter)?;
            drop(lock);
            Some(child)
        }
        Ok(None) | Err(_) => None,
    };
    let started = Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
        if let Some(s) = try_connect(&socket.path)? {
            return Ok(s);
        }
        let exited = child.as_mut().is_some_and(|c| !matches!(c.try_wait(), Ok(None)));
        if exited {
            child = None;
            // It exited; if nobody else holds the lock, nobody is coming.
            if let Ok(Some(_free)) = InstanceLock::try_acquire(&lock_path) {
                return Err(ConnectError::Exited(socket.log_path()));
            }
        }
        if started.elapsed() >= starter.wait {
            return Err(ConnectError::Timeout { path: socket.path.clone(), waited: started.elapsed() });
        }
    }
}

/// Starts the consumerd in its own session, stdio to the log, without
/// inheriting any other descriptor of the build (make's jobserver pipes,
/// ninja's output pipe: holding those open would stall the build).
fn spawn(socket: &SocketPath, starter: &Starter) -> Result<std::process::Child, ConnectError> {
    let start_err = |source| ConnectError::Start { program: starter.program.clone(), source };
    let log_path = socket.log_path();
    let big = std::fs::metadata(&log_path).is_ok_and(|m| m.len() > MAX_LOG_BYTES);
    let log = OpenOptions::new()
        .create(true)
        .append(!big)
        .write(true)
        .truncate(big)
        .mode(0o600)
        .open(&log_path)
        .map_err(start_err)?;
    let log2 = log.try_clone().map_err(start_err)?;
    let mut cmd = Command::new(&starter.program);
    cmd.args(&starter.args)
        .env(SOCKET_ENV, &socket.path)
        .env(SPAWNED_ENV, "1")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .current_dir("/");
    #[allow(unsafe_code)]
    // SAFETY: between fork and exec the closure calls only async-signal-safe
    // functions (setsid, close_range) and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            // Marks every inherited descriptor past stdio close-on-exec; the
            // exec-error pipe std keeps is close-on-exec already. Older
            // kernels without close_range: the descriptors stay (harmless
            // unless a build waits for them to close).
            libc::close_range(3, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC as libc::c_int);
            Ok(())
        });
    }
    cmd.spawn().map_err(start_err)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_starter_that_exits_at_once_is_given_up_without_waiting_out_the_deadline() {
        let t = tempfile::tempdir().unwrap();
        let s = SocketPath::explicit(t.path().join("consumerd.sock"));
        let starter = Starter { program: "/bin/false".into(), args: vec![], wait: Duration::from_secs(600) };
        let err = connect(&s, Some(&starter)).unwrap_err();
        assert!(matches!(err, ConnectError::Exited(_)), "{err}");
        assert!(matches!(connect(&s, None).unwrap_err(), ConnectError::NotRunning(_)));
    }
}
