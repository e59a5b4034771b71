//! What a cache hit returns, and how it is stored on disk and in Redis.
//!
//! [`CachedResult`] is a successful compile: exit status, stdout, stderr, CPU
//! time and the object exactly as it travels on the wire (compressed bytes and
//! their [`PayloadInfo`]), so a hit is answered without recompressing. Every
//! field is [`Bytes`] or plain data, so clones are cheap.
//!
//! The stored form, the same in every tier that holds bytes:
//!
//! ```text
//! entry = magic "ccrc" ‖ version:u32 LE ‖ checksum[32] ‖ key[32] ‖ frame
//! frame = a framed Message::TaskResult (task_id 0), followed by its payload
//! checksum = blake3(key ‖ frame)
//! ```
//!
//! The key inside the entry makes an entry filed under the wrong key (a
//! renamed file, a Redis value copied by hand) corrupt rather than a wrong
//! answer. Decoding checks magic, version, checksum, key, the frame, the
//! outcome and the payload length; anything off is [`EntryError::Corrupt`].
//!
//! Left out: expiry (the disk tier evicts by size, Redis by its own TTL) and
//! any check that the object decompresses (the checksum already covers what
//! was written, and the consumerd decompresses with its own bounds).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use ccroute_wire::codec::HARD_MAX_HEADER;
use ccroute_wire::{encode_header, CacheKey, FrameDecoder, Limits, Message, Outcome, PayloadInfo, ResultHeader};
use thiserror::Error;

/// First bytes of every entry.
pub const MAGIC: [u8; 4] = *b"ccrc";
/// The format this module writes and reads.
pub const FORMAT_VERSION: u32 = 3;

const CHECKSUM_AT: usize = MAGIC.len() + 4;
const KEY_AT: usize = CHECKSUM_AT + 32;
/// Bytes before the frame: magic, version, checksum, key.
pub const PREFIX_LEN: usize = KEY_AT + 32;

/// Why stored bytes could not be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EntryError {
    /// The bytes are not a valid entry for the key asked for.
    #[error("corrupt cache entry: {0}")]
    Corrupt(String),
}

/// Why a result cannot be cached.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UncacheableError {
    /// Only successful compiles are cached.
    #[error("outcome {0} is not cacheable")]
    Outcome(String),
    /// The object bytes do not match the header's payload description.
    #[error("object of {actual} bytes, header declares {declared}")]
    PayloadLength {
        /// `payload.len` of the header.
        declared: u64,
        /// Bytes handed in.
        actual: u64,
    },
}

/// A successful compile, as the cache stores and returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedResult {
    /// The compiler's exit status.
    pub exit_status: i32,
    /// The compiler's standard output, unchanged.
    pub stdout: Bytes,
    /// The compiler's standard error, unchanged (warnings included).
    pub stderr: Bytes,
    /// CPU time of the compile that produced it, in microseconds.
    pub cpu_time_us: u64,
    /// How `object` is compressed and how long it is once decompressed.
    pub payload: PayloadInfo,
    /// The object's bytes as they travel on the wire.
    pub object: Bytes,
}

impl CachedResult {
    /// Takes a task's result and its object payload, if it may be cached.
    ///
    /// # Errors
    /// [`UncacheableError`] for any outcome but `Success`, or an object whose
    /// length is not the header's `payload.len`.
    pub fn from_result(header: &ResultHeader, object: Bytes) -> Result<Self, UncacheableError> {
        if header.outcome != Outcome::Success {
            return Err(UncacheableError::Outcome(format!("{:?}", header.outcome)));
        }
        if header.payload.len != object.len() as u64 {
            return Err(UncacheableError::PayloadLength { declared: header.payload.len, actual: object.len() as u64 });
        }
        Ok(CachedResult {
            exit_status: header.exit_status,
            stdout: header.stdout.clone(),
            stderr: header.stderr.clone(),
            cpu_time_us: header.cpu_time_us,
            payload: header.payload,
            object,
        })
    }

    /// The result header that answers task `task_id` with this result; the
    /// object ([`CachedResult::object`]) follows it as its payload.
    pub fn to_header(&self, task_id: u64) -> ResultHeader {
        ResultHeader {
            task_id,
            outcome: Outcome::Success,
            exit_status: self.exit_status,
            stdout: self.stdout.clone(),
            stderr: self.stderr.clone(),
            cpu_time_us: self.cpu_time_us,
            wall_us: 0,
            payload: self.payload,
            cached: true,
        }
    }

    /// Bytes this result holds (object, stdout, stderr), for size accounting.
    pub fn held_bytes(&self) -> u64 {
        (self.object.len() + self.stdout.len() + self.stderr.len()) as u64
    }

    /// Everything of the stored form but the object: prefix and header frame.
    /// The object follows it; together they are [`CachedResult::encode`].
    pub fn encode_head(&self, key: &CacheKey) -> BytesMut {
        let mut out = BytesMut::with_capacity(PREFIX_LEN + 128 + self.stdout.len() + self.stderr.len());
        out.put_slice(&MAGIC);
        out.put_u32_le(FORMAT_VERSION);
        out.put_bytes(0, 32);
        out.put_slice(&key.0);
        encode_header(&Message::TaskResult(self.to_header(0)), &mut out);
        let mut hasher = blake3::Hasher::new();
        hasher.update(&out[KEY_AT..]);
        hasher.update(&self.object);
        out[CHECKSUM_AT..KEY_AT].copy_from_slice(hasher.finalize().as_bytes());
        out
    }

    /// The whole stored form.
    pub fn encode(&self, key: &CacheKey) -> Bytes {
        let mut out = self.encode_head(key);
        out.extend_from_slice(&self.object);
        out.freeze()
    }

    /// Reads a stored entry, expecting it to be filed under `key`. The object
    /// and outputs of the result share `bytes`' buffer; nothing is copied when
    /// `bytes` is its buffer's only owner.
    ///
    /// # Errors
    /// [`EntryError::Corrupt`] naming the first thing found wrong.
    pub fn decode(key: &CacheKey, bytes: Bytes) -> Result<Self, EntryError> {
        let corrupt = |why: String| Err(EntryError::Corrupt(why));
        if bytes.len() < PREFIX_LEN {
            return corrupt(format!("{} bytes is shorter than the {PREFIX_LEN}-byte prefix", bytes.len()));
        }
        if bytes[..MAGIC.len()] != MAGIC {
            return corrupt("bad magic".into());
        }
        let version = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        if version != FORMAT_VERSION {
            return corrupt(format!("format version {version}, expected {FORMAT_VERSION}"));
        }
        if blake3::hash(&bytes[KEY_AT..]).as_bytes()[..] != bytes[CHECKSUM_AT..KEY_AT] {
            return corrupt(format!("checksum mismatch over {} bytes", bytes.len() - KEY_AT));
        }
        if bytes[KEY_AT..PREFIX_LEN] != key.0 {
            return corrupt(format!("entry is for key {:?}, not {key:?}", stored_key(&bytes)));
        }
        let rest = bytes.len() - PREFIX_LEN;
        let mut buf = BytesMut::from(bytes);
        buf.advance(PREFIX_LEN);
        // The whole entry is in hand: a frame that claims more than what is
        // left is truncated, and nothing here allocates past the entry's size.
        let limits = Limits {
            max_header: u32::try_from(rest.min(HARD_MAX_HEADER)).unwrap_or(u32::MAX),
            max_payload: rest as u64,
        };
        let frame = match FrameDecoder::new(limits).decode(&mut buf) {
            Ok(Some(frame)) => frame,
            Ok(None) => return corrupt(format!("frame truncated at {rest} bytes")),
            Err(e) => return corrupt(format!("bad frame: {e}")),
        };
        if !buf.is_empty() {
            return corrupt(format!("{} trailing bytes after the frame", buf.len()));
        }
        let Message::TaskResult(header) = frame.message else {
            return corrupt(format!("frame holds a {}, not a task result", frame.message.name()));
        };
        let result = Self::from_result(&header, frame.payload).or_else(|e| corrupt(e.to_string()))?;
        // Only the form `encode` writes: a header with other values in the
        // fields a stored result does not keep (task id, flags, timings) is
        // not one this cache wrote.
        if result.to_header(0) != header {
            return corrupt("the stored header is not in the form this cache writes".into());
        }
        Ok(result)
    }
}

fn stored_key(bytes: &[u8]) -> CacheKey {
    let mut key = [0; 32];
    key.copy_from_slice(&bytes[KEY_AT..PREFIX_LEN]);
    CacheKey(key)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
pub(crate) mod tests {
    use super::*;
    use ccroute_wire::payload::compress;
    use ccroute_wire::Compression;

    /// A result whose object is `object_len` bytes of `seed`-dependent text.
    pub(crate) fn sample(seed: u8, object_len: usize) -> CachedResult {
        let raw: Vec<u8> = (0..object_len).map(|i| seed.wrapping_add((i % 251) as u8)).collect();
        CachedResult {
            exit_status: 0,
            stdout: Bytes::new(),
            stderr: Bytes::from(format!("a.c:1:1: warning: seed {seed}\n")),
            cpu_time_us: 1000 + u64::from(seed),
            payload: PayloadInfo { len: raw.len() as u64, raw_len: raw.len() as u64, compression: Compression::None },
            object: Bytes::from(raw),
        }
    }

    pub(crate) fn key(n: u32) -> CacheKey {
        CacheKey(*blake3::hash(&n.to_le_bytes()).as_bytes())
    }

    #[test]
    fn round_trips_a_compressed_object() {
        let raw = b"\x7fELF object bytes ".repeat(200);
        let (wire, payload) = compress(&raw);
        assert_eq!(payload.compression, Compression::Zstd);
        let r = CachedResult { payload, object: Bytes::from(wire), ..sample(1, 0) };
        let bytes = r.encode(&key(1));
        assert_eq!(bytes.len(), r.encode_head(&key(1)).len() + r.object.len());
        let back = CachedResult::decode(&key(1), bytes).unwrap();
        assert_eq!(back, r);
        assert_eq!(ccroute_wire::payload::decompress(&back.payload, &back.object, 1 << 20).unwrap(), raw);
    }

    #[test]
    fn to_header_answers_the_task_asked() {
        let r = sample(3, 10);
        let h = r.to_header(77);
        assert_eq!((h.task_id, h.outcome.clone(), h.cpu_time_us), (77, Outcome::Success, 1003));
        assert_eq!(CachedResult::from_result(&h, r.object.clone()).unwrap(), r);
    }

    #[test]
    fn only_successes_with_matching_payloads_are_cacheable() {
        let r = sample(1, 10);
        let mut h = r.to_header(1);
        h.outcome = Outcome::CompileFailed;
        assert!(matches!(CachedResult::from_result(&h, r.object.clone()), Err(UncacheableError::Outcome(_))));
        let h = r.to_header(1);
        assert_eq!(
            CachedResult::from_result(&h, Bytes::from_static(b"short")),
            Err(UncacheableError::PayloadLength { declared: 10, actual: 5 })
        );
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let good = sample(2, 40).encode(&key(2));
        for i in 0..good.len() {
            let mut bad = good.to_vec();
            bad[i] ^= 0x01;
            assert!(CachedResult::decode(&key(2), Bytes::from(bad)).is_err(), "flip at byte {i} went unnoticed");
        }
    }

    #[test]
    fn every_truncation_is_detected() {
        let good = sample(2, 40).encode(&key(2));
        for len in 0..good.len() {
            assert!(CachedResult::decode(&key(2), good.slice(..len)).is_err(), "truncation to {len} went unnoticed");
        }
    }

    #[test]
    fn an_entry_under_the_wrong_key_is_corrupt() {
        let err = CachedResult::decode(&key(2), sample(1, 8).encode(&key(1))).unwrap_err();
        assert!(err.to_string().contains("entry is for key"), "{err}");
    }

    #[test]
    fn a_consistent_entry_that_is_not_a_success_is_corrupt() {
        // Rebuild a well-checksummed entry around a failed compile.
        let mut h = sample(1, 0).to_header(0);
        h.outcome = Outcome::InternalError("boom".into());
        let mut out = BytesMut::new();
        out.put_slice(&MAGIC);
        out.put_u32_le(FORMAT_VERSION);
        out.put_bytes(0, 32);
        out.put_slice(&key(1).0);
        encode_header(&Message::TaskResult(h), &mut out);
        let sum = blake3::hash(&out[KEY_AT..]);
        out[CHECKSUM_AT..KEY_AT].copy_from_slice(sum.as_bytes());
        let err = CachedResult::decode(&key(1), out.freeze()).unwrap_err();
        assert!(err.to_string().contains("not cacheable"), "{err}");
    }

    #[test]
    fn another_version_is_refused_by_name() {
        let mut bytes = sample(1, 8).encode(&key(1)).to_vec();
        bytes[4] = 9;
        let err = CachedResult::decode(&key(1), Bytes::from(bytes)).unwrap_err();
        assert_eq!(err, EntryError::Corrupt(format!("format version 9, expected {FORMAT_VERSION}")));
    }
}
