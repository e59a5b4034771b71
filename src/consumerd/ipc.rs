//! The consumerd's Unix-socket server: a mio poll loop on its own thread,
//! speaking the local protocol (`ccroute_wire::local`) to wrappers, one
//! connection per compile.
//!
//! The loop does only I/O: it decodes wrapper frames and hands them to the
//! tokio side over a flume channel as `(ConnId, IpcEvent)`, and writes what
//! comes back as `(ConnId, Outbound)`, woken by a [`mio::Waker`]. Memory is
//! bounded: frames are checked against [`WRAPPER_LIMITS`] before they are
//! buffered, a wrapper may have only one unanswered message (anything it sends
//! before the answer closes the connection), and past `max_connections` a new
//! connection is accepted and closed at once — its wrapper compiles locally.
//!
//! The socket file is 0600 in a directory [`SocketPath::prepare_dir`] vetted.
//! The server holds the socket's [`InstanceLock`] for its lifetime, replaces
//! a stale socket file nobody listens on, and binds again if its file is
//! removed under it.
//!
//! Main items: [`bind`], [`spawn`], [`IpcHandle`], [`ConnId`], [`IpcEvent`],
//! [`Outbound`], [`IpcError`]. Left out: what the messages mean (`super`).

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use ccroute_wire::local::{encode_local_header, ConsumerdMsg, LocalDecoder, LocalFrame, WrapperMsg, WRAPPER_LIMITS};
use mio::net::{UnixListener, UnixStream};
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use tracing::{debug, info, warn};

use crate::local_socket::{InstanceLock, SocketDirError, SocketPath};

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
/// Connection ids start past the fixed tokens, and are never reused.
const FIRST_CONN: u64 = 2;
/// How often the loop checks that its socket file is still there.
const SOCKET_CHECK: Duration = Duration::from_secs(5);
/// Bytes asked of a socket per read.
const READ_CHUNK: usize = 256 << 10;
/// Bytes read from a wrapper that owes nothing: only to see data (a
/// protocol violation) apart from the end of the connection.
const PROBE_CHUNK: usize = 512;

/// One wrapper connection, for the life of the consumerd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

impl std::fmt::Display for ConnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// What the server tells the tokio side.
// Frames are the common case and move once, through a channel: boxing
// each would cost an allocation per frame.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum IpcEvent {
    /// A whole frame from the wrapper.
    Message(LocalFrame<WrapperMsg>),
    /// The connection is gone (closed by either side, or for a protocol error).
    Closed,
}

/// What the tokio side tells the server.
#[derive(Debug)]
pub enum Outbound {
    /// Send this message, followed by these payload pieces back to back.
    Message(ConsumerdMsg, Vec<Bytes>),
    /// Close the connection once everything queued is written.
    Close,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum IpcError {
    /// Another consumerd holds the lock or answers on the socket.
    #[error("a consumerd is already running at {0}")]
    AlreadyRunning(PathBuf),
    /// Something other than a socket has the socket's name.
    #[error("{0} exists and is not a socket")]
    NotASocket(PathBuf),
    /// The socket's directory is unusable.
    #[error(transparent)]
    Dir(#[from] SocketDirError),
    /// An operating-system call failed.
    #[error("cannot {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> IpcError {
    let path = path.to_owned();
    move |source| IpcError::Io { what, path, source }
}

/// A bound, listening socket and the lock that makes it ours.
#[derive(Debug)]
pub struct BoundSocket {
    listener: std::os::unix::net::UnixListener,
    path: PathBuf,
    /// Device and inode of the socket file we bound, to tell it from a replacement.
    identity: (u64, u64),
    lock: InstanceLock,
}

/// Takes the instance lock and binds the socket (mode 0600), replacing a
/// stale socket file.
///
/// # Errors
/// [`IpcError::AlreadyRunning`] when another consumerd has it; others when
/// the directory or the socket cannot be set up.
pub fn bind(socket: &SocketPath) -> Result<BoundSocket, IpcError> {
    socket.prepare_dir()?;
    let lock_path = socket.lock_path();
    let lock = InstanceLock::try_acquire(&lock_path)
        .map_err(io_err("lock", &lock_path))?
        .ok_or_else(|| IpcError::AlreadyRunning(socket.path.clone()))?;
    let (listener, identity) = bind_path(&socket.path)?;
    info!(socket = %socket.path.display(), "consumerd listening");
    Ok(BoundSocket { listener, path: socket.path.clone(), identity, lock })
}

/// Binds at `path`, which the caller's lock makes ours to replace.
fn bind_path(path: &Path) -> Result<(std::os::unix::net::UnixListener, (u64, u64)), IpcError> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(IpcError::NotASocket(path.to_owned()));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(IpcError::AlreadyRunning(path.to_owned()));
        }
        std::fs::remove_file(path).map_err(io_err("remove the stale socket", path))?;
    }
    let listener = std::os::unix::net::UnixListener::bind(path).map_err(io_err("bind", path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io_err("set the mode of", path))?;
    listener.set_nonblocking(true).map_err(io_err("configure", path))?;
    let meta = std::fs::symlink_metadata(path).map_err(io_err("inspect", path))?;
    Ok((listener, (meta.dev(), meta.ino())))
}

/// The tokio side's handle on the server thread.
#[derive(Debug)]
pub struct IpcHandle {
    outbound: flume::Sender<(ConnId, Outbound)>,
    waker: Arc<Waker>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// A sending end of the handle, for work off the dispatcher's task.
#[derive(Debug, Clone)]
pub struct IpcSender {
    outbound: flume::Sender<(ConnId, Outbound)>,
    waker: Arc<Waker>,
}

impl IpcSender {
    /// Queues `out` for `conn` (ignored if the connection is gone).
    pub fn send(&self, conn: ConnId, out: Outbound) {
        if self.outbound.send((conn, out)).is_ok() {
            if let Err(e) = self.waker.wake() {
                warn!(error = %e, "cannot wake the socket thread");
            }
        }
    }
}

impl IpcHandle {
    /// Queues `out` for `conn` (ignored if the connection is gone).
    pub fn send(&self, conn: ConnId, out: Outbound) {
        if self.outbound.send((conn, out)).is_ok() {
            self.wake();
        }
    }

    /// A sender that other threads can hold.
    pub fn sender(&self) -> IpcSender {
        IpcSender { outbound: self.outbound.clone(), waker: self.waker.clone() }
    }

    fn wake(&self) {
        if let Err(e) = self.waker.wake() {
            warn!(error = %e, "cannot wake the socket thread");
        }
    }

    /// Stops the server: every connection is closed (their wrappers compile
    /// locally) and the socket file removed. Blocks until the thread ends.
    pub fn shutdown(mut self) {
        self.stop_thread();
    }

    fn stop_thread(&mut self) {
        // Release pairs with the Acquire load in the poll loop: the loop sees
        // the flag on the wake-up this causes.
        self.stop.store(true, Ordering::Release);
        self.wake();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                warn!("the socket thread panicked");
            }
        }
    }
}

impl Drop for IpcHandle {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// Starts the server thread on `bound`.
///
/// # Errors
/// When the poll instance cannot be created.
pub fn spawn(
    bound: BoundSocket,
    max_connections: usize,
) -> Result<(IpcHandle, flume::Receiver<(ConnId, IpcEvent)>), IpcError> {
    let poll = Poll::new().map_err(io_err("create a poll instance for", &bound.path))?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(io_err("create a waker for", &bound.path))?);
    let BoundSocket { listener, path, identity, lock } = bound;
    let mut listener = UnixListener::from_std(listener);
    poll.registry().register(&mut listener, LISTENER, Interest::READABLE).map_err(io_err("poll", &path))?;
    raise_fd_limit();
    let (in_tx, in_rx) = flume::unbounded();
    let (out_tx, out_rx) = flume::unbounded();
    let stop = Arc::new(AtomicBool::new(false));
    let mut server = Server {
        poll,
        listener,
        path,
        identity,
        _lock: lock,
        conns: HashMap::new(),
        next_id: FIRST_CONN,
        max_connections,
        inbound: in_tx,
        outbound: out_rx,
        stop: stop.clone(),
        accept_paused: false,
        warned_socket: false,
        scratch: vec![0; READ_CHUNK],
    };
    let thread = std::thread::Builder::new()
        .name("ccroute-ipc".into())
        .spawn(move || server.run())
        .map_err(|source| IpcError::Io { what: "start a thread for", path: PathBuf::new(), source })?;
    Ok((IpcHandle { outbound: out_tx, waker, stop, thread: Some(thread) }, in_rx))
}

/// Lifts the soft descriptor limit to the hard one: each wrapper is a descriptor.
fn raise_fd_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    #[allow(unsafe_code)]
    // SAFETY: `lim` is a valid, writable rlimit for the duration of both calls.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

struct Conn {
    id: ConnId,
    stream: UnixStream,
    rbuf: BytesMut,
    decoder: LocalDecoder<WrapperMsg>,
    wqueue: VecDeque<Bytes>,
    /// A frame was handed on and not answered yet.
    awaiting: bool,
    /// Close once `wqueue` is written.
    closing: bool,
    /// Registered for writability (only while `wqueue` is not empty).
    writable: bool,
}

/// How a read pass ended.
enum ReadEnd {
    /// Drained; the connection stays.
    Open,
    /// The connection must go, and why (`None`: the wrapper closed it).
    Close(Option<String>),
}

struct Server {
    poll: Poll,
    listener: UnixListener,
    path: PathBuf,
    /// Device and inode of the socket file we bound.
    identity: (u64, u64),
    /// Held until the server ends, after the socket file is removed.
    _lock: InstanceLock,
    conns: HashMap<Token, Conn>,
    next_id: u64,
    max_connections: usize,
    inbound: flume::Sender<(ConnId, IpcEvent)>,
    outbound: flume::Receiver<(ConnId, Outbound)>,
    stop: Arc<AtomicBool>,
    /// Accepting failed for want of descriptors; retried when one closes.
    accept_paused: bool,
    warned_socket: bool,
    /// Where reads land before they join a connection's buffer.
    scratch: Vec<u8>,
}

impl Server {
    fn run(&mut self) {
        let mut events = Events::with_capacity(256);
        let mut last_check = Instant::now();
        loop {
            if let Err(e) = self.poll.poll(&mut events, Some(SOCKET_CHECK)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    warn!(error = %e, "poll failed; closing the socket");
                    break;
                }
            }
            // Acquire pairs with the Release store in IpcHandle::stop_thread.
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(),
                    WAKER => {}
                    token => {
                        if event.is_readable() || event.is_read_closed() || event.is_error() {
                            self.on_readable(token);
                        }
                        if event.is_writable() {
                            self.flush(token);
                        }
                    }
                }
            }
            // Outbound messages may come with any wake-up, not only the waker's.
            self.drain_outbound();
            if last_check.elapsed() >= SOCKET_CHECK {
                last_check = Instant::now();
                self.check_socket_file();
            }
        }
        self.close_all();
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if self.conns.len() >= self.max_connections {
                        debug!(max = self.max_connections, "connection limit reached; closing a new connection");
                        continue;
                    }
                    self.add(stream);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors: the connection waits in the backlog
                    // until one of ours closes.
                    warn!(error = %e, open = self.conns.len(), "cannot accept");
                    self.accept_paused = true;
                    break;
                }
            }
        }
    }

    fn add(&mut self, mut stream: UnixStream) {
        let id = ConnId(self.next_id);
        self.next_id += 1;
        let token = Token(id.0 as usize);
        if let Err(e) = self.poll.registry().register(&mut stream, token, Interest::READABLE) {
            warn!(conn = %id, error = %e, "cannot poll a new connection");
            return;
        }
        debug!(conn = %id, "wrapper connected");
        let conn = Conn {
            id,
            stream,
            rbuf: BytesMut::new(),
            decoder: LocalDecoder::new(WRAPPER_LIMITS),
            wqueue: VecDeque::new(),
            awaiting: false,
            closing: false,
            writable: false,
        };
        self.conns.insert(token, conn);
    }

    fn on_readable(&mut self, token: Token) {
        let Some(conn) = self.conns.get_mut(&token) else { return };
        match read_frames(conn, &self.inbound, &mut self.scratch) {
            ReadEnd::Open => {}
            ReadEnd::Close(why) => {
                if let Some(why) = why {
                    warn!(conn = %conn.id, error = %why, "closing a wrapper connection");
                }
                self.remove(token);
            }
        }
    }

    fn drain_outbound(&mut self) {
        while let Ok((id, out)) = self.outbound.try_recv() {
            let token = Token(id.0 as usize);
            let Some(conn) = self.conns.get_mut(&token) else { continue };
            match out {
                Outbound::Message(message, payload) => {
                    let mut header = BytesMut::with_capacity(64);
                    encode_local_header(&message, &mut header);
                    conn.wqueue.push_back(header.freeze());
                    conn.wqueue.extend(payload.into_iter().filter(|p| !p.is_empty()));
                    // A heartbeat is not the answer the wrapper waits for.
                    if message != ConsumerdMsg::Waiting {
                        conn.awaiting = false;
                    }
                }
                Outbound::Close => conn.closing = true,
            }
            self.flush(token);
        }
    }

    fn flush(&mut self, token: Token) {
        let Some(conn) = self.conns.get_mut(&token) else { return };
        let drained = match write_queue(conn) {
            Ok(drained) => drained,
            Err(e) => {
                debug!(conn = %conn.id, error = %e, "cannot write to a wrapper");
                self.remove(token);
                return;
            }
        };
        if drained && conn.closing {
            self.remove(token);
            return;
        }
        if drained != conn.writable {
            return;
        }
        let interest = if drained { Interest::READABLE } else { Interest::READABLE | Interest::WRITABLE };
        conn.writable = !drained;
        if let Err(e) = self.poll.registry().reregister(&mut conn.stream, token, interest) {
            warn!(conn = %conn.id, error = %e, "cannot poll a connection");
            self.remove(token);
        }
    }

    fn remove(&mut self, token: Token) {
        if let Some(mut conn) = self.conns.remove(&token) {
            deregister(self.poll.registry(), &mut conn.stream);
            debug!(conn = %conn.id, "wrapper connection closed");
            let _ = self.inbound.send((conn.id, IpcEvent::Closed));
        }
        if self.accept_paused {
            self.accept_paused = false;
            self.accept();
        }
    }

    fn close_all(&mut self) {
        let tokens: Vec<Token> = self.conns.keys().copied().collect();
        for t in tokens {
            self.remove(t);
        }
        // Remove our socket file, not a replacement someone made.
        if identity(&self.path) == Some(self.identity) {
            let _ = std::fs::remove_file(&self.path);
        }
        info!(socket = %self.path.display(), "consumerd socket closed");
    }

    /// Binds again if the socket file was removed or replaced: wrappers find
    /// the consumerd by that name alone.
    fn check_socket_file(&mut self) {
        if identity(&self.path) == Some(self.identity) {
            return;
        }
        let rebound = bind_path(&self.path).and_then(|(std_listener, id)| {
            let mut listener = UnixListener::from_std(std_listener);
            self.poll
                .registry()
                .register(&mut listener, LISTENER, Interest::READABLE)
                .map_err(io_err("poll", &self.path))?;
            Ok((listener, id))
        });
        match rebound {
            Ok((mut listener, id)) => {
                std::mem::swap(&mut self.listener, &mut listener);
                deregister(self.poll.registry(), &mut listener);
                self.identity = id;
                self.warned_socket = false;
                warn!(socket = %self.path.display(), "socket file was removed or replaced; bound again");
            }
            Err(e) if !self.warned_socket => {
                self.warned_socket = true;
                warn!(error = %e, "socket file was removed or replaced and cannot be bound again");
            }
            Err(_) => {}
        }
    }
}

fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

fn deregister<S: mio::event::Source>(registry: &Registry, source: &mut S) {
    if let Err(e) = registry.deregister(source) {
        debug!(error = %e, "deregister failed");
    }
}

/// Reads until the socket would block, handing on whole frames.
fn read_frames(conn: &mut Conn, inbound: &flume::Sender<(ConnId, IpcEvent)>, scratch: &mut [u8]) -> ReadEnd {
    loop {
        let want = if conn.awaiting { PROBE_CHUNK } else { scratch.len() };
        let n = match conn.stream.read(&mut scratch[..want]) {
            Ok(n) => n,
            Err(e) => match e.kind() {
                io::ErrorKind::WouldBlock => return ReadEnd::Open,
                io::ErrorKind::Interrupted => continue,
                _ => return ReadEnd::Close(Some(e.to_string())),
            },
        };
        if n == 0 {
            return ReadEnd::Close(None);
        }
        if conn.awaiting {
            return ReadEnd::Close(Some(format!("{n} bytes sent before the answer to the previous message")));
        }
        conn.rbuf.extend_from_slice(&scratch[..n]);
        match conn.decoder.decode(&mut conn.rbuf) {
            Ok(None) => {}
            Ok(Some(frame)) => {
                conn.awaiting = true;
                if inbound.send((conn.id, IpcEvent::Message(frame))).is_err() {
                    return ReadEnd::Close(Some("the consumerd is shutting down".into()));
                }
            }
            Err(e) => return ReadEnd::Close(Some(e.to_string())),
        }
        // Anything past one message (a second one included) came too early.
        if conn.awaiting && !conn.rbuf.is_empty() {
            return ReadEnd::Close(Some("bytes sent without waiting for an answer".into()));
        }
    }
}

/// Writes as much of the queue as the socket takes; `Ok(true)` when it is empty.
fn write_queue(conn: &mut Conn) -> io::Result<bool> {
    while let Some(front) = conn.wqueue.front_mut() {
        match conn.stream.write(front) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                front.advance(n);
                if front.is_empty() {
                    conn.wqueue.pop_front();
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
