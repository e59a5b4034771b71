//! Arbitrary bytes as either direction of the local protocol (wrapper ↔
//! consumerd), fed to the decoder in two pieces split where the input says,
//! as a socket would hand them over: never a panic; whatever decodes
//! re-encodes to bytes that decode to the same frame; a stream split
//! anywhere decodes to what it decodes to whole.
#![no_main]

use bytes::BytesMut;
use ccroute_wire::local::{
    encode_local, ConsumerdMsg, LocalDecoder, LocalFrame, LocalMessage, WrapperMsg, CONSUMERD_LIMITS, WRAPPER_LIMITS,
};
use ccroute_wire::Limits;
use libfuzzer_sys::fuzz_target;

/// Every frame of `data`, fed to one decoder in two pieces split at `cut`;
/// decoding stops at the first error.
fn frames<M: LocalMessage>(limits: Limits, data: &[u8], cut: usize) -> (Vec<LocalFrame<M>>, bool) {
    let mut dec = LocalDecoder::<M>::new(limits);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in [&data[..cut], &data[cut..]] {
        buf.extend_from_slice(piece);
        loop {
            match dec.decode(&mut buf) {
                Ok(Some(frame)) => out.push(frame),
                Ok(None) => break,
                Err(_) => return (out, true),
            }
        }
    }
    (out, false)
}

/// Each side decodes what the other sends with the limits it enforces.
fn check<M: LocalMessage + Clone + PartialEq + std::fmt::Debug>(limits: Limits, data: &[u8], cut: usize) {
    let (split, split_failed) = frames::<M>(limits, data, cut);
    let (whole, whole_failed) = frames::<M>(limits, data, data.len());
    assert_eq!(split, whole, "where the bytes were split changed what decoded");
    assert_eq!(split_failed, whole_failed);
    for frame in whole {
        let mut again = BytesMut::new();
        encode_local(&frame.message, &frame.payload, &mut again);
        let back = LocalDecoder::<M>::new(limits)
            .decode(&mut again)
            .expect("a re-encoded frame decodes")
            .expect("a re-encoded frame is whole");
        assert_eq!(back, frame);
        assert!(again.is_empty());
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let cut = if rest.is_empty() { 0 } else { usize::from(mode >> 1) * rest.len() / 127 };
    let cut = cut.min(rest.len());
    if mode & 1 == 0 {
        check::<WrapperMsg>(WRAPPER_LIMITS, rest, cut);
    } else {
        check::<ConsumerdMsg>(CONSUMERD_LIMITS, rest, cut);
    }
});
