//! Arbitrary bytes as a hello and as a reply: a typed error or a value,
//! never a panic; a decoded hello re-encodes to the same hello.
#![no_main]

use bytes::BytesMut;
use ccroute_wire::handshake::{decode_hello, decode_reply, encode_hello, HelloOutcome};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    if let Ok(Some(HelloOutcome::Hello(h))) = decode_hello(&mut buf) {
        let mut again = BytesMut::new();
        encode_hello(&h, &mut again);
        assert_eq!(decode_hello(&mut again), Ok(Some(HelloOutcome::Hello(h))));
    }
    let mut buf = BytesMut::from(data);
    let _ = decode_reply(&mut buf);
});
