//! Whatever decodes re-encodes to bytes that decode to the same message and
//! payload.
#![no_main]

use bytes::BytesMut;
use ccroute_wire::{encode_frame, FrameDecoder, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut dec = FrameDecoder::new(Limits::DEFAULT);
    let mut buf = BytesMut::from(data);
    while let Ok(Some(frame)) = dec.decode(&mut buf) {
        let mut again = BytesMut::new();
        encode_frame(&frame.message, &frame.payload, &mut again);
        let back = FrameDecoder::new(Limits::DEFAULT)
            .decode(&mut again)
            .expect("re-encoded frame decodes")
            .expect("re-encoded frame is whole");
        assert_eq!(back, frame);
        assert!(again.is_empty());
        if let ccroute_wire::Message::Task(t) = &frame.message {
            if let Ok(spec) = ccroute_wire::codec::decode_spec(&t.spec) {
                assert_eq!(ccroute_wire::codec::decode_spec(&ccroute_wire::codec::encode_spec(&spec)), Ok(spec));
            }
        }
    }
});
