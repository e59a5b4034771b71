//! Typed errors of the wire layer.
//!
//! "Need more bytes" is not an error: decoders return `Ok(None)` for it. Every
//! variant here means the peer sent something it must not, and the stream
//! carrying it should be closed with the error's message.

use thiserror::Error;

/// Why bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// A header frame's length prefix exceeds the limit (checked before any allocation).
    #[error("frame of {len} bytes exceeds limit {max}")]
    FrameTooLarge {
        /// Declared length.
        len: u64,
        /// Configured limit.
        max: u64,
    },
    /// A payload's declared length exceeds the limit.
    #[error("payload of {len} bytes exceeds limit {max}")]
    PayloadTooLarge {
        /// Declared length.
        len: u64,
        /// Configured limit.
        max: u64,
    },
    /// The bytes are not a valid encoding of what was expected.
    #[error("malformed {what}: {detail}")]
    Malformed {
        /// What was being decoded.
        what: &'static str,
        /// The decoder's description.
        detail: String,
    },
    /// A valid value was followed by bytes that belong to nothing.
    #[error("{extra} trailing bytes after {what}")]
    TrailingBytes {
        /// What was decoded.
        what: &'static str,
        /// How many bytes were left.
        extra: usize,
    },
    /// A handshake frame did not start with the expected magic.
    #[error("not a ccroute {expected} (bad magic)")]
    BadMagic {
        /// Which handshake frame was expected.
        expected: &'static str,
    },
    /// A payload did not decompress to its declared size.
    #[error("payload does not decompress to its declared {raw_len} bytes: {detail}")]
    BadPayload {
        /// The declared uncompressed size.
        raw_len: u64,
        /// What went wrong.
        detail: String,
    },
}
