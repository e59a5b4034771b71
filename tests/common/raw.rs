//! A consumerd written by hand, on the real protocol: it sends exactly the
//! tasks a test wants — honest ones, identical ones, lying ones — with the
//! no-op test toolchain, whose "object" is a digest of the source it saw.

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

/// The next frame on the control stream or a uni stream, within 60 s.
async fn next_frame(reader: &mut net::FrameReader, uni: &mut net::UniFrames, what: &str) -> Frame {
    tokio::time::timeout(Duration::from_secs(60), async {
        tokio::select! {
            f = reader.next() => f.unwrap().unwrap(),
            f = uni.next() => f.unwrap().unwrap(),
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {what} within 60 s"))
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
        loop {
            let frame = next_frame(&mut self.reader, &mut self.uni, "task").await;
            if let Message::Task(h) = frame.message {
                return (h, frame.payload);
            }
        }
    }

    /// Answers `task_id` with a result declaring a `declared`-byte object
    /// on a stream of its own, of which only the first KiB is sent; the
    /// stream is the test's to break.
    pub async fn answer_partly(&self, task_id: u64, declared: u64) -> quinn::SendStream {
        let info = ccroute_wire::PayloadInfo {
            len: declared,
            raw_len: declared,
            compression: ccroute_wire::Compression::None,
        };
        let header = ResultHeader { payload: info, ..ResultHeader::bare(task_id, ccroute_wire::Outcome::Success) };
        send_partly(&self.conn, &Message::TaskResult(header)).await
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
        let header = TaskHeader {
            task_id: id,
            toolchain,
            cache_key: key,
            spec: codec::encode_spec(spec),
            payload: info,
            inputs: false,
            origin: None,
            resumed: false,
        };
        let packed = Bytes::from(packed);
        if packed.len() <= INLINE_PAYLOAD_MAX {
            self.writer.send(Message::Task(header), packed).await.unwrap();
        } else {
            net::send_on_new_stream(&self.conn, &Message::Task(header), packed).await.unwrap();
        }
    }

    /// Sends a task declaring a `declared`-byte payload on a stream of its
    /// own, then only its first KiB: a stalling peer. The stream stays open
    /// for as long as the returned handle lives.
    #[allow(dead_code)] // not every test file that includes this module stalls
    pub async fn send_stalling(&self, id: u64, spec: &TaskSpec, declared: u64) -> quinn::SendStream {
        let info = ccroute_wire::PayloadInfo {
            len: declared,
            raw_len: declared,
            compression: ccroute_wire::Compression::None,
        };
        let header = TaskHeader {
            task_id: id,
            toolchain: test_toolchain().key(),
            cache_key: None,
            spec: codec::encode_spec(spec),
            payload: info,
            inputs: false,
            origin: None,
            resumed: false,
        };
        send_partly(&self.conn, &Message::Task(header)).await
    }

    /// The next result, with its object decompressed.
    pub async fn result(&mut self) -> (ResultHeader, Vec<u8>) {
        loop {
            let frame = next_frame(&mut self.reader, &mut self.uni, "result").await;
            if let Message::TaskResult(h) = frame.message {
                let object = payload::decompress(&h.payload, &frame.payload, 1 << 30).unwrap();
                return (h, object);
            }
        }
    }
}
