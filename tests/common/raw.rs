//! Peers written by hand, on the real protocol: a consumerd that sends
//! exactly the tasks a test wants — honest ones, identical ones, lying ones —
//! with the no-op test toolchain, whose "object" is a digest of the source it
//! saw; an agent that answers them however a test wants; and a scheduler that
//! sends real agents and consumerds what a test wants.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use ccroute::net::{self, tls, CertRole, TransportOptions, INLINE_PAYLOAD_MAX};
use ccroute::toolchain::test_toolchain;
use ccroute_wire::{
    cache_key, codec, payload, CacheKey, Frame, Hello, HelloBody, Message, ResultHeader, Role, SystemInfo, TaskHeader,
    TaskSpec, PROTOCOL_VERSION,
};

/// A connected hand-written consumerd.
pub struct RawConsumerd {
    _endpoint: net::Endpoint,
    pub conn: net::Connection,
    writer: net::FrameWriter,
    reader: net::FrameReader,
    uni: net::UniFrames,
}

/// The spec of a test-toolchain task (`sleep_ms` > 0: the agent waits that long).
pub fn spec(sleep_ms: u32) -> TaskSpec {
    let args = if sleep_ms > 0 { vec![format!("-sleep={sleep_ms}")] } else { vec![] };
    TaskSpec { args, input_path: "t.c".into(), cwd: None, env: vec![], inputs: None }
}

/// The key an honest consumerd computes for `source` under `spec`.
pub fn honest_key(spec: &TaskSpec, source: &[u8]) -> CacheKey {
    cache_key(test_toolchain().key(), &codec::encode_spec(spec), source)
}

/// Connects to `addr` and shakes hands as `role` (one token for an agent).
async fn handshake(
    tls_dir: &Path,
    addr: SocketAddr,
    role: Role,
    toolchains: Vec<ccroute_wire::Toolchain>,
    system: SystemInfo,
) -> (net::Endpoint, net::Connection, net::FrameWriter, net::FrameReader, net::UniFrames) {
    let cert = if role == Role::Agent { CertRole::Agent } else { CertRole::Consumerd };
    let identity = tls::load(tls_dir, cert).unwrap();
    let endpoint = net::client_endpoint(&identity, &TransportOptions::default(), addr).unwrap();
    let conn = net::connect(&endpoint, addr).await.unwrap();
    let hello = Hello {
        version: PROTOCOL_VERSION,
        body: HelloBody {
            role,
            node_id: if role == Role::Agent { 0xa9e7 } else { 0x5eed },
            host_name: "raw".into(),
            system,
            toolchains,
            usage_limit: u32::from(role == Role::Agent),
            speed_milli: 0,
            probed_speed_milli: 0,
            shipping: ccroute_wire::Shipping::Off,
            resumed: Vec::new(),
        },
    };
    let (writer, reader, _) = net::client_handshake(&conn, &hello, &net::StreamOptions::default()).await.unwrap();
    let uni = net::accept_frames(conn.clone(), ccroute_wire::Limits::DEFAULT);
    (endpoint, conn, writer, reader, uni)
}

/// How long a hand-written peer waits for what it expects.
const WAIT: Duration = Duration::from_secs(60);

/// The next frame on the control stream or a uni stream, within 60 s.
async fn next_frame(reader: &mut net::FrameReader, uni: &mut net::UniFrames, what: &str) -> Frame {
    next_frame_by(reader, uni, what, tokio::time::Instant::now() + WAIT).await
}

/// The next frame on the control stream or a uni stream, by `deadline`.
async fn next_frame_by(
    reader: &mut net::FrameReader,
    uni: &mut net::UniFrames,
    what: &str,
    deadline: tokio::time::Instant,
) -> Frame {
    tokio::time::timeout_at(deadline, async {
        tokio::select! {
            f = reader.next() => f.unwrap().unwrap(),
            f = uni.next() => f.unwrap().unwrap(),
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {what} within {WAIT:?}"))
}

/// Opens a uni stream and sends `message`'s header and the first KiB of
/// the payload it declares, leaving the stream open.
async fn send_partly(conn: &net::Connection, message: &Message) -> quinn::SendStream {
    let mut bytes = bytes::BytesMut::new();
    ccroute_wire::encode_header(message, &mut bytes);
    bytes.extend_from_slice(&[7u8; 1024]);
    let mut send = conn.open_uni().await.unwrap();
    send.write_all(&bytes).await.unwrap();
    send
}

/// The next task on the control stream or a uni stream, within 60 s
/// however many other messages (passed over) come meanwhile.
async fn next_task(reader: &mut net::FrameReader, uni: &mut net::UniFrames) -> (TaskHeader, Bytes) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let frame = next_frame_by(reader, uni, "task", deadline).await;
        if let Message::Task(h) = frame.message {
            return (h, frame.payload);
        }
    }
}

/// The next result, with its object decompressed, within 60 s however
/// many other messages (passed over) come meanwhile.
async fn next_result(reader: &mut net::FrameReader, uni: &mut net::UniFrames) -> (ResultHeader, Vec<u8>) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let frame = next_frame_by(reader, uni, "result", deadline).await;
        if let Message::TaskResult(h) = frame.message {
            let object = payload::decompress(&h.payload, &frame.payload, 1 << 30).unwrap();
            return (h, object);
        }
    }
}

/// A payload of `declared` bytes, stored as they are.
fn declared(declared: u64) -> ccroute_wire::PayloadInfo {
    ccroute_wire::PayloadInfo { len: declared, raw_len: declared, compression: ccroute_wire::Compression::None }
}

/// A test-toolchain task `id` carrying `payload`.
fn task_header(id: u64, spec: &TaskSpec, key: Option<CacheKey>, payload: ccroute_wire::PayloadInfo) -> TaskHeader {
    TaskHeader {
        task_id: id,
        toolchain: test_toolchain().key(),
        cache_key: key,
        spec: codec::encode_spec(spec),
        payload,
        inputs: false,
        origin: None,
        resumed: false,
    }
}

/// Sends `message` with `packed` inline, or on a stream of its own when
/// it is too large to go inline.
async fn send_frame(conn: &net::Connection, writer: &net::FrameWriter, message: Message, packed: Vec<u8>) {
    let packed = Bytes::from(packed);
    if packed.len() <= INLINE_PAYLOAD_MAX {
        writer.send(message, packed).await.unwrap();
    } else {
        net::send_on_new_stream(conn, &message, packed).await.unwrap();
    }
}

/// A hand-written agent of one token for the test toolchain: it answers
/// the tasks it is sent however a test wants.
#[allow(dead_code)] // not every test file that includes this module plays an agent
pub struct RawAgent {
    _endpoint: net::Endpoint,
    pub conn: net::Connection,
    writer: net::FrameWriter,
    reader: net::FrameReader,
    uni: net::UniFrames,
}

#[allow(dead_code)]
impl RawAgent {
    /// Connects and shakes hands as an agent.
    pub async fn connect(tls_dir: &Path, addr: SocketAddr) -> RawAgent {
        let (endpoint, conn, writer, reader, uni) =
            handshake(tls_dir, addr, Role::Agent, vec![test_toolchain()], SystemInfo::default()).await;
        RawAgent { _endpoint: endpoint, conn, writer, reader, uni }
    }

    /// The next task the scheduler sends (other messages are passed over).
    pub async fn task(&mut self) -> (TaskHeader, Bytes) {
        next_task(&mut self.reader, &mut self.uni).await
    }

    /// Answers `task_id` with a result declaring a `declared`-byte object
    /// on a stream of its own, of which only the first KiB is sent; the
    /// stream is the test's to break.
    pub async fn answer_partly(&self, task_id: u64, size: u64) -> quinn::SendStream {
        answer_partly(&self.conn, task_id, size).await
    }

    /// Answers `header`'s task with it and `object` (compressed as
    /// `header.payload` says).
    pub async fn answer(&self, header: ResultHeader, object: Vec<u8>) {
        send_frame(&self.conn, &self.writer, Message::TaskResult(header), object).await;
    }
}

impl RawConsumerd {
    /// Connects and shakes hands as a consumerd.
    pub async fn connect(tls_dir: &Path, addr: SocketAddr) -> RawConsumerd {
        Self::connect_with(tls_dir, addr, vec![test_toolchain()], SystemInfo::default()).await
    }

    /// Connects announcing `toolchains`, as a host described by `system`.
    pub async fn connect_with(
        tls_dir: &Path,
        addr: SocketAddr,
        toolchains: Vec<ccroute_wire::Toolchain>,
        system: SystemInfo,
    ) -> RawConsumerd {
        let (endpoint, conn, writer, reader, uni) = handshake(tls_dir, addr, Role::Consumerd, toolchains, system).await;
        RawConsumerd { _endpoint: endpoint, conn, writer, reader, uni }
    }

    /// Sends one test-toolchain task claiming `key` (none: not cacheable).
    pub async fn send(&self, id: u64, spec: &TaskSpec, source: &[u8], key: Option<CacheKey>) {
        self.send_for(test_toolchain().key(), id, spec, source, key).await;
    }

    /// Sends one task for `toolchain`.
    pub async fn send_for(
        &self,
        toolchain: ccroute_wire::ToolchainKey,
        id: u64,
        spec: &TaskSpec,
        source: &[u8],
        key: Option<CacheKey>,
    ) {
        let (packed, info) = payload::compress(source);
        let header = TaskHeader { toolchain, ..task_header(id, spec, key, info) };
        send_frame(&self.conn, &self.writer, Message::Task(header), packed).await;
    }

    /// Sends a task declaring a `declared`-byte payload on a stream of its
    /// own, then only its first KiB: a stalling peer. The stream stays open
    /// for as long as the returned handle lives.
    #[allow(dead_code)] // not every test file that includes this module stalls
    pub async fn send_stalling(&self, id: u64, spec: &TaskSpec, size: u64) -> quinn::SendStream {
        send_partly(&self.conn, &Message::Task(task_header(id, spec, None, declared(size)))).await
    }

    /// The next result, with its object decompressed.
    pub async fn result(&mut self) -> (ResultHeader, Vec<u8>) {
        next_result(&mut self.reader, &mut self.uni).await
    }

    /// Cancels task `id` (on the control stream).
    #[allow(dead_code)] // not every test file that includes this module cancels
    pub async fn cancel(&self, id: u64) {
        let cancel = Message::Cancel(ccroute_wire::Cancel { task_id: id });
        self.writer.send(cancel, Bytes::new()).await.unwrap();
    }
}

/// Answers `task_id` with a result declaring a `size`-byte object on a
/// stream of its own, of which only the first KiB is sent; the stream is
/// the caller's to break.
async fn answer_partly(conn: &net::Connection, task_id: u64, size: u64) -> quinn::SendStream {
    let header =
        ResultHeader { payload: declared(size), ..ResultHeader::bare(task_id, ccroute_wire::Outcome::Success) };
    send_partly(conn, &Message::TaskResult(header)).await
}

/// A hand-written scheduler on 127.0.0.1: real agents and consumerds
/// connect to it, and a test sends them what it wants.
#[allow(dead_code)] // not every test file that includes this module plays the scheduler
pub struct RawScheduler {
    endpoint: net::Endpoint,
    pub addr: SocketAddr,
}

/// A peer connected to a [`RawScheduler`], past the handshake.
#[allow(dead_code)]
pub struct RawPeer {
    pub hello: Hello,
    pub conn: net::Connection,
    writer: net::FrameWriter,
    reader: net::FrameReader,
    uni: net::UniFrames,
}

#[allow(dead_code)]
impl RawScheduler {
    /// Listens on a free port of 127.0.0.1 with the cluster's scheduler
    /// certificate. Call within a tokio runtime.
    pub fn bind(tls_dir: &Path) -> RawScheduler {
        let identity = tls::load(tls_dir, CertRole::Scheduler).unwrap();
        let endpoint =
            net::server_endpoint("127.0.0.1:0".parse().unwrap(), &identity, &TransportOptions::default()).unwrap();
        let addr = endpoint.local_addr().unwrap();
        RawScheduler { endpoint, addr }
    }

    /// [`RawScheduler::bind`] with `cluster`'s certificates, and made the
    /// scheduler the daemons it starts from now on connect to.
    pub fn for_cluster(cluster: &mut super::Cluster) -> RawScheduler {
        let scheduler = RawScheduler::bind(&cluster.tls);
        cluster.addr = Some(scheduler.addr);
        scheduler
    }

    /// The next peer of `role`, welcomed with `limit` (an agent's tokens, a
    /// consumerd's remote limit); peers of other roles are closed.
    pub async fn accept(&self, role: Role, limit: u32) -> RawPeer {
        tokio::time::timeout(WAIT, async {
            loop {
                let incoming = self.endpoint.accept().await.expect("the endpoint is open");
                let Ok(conn) = net::accept(incoming).await else { continue };
                let Ok((ccroute_wire::HelloOutcome::Hello(hello), hs)) =
                    net::accept_hello(&conn, net::HANDSHAKE_TIMEOUT).await
                else {
                    continue;
                };
                if hello.body.role != role {
                    conn.close(0u32.into(), b"not the peer this test waits for");
                    continue;
                }
                let welcome = ccroute_wire::Welcome { scheduler_id: 0x5c4e, limit };
                let (writer, reader) = hs.welcome(welcome, &net::StreamOptions::default()).await.unwrap();
                let uni = net::accept_frames(conn.clone(), ccroute_wire::Limits::DEFAULT);
                return RawPeer { hello, conn, writer, reader, uni };
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {role} connected within {WAIT:?}"))
    }
}

#[allow(dead_code)]
impl RawPeer {
    /// Sends an agent a test-toolchain task compiling `source`.
    pub async fn send_task(&self, id: u64, spec: &TaskSpec, source: &[u8]) {
        let (packed, info) = payload::compress(source);
        send_frame(&self.conn, &self.writer, Message::Task(task_header(id, spec, None, info)), packed).await;
    }

    /// Sends an agent a task declaring a `size`-byte source on a stream of
    /// its own, then only its first KiB; the stream is the caller's to break.
    pub async fn send_task_partly(&self, id: u64, spec: &TaskSpec, size: u64) -> quinn::SendStream {
        send_partly(&self.conn, &Message::Task(task_header(id, spec, None, declared(size)))).await
    }

    /// Answers a consumerd's `task_id` with a result declaring a `size`-byte
    /// object, of which only the first KiB is sent.
    pub async fn answer_partly(&self, task_id: u64, size: u64) -> quinn::SendStream {
        answer_partly(&self.conn, task_id, size).await
    }

    /// Sends `message` with `payload` on the control stream.
    pub async fn send(&self, message: Message, payload: Bytes) {
        self.writer.send(message, payload).await.unwrap();
    }

    /// The next frame on the control stream or a uni stream, within 60 s.
    pub async fn frame(&mut self) -> Frame {
        next_frame(&mut self.reader, &mut self.uni, "frame").await
    }

    /// The next task a consumerd sends.
    pub async fn task(&mut self) -> (TaskHeader, Bytes) {
        next_task(&mut self.reader, &mut self.uni).await
    }

    /// The next result an agent sends.
    pub async fn result(&mut self) -> (ResultHeader, Vec<u8>) {
        next_result(&mut self.reader, &mut self.uni).await
    }
}
