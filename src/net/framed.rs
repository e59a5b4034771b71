//! Frames on QUIC streams.
//!
//! - [`FrameReader`]: frames off a [`RecvStream`], through the wire crate's
//!   bounded [`FrameDecoder`], read in batches of chunks.
//! - [`FrameWriter`]: a handle to a writer task that owns a [`SendStream`].
//!   Callers queue frames; the task writes whatever is queued with one
//!   `write_all_chunks` per batch (coalescing), and payloads go out as their
//!   own `Bytes`, never copied into the header buffer.
//! - [`send_on_new_stream`] / [`accept_frames`]: a payload larger than
//!   [`INLINE_PAYLOAD_MAX`] travels on a uni stream of its own, one frame per
//!   stream, so that it never holds up small messages on the long-lived
//!   control stream.
//!
//! Left out: which messages a role may send (the sessions decide), and
//! payload compression (`ccroute_wire::payload`).

use std::fmt;
use std::mem;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ccroute_wire::{encode_header, Frame, FrameDecoder, Limits, Message};
use quinn::{Connection, ConnectionError, RecvStream, SendStream};
use thiserror::Error;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::error::{CloseReason, NetError};

/// Payloads up to this size go inline on the control stream; larger ones on
/// a stream of their own ([`send_on_new_stream`]).
pub const INLINE_PAYLOAD_MAX: usize = 64 << 10;

/// Chunks taken from quinn per read: one lock of the connection per batch.
const READ_CHUNKS: usize = 32;

/// Frames a writer task takes off its queue per write.
const WRITE_BATCH: usize = 256;

/// Settings of the framed streams of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamOptions {
    /// What a reader accepts.
    pub limits: Limits,
    /// Frames a writer queues before `send` waits (and `try_send` refuses).
    pub writer_queue: usize,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions { limits: Limits::DEFAULT, writer_queue: 1024 }
    }
}

/// Reads frames off one stream.
pub struct FrameReader {
    recv: RecvStream,
    decoder: FrameDecoder,
    buf: BytesMut,
    /// The length of the payload of the header [`FrameReader::next_header`]
    /// returned, while it is unread.
    pending: Option<usize>,
    chunks: Vec<Bytes>,
    peer: SocketAddr,
    /// Where the bytes read off the stream are counted, when someone
    /// watches ([`queued_payload_deadline`]).
    counted: Option<Arc<AtomicU64>>,
}

impl fmt::Debug for FrameReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrameReader")
            .field("peer", &self.peer)
            .field("stream", &self.recv.id())
            .field("buffered", &self.buf.len())
            .finish_non_exhaustive()
    }
}

impl FrameReader {
    /// A reader of `recv`, whose frames come from `peer`.
    pub fn new(recv: RecvStream, peer: SocketAddr, limits: Limits) -> Self {
        Self::with_buffered(recv, peer, limits, BytesMut::new())
    }

    /// A reader that first decodes `buffered`, bytes already read off `recv`.
    pub(crate) fn with_buffered(recv: RecvStream, peer: SocketAddr, limits: Limits, buffered: BytesMut) -> Self {
        FrameReader {
            recv,
            decoder: FrameDecoder::new(limits),
            buf: buffered,
            pending: None,
            chunks: vec![Bytes::new(); READ_CHUNKS],
            peer,
            counted: None,
        }
    }

    /// The next frame; `None` when the stream ended cleanly between frames.
    ///
    /// # Errors
    /// [`NetError::Decode`] for a malformed or oversized frame (the stream is
    /// then stopped: the sender's writes fail), [`NetError::EndedMidFrame`],
    /// [`NetError::Reset`], [`NetError::ConnectionLost`]. The stream is
    /// unusable after any error.
    pub async fn next(&mut self) -> Result<Option<Frame>, NetError> {
        self.release_idle_buffer();
        loop {
            match self.decoder.decode(&mut self.buf) {
                Ok(Some(frame)) => return Ok(Some(frame)),
                Ok(None) => {}
                Err(source) => {
                    let _ = self.recv.stop(CloseReason::ProtocolError.code());
                    return Err(NetError::Decode { peer: self.peer, source });
                }
            }
            if !self.fill().await? {
                return if self.buf.is_empty() && !self.decoder.is_mid_frame() {
                    Ok(None)
                } else {
                    Err(NetError::EndedMidFrame { peer: self.peer, buffered: self.buf.len() })
                };
            }
        }
    }

    /// The next frame's header, leaving its payload unread: read it with
    /// [`FrameReader::payload`], or [`FrameReader::stop`] the stream to skip
    /// it without receiving it. `None` at a clean end between frames.
    ///
    /// # Errors
    /// As [`FrameReader::next`].
    pub async fn next_header(&mut self) -> Result<Option<Message>, NetError> {
        self.release_idle_buffer();
        loop {
            if self.pending.is_none() {
                match self.decoder.decode_header(&mut self.buf) {
                    Ok(Some(message)) => {
                        self.pending = Some(message.payload_len() as usize);
                        return Ok(Some(message));
                    }
                    Ok(None) => {}
                    Err(source) => {
                        let _ = self.recv.stop(CloseReason::ProtocolError.code());
                        return Err(NetError::Decode { peer: self.peer, source });
                    }
                }
            } else {
                return Err(NetError::Protocol {
                    peer: self.peer,
                    detail: "next_header called before the previous payload was read".into(),
                });
            }
            if !self.fill().await? {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(NetError::EndedMidFrame { peer: self.peer, buffered: self.buf.len() })
                };
            }
        }
    }

    /// The payload of the header [`FrameReader::next_header`] returned.
    ///
    /// # Errors
    /// As [`FrameReader::next`].
    pub async fn payload(&mut self) -> Result<Bytes, NetError> {
        let Some(len) = self.pending else {
            return Ok(Bytes::new());
        };
        while self.buf.len() < len {
            self.buf.reserve(len - self.buf.len());
            if !self.fill().await? {
                return Err(NetError::EndedMidFrame { peer: self.peer, buffered: self.buf.len() });
            }
        }
        self.pending = None;
        Ok(ccroute_wire::frame::take_payload(&mut self.buf, len))
    }

    /// Bytes read and not yet taken as a frame.
    fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Lets go of an empty buffer. Frames are split off the buffer, so an
    /// empty `BytesMut` still shares the allocation of the last ones read (its
    /// own capacity is only that allocation's tail): kept, it would hold the
    /// largest allocation a burst of frames grew, for as long as the stream
    /// lives and stays quiet (about 1 MiB of a scheduler's RSS after a load,
    /// over 8 consumerds' control streams, with `cargo bench --bench memory`).
    /// The next read allocates what it needs.
    fn release_idle_buffer(&mut self) {
        if self.buf.is_empty() {
            self.buf = BytesMut::new();
        }
    }

    /// Reads more bytes into the buffer; false at the end of the stream.
    async fn fill(&mut self) -> Result<bool, NetError> {
        match self.recv.read_chunks(&mut self.chunks).await {
            Ok(Some(n)) => {
                let before = self.buf.len();
                for chunk in &mut self.chunks[..n] {
                    self.buf.extend_from_slice(&mem::take(chunk));
                }
                if let Some(counted) = &self.counted {
                    counted.fetch_add((self.buf.len() - before) as u64, Ordering::Relaxed);
                }
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => Err(NetError::from_read(self.peer, e)),
        }
    }

    /// Tells the sender we read no more of this stream.
    pub fn stop(&mut self, reason: CloseReason) {
        let _ = self.recv.stop(reason.code());
    }
}

/// Something to write on a stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Outgoing {
    /// A message and its payload.
    Frame {
        /// The header.
        message: Message,
        /// Exactly `message.payload_len()` bytes.
        payload: Bytes,
    },
    /// Bytes that already are whole frames (a relay forwarding a frame it did
    /// not decode).
    Encoded(Bytes),
}

// Sends are the common case and move once, through a channel: boxing
// each would cost an allocation per frame.
#[allow(clippy::large_enum_variant)]
enum Command {
    Send(Outgoing),
    Finish,
}

/// What became of a writer's stream.
#[derive(Debug, Clone)]
enum WriterState {
    Open,
    Finished,
    Failed(quinn::WriteError),
}

/// A [`FrameWriter::try_send`] that could not queue its frame.
#[derive(Debug, Error)]
pub enum TrySendError {
    /// The queue is full; here is the frame back.
    #[error("the writer's queue is full")]
    Full(Box<Outgoing>),
    /// The stream is closed or failed.
    #[error(transparent)]
    Closed(NetError),
}

/// A handle to the task writing one stream. Clones share the stream.
#[derive(Clone)]
pub struct FrameWriter {
    tx: mpsc::Sender<Command>,
    state: watch::Receiver<WriterState>,
    peer: SocketAddr,
}

impl fmt::Debug for FrameWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrameWriter").field("peer", &self.peer).field("state", &*self.state.borrow()).finish()
    }
}

impl FrameWriter {
    /// Starts the task that writes `send`, with room for `queue` frames.
    ///
    /// The task's end is tracked through the writer's state, which every
    /// handle shares: [`FrameWriter::finish`] waits for it and
    /// [`FrameWriter::failed`] reports it. It ends when every handle is
    /// dropped (finishing the stream), on `finish`, or when the stream or its
    /// connection fails — so it lives no longer than the connection it writes to.
    pub fn spawn(send: SendStream, peer: SocketAddr, queue: usize) -> FrameWriter {
        let (tx, rx) = mpsc::channel(queue.max(1));
        let (state_tx, state) = watch::channel(WriterState::Open);
        tokio::spawn(write_loop(send, rx, state_tx));
        FrameWriter { tx, state, peer }
    }

    /// Queues a frame, waiting while the queue is full.
    ///
    /// # Errors
    /// [`NetError::PayloadMismatch`] (nothing queued) or the stream's failure.
    pub async fn send(&self, message: Message, payload: Bytes) -> Result<(), NetError> {
        check_payload(self.peer, &message, &payload)?;
        self.tx.send(Command::Send(Outgoing::Frame { message, payload })).await.map_err(|_| self.closed())
    }

    /// Queues bytes that are already whole frames, waiting while the queue
    /// is full.
    ///
    /// # Errors
    /// The stream's failure.
    pub async fn send_encoded(&self, frames: Bytes) -> Result<(), NetError> {
        self.tx.send(Command::Send(Outgoing::Encoded(frames))).await.map_err(|_| self.closed())
    }

    /// Queues a frame if there is room, without waiting.
    ///
    /// # Errors
    /// [`TrySendError::Full`] with the frame, or [`TrySendError::Closed`].
    pub fn try_send(&self, out: Outgoing) -> Result<(), TrySendError> {
        if let Outgoing::Frame { message, payload } = &out {
            check_payload(self.peer, message, payload).map_err(TrySendError::Closed)?;
        }
        self.tx.try_send(Command::Send(out)).map_err(|e| match e {
            mpsc::error::TrySendError::Full(Command::Send(out)) => TrySendError::Full(Box::new(out)),
            _ => TrySendError::Closed(self.closed()),
        })
    }

    /// Writes what is queued, finishes the stream, and waits for the task to
    /// end. Frames that other handles queue behind the finish are dropped;
    /// once the task has ended, their sends are refused.
    ///
    /// # Errors
    /// The stream's failure, if it failed before everything was written.
    pub async fn finish(self) -> Result<(), NetError> {
        let _ = self.tx.send(Command::Finish).await;
        let mut state = self.state.clone();
        let outcome = state.wait_for(|s| !matches!(s, WriterState::Open)).await.map(|s| s.clone());
        match outcome {
            Ok(WriterState::Failed(e)) => Err(NetError::from_write(self.peer, e)),
            _ => Ok(()),
        }
    }

    /// Resolves when the stream fails — a write failed, the peer stopped
    /// reading, or the connection was lost, even while nothing was being
    /// written — with the reason. Never resolves for a stream that stays
    /// healthy or finishes cleanly. For an owner's `select!` loop.
    pub async fn failed(&self) -> NetError {
        let mut state = self.state.clone();
        let failure = state.wait_for(|s| matches!(s, WriterState::Failed(_))).await.map(|s| s.clone());
        match failure {
            Ok(WriterState::Failed(e)) => NetError::from_write(self.peer, e),
            _ => std::future::pending().await,
        }
    }

    /// The error for a send to a writer whose task has ended.
    fn closed(&self) -> NetError {
        match &*self.state.borrow() {
            WriterState::Failed(e) => NetError::from_write(self.peer, e.clone()),
            _ => NetError::StreamClosed { peer: self.peer },
        }
    }
}

/// The writer task: batches of queued frames, one write each. It also
/// watches the stream while idle, so that a peer that stops reading or a
/// lost connection is reported at once, not at the next write.
async fn write_loop(mut send: SendStream, mut rx: mpsc::Receiver<Command>, state: watch::Sender<WriterState>) {
    let stopped = send.stopped();
    tokio::pin!(stopped);
    let mut commands = Vec::new();
    let mut headers = BytesMut::new();
    let mut chunks: Vec<Bytes> = Vec::new();
    let outcome = loop {
        let received = tokio::select! {
            received = rx.recv_many(&mut commands, WRITE_BATCH) => received,
            stop = &mut stopped => break match stop {
                Ok(Some(code)) => WriterState::Failed(quinn::WriteError::Stopped(code)),
                Err(quinn::StoppedError::ConnectionLost(e)) => WriterState::Failed(quinn::WriteError::ConnectionLost(e)),
                // Not finished, so never acknowledged in full; and no 0-RTT.
                Ok(None) | Err(quinn::StoppedError::ZeroRttRejected) => {
                    WriterState::Failed(quinn::WriteError::ClosedStream)
                }
            },
        };
        if received == 0 {
            // Every handle is gone: nothing more will come.
            let _ = send.finish();
            break WriterState::Finished;
        }
        let mut finishing = false;
        for command in commands.drain(..) {
            match command {
                Command::Send(_) if finishing => {}
                Command::Send(Outgoing::Frame { message, payload }) => {
                    encode_header(&message, &mut headers);
                    if !payload.is_empty() {
                        chunks.push(headers.split().freeze());
                        chunks.push(payload);
                    }
                }
                Command::Send(Outgoing::Encoded(frames)) => {
                    if !headers.is_empty() {
                        chunks.push(headers.split().freeze());
                    }
                    chunks.push(frames);
                }
                Command::Finish => finishing = true,
            }
        }
        if !headers.is_empty() {
            chunks.push(headers.split().freeze());
        }
        if let Err(e) = send.write_all_chunks(&mut chunks).await {
            tracing::debug!(error = %e, "frame writer stopped");
            break WriterState::Failed(e);
        }
        chunks.clear();
        if rx.is_empty() {
            release_batch_buffers(&mut commands, &mut headers, &mut chunks);
        }
        if finishing {
            let _ = send.finish();
            break WriterState::Finished;
        }
    };
    // State first, so that a send refused by the closed queue reads the failure.
    state.send_replace(outcome);
    rx.close();
}

/// Lets go of what a burst of frames grew, once the writer's queue is
/// empty: kept, each writer would hold its largest batch (up to
/// [`WRITE_BATCH`] commands of ~200 bytes) and header buffer for as long as
/// its stream lives and stays quiet: 0.6 MB of a scheduler's live heap 15 s
/// after a load, over 12 peers (`MEMORY_HEAPTRACK=after cargo bench --bench
/// memory`), in pages the load had touched. A small batch keeps
/// its room; the header buffer, whose encoded bytes quinn holds until they
/// are acknowledged, always goes.
fn release_batch_buffers(commands: &mut Vec<Command>, headers: &mut BytesMut, chunks: &mut Vec<Bytes>) {
    const KEPT: usize = 16;
    if commands.capacity() > KEPT {
        *commands = Vec::new();
    }
    if chunks.capacity() > 2 * KEPT {
        *chunks = Vec::new();
    }
    *headers = BytesMut::new();
}

/// [`NetError::PayloadMismatch`] unless `payload` is as long as `message` declares.
fn check_payload(peer: SocketAddr, message: &Message, payload: &Bytes) -> Result<(), NetError> {
    if message.payload_len() == payload.len() as u64 {
        return Ok(());
    }
    Err(NetError::PayloadMismatch {
        peer,
        message: message.name(),
        declared: message.payload_len(),
        actual: payload.len(),
    })
}

/// The least time a payload on a stream of its own is given to arrive.
pub const PAYLOAD_DEADLINE_FLOOR: Duration = Duration::from_secs(10);
/// The slowest rate a payload may arrive at, bytes per second, past the
/// floor (counting, for one queued behind others, what its connection
/// received meanwhile: [`queued_payload_deadline`]).
pub const PAYLOAD_MIN_RATE: u64 = 1 << 20;

/// How long a payload of `len` bytes on a stream of its own may take: the
/// floor, plus its size at the slowest rate accepted (a 60 MiB source: 70 s).
pub fn payload_deadline(len: u64) -> Duration {
    PAYLOAD_DEADLINE_FLOOR + Duration::from_secs(len / PAYLOAD_MIN_RATE)
}

/// [`payload_deadline`] for a payload queued behind others: its connection
/// received `meanwhile` bytes besides its own since it was admitted (other
/// payload streams, the control stream's inline frames, toolchain
/// fetches), and a sender that sends its streams in turn sends those
/// first. A stream is stalled when its connection is, not when it waits
/// its turn. Its time still ends at the deadline of the largest payload
/// the reader takes (`max_payload`: 74 s for [`Limits::DEFAULT`]'s
/// 64 MiB), so that what is reserved for it is not held for ever: a peer
/// that keeps sending (junk included) holds a stream no longer than one
/// that declares the largest payload and trickles it.
pub fn queued_payload_deadline(len: u64, meanwhile: u64, max_payload: u64) -> Duration {
    payload_deadline(len.saturating_add(meanwhile)).min(payload_deadline(len.max(max_payload)))
}

/// Sends one frame on a new uni stream and finishes it: for a payload larger
/// than [`INLINE_PAYLOAD_MAX`]. Returns once quinn has taken all the bytes
/// (flow control permitting), not when the peer has them.
///
/// # Errors
/// [`NetError::PayloadMismatch`], or the connection's or stream's failure.
pub async fn send_on_new_stream(conn: &Connection, message: &Message, payload: Bytes) -> Result<(), NetError> {
    send_on_new_stream_then(conn, message, payload, || {}).await
}

/// As [`send_on_new_stream`], calling `opened` once the stream is open
/// (and so placed among the connection's streams: with fairness off, quinn
/// sends their data in the order they were opened), before its bytes are
/// written.
///
/// # Errors
/// As [`send_on_new_stream`].
pub async fn send_on_new_stream_then(
    conn: &Connection,
    message: &Message,
    payload: Bytes,
    opened: impl FnOnce(),
) -> Result<(), NetError> {
    let peer = conn.remote_address();
    check_payload(peer, message, &payload)?;
    let mut send = conn.open_uni().await.map_err(|source| NetError::ConnectionLost { peer, source })?;
    opened();
    // Below the control stream (priority 0): when both have data, quinn fills
    // packets with small messages first.
    let _ = send.set_priority(-1);
    let mut header = BytesMut::new();
    encode_header(message, &mut header);
    let mut chunks = [header.freeze(), payload];
    send.write_all_chunks(&mut chunks).await.map_err(|e| NetError::from_write(peer, e))?;
    send.finish().map_err(|_| NetError::StreamClosed { peer })
}

/// Sends a frame the way its size asks: inline on the control stream up to
/// [`INLINE_PAYLOAD_MAX`], else on a uni stream of its own, spawned into
/// `streams` so that the caller never waits on a large payload. `hold` (a
/// budget reservation, say) lives until the bytes are handed to quinn.
///
/// # Errors
/// The control stream's failure; a failed payload stream is only logged
/// (its connection is going, and its loss is handled there).
pub async fn send_sized<H: Send + 'static>(
    conn: &Connection,
    writer: &FrameWriter,
    streams: &mut JoinSet<()>,
    message: Message,
    payload: Bytes,
    hold: H,
) -> Result<(), NetError> {
    if payload.len() <= INLINE_PAYLOAD_MAX {
        return writer.send(message, payload).await;
    }
    let conn = conn.clone();
    streams.spawn(async move {
        if let Err(e) = send_on_new_stream(&conn, &message, payload).await {
            tracing::debug!(error = %e, message = message.name(), "payload stream failed");
        }
        drop(hold);
    });
    Ok(())
}

/// The frames a peer sends on uni streams (one frame per stream), each
/// stream read concurrently so that a small frame is not stuck behind a
/// large one.
pub fn accept_frames(conn: Connection, limits: Limits) -> UniFrames {
    UniFrames(accept_gated_frames(conn, limits, |m| std::future::ready((m, Admission::Read(())))))
}

/// Frames arriving on uni streams; see [`accept_frames`].
#[derive(Debug)]
pub struct UniFrames(GatedFrames<()>);

impl UniFrames {
    /// The next frame, or the error of one stream (other streams go on).
    /// When the connection ends: its error once, then `None`. Cancel-safe.
    pub async fn next(&mut self) -> Option<Result<Frame, NetError>> {
        let next = self.0.next().await?;
        Some(next.map(|g| Frame { message: g.message, payload: g.payload.unwrap_or_default() }))
    }
}

/// What a gate decides about a frame arriving on a uni stream, from its
/// header alone.
#[derive(Debug)]
pub enum Admission<T> {
    /// Read the payload; hand the frame on with this token.
    Read(T),
    /// Do not read the payload (stop the stream); hand the header on with
    /// this token.
    Skip(T),
}

/// A frame a gate saw: its payload is `None` when the gate skipped it.
#[derive(Debug)]
pub struct Gated<T> {
    /// The header.
    pub message: Message,
    /// The payload, unless skipped.
    pub payload: Option<Bytes>,
    /// What the gate said about it.
    pub token: T,
}

/// Like [`accept_frames`], but every frame's header goes through `gate`
/// before a byte of its payload is read: the scheduler reserves payload
/// budget there, and answers cache hits without reading the source.
pub fn accept_gated_frames<T, G, F>(conn: Connection, limits: Limits, gate: G) -> GatedFrames<T>
where
    T: Send + 'static,
    G: Fn(Message) -> F + Send + Sync + 'static,
    F: std::future::Future<Output = (Message, Admission<T>)> + Send + 'static,
{
    let gate: GateFn<T> = std::sync::Arc::new(move |m| Box::pin(gate(m)));
    GatedFrames { conn, limits, gate, reads: JoinSet::new(), lost: None, done: false }
}

type GateFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = (Message, Admission<T>)> + Send>>;
type GateFn<T> = std::sync::Arc<dyn Fn(Message) -> GateFuture<T> + Send + Sync>;

/// Frames arriving on uni streams through a gate; see [`accept_gated_frames`].
pub struct GatedFrames<T> {
    conn: Connection,
    limits: Limits,
    gate: GateFn<T>,
    reads: JoinSet<Result<Gated<T>, NetError>>,
    lost: Option<ConnectionError>,
    done: bool,
}

impl<T> fmt::Debug for GatedFrames<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatedFrames")
            .field("peer", &self.conn.remote_address())
            .field("reading", &self.reads.len())
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> GatedFrames<T> {
    /// The next frame, or the error of one stream (other streams go on).
    /// When the connection ends: its error once, then `None`. Cancel-safe.
    pub async fn next(&mut self) -> Option<Result<Gated<T>, NetError>> {
        let peer = self.conn.remote_address();
        loop {
            if let Some(source) = self.lost.take() {
                self.reads.abort_all();
                self.done = true;
                return Some(Err(NetError::ConnectionLost { peer, source }));
            }
            if self.done {
                return None;
            }
            tokio::select! {
                biased;
                Some(joined) = self.reads.join_next() => {
                    return Some(joined.unwrap_or_else(|e| Err(NetError::Protocol {
                        peer,
                        detail: format!("the reader of a payload stream ended abnormally: {e}"),
                    })));
                }
                accepted = self.conn.accept_uni() => match accepted {
                    Ok(recv) => {
                        let conn = self.conn.clone();
                        self.reads.spawn(read_gated_frame(recv, conn, self.limits, self.gate.clone()));
                    }
                    Err(e) => self.lost = Some(e),
                },
            }
        }
    }
}

/// What went wrong after `message`'s header was read: the connection's end
/// as it is (everything on it is answered when its owner sees that), else
/// an error that carries the header, so that what it names is answered.
fn unfinished(peer: SocketAddr, message: Message, e: NetError) -> NetError {
    match e {
        lost @ NetError::ConnectionLost { .. } => lost,
        source => NetError::Unfinished { peer, message: Box::new(message), source: Box::new(source) },
    }
}

/// Reads the header of a payload stream, asks the gate, then reads or skips
/// the payload.
async fn read_gated_frame<T>(
    recv: RecvStream,
    conn: Connection,
    limits: Limits,
    gate: GateFn<T>,
) -> Result<Gated<T>, NetError> {
    let peer = conn.remote_address();
    let own = Arc::new(AtomicU64::new(0));
    let mut reader = FrameReader::new(recv, peer, limits);
    reader.counted = Some(own.clone());
    let Some(message) = reader.next_header().await? else {
        return Err(NetError::Protocol { peer, detail: "a payload stream ended without a frame".into() });
    };
    let (message, admission) = gate(message).await;
    match admission {
        Admission::Skip(token) => {
            reader.stop(CloseReason::Done);
            Ok(Gated { message, payload: None, token })
        }
        Admission::Read(token) => {
            // A peer that declares a payload and stops sending it must not
            // hold the budget reserved for it for as long as it stays connected.
            let len = message.payload_len();
            let admitted = tokio::time::Instant::now();
            // What the connection received since, less this stream's bytes.
            let then = (conn.stats().udp_rx.bytes, own.load(Ordering::Relaxed));
            let others = || {
                let all = conn.stats().udp_rx.bytes.saturating_sub(then.0);
                all.saturating_sub(own.load(Ordering::Relaxed).saturating_sub(then.1))
            };
            let mut after = payload_deadline(len);
            let read = {
                let payload = reader.payload();
                tokio::pin!(payload);
                loop {
                    match tokio::time::timeout_at(admitted + after, &mut payload).await {
                        Ok(read) => break Some(read),
                        Err(_) => {
                            let queued = queued_payload_deadline(len, others(), limits.max_payload);
                            if queued <= after {
                                break None;
                            }
                            after = queued;
                        }
                    }
                }
            };
            let payload = match read {
                Some(Ok(payload)) => payload,
                Some(Err(e)) => return Err(unfinished(peer, message, e)),
                None => {
                    let received = reader.buffered() as u64;
                    let meanwhile = others();
                    reader.stop(CloseReason::ProtocolError);
                    drop(token);
                    let message = Box::new(message);
                    return Err(NetError::PayloadStalled { peer, message, len, after, received, meanwhile });
                }
            };
            match reader.next_header().await {
                Ok(None) => Ok(Gated { message, payload: Some(payload), token }),
                Ok(Some(extra)) => {
                    reader.stop(CloseReason::ProtocolError);
                    let detail = format!(
                        "a payload stream carried a {} after its {}: one frame per stream",
                        extra.name(),
                        message.name()
                    );
                    Err(unfinished(peer, message, NetError::Protocol { peer, detail }))
                }
                Err(e) => Err(unfinished(peer, message, e)),
            }
        }
    }
}
