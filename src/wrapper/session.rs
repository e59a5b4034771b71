//! The wrapper's end of one consumerd connection: blocking, framed, bounded.
//!
//! Main items: [`Session`], [`SessionError`]. Left out: what the messages
//! mean (the wrapper's flow in `super`).

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;

use bytes::BytesMut;
use ccroute_wire::local::{encode_local_header, ConsumerdMsg, LocalDecoder, LocalFrame, WrapperMsg, CONSUMERD_LIMITS};
use ccroute_wire::DecodeError;

/// Bytes asked of the socket per read.
const READ_CHUNK: usize = 256 << 10;

/// Why the consumerd could not be talked to; every variant means "compile locally".
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Reading or writing failed.
    #[error("consumerd connection: {0}")]
    Io(#[from] io::Error),
    /// The consumerd closed the connection.
    #[error("the consumerd closed the connection")]
    Closed,
    /// The consumerd sent bytes that are not a message.
    #[error("bad frame from the consumerd: {0}")]
    Decode(#[from] DecodeError),
}

/// One connection to the consumerd.
#[derive(Debug)]
pub struct Session {
    stream: UnixStream,
    buf: BytesMut,
    /// Where reads land before they join `buf` (allocated once, not per read).
    chunk: Vec<u8>,
    decoder: LocalDecoder<ConsumerdMsg>,
}

impl Session {
    /// Wraps a connected stream.
    pub fn new(stream: UnixStream) -> Session {
        Session {
            stream,
            buf: BytesMut::new(),
            chunk: vec![0; READ_CHUNK],
            decoder: LocalDecoder::new(CONSUMERD_LIMITS),
        }
    }

    /// Sends one message and its payload.
    ///
    /// # Errors
    /// [`SessionError::Io`] when the socket fails.
    pub fn send(&mut self, msg: &WrapperMsg, payload: &[u8]) -> Result<(), SessionError> {
        let mut header = BytesMut::with_capacity(256);
        encode_local_header(msg, &mut header);
        self.stream.write_all(&header)?;
        if !payload.is_empty() {
            self.stream.write_all(payload)?;
        }
        Ok(())
    }

    /// Waits for the next message.
    ///
    /// # Errors
    /// Any [`SessionError`].
    pub fn recv(&mut self) -> Result<LocalFrame<ConsumerdMsg>, SessionError> {
        loop {
            if let Some(frame) = self.decoder.decode(&mut self.buf)? {
                return Ok(frame);
            }
            let n = loop {
                match self.stream.read(&mut self.chunk) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    r => break r?,
                }
            };
            if n == 0 {
                return Err(SessionError::Closed);
            }
            self.buf.extend_from_slice(&self.chunk[..n]);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use bytes::BufMut;
    use ccroute_wire::local::{encode_local, CompiledHeader, CompiledParts};

    #[test]
    fn a_large_compiled_frame_arrives_whole() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let object = bytes::Bytes::from(vec![7u8; 3 << 20]);
        let parts = CompiledParts { stdout: "o".into(), stderr: "e".into(), object: object.clone() };
        let writer = std::thread::spawn(move || {
            let mut out = BytesMut::new();
            let payload = [&parts.stdout[..], &parts.stderr[..], &parts.object[..]].concat();
            encode_local(&ConsumerdMsg::Compiled(CompiledHeader::of(0, &parts)), &payload, &mut out);
            encode_local(&ConsumerdMsg::Preprocess, b"", &mut out);
            b.write_all(&out).unwrap();
        });
        let mut s = Session::new(a);
        let f = s.recv().unwrap();
        let ConsumerdMsg::Compiled(h) = f.message else { panic!() };
        assert_eq!(h.split(f.payload).unwrap().object, object);
        assert_eq!(s.recv().unwrap().message, ConsumerdMsg::Preprocess);
        writer.join().unwrap();
        assert!(matches!(s.recv(), Err(SessionError::Closed)));
    }

    #[test]
    fn garbage_and_oversized_frames_are_errors() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut out = BytesMut::new();
        out.put_u32_le(CONSUMERD_LIMITS.max_header + 1);
        b.write_all(&out).unwrap();
        assert!(matches!(Session::new(a).recv(), Err(SessionError::Decode(DecodeError::FrameTooLarge { .. }))));
        let (a, mut b) = UnixStream::pair().unwrap();
        b.write_all(&[2, 0, 0, 0, 0xff, 0xff]).unwrap();
        assert!(matches!(Session::new(a).recv(), Err(SessionError::Decode(DecodeError::Malformed { .. }))));
    }
}
