//! The wrapper's end of one consumerd connection: blocking, framed, bounded.
//!
//! Main items: [`Session`], [`SessionError`]. Left out: what the messages
//! mean (the wrapper's flow in `super`).

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;

use bytes::BytesMut;
use ccroute_wire::local::{
    encode_local_header, ConsumerdMsg, LocalDecoder, LocalFrame, WrapperMsg, CONSUMERD_LIMITS, SILENCE_LIMIT,
    WRAPPER_LIMITS,
};
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
    /// A message bigger than the consumerd takes (a command line of
    /// megabytes, say); nothing was sent.
    #[error("the {what} is {len} bytes, over the {max} the consumerd takes (the local protocol's limit)")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its size.
        len: u64,
        /// The consumerd's limit.
        max: u64,
    },
    /// Nothing came, not even a heartbeat, for this long: the consumerd is
    /// stopped or wedged.
    #[error("the consumerd sent nothing for {0:?}")]
    Silent(std::time::Duration),
}

/// One connection to the consumerd.
#[derive(Debug)]
pub struct Session {
    stream: UnixStream,
    buf: BytesMut,
    /// Where reads land before they join `buf` (allocated once, not per read).
    chunk: Vec<u8>,
    decoder: LocalDecoder<ConsumerdMsg>,
    silence: std::time::Duration,
}

impl Session {
    /// Wraps a connected stream; a consumerd silent for [`SILENCE_LIMIT`] is given up.
    pub fn new(stream: UnixStream) -> Session {
        Session::with_silence_limit(stream, SILENCE_LIMIT)
    }

    /// Wraps a connected stream; a read or write that waits `silence` fails.
    pub fn with_silence_limit(stream: UnixStream, silence: std::time::Duration) -> Session {
        // Without timeouts a stopped consumerd would hold the build forever;
        // setting them only fails for a zero duration, which this is not.
        let _ = stream.set_read_timeout(Some(silence));
        let _ = stream.set_write_timeout(Some(silence));
        Session {
            stream,
            buf: BytesMut::new(),
            chunk: vec![0; READ_CHUNK],
            decoder: LocalDecoder::new(CONSUMERD_LIMITS),
            silence,
        }
    }

    /// Sends one message and its payload.
    ///
    /// # Errors
    /// [`SessionError::Io`] when the socket fails, [`SessionError::Silent`]
    /// when the consumerd takes nothing for the silence limit.
    pub fn send(&mut self, msg: &WrapperMsg, payload: &[u8]) -> Result<(), SessionError> {
        let mut header = BytesMut::with_capacity(256);
        encode_local_header(msg, &mut header);
        // What the consumerd's decoder would refuse by closing the socket
        // (seen here as a broken pipe) is refused here, saying what.
        let header_len = header.len().saturating_sub(ccroute_wire::frame::LEN_PREFIX) as u64;
        if header_len > u64::from(WRAPPER_LIMITS.max_header) {
            let what = match msg {
                WrapperMsg::Job(_) => "command line (with its environment and paths)",
                _ => "message",
            };
            return Err(SessionError::TooLarge { what, len: header_len, max: u64::from(WRAPPER_LIMITS.max_header) });
        }
        if payload.len() as u64 > WRAPPER_LIMITS.max_payload {
            return Err(SessionError::TooLarge {
                what: "preprocessed source",
                len: payload.len() as u64,
                max: WRAPPER_LIMITS.max_payload,
            });
        }
        self.stream.write_all(&header).map_err(|e| self.io_error(e))?;
        if !payload.is_empty() {
            self.stream.write_all(payload).map_err(|e| self.io_error(e))?;
        }
        Ok(())
    }

    fn io_error(&self, e: io::Error) -> SessionError {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => SessionError::Silent(self.silence),
            _ => SessionError::Io(e),
        }
    }

    /// Waits for the next message; heartbeats ([`ConsumerdMsg::Waiting`])
    /// only keep the wait alive.
    ///
    /// # Errors
    /// Any [`SessionError`].
    pub fn recv(&mut self) -> Result<LocalFrame<ConsumerdMsg>, SessionError> {
        loop {
            if let Some(frame) = self.decoder.decode(&mut self.buf)? {
                if frame.message == ConsumerdMsg::Waiting {
                    continue;
                }
                return Ok(frame);
            }
            let n = loop {
                match self.stream.read(&mut self.chunk) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(self.io_error(e)),
                    Ok(n) => break n,
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

    /// A command the consumerd's decoder would refuse (it would close the
    /// socket, which the wrapper saw as a broken pipe) is refused before a
    /// byte is written, saying what and how large; a command just under the
    /// limit goes.
    #[test]
    fn a_message_over_the_consumerd_limit_is_refused_here_saying_why() {
        let job = |arg_bytes: usize| {
            WrapperMsg::Job(ccroute_wire::local::Job {
                version: ccroute_wire::local::LOCAL_PROTOCOL_VERSION,
                compiler: b"/usr/bin/gcc".to_vec(),
                spec: ccroute_wire::TaskSpec {
                    args: vec![format!("-DLONG={}", "1".repeat(arg_bytes))],
                    input_path: "t.c".into(),
                    cwd: None,
                    env: vec![],
                    inputs: None,
                },
                pid: 1,
                direct: None,
                inputs_args: None,
                text_refused: None,
            })
        };
        let (a, b) = UnixStream::pair().unwrap();
        let mut s = Session::new(a);
        let err = s.send(&job(1 << 20), b"").unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, SessionError::TooLarge { .. }), "{text}");
        assert!(text.contains("command line") && text.contains("over the 1048576 the consumerd takes"), "{text}");
        b.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        assert_eq!((&b).read(&mut byte).unwrap_err().kind(), io::ErrorKind::WouldBlock, "bytes were sent");
        // Under the limit it is sent, and decodes on the consumerd's side.
        let writer = std::thread::spawn(move || s.send(&job(1000 << 10), b"").map(|()| s));
        let mut dec = LocalDecoder::<WrapperMsg>::new(WRAPPER_LIMITS);
        let mut buf = BytesMut::new();
        b.set_nonblocking(false).unwrap();
        let frame = loop {
            if let Some(f) = dec.decode(&mut buf).unwrap() {
                break f;
            }
            let mut chunk = vec![0u8; 1 << 16];
            let n = (&b).read(&mut chunk).unwrap();
            assert!(n > 0, "closed before a whole frame");
            buf.extend_from_slice(&chunk[..n]);
        };
        assert!(matches!(frame.message, WrapperMsg::Job(_)));
        writer.join().unwrap().unwrap();
    }

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
    fn heartbeats_keep_a_wait_alive_and_silence_ends_it() {
        let limit = std::time::Duration::from_millis(1000);
        let (a, mut b) = UnixStream::pair().unwrap();
        let writer = std::thread::spawn(move || {
            // Beats far apart enough to matter (together longer than the
            // limit), close enough that a stalled thread does not miss one.
            for _ in 0..12 {
                let mut out = BytesMut::new();
                encode_local(&ConsumerdMsg::Waiting, b"", &mut out);
                b.write_all(&out).unwrap();
                std::thread::sleep(limit / 8);
            }
            let mut out = BytesMut::new();
            encode_local(&ConsumerdMsg::Preprocess, b"", &mut out);
            b.write_all(&out).unwrap();
            b // kept open, silent
        });
        let mut s = Session::with_silence_limit(a, limit);
        // Six heartbeats span longer than the limit: the wait survives them.
        assert_eq!(s.recv().unwrap().message, ConsumerdMsg::Preprocess);
        let _open = writer.join().unwrap();
        assert!(matches!(s.recv(), Err(SessionError::Silent(l)) if l == limit));
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
