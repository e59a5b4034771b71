//! The socket server alone, driven through raw client sockets and its channels.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream as StdStream;
use std::time::{Duration, Instant};

use bytes::BufMut;
use ccroute_wire::local::{encode_local, Job, SourceHeader, LOCAL_PROTOCOL_VERSION};
use ccroute_wire::TaskSpec;

use super::*;

const LONG: Duration = Duration::from_secs(30);

struct Fixture {
    _dir: tempfile::TempDir,
    socket: SocketPath,
    handle: Option<IpcHandle>,
    inbound: flume::Receiver<(ConnId, IpcEvent)>,
}

impl Fixture {
    fn new(max_connections: usize) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let socket = SocketPath::explicit(dir.path().join("consumerd.sock"));
        let (handle, inbound) = spawn(bind(&socket).unwrap(), max_connections).unwrap();
        Fixture { _dir: dir, socket, handle: Some(handle), inbound }
    }

    fn connect(&self) -> StdStream {
        let s = StdStream::connect(&self.socket.path).unwrap();
        s.set_read_timeout(Some(LONG)).unwrap();
        s
    }

    fn next(&self) -> (ConnId, IpcEvent) {
        self.inbound.recv_timeout(LONG).unwrap()
    }

    fn answer(&self, conn: ConnId, msg: ConsumerdMsg) {
        self.handle.as_ref().unwrap().send(conn, Outbound::Message(msg, vec![]));
    }
}

fn job_frame() -> BytesMut {
    let job = Job {
        version: LOCAL_PROTOCOL_VERSION,
        compiler: b"/usr/bin/gcc".to_vec(),
        spec: TaskSpec { args: vec![], input_path: "a.c".into(), cwd: None, env: vec![], inputs: None },
        pid: 1,
        direct: None,
        inputs_args: None,
        text_refused: None,
    };
    let mut out = BytesMut::new();
    encode_local(&WrapperMsg::Job(job), b"", &mut out);
    out
}

/// Reads one whole consumerd frame off a raw client socket.
fn read_answer(s: &mut StdStream) -> ConsumerdMsg {
    crate::wrapper::session::Session::new(s.try_clone().unwrap()).recv().unwrap().message
}

/// Whether the server closed the client's connection (EOF, or a reset).
fn is_closed(s: &mut StdStream) -> bool {
    let mut b = [0u8; 16];
    matches!(s.read(&mut b), Ok(0) | Err(_))
}

#[test]
fn the_socket_is_0600_and_a_second_server_is_refused() {
    let f = Fixture::new(8);
    let mode = std::fs::metadata(&f.socket.path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let err = bind(&f.socket).unwrap_err();
    assert_eq!(err.to_string(), format!("a consumerd is already running at {}", f.socket.path.display()));
}

#[test]
fn a_stale_socket_is_replaced_but_another_file_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let socket = SocketPath::explicit(dir.path().join("consumerd.sock"));
    drop(std::os::unix::net::UnixListener::bind(&socket.path).unwrap());
    let (handle, _inbound) = spawn(bind(&socket).unwrap(), 8).unwrap();
    StdStream::connect(&socket.path).unwrap();
    handle.shutdown();
    assert!(!socket.path.exists(), "shutdown removes the socket file");
    std::fs::write(&socket.path, "precious").unwrap();
    assert!(matches!(bind(&socket), Err(IpcError::NotASocket(_))));
    assert_eq!(std::fs::read(&socket.path).unwrap(), b"precious");
}

#[test]
fn garbage_and_oversized_frames_close_that_connection_only() {
    let f = Fixture::new(8);
    let mut good = f.connect();
    good.write_all(&job_frame()).unwrap();
    let (good_id, msg) = f.next();
    assert!(matches!(msg, IpcEvent::Message(ref m) if matches!(m.message, WrapperMsg::Job(_))));

    let mut garbage = f.connect();
    garbage.write_all(&[5, 0, 0, 0, 0xff, 0xfe, 0xfd, 0xfc, 0xfb]).unwrap();
    assert!(matches!(f.next(), (_, IpcEvent::Closed)));
    assert!(is_closed(&mut garbage));

    let mut big = f.connect();
    let mut frame = BytesMut::new();
    frame.put_u32_le(WRAPPER_LIMITS.max_header + 1);
    big.write_all(&frame).unwrap();
    assert!(matches!(f.next(), (_, IpcEvent::Closed)));
    assert!(is_closed(&mut big));

    // A payload past the limit is refused at its header, before it is sent.
    let mut huge = f.connect();
    let mut frame = BytesMut::new();
    ccroute_wire::local::encode_local_header(
        &WrapperMsg::Source(SourceHeader {
            cacheable: true,
            len: WRAPPER_LIMITS.max_payload + 1,
            files: vec![],
            text_refused: None,
        }),
        &mut frame,
    );
    huge.write_all(&frame).unwrap();
    assert!(matches!(f.next(), (_, IpcEvent::Closed)));
    assert!(is_closed(&mut huge));

    f.answer(good_id, ConsumerdMsg::RunLocally { reason: "test".into(), record: false });
    assert_eq!(read_answer(&mut good), ConsumerdMsg::RunLocally { reason: "test".into(), record: false });
    drop(good);
    assert!(matches!(f.next(), (id, IpcEvent::Closed) if id == good_id));
}

#[test]
fn a_second_message_before_the_answer_closes_the_connection() {
    let f = Fixture::new(8);
    let mut s = f.connect();
    let mut two = job_frame();
    two.extend_from_slice(&job_frame());
    s.write_all(&two).unwrap();
    assert!(matches!(f.next(), (_, IpcEvent::Message(_))));
    assert!(matches!(f.next(), (_, IpcEvent::Closed)));
    assert!(is_closed(&mut s));
}

#[test]
fn past_the_connection_limit_new_connections_are_closed_at_once() {
    let f = Fixture::new(2);
    let mut a = f.connect();
    let mut b = f.connect();
    a.write_all(&job_frame()).unwrap();
    b.write_all(&job_frame()).unwrap();
    let ids = [f.next().0, f.next().0];
    let mut c = f.connect();
    assert!(is_closed(&mut c));
    for id in ids {
        f.answer(id, ConsumerdMsg::Preprocess);
    }
    assert_eq!(read_answer(&mut a), ConsumerdMsg::Preprocess);
    assert_eq!(read_answer(&mut b), ConsumerdMsg::Preprocess);
    // A slot frees when a connection closes.
    drop(a);
    assert!(matches!(f.next(), (_, IpcEvent::Closed)));
    let mut d = f.connect();
    d.write_all(&job_frame()).unwrap();
    assert!(matches!(f.next(), (_, IpcEvent::Message(_))));
}

#[test]
fn close_waits_for_queued_bytes_and_shutdown_closes_everything() {
    let mut f = Fixture::new(8);
    let mut s = f.connect();
    s.write_all(&job_frame()).unwrap();
    let (id, _) = f.next();
    let handle = f.handle.as_ref().unwrap();
    let big = Bytes::from(vec![1u8; 4 << 20]);
    let parts = ccroute_wire::local::CompiledParts { stdout: Bytes::new(), stderr: Bytes::new(), object: big.clone() };
    let header = ccroute_wire::local::CompiledHeader::of(0, &parts);
    handle.send(id, Outbound::Message(ConsumerdMsg::Compiled(header), vec![big]));
    handle.send(id, Outbound::Close);
    assert_eq!(read_answer(&mut s), ConsumerdMsg::Compiled(header));
    let mut other = f.connect();
    other.write_all(&job_frame()).unwrap();
    let _ = f.next();
    f.handle.take().unwrap().shutdown();
    assert!(is_closed(&mut other));
    assert!(!f.socket.path.exists());
}

#[test]
fn a_removed_socket_file_is_bound_again() {
    let f = Fixture::new(8);
    std::fs::remove_file(&f.socket.path).unwrap();
    let deadline = Instant::now() + LONG;
    let mut s = loop {
        if let Ok(s) = StdStream::connect(&f.socket.path) {
            break s;
        }
        assert!(Instant::now() < deadline, "not bound again");
        std::thread::sleep(Duration::from_millis(100));
    };
    s.write_all(&job_frame()).unwrap();
    assert!(matches!(f.next(), (_, IpcEvent::Message(_))));
}
