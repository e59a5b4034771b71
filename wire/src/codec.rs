//! The one place that knows headers are bincode.
//!
//! bincode is pinned at `=2.0.1` (3.0.0 on the registry is a `compile_error!`
//! tombstone, and 2.x is frozen). Every other module works with the types in
//! [`crate::message`] and [`crate::handshake`] and calls the functions here,
//! so swapping the encoding touches this file alone.
//!
//! Decoding is bounded: the caller hands in one frame whose length was already
//! checked against its limit, and bincode is told that limit too, so a length
//! prefix inside the frame can never claim more memory than the frame holds.
//! Trailing bytes after a message are an error, not ignored.

use bincode::config::{Configuration, Fixint, Limit, LittleEndian};
use bincode::error::{DecodeError as BinDecodeError, EncodeError};
use bytes::{BufMut, Bytes, BytesMut};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::DecodeError;
use crate::handshake::HelloBody;
use crate::message::{Message, Package, TaskSpec};

/// The largest header any message may have, whatever the configured limit:
/// bincode's own allocation bound.
pub const HARD_MAX_HEADER: usize = 16 << 20;

/// Fixed-width integers: a header's size does not depend on its values, and
/// encoding is a straight copy.
type Config = Configuration<LittleEndian, Fixint, Limit<HARD_MAX_HEADER>>;

const CONFIG: Config = bincode::config::standard().with_fixed_int_encoding().with_limit::<HARD_MAX_HEADER>();

fn encode_into<T: Serialize>(value: &T, out: &mut BytesMut) {
    // Writing into a growable buffer only fails if a value refuses to
    // serialize, which none of our types does; a failure here is a bug in this
    // crate, reported loudly in debug builds and as an empty body otherwise.
    let mut writer = out.writer();
    let r: Result<usize, EncodeError> = bincode::serde::encode_into_std_write(value, &mut writer, CONFIG);
    debug_assert!(r.is_ok(), "encoding a wire type failed: {r:?}");
}

fn decode_exact<T: DeserializeOwned>(bytes: &[u8], what: &'static str) -> Result<T, DecodeError> {
    let (value, used) = bincode::serde::decode_from_slice::<T, _>(bytes, CONFIG).map_err(|e| malformed(what, &e))?;
    if used != bytes.len() {
        return Err(DecodeError::TrailingBytes { what, extra: bytes.len() - used });
    }
    Ok(value)
}

fn malformed(what: &'static str, e: &BinDecodeError) -> DecodeError {
    DecodeError::Malformed { what, detail: e.to_string() }
}

/// Appends the encoded body of `msg` to `out` (no length prefix).
pub fn encode_message(msg: &Message, out: &mut BytesMut) {
    encode_into(msg, out);
}

/// Decodes one message body (no length prefix).
///
/// # Errors
/// [`DecodeError::Malformed`] when the bytes are not a message, and
/// [`DecodeError::TrailingBytes`] when bytes are left over after one.
pub fn decode_message(body: &[u8]) -> Result<Message, DecodeError> {
    decode_exact(body, "message")
}

/// Encodes a [`TaskSpec`] into the opaque bytes a [`crate::TaskHeader`] carries.
pub fn encode_spec(spec: &TaskSpec) -> Bytes {
    let mut out = BytesMut::with_capacity(256);
    encode_into(spec, &mut out);
    out.freeze()
}

/// Decodes the opaque spec bytes of a [`crate::TaskHeader`].
///
/// # Errors
/// [`DecodeError::Malformed`] or [`DecodeError::TrailingBytes`].
pub fn decode_spec(bytes: &[u8]) -> Result<TaskSpec, DecodeError> {
    decode_exact(bytes, "task spec")
}

/// Encodes a [`Package`] for an agent's store (the same encoding as on the wire).
pub fn encode_package(package: &Package) -> Bytes {
    let mut out = BytesMut::with_capacity(4096);
    encode_into(package, &mut out);
    out.freeze()
}

/// Decodes what [`encode_package`] wrote.
///
/// # Errors
/// [`DecodeError::Malformed`] or [`DecodeError::TrailingBytes`].
pub fn decode_package(bytes: &[u8]) -> Result<Package, DecodeError> {
    decode_exact(bytes, "package")
}

pub(crate) fn encode_hello_body(hello: &HelloBody, out: &mut BytesMut) {
    encode_into(hello, out);
}

pub(crate) fn decode_hello_body(bytes: &[u8]) -> Result<HelloBody, DecodeError> {
    decode_exact(bytes, "hello")
}

pub(crate) fn encode_value<T: Serialize>(value: &T, out: &mut BytesMut) {
    encode_into(value, out);
}

pub(crate) fn decode_value<T: DeserializeOwned>(bytes: &[u8], what: &'static str) -> Result<T, DecodeError> {
    decode_exact(bytes, what)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Cancel, Message};

    #[test]
    fn a_vector_length_beyond_the_frame_is_malformed_not_an_allocation() {
        // A ToolchainUpdate whose vector claims u64::MAX elements.
        let mut body = BytesMut::new();
        encode_message(&Message::ToolchainUpdate(crate::ToolchainUpdate { toolchains: vec![] }), &mut body);
        let n = body.len();
        body[n - 8..].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(decode_message(&body), Err(DecodeError::Malformed { .. })));
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut body = BytesMut::new();
        encode_message(&Message::Cancel(Cancel { task_id: 3 }), &mut body);
        body.put_u8(0);
        assert_eq!(decode_message(&body), Err(DecodeError::TrailingBytes { what: "message", extra: 1 }));
    }

    #[test]
    fn spec_round_trips() {
        let spec = TaskSpec {
            args: vec!["-O2".into()],
            input_path: "src/x.c".into(),
            cwd: Some("/home/u/p".into()),
            env: vec![("LANG".into(), "C.UTF-8".into())],
            inputs: None,
        };
        assert_eq!(decode_spec(&encode_spec(&spec)), Ok(spec));
    }
}
