//! Where the wrapper and the consumerd meet: where the consumerd's socket
//! lives, who may use its directory, and the one-instance lock.
//!
//! The socket is `$CCROUTE_SOCKET`, else `$XDG_RUNTIME_DIR/ccroute/consumerd.sock`,
//! else `/tmp/ccroute-<uid>/consumerd.sock`. A directory ccroute picks itself
//! must be ours and private (0700): in a shared `/tmp`, anyone could have
//! created it first. One consumerd per socket: it holds an exclusive `flock`
//! on `<socket>.lock` for its lifetime, so a stale socket file can be replaced
//! safely and concurrent starts end with one survivor.
//!
//! Main items: [`SocketPath`], [`InstanceLock`]. Left out: reaching or
//! starting a consumerd (`crate::wrapper::connect`), serving the socket
//! (`crate::consumerd`).

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Environment variable naming the socket.
pub const SOCKET_ENV: &str = "CCROUTE_SOCKET";

/// Set (to `1`) in the environment of a consumerd a wrapper started: such a
/// consumerd should exit when idle.
pub const SPAWNED_ENV: &str = "CCROUTE_SPAWNED";

/// The consumerd's socket and the files beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketPath {
    /// The socket file.
    pub path: PathBuf,
    /// ccroute chose the directory, so it must be ours and private.
    pub private_dir: bool,
}

/// Why the socket's directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SocketDirError {
    /// The socket path has no parent directory.
    #[error("socket path {0} has no directory")]
    NoDir(PathBuf),
    /// Creating or inspecting the directory failed.
    #[error("cannot create socket directory {dir}: {source}")]
    Create {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Something other than a directory (a symlink, a file) has its name.
    #[error("socket directory {0} is not a directory")]
    NotDir(PathBuf),
    /// Someone else owns it.
    #[error("socket directory {dir} is owned by uid {owner}, not by us (uid {uid})")]
    Owner {
        /// The directory.
        dir: PathBuf,
        /// Its owner.
        owner: u32,
        /// Our uid.
        uid: u32,
    },
    /// Its mode could not be narrowed to 0700.
    #[error("cannot restrict socket directory {dir} to mode 0700: {source}")]
    Mode {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// The real user id of this process.
pub fn current_uid() -> u32 {
    #[allow(unsafe_code)]
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe {
        libc::getuid()
    }
}

impl SocketPath {
    /// The socket path for this environment (see the module docs).
    pub fn from_env_with(env: impl Fn(&str) -> Option<OsString>, uid: u32) -> SocketPath {
        let non_empty = |k: &str| env(k).filter(|v| !v.is_empty());
        if let Some(p) = non_empty(SOCKET_ENV) {
            return SocketPath { path: PathBuf::from(p), private_dir: false };
        }
        if let Some(dir) = non_empty("XDG_RUNTIME_DIR").map(PathBuf::from).filter(|d| d.is_absolute()) {
            return SocketPath { path: dir.join("ccroute").join("consumerd.sock"), private_dir: true };
        }
        SocketPath { path: PathBuf::from(format!("/tmp/ccroute-{uid}/consumerd.sock")), private_dir: true }
    }

    /// The socket path for this process's environment.
    pub fn from_env() -> SocketPath {
        Self::from_env_with(|k| std::env::var_os(k), current_uid())
    }

    /// An explicit path (as `$CCROUTE_SOCKET` gives it).
    pub fn explicit(path: impl Into<PathBuf>) -> SocketPath {
        SocketPath { path: path.into(), private_dir: false }
    }

    /// The directory holding the socket.
    pub fn dir(&self) -> Option<&Path> {
        self.path.parent().filter(|p| !p.as_os_str().is_empty())
    }

    /// The lock a running consumerd holds.
    pub fn lock_path(&self) -> PathBuf {
        self.beside(".lock")
    }

    /// The jobserver pipe of the build `ccroute make` runs as process `pid` ([`crate::jobserver`]).
    pub fn jobserver_path(&self, pid: u32) -> PathBuf {
        self.beside(&format!(".jobserver.{pid}"))
    }

    /// Where `ccroute make` puts the compiler names that lead to ccroute.
    pub fn masquerade_dir(&self) -> PathBuf {
        self.beside(".bin")
    }

    /// The socket's path with `suffix` appended: the files that go with it.
    fn beside(&self, suffix: &str) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(suffix);
        PathBuf::from(p)
    }

    /// Where a consumerd a wrapper started writes its output.
    pub fn log_path(&self) -> PathBuf {
        self.beside(".log")
    }

    /// Creates the socket's directory if needed; a directory ccroute chose
    /// must be a real directory, ours, and 0700 (it is narrowed if wider).
    ///
    /// # Errors
    /// [`SocketDirError`] when it cannot be created or is not safe to use.
    pub fn prepare_dir(&self) -> Result<(), SocketDirError> {
        let dir = self.dir().ok_or_else(|| SocketDirError::NoDir(self.path.clone()))?;
        let create = |source| SocketDirError::Create { dir: dir.to_owned(), source };
        match std::fs::DirBuilder::new().recursive(!self.private_dir).mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            // The parent of a private directory (XDG_RUNTIME_DIR, /tmp) must exist already.
            Err(e) => return Err(create(e)),
        }
        if !self.private_dir {
            return Ok(());
        }
        let meta = std::fs::symlink_metadata(dir).map_err(create)?;
        if !meta.file_type().is_dir() {
            return Err(SocketDirError::NotDir(dir.to_owned()));
        }
        let uid = current_uid();
        if meta.uid() != uid {
            return Err(SocketDirError::Owner { dir: dir.to_owned(), owner: meta.uid(), uid });
        }
        if meta.mode() & 0o077 != 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|source| SocketDirError::Mode { dir: dir.to_owned(), source })?;
        }
        Ok(())
    }
}

/// An exclusive `flock` on a file, released when dropped (or when the process ends).
#[derive(Debug)]
pub struct InstanceLock {
    _file: File,
}

impl InstanceLock {
    /// Takes the lock without waiting; `Ok(None)` when someone else holds it.
    ///
    /// # Errors
    /// When the lock file cannot be opened or locked for another reason.
    pub fn try_acquire(path: &Path) -> io::Result<Option<InstanceLock>> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(path)?;
        #[allow(unsafe_code)]
        // SAFETY: the descriptor is open and owned by `file` for the whole call.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(Some(InstanceLock { _file: file }));
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(None)
        } else {
            Err(err)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| OsString::from(v))
    }

    #[test]
    fn socket_path_precedence() {
        let p = SocketPath::from_env_with(env_of(&[("CCROUTE_SOCKET", "/s/x.sock"), ("XDG_RUNTIME_DIR", "/run/u")]), 7);
        assert_eq!(p, SocketPath { path: "/s/x.sock".into(), private_dir: false });
        let p = SocketPath::from_env_with(env_of(&[("CCROUTE_SOCKET", ""), ("XDG_RUNTIME_DIR", "/run/u")]), 7);
        assert_eq!(p, SocketPath { path: "/run/u/ccroute/consumerd.sock".into(), private_dir: true });
        let p = SocketPath::from_env_with(env_of(&[("XDG_RUNTIME_DIR", "relative")]), 7);
        assert_eq!(p.path, Path::new("/tmp/ccroute-7/consumerd.sock"));
        assert_eq!(p.lock_path(), Path::new("/tmp/ccroute-7/consumerd.sock.lock"));
        assert_eq!(p.log_path(), Path::new("/tmp/ccroute-7/consumerd.sock.log"));
    }

    #[test]
    fn private_dir_is_created_0700_and_narrowed() {
        let t = tempfile::tempdir().unwrap();
        let s = SocketPath { path: t.path().join("cc/consumerd.sock"), private_dir: true };
        s.prepare_dir().unwrap();
        let mode = std::fs::metadata(t.path().join("cc")).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(t.path().join("cc"), std::fs::Permissions::from_mode(0o755)).unwrap();
        s.prepare_dir().unwrap();
        assert_eq!(std::fs::metadata(t.path().join("cc")).unwrap().mode() & 0o777, 0o700);
    }

    #[test]
    fn private_dir_owned_by_someone_else_or_a_symlink_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let other = t.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::os::unix::fs::symlink(&other, t.path().join("link")).unwrap();
        let s = SocketPath { path: t.path().join("link/consumerd.sock"), private_dir: true };
        assert!(matches!(s.prepare_dir(), Err(SocketDirError::NotDir(_))));
        if current_uid() == 0 {
            let theirs = t.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(12345), None).unwrap();
            let s = SocketPath { path: theirs.join("consumerd.sock"), private_dir: true };
            let err = s.prepare_dir().unwrap_err();
            assert!(err.to_string().contains("owned by uid 12345"), "{err}");
        }
    }

    #[test]
    fn the_lock_is_exclusive_until_dropped() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("x.lock");
        let held = InstanceLock::try_acquire(&p).unwrap().unwrap();
        assert!(InstanceLock::try_acquire(&p).unwrap().is_none());
        drop(held);
        assert!(InstanceLock::try_acquire(&p).unwrap().is_some());
    }
}
