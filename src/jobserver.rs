//! A jobserver: GNU make's token protocol on a named pipe, one per build
//! that `ccroute make` or `ccroute ninja` runs (`crate::cli::build`), sized
//! to this machine's local slots plus the remote window the scheduler gives
//! its consumerd (this machine's share of the farm), and resized as the
//! consumerd reports that window moving.
//!
//! The protocol: the pipe holds one byte per token; a client reads a byte
//! before it starts a job beyond its first and writes it back when the job
//! ends. Each client's first job needs no token, so a jobserver of size N
//! puts N − 1 bytes in the pipe (`make -jN` does the same). Clients reach it
//! as `--jobserver-auth=fifo:PATH` (make 4.4 and later, ninja 1.13) or, for
//! older make, as two inherited descriptors of the same pipe
//! (`--jobserver-auth=R,W`).
//!
//! Growing writes bytes. Shrinking cannot take back tokens clients hold:
//! the difference is a debt, paid by reading bytes back as clients return
//! them. The owner keeps the pipe open for reading and writing, so a client
//! never sees it closed; when the owner drops it, the path is removed.
//!
//! One pipe per build rather than one per consumerd: a client killed while
//! it holds tokens (a build cut short by Ctrl-C or a closed pipe) never gives
//! them back, and a shared pipe would leave every later build short of them.
//!
//! Main item: [`Jobserver`].

use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The byte a token is (GNU make's own).
const TOKEN: u8 = b'+';

/// The largest jobserver: far above any farm's share, far below a pipe's
/// buffer (64 KiB on Linux), so that writing tokens never blocks.
pub const MAX_SIZE: u32 = 4096;

/// How often the owner should call [`Jobserver::reclaim`] while a debt is unpaid.
pub const RECLAIM_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// The pipe and how many tokens are out.
#[derive(Debug)]
pub struct Jobserver {
    path: PathBuf,
    /// Read and write, non-blocking.
    file: std::fs::File,
    /// The inode made, so that only our own pipe is removed.
    ino: u64,
    /// Tokens in circulation: in the pipe or held by clients.
    issued: u32,
    /// Tokens wanted in circulation (size − 1).
    target: u32,
}

impl Jobserver {
    /// Makes the pipe at `path` (mode 0600), replacing a pipe left there by
    /// an owner before this one; with no tokens yet.
    ///
    /// # Errors
    /// When `path` is something other than a pipe, or the pipe cannot be made or opened.
    pub fn create(path: &Path) -> io::Result<Jobserver> {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_fifo() => std::fs::remove_file(path)?,
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a pipe; remove it", path.display()),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        mkfifo(path)?;
        // Read and write: opening never waits for a peer, and the pipe never
        // reads as closed to clients while we hold it.
        let file = std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_NONBLOCK).open(path)?;
        let ino = file.metadata()?.ino();
        Ok(Jobserver { path: path.to_owned(), file, ino, issued: 0, target: 0 })
    }

    /// Where clients open it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tokens in circulation (in the pipe or held).
    pub fn issued(&self) -> u32 {
        self.issued
    }

    /// Tokens still to be taken back after a shrink.
    pub fn debt(&self) -> u32 {
        self.issued.saturating_sub(self.target)
    }

    /// Makes the jobserver `size` jobs wide (at most [`MAX_SIZE`]): tokens
    /// are written at once; a shrink is a debt [`Self::reclaim`] collects.
    ///
    /// # Errors
    /// When the pipe cannot be written.
    pub fn resize(&mut self, size: u32) -> io::Result<()> {
        self.target = size.clamp(1, MAX_SIZE) - 1;
        // A debt a grow cancels is simply not collected.
        while self.issued < self.target {
            let buf = vec![TOKEN; (self.target - self.issued) as usize];
            let n = (&self.file).write(&buf)?;
            self.issued += u32::try_from(n).unwrap_or(0);
        }
        self.reclaim()
    }

    /// Takes back, of the tokens owed, those clients have returned.
    ///
    /// # Errors
    /// When the pipe cannot be read.
    pub fn reclaim(&mut self) -> io::Result<()> {
        let mut buf = [0u8; 512];
        while self.debt() > 0 {
            let want = (self.debt() as usize).min(buf.len());
            match (&self.file).read(&mut buf[..want]) {
                Ok(0) => return Ok(()),
                Ok(n) => self.issued -= u32::try_from(n).unwrap_or(0),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Makes a named pipe at `path`, mode 0600.
#[allow(unsafe_code)]
fn mkfifo(path: &Path) -> io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    // SAFETY: a valid C string that outlives the call; mkfifo only reads it.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Drop for Jobserver {
    /// Removes the path if it is still this pipe (clients that opened it keep it).
    fn drop(&mut self) {
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() == self.ino) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A client's view: its own descriptor of the pipe, non-blocking.
    fn client(path: &Path) -> std::fs::File {
        std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_NONBLOCK).open(path).unwrap()
    }

    /// Takes every token the pipe holds now.
    fn take_all(c: &mut std::fs::File) -> usize {
        let mut got = 0;
        let mut buf = [0u8; 64];
        loop {
            match c.read(&mut buf) {
                Ok(0) => return got,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return got,
                Err(e) => panic!("{e}"),
            }
        }
    }

    #[test]
    fn a_jobserver_of_n_holds_n_minus_one_tokens_and_grows_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("js");
        let mut js = Jobserver::create(&path).unwrap();
        let mut c = client(&path);
        js.resize(5).unwrap();
        assert_eq!(take_all(&mut c), 4, "a jobserver of 5 lends 4 tokens (each client's first job needs none)");
        js.resize(9).unwrap();
        assert_eq!(take_all(&mut c), 4, "growing to 9 lends 4 more at once");
        assert_eq!(js.issued(), 8);
        js.resize(1).unwrap();
        assert_eq!(take_all(&mut c), 0);
    }

    #[test]
    fn a_shrink_takes_back_returned_tokens_and_never_lends_them_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("js");
        let mut js = Jobserver::create(&path).unwrap();
        let mut c = client(&path);
        js.resize(7).unwrap();
        assert_eq!(take_all(&mut c), 6, "a client holds all six");
        js.resize(3).unwrap();
        assert_eq!(js.debt(), 4, "four are owed while the client holds them");
        c.write_all(b"+++").unwrap();
        js.reclaim().unwrap();
        assert_eq!(js.debt(), 1, "three came back and were kept");
        assert_eq!(take_all(&mut c), 0, "none of them is lent again");
        c.write_all(b"+++").unwrap();
        js.reclaim().unwrap();
        assert_eq!((js.debt(), js.issued()), (0, 2), "the debt is paid; two tokens stay out");
        assert_eq!(take_all(&mut c), 2);
    }

    #[test]
    fn a_grow_cancels_a_debt_instead_of_adding_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("js");
        let mut js = Jobserver::create(&path).unwrap();
        let mut c = client(&path);
        js.resize(6).unwrap();
        assert_eq!(take_all(&mut c), 5);
        js.resize(2).unwrap();
        assert_eq!(js.debt(), 4);
        js.resize(4).unwrap();
        assert_eq!((js.debt(), js.issued()), (2, 5), "still five out, two owed");
        assert_eq!(take_all(&mut c), 0, "no token written on top of those held");
    }

    #[test]
    fn the_pipe_replaces_a_stale_one_refuses_anything_else_and_goes_with_its_owner() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("js");
        let first = Jobserver::create(&path).unwrap();
        std::mem::forget(first); // a consumerd that died without cleaning up
        let js = Jobserver::create(&path).unwrap();
        assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_fifo());
        drop(js);
        assert!(!path.exists(), "the pipe is removed with its jobserver");
        std::fs::write(&path, b"not a pipe").unwrap();
        let e = Jobserver::create(&path).unwrap_err();
        assert!(e.to_string().contains("is not a pipe"), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), b"not a pipe", "a file that is not ours is left alone");
    }

    #[test]
    fn a_pipe_replaced_meanwhile_is_not_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("js");
        let old = Jobserver::create(&path).unwrap();
        let new = Jobserver::create(&path).unwrap();
        drop(old);
        assert!(path.exists(), "the older jobserver leaves the newer one's pipe");
        drop(new);
        assert!(!path.exists());
    }
}
