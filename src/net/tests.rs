//! End-to-end tests of the network layer: real QUIC on 127.0.0.1, port 0,
//! certificates from `tls::init` in temporary directories.

use std::fmt::{self, Write as _};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use ccroute_wire::{
    Cancel, Compression, Hello, HelloBody, HelloOutcome, Message, PayloadInfo, RefusalKind, ResultHeader, Role,
    SystemInfo, TaskHeader, ToolchainKey, Welcome, PROTOCOL_VERSION,
};
use quinn::{Connection, ConnectionError, Endpoint};
use tempfile::TempDir;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

use super::tls::{self, CertRole, Identity};
use super::*;

/// A cluster's certificate directory.
struct Cluster {
    dir: TempDir,
}

impl Cluster {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        tls::init(dir.path(), false).unwrap();
        Cluster { dir }
    }

    fn identity(&self, role: CertRole) -> Identity {
        tls::load(self.dir.path(), role).unwrap()
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

fn server(identity: &Identity, opts: &TransportOptions) -> Endpoint {
    server_endpoint(SocketAddr::from(([127, 0, 0, 1], 0)), identity, opts).unwrap()
}

fn addr_of(endpoint: &Endpoint) -> SocketAddr {
    endpoint.local_addr().unwrap()
}

fn client(identity: &Identity, opts: &TransportOptions, target: SocketAddr) -> Endpoint {
    client_endpoint(identity, opts, target).unwrap()
}

fn hello(role: Role, version: u32) -> Hello {
    Hello {
        version,
        body: HelloBody {
            role,
            node_id: 42,
            host_name: "test-host".into(),
            system: SystemInfo { arch: "x86_64".into(), cpus: 2, memory_bytes: 1 << 30 },
            toolchains: vec![],
            usage_limit: 0,
            speed_milli: 0,
            probed_speed_milli: 0,
            shipping: ccroute_wire::Shipping::Off,
            resumed: Vec::new(),
        },
    }
}

const WELCOME: Welcome = Welcome { scheduler_id: 7, limit: 3 };

/// What the test scheduler made of one connection.
struct Served {
    conn: Connection,
    role: Role,
    writer: FrameWriter,
    reader: FrameReader,
}

/// Plays the scheduler for the next incoming connection: TLS, hello,
/// version and role checks, welcome or refusal. `None` when it refused.
async fn serve_one(endpoint: &Endpoint) -> Result<Option<Served>, NetError> {
    let incoming = endpoint.accept().await.unwrap();
    let conn = accept(incoming).await?;
    let (outcome, handshake) = accept_hello(&conn, HANDSHAKE_TIMEOUT).await?;
    let refusal = match outcome {
        HelloOutcome::Hello(hello) => match verify_role(&conn, &hello) {
            Ok(role) => {
                let (writer, reader) = handshake.welcome(WELCOME, &StreamOptions::default()).await?;
                return Ok(Some(Served { conn, role, writer, reader }));
            }
            Err(refusal) => refusal,
        },
        HelloOutcome::Incompatible(refusal) => refusal,
    };
    handshake.refuse(refusal).await?;
    Ok(None)
}

fn cancel(id: u64) -> Message {
    Message::Cancel(Cancel { task_id: id })
}

fn task(id: u64, payload_len: usize) -> Message {
    Message::Task(TaskHeader {
        task_id: id,
        toolchain: ToolchainKey(9),
        cache_key: None,
        spec: Bytes::from_static(b"spec"),
        payload: PayloadInfo { len: payload_len as u64, raw_len: payload_len as u64, compression: Compression::None },
        inputs: false,
        origin: None,
        resumed: false,
    })
}

fn pattern(len: usize) -> Bytes {
    (0..len).map(|i| (i % 251) as u8).collect::<Vec<u8>>().into()
}

/// Collects the events of `ccroute` targets, formatted, for assertions on
/// what was logged. Installed per thread: a current-thread runtime runs
/// every task of a test on it.
#[derive(Clone, Default)]
struct Capture {
    lines: Arc<Mutex<Vec<String>>>,
}

impl Capture {
    fn install(&self) -> tracing::subscriber::DefaultGuard {
        tracing::subscriber::set_default(self.clone())
    }

    fn warnings(&self) -> Vec<String> {
        self.lines.lock().unwrap().iter().filter_map(|l| l.strip_prefix("WARN ").map(str::to_string)).collect()
    }
}

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

impl Subscriber for Capture {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target().starts_with("ccroute")
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        let level = event.metadata().level();
        let level = if *level == Level::WARN { "WARN" } else { "OTHER" };
        self.lines.lock().unwrap().push(format!("{level} {}", fields.0));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[tokio::test]
async fn a_client_of_the_cluster_completes_the_handshake_and_frames_flow_both_ways() {
    let cluster = Cluster::new();
    let opts = TransportOptions::default();
    let sched = server(&cluster.identity(CertRole::Scheduler), &opts);
    let target = addr_of(&sched);
    let scheduler = tokio::spawn(async move {
        let mut served = serve_one(&sched).await.unwrap().unwrap();
        // Echo every frame, then say goodbye with one of our own.
        let mut echoed = 0;
        while let Some(frame) = served.reader.next().await.unwrap() {
            served.writer.send(frame.message, frame.payload).await.unwrap();
            echoed += 1;
            if echoed == 3 {
                break;
            }
        }
        served.writer.send(cancel(99), Bytes::new()).await.unwrap();
        served.writer.finish().await.unwrap();
        (served.role, echoed, served.conn, sched)
    });

    let ep = client(&cluster.identity(CertRole::Consumerd), &opts, target);
    let conn = connect(&ep, target).await.unwrap();
    let (writer, mut reader, welcome) =
        client_handshake(&conn, &hello(Role::Consumerd, PROTOCOL_VERSION), &StreamOptions::default()).await.unwrap();
    assert_eq!(welcome, WELCOME);
    let source = pattern(1000);
    writer.send(cancel(1), Bytes::new()).await.unwrap();
    writer.send(task(2, source.len()), source.clone()).await.unwrap();
    writer.send(cancel(3), Bytes::new()).await.unwrap();

    let mut got = vec![];
    while let Some(frame) = reader.next().await.unwrap() {
        got.push(frame);
    }
    assert_eq!(got.len(), 4, "three echoes and the goodbye, then a clean end of stream");
    assert_eq!(got[0].message, cancel(1));
    assert_eq!(got[1].message, task(2, 1000));
    assert_eq!(got[1].payload, source);
    assert_eq!(got[2].message, cancel(3));
    assert_eq!(got[3].message, cancel(99));

    let (role, echoed, _conn, _sched) = scheduler.await.unwrap();
    assert_eq!(role, Role::Consumerd, "the scheduler reads the role from the certificate");
    assert_eq!(echoed, 3);
    CloseReason::Done.close(&conn);
}

#[tokio::test]
async fn a_scheduler_shutting_down_tells_its_clients_at_once() {
    let cluster = Cluster::new();
    // An idle timeout no test would wait out: the close must be what ends it.
    let opts = TransportOptions { idle_timeout: Duration::from_secs(600), ..Default::default() };
    let sched = server(&cluster.identity(CertRole::Scheduler), &opts);
    let target = addr_of(&sched);
    let ep = client(&cluster.identity(CertRole::Admin), &opts, target);
    let (served, client_side) = tokio::join!(serve_one(&sched), async {
        let conn = connect(&ep, target).await.unwrap();
        client_handshake(&conn, &hello(Role::Admin, PROTOCOL_VERSION), &StreamOptions::default()).await.unwrap()
    });
    let served = served.unwrap().unwrap();
    assert_eq!(served.role, Role::Admin);
    let (_writer, mut reader, _) = client_side;
    shutdown(&sched, CloseReason::Shutdown).await;
    let err = reader.next().await.unwrap_err();
    assert_eq!(err.close_reason(), Some(CloseReason::Shutdown), "{err}");
    assert!(err.to_string().ends_with("lost: closed by peer: shutting down (code 1)"), "{err}");
}

#[tokio::test]
async fn a_hello_claiming_another_role_than_the_certificate_is_refused() {
    let cluster = Cluster::new();
    let opts = TransportOptions::default();
    let sched = server(&cluster.identity(CertRole::Scheduler), &opts);
    let target = addr_of(&sched);
    let scheduler = tokio::spawn(async move { serve_one(&sched).await.map(|s| s.is_none()) });

    let ep = client(&cluster.identity(CertRole::Consumerd), &opts, target);
    let conn = connect(&ep, target).await.unwrap();
    let err =
        client_handshake(&conn, &hello(Role::Agent, PROTOCOL_VERSION), &StreamOptions::default()).await.unwrap_err();
    let NetError::Refused { refusal, .. } = &err else { panic!("expected a refusal, got {err}") };
    assert_eq!(refusal.kind, RefusalKind::WrongRole);
    assert!(
        err.to_string()
            .ends_with("refused the connection: the hello says agent but the certificate is issued for consumerd"),
        "{err}"
    );
    assert!(scheduler.await.unwrap().unwrap(), "the scheduler refused");
}

#[tokio::test]
async fn a_hello_of_an_unknown_version_gets_a_refusal_naming_both_versions() {
    let cluster = Cluster::new();
    let opts = TransportOptions::default();
    let sched = server(&cluster.identity(CertRole::Scheduler), &opts);
    let target = addr_of(&sched);
    let scheduler = tokio::spawn(async move {
        let refused = serve_one(&sched).await.map(|s| s.is_none());
        (refused, sched)
    });

    let ep = client(&cluster.identity(CertRole::Agent), &opts, target);
    let conn = connect(&ep, target).await.unwrap();
    let future = PROTOCOL_VERSION + 1;
    let err = client_handshake(&conn, &hello(Role::Agent, future), &StreamOptions::default()).await.unwrap_err();
    let NetError::Refused { refusal, .. } = &err else { panic!("expected a refusal, got {err}") };
    assert_eq!(refusal.kind, RefusalKind::IncompatibleVersion);
    assert!(
        err.to_string().ends_with(&format!(
            "refused the connection: incompatible protocol version: scheduler speaks {PROTOCOL_VERSION}, peer speaks {future}"
        )),
        "{err}"
    );
    let (refused, _sched) = scheduler.await.unwrap();
    assert!(refused.unwrap());
    // The client closed the connection with the refusal's code.
    assert_eq!(CloseReason::of(&conn.closed().await), None, "closed locally");
    assert!(matches!(conn.close_reason(), Some(ConnectionError::LocallyClosed)));
}

#[tokio::test]
async fn a_client_from_another_cluster_is_refused_and_both_sides_say_why() {
    let capture = Capture::default();
    let _guard = capture.install();
    let ours = Cluster::new();
    let theirs = Cluster::new();
    let opts = TransportOptions::default();
    let sched = server(&ours.identity(CertRole::Scheduler), &opts);
    let target = addr_of(&sched);

    // Their client trusts our CA (it got hold of ca.pem) but holds a
    // certificate of its own cluster: the scheduler must turn it away.
    std::fs::copy(ours.path().join("ca.pem"), theirs.path().join("ca.pem")).unwrap();
    let scheduler = tokio::spawn(async move {
        let incoming = sched.accept().await.unwrap();
        (accept(incoming).await.map(|_| ()), sched)
    });
    let ep = client(&theirs.identity(CertRole::Consumerd), &opts, target);
    let client_err = match connect(&ep, target).await {
        // TLS 1.3: our side of the handshake may finish before the server
        // checks our certificate; the rejection then meets the hello.
        Ok(conn) => client_handshake(&conn, &hello(Role::Consumerd, PROTOCOL_VERSION), &StreamOptions::default())
            .await
            .map(|_| ())
            .unwrap_err(),
        Err(e) => e,
    };
    let (server_result, sched) = scheduler.await.unwrap();
    let server_err = server_result.unwrap_err();

    assert!(matches!(server_err, NetError::Handshake { .. }), "{server_err}");
    assert!(
        server_err.to_string().ends_with("failed: client certificate not signed by the cluster CA"),
        "{server_err}"
    );
    assert!(matches!(client_err, NetError::Handshake { .. }), "{client_err}");
    assert!(
        client_err
            .to_string()
            .ends_with("failed: the scheduler rejected our certificate: it is not signed by their cluster CA"),
        "{client_err}"
    );
    let warnings = capture.warnings();
    let said = |text: &str| warnings.iter().filter(|w| w.contains(text)).count();
    assert_eq!(said("tls handshake failed: client certificate not signed by the cluster CA"), 1, "{warnings:#?}");
    assert_eq!(
        said("tls handshake failed: the scheduler rejected our certificate: it is not signed by their cluster CA"),
        1,
        "{warnings:#?}"
    );
    assert_eq!(warnings.len(), 2, "{warnings:#?}");

    // A client of a wholly other cluster also distrusts our scheduler: it
    // gives up first, and again both sides say why.
    let stranger = Cluster::new();
    let scheduler = tokio::spawn(async move {
        let incoming = sched.accept().await.unwrap();
        accept(incoming).await.map(|_| ())
    });
    let ep = client(&stranger.identity(CertRole::Agent), &opts, target);
    let client_err = connect(&ep, target).await.unwrap_err();
    let server_err = scheduler.await.unwrap().unwrap_err();
    assert!(
        client_err.to_string().ends_with("failed: server certificate not signed by the cluster CA"),
        "{client_err}"
    );
    assert!(
        server_err
            .to_string()
            .ends_with("failed: the client rejected our certificate: it is not signed by their cluster CA"),
        "{server_err}"
    );
    assert_eq!(capture.warnings().len(), 4, "{:#?}", capture.warnings());
}

#[tokio::test]
async fn a_server_without_the_scheduler_certificate_is_refused_by_the_client() {
    let capture = Capture::default();
    let _guard = capture.install();
    let cluster = Cluster::new();
    let opts = TransportOptions::default();
    // Same cluster, but the server presents the agent's certificate.
    let impostor = server(&cluster.identity(CertRole::Agent), &opts);
    let target = addr_of(&impostor);
    let server_side = tokio::spawn(async move {
        let incoming = impostor.accept().await.unwrap();
        accept(incoming).await.map(|_| ())
    });
    let ep = client(&cluster.identity(CertRole::Consumerd), &opts, target);
    let client_err = connect(&ep, target).await.unwrap_err();
    let server_err = server_side.await.unwrap().unwrap_err();
    assert!(
        client_err.to_string().ends_with("failed: server certificate is not a scheduler certificate"),
        "{client_err}"
    );
    assert!(
        server_err
            .to_string()
            .ends_with("failed: the client rejected our certificate: it is not a scheduler certificate"),
        "{server_err}"
    );
    let warnings = capture.warnings();
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    assert!(warnings.iter().any(|w| w.contains("server certificate is not a scheduler certificate")), "{warnings:#?}");
}

/// A client connected to a test scheduler with default options, both
/// handshakes done. The endpoints and certificates live as long as it.
struct Pair {
    served: Served,
    conn: Connection,
    writer: FrameWriter,
    reader: FrameReader,
    _kept: (Endpoint, Endpoint, Cluster),
}

async fn connected_pair(cert: CertRole, role: Role) -> Pair {
    let cluster = Cluster::new();
    let opts = TransportOptions::default();
    let sched = server(&cluster.identity(CertRole::Scheduler), &opts);
    let target = addr_of(&sched);
    let ep = client(&cluster.identity(cert), &opts, target);
    let (served, (conn, writer, reader)) = tokio::join!(serve_one(&sched), async {
        let conn = connect(&ep, target).await.unwrap();
        let (w, r, _) =
            client_handshake(&conn, &hello(role, PROTOCOL_VERSION), &StreamOptions::default()).await.unwrap();
        (conn, w, r)
    });
    Pair { served: served.unwrap().unwrap(), conn, writer, reader, _kept: (sched, ep, cluster) }
}

#[tokio::test]
async fn malformed_bytes_are_a_clear_error_and_the_other_streams_keep_working() {
    let Pair { mut served, conn, writer, mut reader, _kept } = connected_pair(CertRole::Agent, Role::Agent).await;
    let mut uni = accept_frames(served.conn.clone(), Default::default());

    // Garbage on a payload stream: that stream's error, nothing else.
    let mut garbage = conn.open_uni().await.unwrap();
    garbage.write_all(&[3, 0, 0, 0, 0xff, 0xff, 0xff]).await.unwrap();
    garbage.finish().unwrap();
    let err = uni.next().await.unwrap().unwrap_err();
    assert!(matches!(err, NetError::Decode { .. }), "{err}");
    let from = served.conn.remote_address();
    assert!(err.to_string().starts_with(&format!("malformed data from {from}: malformed")), "{err}");

    // Half a frame, then the end of the stream.
    let mut half = BytesMut::new();
    ccroute_wire::encode_header(&task(5, 10), &mut half);
    half.put_slice(b"12345");
    let mut cut = conn.open_uni().await.unwrap();
    cut.write_all(&half).await.unwrap();
    cut.finish().unwrap();
    let err = uni.next().await.unwrap().unwrap_err();
    assert!(err.to_string().contains("ended in the middle of a frame (5 bytes of it buffered)"), "{err}");
    // Its header came whole: it is handed back, so that its task is answered.
    let (header, why) = err.into_unfinished().unwrap();
    assert_eq!(header, task(5, 10));
    assert!(why.contains("could not be read"), "{why}");

    // A good payload stream still arrives.
    send_on_new_stream(&conn, &task(6, 4), Bytes::from_static(b"abcd")).await.unwrap();
    let frame = uni.next().await.unwrap().unwrap();
    assert_eq!((frame.message, &frame.payload[..]), (task(6, 4), &b"abcd"[..]));

    // Garbage on the control stream: the reader says so and stops the
    // stream, and the client's writer learns of it without writing again.
    writer.send(cancel(1), Bytes::new()).await.unwrap();
    writer.send_encoded(Bytes::from_static(&[2, 0, 0, 0, 0xee, 0xee])).await.unwrap();
    assert_eq!(served.reader.next().await.unwrap().unwrap().message, cancel(1));
    let err = served.reader.next().await.unwrap_err();
    assert!(matches!(err, NetError::Decode { .. }), "{err}");
    let failure = writer.failed().await;
    assert!(
        matches!(failure, NetError::Stopped { code, .. } if code == CloseReason::ProtocolError.code()),
        "{failure}"
    );
    assert!(writer.send(cancel(2), Bytes::new()).await.is_err(), "a failed writer refuses frames");

    // The connection itself is fine: payload streams and the other direction work.
    send_on_new_stream(&conn, &task(7, 3), Bytes::from_static(b"xyz")).await.unwrap();
    assert_eq!(uni.next().await.unwrap().unwrap().message, task(7, 3));
    served.writer.send(cancel(8), Bytes::new()).await.unwrap();
    assert_eq!(reader.next().await.unwrap().unwrap().message, cancel(8));
}

#[tokio::test]
async fn a_full_writer_queue_hands_the_frame_back_and_nothing_is_lost() {
    let cluster = Cluster::new();
    // A tiny window: the writer blocks as soon as the reader stops reading.
    let opts = TransportOptions { stream_receive_window: 4096, ..Default::default() };
    let sched = server(&cluster.identity(CertRole::Scheduler), &opts);
    let target = addr_of(&sched);
    let ep = client(&cluster.identity(CertRole::Agent), &opts, target);
    let small = StreamOptions { writer_queue: 4, ..Default::default() };
    let (served, client_side) = tokio::join!(serve_one(&sched), async {
        let conn = connect(&ep, target).await.unwrap();
        client_handshake(&conn, &hello(Role::Agent, PROTOCOL_VERSION), &small).await.unwrap()
    });
    let mut served = served.unwrap().unwrap();
    let (writer, _reader, _) = client_side;

    let payload = pattern(1000);
    let mut queued = 0u64;
    let refused = loop {
        match writer.try_send(Outgoing::Frame { message: task(queued, 1000), payload: payload.clone() }) {
            Ok(()) => queued += 1,
            Err(TrySendError::Full(out)) => break out,
            Err(TrySendError::Closed(e)) => panic!("{e}"),
        }
        if queued % 4 == 0 {
            // Let the writer task drain into the stream until flow control stops it.
            tokio::task::yield_now().await;
        }
        assert!(queued < 100_000, "the queue never filled");
    };
    assert_eq!(*refused, Outgoing::Frame { message: task(queued, 1000), payload: payload.clone() });
    let mut seen = 0;
    while seen < queued {
        let frame = served.reader.next().await.unwrap().unwrap();
        assert_eq!(frame.message, task(seen, 1000), "in order");
        assert_eq!(frame.payload, payload);
        seen += 1;
    }
    let mismatch = writer.send(task(0, 5), Bytes::from_static(b"1234")).await.unwrap_err();
    assert_eq!(mismatch.to_string(), format!("a task to {target} declares 5 payload bytes but carries 4"));
}

/// A payload is given time for what its connection delivers meanwhile, up
/// to the deadline of the largest payload the reader takes, and a stream
/// alone on a quiet connection still stalls at the floor.
#[test]
fn a_queued_payload_is_given_time_for_what_its_connection_delivers_first() {
    let max = ccroute_wire::Limits::DEFAULT.max_payload;
    assert_eq!(queued_payload_deadline(1000, 0, max), PAYLOAD_DEADLINE_FLOOR);
    assert_eq!(queued_payload_deadline(1000, 30 << 20, max), PAYLOAD_DEADLINE_FLOOR + Duration::from_secs(30));
    assert_eq!(queued_payload_deadline(1000, u64::MAX, max), payload_deadline(max));
    // A consumerd takes objects up to 1 GiB.
    assert_eq!(queued_payload_deadline(1000, u64::MAX, 1 << 30), payload_deadline(1 << 30));
}

/// A payload whose first KiB came at once and whose rest waits its turn
/// behind other streams the connection keeps delivering (at twice the
/// slowest rate accepted) arrives whole, past the floor: it was queued, not
/// stalled. Then a payload that stops with nothing else arriving is dropped
/// at its own deadline, which its own bytes do not stretch. (Before, the first one was dropped at the floor
/// too: a sender running far ahead lost sources that were only waiting.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_waiting_behind_others_is_not_taken_for_stalled() {
    let Pair { served, conn, writer: _writer, reader: _reader, _kept } =
        connected_pair(CertRole::Consumerd, Role::Consumerd).await;
    let mut uni = accept_frames(served.conn.clone(), Default::default());
    const WAITING: usize = 4096;
    const OTHER: usize = 200 << 10;
    let whole = pattern(WAITING);

    let started = Instant::now();
    let mut header = BytesMut::new();
    ccroute_wire::encode_header(&task(1, WAITING), &mut header);
    let mut waiting = conn.open_uni().await.unwrap();
    // As every payload stream: below the control stream.
    let _ = waiting.set_priority(-1);
    waiting.write_all(&header).await.unwrap();
    waiting.write_all(&whole[..1024]).await.unwrap();
    // 10 streams of 200 KiB a second (2 MiB/s) until the floor is well past.
    let others = {
        let conn = conn.clone();
        tokio::spawn(async move {
            let mut id = 2;
            while started.elapsed() < PAYLOAD_DEADLINE_FLOOR + Duration::from_secs(2) {
                send_on_new_stream(&conn, &task(id, OTHER), pattern(OTHER)).await.unwrap();
                id += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            id - 2
        })
    };
    let mut arrived = 0;
    let finisher = async {
        let sent = others.await.unwrap();
        waiting.write_all(&whole[1024..]).await.unwrap();
        waiting.finish().unwrap();
        sent
    };
    let reading = async {
        loop {
            let frame = uni.next().await.unwrap().expect("every payload arrives: none is taken for stalled");
            if frame.message == task(1, WAITING) {
                assert!(frame.payload == whole);
                break;
            }
            assert_eq!(frame.payload.len(), OTHER);
            arrived += 1;
        }
    };
    let (sent, ()) = tokio::join!(finisher, reading);
    // Streams are read at once each: the last others may come after it.
    while arrived < sent {
        let next = tokio::time::timeout(Duration::from_secs(60), uni.next()).await;
        let frame = next.expect("a payload never came").unwrap().expect("every payload arrives: none stalled");
        assert_eq!(frame.payload.len(), OTHER);
        arrived += 1;
    }
    assert!(started.elapsed() > PAYLOAD_DEADLINE_FLOOR, "the test must outlast the floor to mean anything");

    // Alone on a quiet connection, a payload that stops is stalled at its
    // own deadline: its own 3 MiB do not count as others' traffic.
    const DECLARED: usize = 4 << 20;
    const SENT: usize = 3 << 20;
    let stopped_at = Instant::now();
    let mut header = BytesMut::new();
    ccroute_wire::encode_header(&task(99, DECLARED), &mut header);
    let mut stalled = conn.open_uni().await.unwrap();
    stalled.write_all(&header).await.unwrap();
    stalled.write_all(&pattern(SENT)).await.unwrap();
    let err = uni.next().await.unwrap().unwrap_err();
    let own = payload_deadline(DECLARED as u64);
    assert!(
        matches!(
            err,
            NetError::PayloadStalled { len, received, after, .. }
                if len == DECLARED as u64 && received == SENT as u64 && after == own
        ),
        "{err}"
    );
    let waited = stopped_at.elapsed();
    assert!(waited >= own, "dropped after {waited:?}");
    drop(stalled);
}

/// The order is forced, not raced: the large payload is on the wire and held
/// there (the scheduler does not take uni streams yet, so the stream's window
/// stops it partway) before the first small frame goes, and half the small
/// frames must come back before the scheduler reads it. Were they queued
/// behind it, on its stream or behind the connection's window, they would
/// never come back and the test would fail at its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_payload_on_its_own_stream_does_not_hold_up_small_frames() {
    const BIG: usize = 50 << 20;
    const SMALL: u64 = 1000;
    const HELD_FOR: u64 = SMALL / 2;
    let cluster = Cluster::new();
    let opts = TransportOptions::default();
    assert!(
        (opts.stream_receive_window as usize) < BIG && opts.stream_receive_window < opts.receive_window,
        "a stream's window must stop the large payload partway and leave the connection's room for the rest"
    );
    let sched = server(&cluster.identity(CertRole::Scheduler), &opts);
    let target = addr_of(&sched);
    let (big_tx, big_rx) = tokio::sync::oneshot::channel();
    let scheduler = tokio::spawn(async move {
        let Served { conn, mut reader, writer, .. } = serve_one(&sched).await.unwrap().unwrap();
        let mut echoed = 0u64;
        while echoed < HELD_FOR {
            let frame = reader.next().await.unwrap().expect("a small frame");
            writer.send(frame.message, frame.payload).await.unwrap();
            echoed += 1;
        }
        let mut uni = accept_frames(conn.clone(), Default::default());
        let mut big_tx = Some(big_tx);
        loop {
            tokio::select! {
                frame = reader.next() => match frame.unwrap() {
                    Some(frame) => {
                        writer.send(frame.message, frame.payload).await.unwrap();
                        echoed += 1;
                    }
                    None => break,
                },
                frame = uni.next() => {
                    let frame = frame.unwrap().unwrap();
                    if let Some(tx) = big_tx.take() {
                        let _ = tx.send((Instant::now(), frame));
                    }
                }
            }
        }
        writer.finish().await.unwrap();
        (echoed, conn, sched)
    });

    let deadline = Duration::from_secs(120);
    let client = async {
        let ep = client(&cluster.identity(CertRole::Consumerd), &opts, target);
        let conn = connect(&ep, target).await.unwrap();
        let (writer, mut reader, _) =
            client_handshake(&conn, &hello(Role::Consumerd, PROTOCOL_VERSION), &StreamOptions::default())
                .await
                .unwrap();
        let big = pattern(BIG);
        let started = Instant::now();
        let sender = {
            let (conn, big) = (conn.clone(), big.clone());
            tokio::spawn(async move { send_on_new_stream(&conn, &task(0, BIG), big).await })
        };
        // On the wire: more than a stream window's half has left the client.
        let on_the_wire = u64::from(opts.stream_receive_window / 2);
        while conn.stats().udp_tx.bytes < on_the_wire {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let mut round_trips = Vec::with_capacity(SMALL as usize);
        for id in 1..=SMALL {
            let sent = Instant::now();
            writer.send(cancel(id), Bytes::new()).await.unwrap();
            let echo = reader.next().await.unwrap().unwrap();
            assert_eq!(echo.message, cancel(id));
            round_trips.push((sent, sent.elapsed()));
        }
        let (arrived, frame) = big_rx.await.unwrap();
        sender.await.unwrap().unwrap();
        assert_eq!(frame.message, task(0, BIG));
        assert!(frame.payload == big, "the large payload arrives intact");
        writer.finish().await.unwrap();
        assert!(reader.next().await.unwrap().is_none());
        (started, arrived, round_trips, conn, ep)
    };
    let (started, arrived, round_trips, _conn, _ep) = tokio::time::timeout(deadline, client)
        .await
        .expect("small frames queued behind the large payload (no echo while it was held)");
    let (echoed, _conn, _sched) = scheduler.await.unwrap();
    assert_eq!(echoed, SMALL, "every small frame arrived");

    let median = |mut times: Vec<Duration>| {
        times.sort();
        times.get(times.len() / 2).copied().unwrap_or_default()
    };
    let during: Vec<Duration> = round_trips.iter().filter(|(at, _)| *at < arrived).map(|(_, d)| *d).collect();
    let after: Vec<Duration> = round_trips.iter().filter(|(at, _)| *at >= arrived).map(|(_, d)| *d).collect();
    println!(
        "50 MiB payload took {:?}; {} of {SMALL} round trips ran while it was held or moved (median {:?}, max {:?}), \
         {} after it (median {:?})",
        arrived - started,
        during.len(),
        median(during.clone()),
        during.iter().max().copied().unwrap_or_default(),
        after.len(),
        median(after.clone()),
    );
}

#[test]
fn a_dead_peer_is_noticed_within_the_idle_timeout() {
    let cluster = Cluster::new();
    // Long enough that a loaded machine's stall during the handshake and
    // the first echo does not end the live connection.
    let opts = TransportOptions {
        idle_timeout: Duration::from_secs(2),
        keep_alive: Duration::from_millis(200),
        ..Default::default()
    };
    let server_rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let sched = server_rt.block_on(async { server(&cluster.identity(CertRole::Scheduler), &opts) });
    let target = addr_of(&sched);

    // The client lives in its own runtime, which is then torn down: no
    // close is ever sent, its socket just goes quiet.
    let identity = cluster.identity(CertRole::Agent);
    let client_opts = opts.clone();
    let client_thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let parts = rt.block_on(async {
            let ep = client(&identity, &client_opts, target);
            let conn = connect(&ep, target).await.unwrap();
            let (w, r, _) = client_handshake(&conn, &hello(Role::Agent, PROTOCOL_VERSION), &StreamOptions::default())
                .await
                .unwrap();
            w.send(cancel(1), Bytes::new()).await.unwrap();
            let mut r = r;
            assert_eq!(r.next().await.unwrap().unwrap().message, cancel(2));
            (ep, conn, w, r)
        });
        rt.shutdown_background();
        std::mem::forget(parts);
    });

    server_rt.block_on(async {
        let mut served = serve_one(&sched).await.unwrap().unwrap();
        assert_eq!(served.reader.next().await.unwrap().unwrap().message, cancel(1));
        served.writer.send(cancel(2), Bytes::new()).await.unwrap();
        tokio::task::spawn_blocking(move || client_thread.join().unwrap()).await.unwrap();
        let started = Instant::now();
        // A bound so that a regression fails instead of hanging.
        let err = tokio::time::timeout(Duration::from_secs(30), served.reader.next()).await.unwrap().unwrap_err();
        assert!(matches!(&err, NetError::ConnectionLost { source: ConnectionError::TimedOut, .. }), "{err}");
        assert!(err.to_string().ends_with("lost: timed out"), "{err}");
        let failure = tokio::time::timeout(Duration::from_secs(30), served.writer.failed()).await.unwrap();
        assert!(matches!(failure, NetError::ConnectionLost { .. }), "{failure}");
        println!("dead peer noticed after {:?} (idle timeout {:?})", started.elapsed(), opts.idle_timeout);
    });
}

/// Prints round trips per second of 200-byte frames over one connection,
/// 64 in flight, through the coalescing writer. For the record: run with
/// `--release -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "prints a rate; slow in debug builds"]
async fn stress_round_trips_per_second() {
    const IN_FLIGHT: u64 = 64;
    const RUN: Duration = Duration::from_secs(2);
    let cluster = Cluster::new();
    let opts = TransportOptions::default();
    let sched = server(&cluster.identity(CertRole::Scheduler), &opts);
    let target = addr_of(&sched);
    let scheduler = tokio::spawn(async move {
        let Served { mut reader, writer, conn, .. } = serve_one(&sched).await.unwrap().unwrap();
        while let Some(frame) = reader.next().await.unwrap() {
            writer.send(frame.message, frame.payload).await.unwrap();
        }
        writer.finish().await.unwrap();
        (conn, sched)
    });
    let ep = client(&cluster.identity(CertRole::Consumerd), &opts, target);
    let conn = connect(&ep, target).await.unwrap();
    let (writer, mut reader, _) =
        client_handshake(&conn, &hello(Role::Consumerd, PROTOCOL_VERSION), &StreamOptions::default()).await.unwrap();
    let frame = |id: u64| {
        Message::TaskResult(ResultHeader {
            stderr: Bytes::from(vec![b'w'; 150]),
            ..ResultHeader::bare(id, ccroute_wire::Outcome::Success)
        })
    };
    let mut probe = BytesMut::new();
    ccroute_wire::encode_header(&frame(1), &mut probe);
    let started = Instant::now();
    let mut sent = 0u64;
    let mut received = 0u64;
    while sent < IN_FLIGHT {
        writer.send(frame(sent), Bytes::new()).await.unwrap();
        sent += 1;
    }
    while started.elapsed() < RUN {
        reader.next().await.unwrap().unwrap();
        received += 1;
        writer.send(frame(sent), Bytes::new()).await.unwrap();
        sent += 1;
    }
    let elapsed = started.elapsed();
    while received < sent {
        reader.next().await.unwrap().unwrap();
        received += 1;
    }
    writer.finish().await.unwrap();
    assert!(reader.next().await.unwrap().is_none());
    let _ = scheduler.await.unwrap();
    println!(
        "{:.0} round trips/s of {}-byte frames, {IN_FLIGHT} in flight, over {elapsed:?}",
        (sent - IN_FLIGHT) as f64 / elapsed.as_secs_f64(),
        probe.len(),
    );
}

/// Every endpoint's socket asks for large buffers: the default drops bursts,
/// and each drop shrinks QUIC's congestion window. The kernel grants up to
/// `net.core.rmem_max` (and reports twice what it grants).
#[test]
fn endpoint_sockets_get_large_receive_buffers() {
    use quinn::udp::{UdpSockRef, UdpSocketState};
    let rmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max").unwrap().trim().parse().unwrap();
    let socket = super::endpoint::bind_udp(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let state = UdpSocketState::new(UdpSockRef::from(&socket)).unwrap();
    let got = state.recv_buffer_size(UdpSockRef::from(&socket)).unwrap();
    let plain = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let default = state.recv_buffer_size(UdpSockRef::from(&plain)).unwrap();
    assert!(got >= super::endpoint::SOCKET_BUFFER.min(rmem_max), "granted {got} (rmem_max {rmem_max})");
    if rmem_max > default {
        assert!(got > default, "granted {got}, no more than a plain socket's {default}");
    }
}
