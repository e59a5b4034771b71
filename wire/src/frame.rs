//! Framing: how messages sit on a byte stream.
//!
//! ```text
//! frame   = len:u32 LE ‖ body[len] ‖ payload[body.payload_len()]
//! ```
//!
//! The length prefix is checked against [`Limits::max_header`] before anything
//! is allocated, and a payload's declared length against
//! [`Limits::max_payload`] as soon as its header is decoded. A decoder returns
//! `Ok(None)` for "need more bytes" and an error only for bytes that can never
//! become a valid frame.
//!
//! [`FrameDecoder`] buffers a header's payload and returns both together; a
//! daemon that wants to forward a large payload without holding it whole uses
//! [`FrameDecoder::decode_header`] and reads the payload itself.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec;
use crate::error::DecodeError;
use crate::message::Message;

/// Bytes of the length prefix.
pub const LEN_PREFIX: usize = 4;

/// Bounds a decoder enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest header body, in bytes.
    pub max_header: u32,
    /// Largest payload on the wire (compressed), in bytes.
    pub max_payload: u64,
}

impl Limits {
    /// 1 MiB headers, 64 MiB payloads.
    pub const DEFAULT: Limits = Limits { max_header: 1 << 20, max_payload: 64 << 20 };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// One decoded frame: a message and its payload (empty for most messages).
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// The header.
    pub message: Message,
    /// The bytes that followed it.
    pub payload: Bytes,
}

/// A frame's header: what the codec encodes ahead of the payload, and how
/// long that payload is. [`Message`] on QUIC streams; the local protocol's
/// messages on the wrapper's socket.
pub(crate) trait Header: Serialize + DeserializeOwned {
    /// What it is, for decode errors.
    const WHAT: &'static str;
    /// Bytes of payload that follow it.
    fn payload_len(&self) -> u64;
}

impl Header for Message {
    const WHAT: &'static str = "message";
    fn payload_len(&self) -> u64 {
        Message::payload_len(self)
    }
}

/// Appends `msg` as a length-prefixed header frame.
pub(crate) fn put_header<H: Header>(msg: &H, out: &mut BytesMut) {
    let start = out.len();
    out.put_u32_le(0);
    codec::encode_value(msg, out);
    let len = (out.len() - start - LEN_PREFIX) as u32;
    out[start..start + LEN_PREFIX].copy_from_slice(&len.to_le_bytes());
}

/// Appends `msg` as a length-prefixed header frame. Its payload, if any, is
/// written by the caller right after (so that it can come from anywhere
/// without being copied here).
pub fn encode_header(msg: &Message, out: &mut BytesMut) {
    put_header(msg, out);
}

/// Appends a whole frame: header and payload.
///
/// # Panics
/// In debug builds, when `payload` is not as long as the header declares.
pub fn encode_frame(msg: &Message, payload: &[u8], out: &mut BytesMut) {
    debug_assert_eq!(msg.payload_len(), payload.len() as u64, "payload length must match its header");
    encode_header(msg, out);
    out.extend_from_slice(payload);
}

/// Payloads up to this size are copied off a read buffer, not split off it:
/// the largest a daemon sends inline on a control stream (64 KiB); larger
/// ones come on a stream of their own, read into a buffer of their size.
pub const COPIED_PAYLOAD_MAX: usize = 64 << 10;

/// Takes `len` bytes off the front of `buf` as a payload. A payload split
/// off shares the buffer's allocation, and a stream's buffer, grown and
/// reserved across a burst of frames, stayed behind after it: 10-18 read
/// buffers of 32 KiB were still live in a scheduler 15 s after a load, over
/// 12 peers' control streams (`MEMORY_HEAPTRACK=after cargo bench --bench
/// memory`); copied off, none were. So a payload that fits inline is
/// copied (a few microseconds for 64 KiB); a larger one, alone in a buffer
/// reserved for it, is split off.
pub fn take_payload(buf: &mut BytesMut, len: usize) -> Bytes {
    if len > COPIED_PAYLOAD_MAX {
        return buf.split_to(len).freeze();
    }
    let payload = Bytes::copy_from_slice(&buf[..len]);
    buf.advance(len);
    payload
}

/// The incremental decoder behind [`FrameDecoder`] and the local protocol's.
#[derive(Debug)]
pub(crate) struct Decoder<H> {
    limits: Limits,
    /// Most bytes reserved ahead of a payload that is still arriving.
    reserve_ahead: usize,
    /// A header whose payload has not fully arrived yet.
    pending: Option<(H, usize)>,
}

impl<H: Header> Decoder<H> {
    pub(crate) fn new(limits: Limits, reserve_ahead: usize) -> Self {
        Decoder { limits, reserve_ahead, pending: None }
    }

    pub(crate) fn limits(&self) -> Limits {
        self.limits
    }

    pub(crate) fn is_mid_frame(&self) -> bool {
        self.pending.is_some()
    }

    pub(crate) fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<(H, Bytes)>, DecodeError> {
        if self.pending.is_none() {
            let Some(message) = self.decode_header(buf)? else {
                return Ok(None);
            };
            // decode_header checked the length against the limit, which fits usize.
            let len = usize::try_from(message.payload_len()).unwrap_or(usize::MAX);
            self.pending = Some((message, len));
        }
        let len = match &self.pending {
            Some((_, len)) => *len,
            None => return Ok(None),
        };
        if buf.len() < len {
            buf.reserve((len - buf.len()).min(self.reserve_ahead));
            return Ok(None);
        }
        Ok(self.pending.take().map(|(message, len)| (message, take_payload(buf, len))))
    }

    pub(crate) fn decode_header(&mut self, buf: &mut BytesMut) -> Result<Option<H>, DecodeError> {
        if buf.len() < LEN_PREFIX {
            return Ok(None);
        }
        let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if len > self.limits.max_header {
            return Err(DecodeError::FrameTooLarge { len: u64::from(len), max: u64::from(self.limits.max_header) });
        }
        let len = len as usize;
        if buf.len() < LEN_PREFIX + len {
            buf.reserve(LEN_PREFIX + len - buf.len());
            return Ok(None);
        }
        let message: H = codec::decode_value(&buf[LEN_PREFIX..LEN_PREFIX + len], H::WHAT)?;
        let payload = message.payload_len();
        if payload > self.limits.max_payload {
            return Err(DecodeError::PayloadTooLarge { len: payload, max: self.limits.max_payload });
        }
        buf.advance(LEN_PREFIX + len);
        Ok(Some(message))
    }
}

/// Incremental decoder for one stream.
#[derive(Debug)]
pub struct FrameDecoder(Decoder<Message>);

impl FrameDecoder {
    /// A decoder with these limits.
    pub fn new(limits: Limits) -> Self {
        // A payload's whole length at once: one allocation, not one per
        // doubling (the limit bounds it).
        FrameDecoder(Decoder::new(limits, usize::MAX))
    }

    /// The limits this decoder enforces.
    pub fn limits(&self) -> Limits {
        self.0.limits()
    }

    /// Whether [`FrameDecoder::decode`] has taken a header whose payload has
    /// not all arrived: a stream that ends now ends mid-frame.
    pub fn is_mid_frame(&self) -> bool {
        self.0.is_mid_frame()
    }

    /// Takes the next whole frame (header and payload) off the front of `buf`.
    ///
    /// # Errors
    /// Any [`DecodeError`]: the stream is unusable after one.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, DecodeError> {
        Ok(self.0.decode(buf)?.map(|(message, payload)| Frame { message, payload }))
    }

    /// Takes the next header frame off the front of `buf`, leaving its payload
    /// (if any) for the caller to read: `message.payload_len()` bytes.
    ///
    /// # Errors
    /// Any [`DecodeError`]: the stream is unusable after one.
    pub fn decode_header(&mut self, buf: &mut BytesMut) -> Result<Option<Message>, DecodeError> {
        self.0.decode_header(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::*;
    use crate::toolchain::ToolchainKey;

    fn task(id: u64, payload: &[u8]) -> Message {
        Message::Task(TaskHeader {
            task_id: id,
            toolchain: ToolchainKey(42),
            cache_key: Some(CacheKey([9; 32])),
            spec: codec::encode_spec(&TaskSpec {
                args: vec!["-O2".into(), "-g".into()],
                input_path: "src/a.c".into(),
                cwd: None,
                env: vec![],
                inputs: None,
            }),
            payload: PayloadInfo {
                len: payload.len() as u64,
                raw_len: payload.len() as u64,
                compression: Compression::None,
            },
            inputs: false,
            origin: None,
            resumed: false,
        })
    }

    #[test]
    fn frames_decode_byte_by_byte() {
        let mut wire = BytesMut::new();
        encode_frame(&task(1, b"hello"), b"hello", &mut wire);
        encode_frame(&Message::Cancel(Cancel { task_id: 1 }), b"", &mut wire);
        encode_frame(&task(2, b""), b"", &mut wire);
        let mut dec = FrameDecoder::new(Limits::DEFAULT);
        let mut buf = BytesMut::new();
        let mut out = vec![];
        for b in wire.iter() {
            buf.put_u8(*b);
            while let Some(f) = dec.decode(&mut buf).unwrap() {
                out.push(f);
            }
        }
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].message, task(1, b"hello"));
        assert_eq!(&out[0].payload[..], b"hello");
        assert_eq!(out[1].message, Message::Cancel(Cancel { task_id: 1 }));
        assert!(out[2].payload.is_empty());
        assert!(buf.is_empty());
    }

    #[test]
    fn an_oversized_length_is_refused_before_the_body_arrives() {
        let mut buf = BytesMut::new();
        buf.put_u32_le(Limits::DEFAULT.max_header + 1);
        let err = FrameDecoder::new(Limits::DEFAULT).decode(&mut buf).unwrap_err();
        assert_eq!(err, DecodeError::FrameTooLarge { len: u64::from(Limits::DEFAULT.max_header) + 1, max: 1 << 20 });
        assert_eq!(err.to_string(), "frame of 1048577 bytes exceeds limit 1048576");
    }

    #[test]
    fn an_oversized_payload_is_refused_at_its_header() {
        let limits = Limits { max_header: 1024, max_payload: 4 };
        let mut buf = BytesMut::new();
        encode_header(&task(1, b"12345"), &mut buf);
        let err = FrameDecoder::new(limits).decode(&mut buf).unwrap_err();
        assert_eq!(err, DecodeError::PayloadTooLarge { len: 5, max: 4 });
    }

    #[test]
    fn garbage_is_malformed() {
        let mut buf = BytesMut::new();
        buf.put_u32_le(3);
        buf.put_slice(&[0xff, 0xff, 0xff]);
        assert!(matches!(FrameDecoder::new(Limits::DEFAULT).decode(&mut buf), Err(DecodeError::Malformed { .. })));
    }

    #[test]
    fn header_only_leaves_the_payload() {
        let mut buf = BytesMut::new();
        encode_frame(&task(7, b"xyz"), b"xyz", &mut buf);
        let msg = FrameDecoder::new(Limits::DEFAULT).decode_header(&mut buf).unwrap().unwrap();
        assert_eq!(msg.payload_len(), 3);
        assert_eq!(&buf[..], b"xyz");
    }

    #[test]
    fn a_payload_kept_does_not_pin_the_read_buffer_unless_it_fills_it() {
        let small = vec![7u8; 1000];
        let large = vec![8u8; COPIED_PAYLOAD_MAX + 1];
        let mut wire = BytesMut::new();
        encode_frame(&task(1, &small), &small, &mut wire);
        encode_frame(&Message::Cancel(Cancel { task_id: 1 }), b"", &mut wire);
        let mut dec = FrameDecoder::new(Limits::DEFAULT);
        let mut buf = BytesMut::with_capacity(wire.len());
        buf.extend_from_slice(&wire);
        let kept: Vec<Frame> = std::iter::from_fn(|| dec.decode(&mut buf).unwrap()).collect();
        assert_eq!((kept.len(), &kept[0].payload[..]), (2, &small[..]));
        // Nothing else holds the buffer's allocation: the reader may keep
        // or reuse it while the frames live on.
        assert!(buf.is_empty() && buf.try_reclaim(wire.len()), "a small payload shares the read buffer");

        let mut buf = BytesMut::new();
        encode_frame(&task(2, &large), &large, &mut buf);
        let frame = dec.decode(&mut buf).unwrap().unwrap();
        assert_eq!(frame.payload.len(), large.len());
        assert!(!buf.try_reclaim(64), "a payload past the copy limit is split off, not copied");
    }
}
