//! Payload compression.
//!
//! Preprocessed sources and objects travel LZ4-compressed (block format, the
//! uncompressed size in [`PayloadInfo::raw_len`]). LZ4 was chosen over zstd by
//! measurement (see `benches/payload.rs`): on preprocessed C/C++ it compresses
//! several times faster and decompresses about ten times faster than zstd's
//! fastest level, and on a build farm the CPU of the two cores beside the
//! compiler is scarcer than bandwidth. Inputs that do not shrink are sent raw.

use crate::error::DecodeError;
use crate::message::{Compression, PayloadInfo};

/// Below this size compression is not worth a call.
pub const MIN_COMPRESS: usize = 512;

/// Compresses `raw` for the wire, returning the bytes to send and their description.
pub fn compress(raw: &[u8]) -> (Vec<u8>, PayloadInfo) {
    let raw_len = raw.len() as u64;
    if raw.len() >= MIN_COMPRESS {
        let packed = lz4_flex::block::compress(raw);
        if packed.len() < raw.len() {
            let info = PayloadInfo { len: packed.len() as u64, raw_len, compression: Compression::Lz4 };
            return (packed, info);
        }
    }
    (raw.to_vec(), PayloadInfo { len: raw_len, raw_len, compression: Compression::None })
}

/// Restores the raw bytes of a payload, refusing one that claims more than
/// `max_raw` bytes before allocating anything.
///
/// # Errors
/// [`DecodeError::PayloadTooLarge`] past `max_raw`; [`DecodeError::BadPayload`]
/// when the bytes do not match their description.
pub fn decompress(info: &PayloadInfo, wire: &[u8], max_raw: u64) -> Result<Vec<u8>, DecodeError> {
    if info.raw_len > max_raw {
        return Err(DecodeError::PayloadTooLarge { len: info.raw_len, max: max_raw });
    }
    if wire.len() as u64 != info.len {
        return Err(DecodeError::BadPayload {
            raw_len: info.raw_len,
            detail: format!("{} bytes on the wire, {} declared", wire.len(), info.len),
        });
    }
    match info.compression {
        Compression::None if info.raw_len == info.len => Ok(wire.to_vec()),
        Compression::None => Err(DecodeError::BadPayload {
            raw_len: info.raw_len,
            detail: format!("uncompressed payload of {} bytes", info.len),
        }),
        Compression::Lz4 => {
            // raw_len <= max_raw was checked above, so this cast cannot truncate
            // on any platform whose address space holds max_raw bytes.
            let raw_len = usize::try_from(info.raw_len)
                .map_err(|_| DecodeError::PayloadTooLarge { len: info.raw_len, max: max_raw })?;
            lz4_flex::block::decompress(wire, raw_len)
                .map_err(|e| DecodeError::BadPayload { raw_len: info.raw_len, detail: e.to_string() })
                .and_then(|out| {
                    if out.len() == raw_len {
                        Ok(out)
                    } else {
                        Err(DecodeError::BadPayload {
                            raw_len: info.raw_len,
                            detail: format!("got {} bytes", out.len()),
                        })
                    }
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_compressible_and_incompressible() {
        let text = b"int main(void) { return 0; }\n".repeat(100);
        let (wire, info) = compress(&text);
        assert_eq!(info.compression, Compression::Lz4);
        assert!(wire.len() < text.len());
        assert_eq!(decompress(&info, &wire, 1 << 20).unwrap(), text);

        let noise: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        let (wire, info) = compress(&noise);
        assert_eq!(decompress(&info, &wire, 1 << 20).unwrap(), noise);
    }

    #[test]
    fn a_bomb_is_refused_before_allocation() {
        let info = PayloadInfo { len: 4, raw_len: u64::MAX, compression: Compression::Lz4 };
        assert!(matches!(decompress(&info, &[0; 4], 1 << 30), Err(DecodeError::PayloadTooLarge { .. })));
    }

    #[test]
    fn lies_about_sizes_are_errors() {
        let text = b"abcdefgh".repeat(200);
        let (wire, mut info) = compress(&text);
        info.raw_len += 1;
        assert!(matches!(decompress(&info, &wire, 1 << 20), Err(DecodeError::BadPayload { .. })));
        let info = PayloadInfo { len: 3, raw_len: 3, compression: Compression::None };
        assert!(decompress(&info, b"ab", 10).is_err());
    }
}
