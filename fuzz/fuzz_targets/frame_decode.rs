//! Arbitrary bytes through the frame decoder, fed in arbitrary chunks: never
//! a panic, never an allocation past the limits, and "need more bytes" is
//! never confused with an error.
#![no_main]

use bytes::BytesMut;
use ccroute_wire::{FrameDecoder, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else { return };
    let limits = Limits { max_header: 1 << 16, max_payload: 1 << 20 };
    let mut dec = FrameDecoder::new(limits);
    let mut buf = BytesMut::new();
    let step = usize::from(split).max(1);
    for chunk in rest.chunks(step) {
        buf.extend_from_slice(chunk);
        loop {
            match dec.decode(&mut buf) {
                Ok(Some(frame)) => assert_eq!(frame.payload.len() as u64, frame.message.payload_len()),
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
