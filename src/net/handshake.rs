//! The version handshake on QUIC.
//!
//! The client opens the bidi control stream and sends its `Hello`
//! ([`client_handshake`]); the scheduler reads it ([`accept_hello`]), decides,
//! and answers through the [`ServerHandshake`] it got back: `welcome` turns
//! the stream into a [`FrameWriter`] and a [`FrameReader`], `refuse` sends
//! the refusal, makes sure it arrived, and closes the connection.
//!
//! Deciding is the scheduler's business: the version check is done by the
//! wire crate ([`HelloOutcome::Incompatible`]), the role check by
//! [`super::tls::verify_role`]. Left out: reconnecting after a refusal.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use ccroute_wire::handshake::{decode_hello, decode_reply, encode_hello, encode_reply, MAX_HANDSHAKE};
use ccroute_wire::{
    DecodeError, Hello, HelloBody, HelloOutcome, HelloReply, Refusal, SystemInfo, Welcome, PROTOCOL_VERSION,
};
use quinn::{Connection, RecvStream, SendStream};

use super::endpoint::{client_endpoint, knock, TransportOptions};
use super::error::{handshake_error, CloseReason, NetError, Side};
use super::framed::{FrameReader, FrameWriter, StreamOptions};
use super::tls::Identity;

/// How long each side waits for the other's handshake frame.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a refusing scheduler waits for the client to have the refusal
/// before it closes the connection (a close discards unsent stream data).
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// A random 128-bit node id from the OS.
pub fn random_id() -> u128 {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS randomness: fall back to time and pid, unique enough for an id.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        return now.as_nanos() ^ (u128::from(std::process::id()) << 96);
    }
    u128::from_le_bytes(bytes)
}

/// This host, for a hello.
pub fn system_info() -> SystemInfo {
    SystemInfo { arch: std::env::consts::ARCH.into(), cpus: crate::host::online_cpus(), memory_bytes: 0 }
}

/// Connects to the scheduler at `addr` and says hello with `body`: an
/// agent's or a consumerd's way in. While nothing answers it keeps knocking
/// ([`knock`]); drop it to stop.
///
/// # Errors
/// As [`client_endpoint`], [`knock`] and [`client_handshake`].
pub async fn dial(
    identity: &Identity,
    transport: &TransportOptions,
    addr: SocketAddr,
    body: HelloBody,
) -> Result<(Connection, FrameWriter, FrameReader, Welcome), NetError> {
    let endpoint = client_endpoint(identity, transport, addr)?;
    let conn = knock(&endpoint, addr).await?;
    let hello = Hello { version: PROTOCOL_VERSION, body };
    let (writer, reader, welcome) = client_handshake(&conn, &hello, &StreamOptions::default()).await?;
    Ok((conn, writer, reader, welcome))
}

/// Opens the control stream, sends `hello` and awaits the scheduler's reply.
///
/// # Errors
/// [`NetError::Refused`] with the scheduler's refusal (the connection is
/// then closed), [`NetError::Handshake`] (logged once) when the scheduler
/// rejected our certificate, [`NetError::Timeout`] when no reply came within
/// [`HANDSHAKE_TIMEOUT`], a decode or connection error otherwise.
pub async fn client_handshake(
    conn: &Connection,
    hello: &Hello,
    opts: &StreamOptions,
) -> Result<(FrameWriter, FrameReader, Welcome), NetError> {
    let peer = conn.remote_address();
    let exchange = async {
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| handshake_error(peer, e, Side::Client))?;
        let mut out = BytesMut::new();
        encode_hello(hello, &mut out);
        send.write_all(&out).await.map_err(|e| write_error(peer, e, Side::Client))?;
        let mut buf = BytesMut::new();
        let reply = read_handshake_frame(&mut recv, &mut buf, peer, Side::Client, decode_reply).await?;
        Ok((send, recv, buf, reply))
    };
    let (send, recv, buf, reply) = match tokio::time::timeout(HANDSHAKE_TIMEOUT, exchange).await {
        Ok(Ok(exchanged)) => exchanged,
        Ok(Err(e)) => {
            close_after(conn, &e);
            return Err(e);
        }
        Err(_) => {
            CloseReason::ProtocolError.close_with(conn, "no reply to the hello");
            return Err(NetError::Timeout { peer, what: "reply to the hello", after: HANDSHAKE_TIMEOUT });
        }
    };
    match reply {
        HelloReply::Welcome(welcome) => Ok((
            FrameWriter::spawn(send, peer, opts.writer_queue),
            FrameReader::with_buffered(recv, peer, opts.limits, buf),
            welcome,
        )),
        HelloReply::Refused(refusal) => {
            CloseReason::Refused.close_with(conn, &refusal.to_string());
            Err(NetError::Refused { peer, refusal })
        }
    }
}

/// The scheduler's end of a handshake in progress: answer it with
/// [`ServerHandshake::welcome`] or [`ServerHandshake::refuse`].
#[derive(Debug)]
pub struct ServerHandshake {
    conn: Connection,
    send: SendStream,
    recv: RecvStream,
    /// Bytes read past the hello.
    buf: BytesMut,
}

/// Accepts the client's control stream and reads its hello, for at most
/// `wait` (e.g. [`HANDSHAKE_TIMEOUT`]).
///
/// # Errors
/// [`NetError::Timeout`], [`NetError::Decode`] for a malformed hello (the
/// connection is then closed with [`CloseReason::ProtocolError`] and the
/// decode error as its reason), a connection error otherwise.
pub async fn accept_hello(conn: &Connection, wait: Duration) -> Result<(HelloOutcome, ServerHandshake), NetError> {
    let peer = conn.remote_address();
    let exchange = async {
        let (send, mut recv) = conn.accept_bi().await.map_err(|e| handshake_error(peer, e, Side::Server))?;
        let mut buf = BytesMut::new();
        let outcome = read_handshake_frame(&mut recv, &mut buf, peer, Side::Server, decode_hello).await?;
        Ok((outcome, send, recv, buf))
    };
    match tokio::time::timeout(wait, exchange).await {
        Ok(Ok((outcome, send, recv, buf))) => Ok((outcome, ServerHandshake { conn: conn.clone(), send, recv, buf })),
        Ok(Err(e)) => {
            close_after(conn, &e);
            Err(e)
        }
        Err(_) => {
            CloseReason::ProtocolError.close_with(conn, "no hello in time");
            Err(NetError::Timeout { peer, what: "hello", after: wait })
        }
    }
}

impl ServerHandshake {
    /// Sends the welcome; the control stream becomes a writer and a reader.
    ///
    /// # Errors
    /// The stream's or connection's failure.
    pub async fn welcome(
        mut self,
        welcome: Welcome,
        opts: &StreamOptions,
    ) -> Result<(FrameWriter, FrameReader), NetError> {
        let peer = self.conn.remote_address();
        let mut out = BytesMut::new();
        encode_reply(&HelloReply::Welcome(welcome), &mut out);
        self.send.write_all(&out).await.map_err(|e| NetError::from_write(peer, e))?;
        Ok((
            FrameWriter::spawn(self.send, peer, opts.writer_queue),
            FrameReader::with_buffered(self.recv, peer, opts.limits, self.buf),
        ))
    }

    /// Sends the refusal, waits (briefly) until the client has it, and closes
    /// the connection with [`CloseReason::Refused`].
    ///
    /// # Errors
    /// The stream's or connection's failure; the connection is closed anyway.
    pub async fn refuse(mut self, refusal: Refusal) -> Result<(), NetError> {
        let peer = self.conn.remote_address();
        let mut out = BytesMut::new();
        let reason = refusal.to_string();
        encode_reply(&HelloReply::Refused(refusal), &mut out);
        let written = self.send.write_all(&out).await.map_err(|e| NetError::from_write(peer, e));
        if written.is_ok() {
            let _ = self.send.finish();
            // Resolves once the client acknowledged every byte, or closed.
            let _ = tokio::time::timeout(REFUSAL_LINGER, self.send.stopped()).await;
        }
        CloseReason::Refused.close_with(&self.conn, &reason);
        written
    }
}

/// Closes `conn` after a handshake error that left it open.
fn close_after(conn: &Connection, err: &NetError) {
    match err {
        NetError::ConnectionLost { .. } | NetError::Handshake { .. } => {}
        other => CloseReason::ProtocolError.close_with(conn, &other.to_string()),
    }
}

fn write_error(peer: SocketAddr, err: quinn::WriteError, side: Side) -> NetError {
    match err {
        quinn::WriteError::ConnectionLost(e) => handshake_error(peer, e, side),
        other => NetError::from_write(peer, other),
    }
}

/// Reads until `decode` finds its frame; handshake frames are bounded by
/// [`MAX_HANDSHAKE`], which the decoders check before the frame is whole.
async fn read_handshake_frame<T>(
    recv: &mut RecvStream,
    buf: &mut BytesMut,
    peer: SocketAddr,
    side: Side,
    decode: fn(&mut BytesMut) -> Result<Option<T>, DecodeError>,
) -> Result<T, NetError> {
    loop {
        if let Some(frame) = decode(buf).map_err(|source| NetError::Decode { peer, source })? {
            return Ok(frame);
        }
        match recv.read_chunk(MAX_HANDSHAKE as usize, true).await {
            Ok(Some(chunk)) => buf.extend_from_slice(&chunk.bytes),
            Ok(None) => return Err(NetError::EndedMidFrame { peer, buffered: buf.len() }),
            Err(quinn::ReadError::ConnectionLost(e)) => return Err(handshake_error(peer, e, side)),
            Err(e) => return Err(NetError::from_read(peer, e)),
        }
    }
}
