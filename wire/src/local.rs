//! The local protocol between a wrapper (one short process per compile) and
//! its consumerd, over a Unix socket: one connection per compile.
//!
//! ```text
//! wrapper                                consumerd
//!   Job ───────────────────────────────▶
//!       ◀──────────────── Hit + out       the direct-mode cache knew it: write the
//!                                         object and dependency file, print, exit
//!       ◀──────────────── RunLocally      a local slot: compile here, keep the
//!                                         connection open; closing it frees the slot
//!   Record + out ──────────────────────▶    (when asked) what the local compile made
//!       ◀──────────────── Preprocess      a remote slot: preprocess here, then
//!   Source + text ─────────────────────▶    either send the text
//!   Abandon ───────────────────────────▶    or give up on remote (→ RunLocally later)
//!       ◀──────────────── Compiled + out  write the object, print, exit
//!       ◀──────────────── RunLocally      the remote compile failed: compile here
//!
//!   Query ─────────────────────────────▶  (instead of a Job: `ccroute stats`,
//!       ◀──────────────── Report           `ccroute cache clear`)
//! ```
//!
//! Every wrapper message waits for its answer before the next one is sent,
//! so a consumerd holds at most one unanswered message per connection.
//!
//! Frames are laid out as in [`crate::frame`] — `len:u32 LE ‖ header ‖
//! payload` — with bounded, bincode-encoded headers and raw payloads, so the
//! preprocessed text and the object travel without being re-encoded.
//!
//! Main items: [`WrapperMsg`], [`ConsumerdMsg`], [`encode_local`],
//! [`LocalDecoder`], and the limits each side enforces ([`WRAPPER_LIMITS`],
//! [`CONSUMERD_LIMITS`]). Left out: sockets and processes (the wrapper and the
//! consumerd own them).

use bytes::{Bytes, BytesMut};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::DecodeError;
use crate::frame::{put_header, Decoder, Header, Limits};
use crate::message::TaskSpec;

/// Version of this protocol, carried by every [`Job`]: a wrapper and a
/// consumerd from different builds notice it instead of misreading each other.
pub const LOCAL_PROTOCOL_VERSION: u32 = 4;

/// How often a consumerd tells a waiting wrapper it is still at work
/// ([`ConsumerdMsg::Waiting`]).
pub const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long a wrapper waits for any message before it gives up on its
/// consumerd and compiles locally: several heartbeats.
pub const SILENCE_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What a consumerd accepts from a wrapper: small headers, preprocessed text
/// up to 256 MiB.
pub const WRAPPER_LIMITS: Limits = Limits { max_header: 1 << 20, max_payload: 256 << 20 };

/// What a wrapper accepts from a consumerd: objects and diagnostics up to 1 GiB.
pub const CONSUMERD_LIMITS: Limits = Limits { max_header: 64 << 10, max_payload: 1 << 30 };

/// The most a decoder reserves ahead of the bytes it has.
const RESERVE_AHEAD: usize = 4 << 20;

/// A message from the wrapper.
// A job is nearly every message and is read once per compile: boxing it
// would cost an allocation for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WrapperMsg {
    /// Opens the connection: a compile that may go remote.
    Job(Job),
    /// Answers [`ConsumerdMsg::Preprocess`]: this compile cannot go remote
    /// after all (why); the wrapper now waits for a local slot.
    Abandon {
        /// For the consumerd's log.
        reason: String,
    },
    /// Answers [`ConsumerdMsg::Preprocess`]: the preprocessed text follows.
    Source(SourceHeader),
    /// After a local compile the consumerd asked to record (exit status 0):
    /// stdout, stderr, the object and the dependency file follow.
    Record(RecordHeader),
    /// Opens a connection that asks about the consumerd's cache instead of compiling.
    Query(Query),
}

/// What a [`WrapperMsg::Query`] asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Query {
    /// The cache's counters and sizes.
    Stats,
    /// Empty this user's tiers (results, manifests, digests), then report.
    Clear,
    /// The jobserver size for a build (`ccroute make`): answered with
    /// [`ConsumerdMsg::Jobserver`] now and again whenever it changes, for
    /// as long as the connection stays open.
    Jobserver,
}

/// What a consumerd's direct-mode cache needs to find a compile's result
/// without running the preprocessor. Paths are absolute, as OS bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectJob {
    /// The working directory.
    pub cwd: Vec<u8>,
    /// The command's arguments as given (without argv\[0\]).
    pub args: Vec<Vec<u8>>,
    /// The input.
    pub input: Vec<u8>,
    /// The dependency file the compile writes.
    pub dep_file: Option<Vec<u8>>,
    /// The dependency output leaves system headers out (`-MMD`).
    pub deps_user_only: bool,
    /// Include directories in search order.
    pub include_dirs: Vec<Vec<u8>>,
    /// Environment variables that change what the compile reads or prints.
    pub env: Vec<(String, Vec<u8>)>,
    /// The wrapper asks for colored diagnostics (its stderr is a terminal).
    pub colors: bool,
    /// The input is C++ (its system include directories are C++'s).
    pub cxx: bool,
    /// When the wrapper started, in nanoseconds since the Unix epoch, read
    /// from the clock the kernel stamps files from (`CLOCK_REALTIME_COARSE`),
    /// so that a file written later is stamped no earlier: a file changed
    /// after this may have been read half old, half new.
    pub started_ns: u64,
}

/// What a local compile made, for the consumerd's local tier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordHeader {
    /// Every file the compile read (from its dependency output), as named there.
    pub files: Vec<Vec<u8>>,
    /// The dependency output left system headers out (`-MMD`): `files` is
    /// not the whole list, which the consumerd then learns on its own.
    pub user_only: bool,
    /// Lengths of stdout, stderr, object and dependency file, which follow back to back.
    pub lens: [u64; 4],
}

/// A compile that may go remote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// [`LOCAL_PROTOCOL_VERSION`] of the wrapper.
    pub version: u32,
    /// The real compiler, an absolute path as OS bytes.
    pub compiler: Vec<u8>,
    /// What an agent compiles with.
    pub spec: TaskSpec,
    /// The wrapper's process id, for logs.
    pub pid: u32,
    /// What a direct-mode lookup needs; `None`: ask no cache.
    pub direct: Option<DirectJob>,
    /// The agent's arguments for a compile from the unit's inputs
    /// ([`crate::inputs`]); `None`: it cannot be sent so.
    pub inputs_args: Option<Vec<String>>,
    /// It may go remote only as its inputs (why not as text). When it
    /// cannot, it runs here whatever happens: only the cache may answer it,
    /// and on a miss it runs at once, without a slot, as it would without
    /// ccroute.
    pub text_refused: Option<String>,
}

/// The header of the preprocessed text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceHeader {
    /// The object does not depend on when it was compiled (no `__DATE__`,
    /// `__TIME__`): the result may be cached.
    pub cacheable: bool,
    /// Bytes of text that follow.
    pub len: u64,
    /// The files the preprocessing read, as its line markers name them.
    pub files: Vec<Vec<u8>>,
    /// Only the unit's inputs may go remote, not this text (why): when they
    /// cannot, the unit compiles here.
    pub text_refused: Option<String>,
}

/// A message from the consumerd.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConsumerdMsg {
    /// Compile locally now: a local slot is held for this connection until it closes.
    RunLocally {
        /// Why it is not (or no longer) remote, for logs.
        reason: String,
        /// Send a [`WrapperMsg::Record`] after a successful compile.
        record: bool,
    },
    /// A remote slot is held: preprocess and answer with `Source` or `Abandon`.
    Preprocess,
    /// The remote compile's outcome; stdout, stderr and object follow.
    Compiled(CompiledHeader),
    /// A cached result (no compile ran): stdout, stderr, object and
    /// dependency file follow, with these lengths.
    Hit {
        /// Lengths of stdout, stderr, object and dependency file.
        lens: [u64; 4],
    },
    /// Answers a [`WrapperMsg::Query`].
    Report(CacheReport),
    /// Still at work on this compile (waiting for a slot, or for the remote
    /// result): sent every [`HEARTBEAT`] while the wrapper waits, so that a
    /// wrapper can tell a stopped consumerd from a slow compile.
    Waiting,
    /// Answers [`Query::Jobserver`], and follows each change.
    Jobserver(JobserverSize),
}

/// What a build's jobserver should hold: this machine's local slots plus the
/// remote window the scheduler gives this consumerd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobserverSize {
    /// Local slots.
    pub local: u32,
    /// The remote window now (0 while no scheduler is connected).
    pub window: u32,
}

impl JobserverSize {
    /// Jobs at once: local slots plus the window.
    pub fn total(&self) -> u32 {
        self.local.saturating_add(self.window)
    }
}

/// The consumerd's cache, as `ccroute stats` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheReport {
    /// Counters by name (`direct_hit`, `direct_miss`, `recorded`, `remote`,
    /// `local`, `fallback`, ...), in a stable order.
    pub counters: Vec<(String, u64)>,
    /// Why units were not recorded or not looked up, by reason.
    pub refusals: Vec<(String, u64)>,
    /// Sizes: manifests, manifest entries, file digests, result entries,
    /// result bytes, the result cap.
    pub sizes: Vec<(String, u64)>,
    /// Where the tiers live (empty when direct mode is off).
    pub dir: String,
}

/// Sum of four lengths; saturates, so that an absurd header fails the limit check.
pub fn total_len(lens: &[u64; 4]) -> u64 {
    lens.iter().fold(0u64, |a, b| a.saturating_add(*b))
}

/// Cuts a payload into pieces of `lens`; `None` when its length does not match.
pub fn split_four(lens: &[u64; 4], mut payload: Bytes) -> Option<[Bytes; 4]> {
    if payload.len() as u64 != total_len(lens) {
        return None;
    }
    let mut take = |n: u64| Some(payload.split_to(usize::try_from(n).ok()?));
    let (a, b, c) = (take(lens[0])?, take(lens[1])?, take(lens[2])?);
    Some([a, b, c, payload])
}

/// The header of a remote compile's outcome. The payload is stdout, then
/// stderr, then the object, back to back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompiledHeader {
    /// The compiler's exit status.
    pub exit_status: i32,
    /// Bytes of stdout.
    pub stdout_len: u64,
    /// Bytes of stderr.
    pub stderr_len: u64,
    /// Bytes of object (0 when the compile failed).
    pub object_len: u64,
    /// The agent compiled the unit from its inputs at their real paths
    /// ([`crate::inputs`]): its diagnostics read as a local compile's.
    pub from_inputs: bool,
}

/// stdout, stderr and object of a [`CompiledHeader`]'s payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledParts {
    /// The compiler's standard output.
    pub stdout: Bytes,
    /// The compiler's standard error.
    pub stderr: Bytes,
    /// The object file.
    pub object: Bytes,
}

impl CompiledHeader {
    /// The header for these parts.
    pub fn of(exit_status: i32, parts: &CompiledParts) -> CompiledHeader {
        CompiledHeader {
            exit_status,
            stdout_len: parts.stdout.len() as u64,
            stderr_len: parts.stderr.len() as u64,
            object_len: parts.object.len() as u64,
            from_inputs: false,
        }
    }

    /// Total payload bytes; saturates, so that an absurd header fails the limit check.
    pub fn payload_len(&self) -> u64 {
        self.stdout_len.saturating_add(self.stderr_len).saturating_add(self.object_len)
    }

    /// Cuts a payload of [`Self::payload_len`] bytes into its parts; `None`
    /// when its length does not match.
    pub fn split(&self, mut payload: Bytes) -> Option<CompiledParts> {
        if payload.len() as u64 != self.payload_len() {
            return None;
        }
        let stdout = payload.split_to(usize::try_from(self.stdout_len).ok()?);
        let stderr = payload.split_to(usize::try_from(self.stderr_len).ok()?);
        Some(CompiledParts { stdout, stderr, object: payload })
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::WrapperMsg {}
    impl Sealed for super::ConsumerdMsg {}
}

/// A message of the local protocol: [`WrapperMsg`] or [`ConsumerdMsg`].
pub trait LocalMessage: Serialize + DeserializeOwned + sealed::Sealed {
    /// What it is, for decode errors.
    const WHAT: &'static str;
    /// Bytes of payload that follow its header.
    fn payload_len(&self) -> u64;
}

impl LocalMessage for WrapperMsg {
    const WHAT: &'static str = "wrapper message";
    fn payload_len(&self) -> u64 {
        match self {
            WrapperMsg::Source(s) => s.len,
            WrapperMsg::Record(r) => total_len(&r.lens),
            WrapperMsg::Job(_) | WrapperMsg::Abandon { .. } | WrapperMsg::Query(_) => 0,
        }
    }
}

impl LocalMessage for ConsumerdMsg {
    const WHAT: &'static str = "consumerd message";
    fn payload_len(&self) -> u64 {
        match self {
            ConsumerdMsg::Compiled(c) => c.payload_len(),
            ConsumerdMsg::Hit { lens } => total_len(lens),
            ConsumerdMsg::RunLocally { .. }
            | ConsumerdMsg::Preprocess
            | ConsumerdMsg::Waiting
            | ConsumerdMsg::Jobserver(_)
            | ConsumerdMsg::Report(_) => 0,
        }
    }
}

impl<M: LocalMessage> Header for M {
    const WHAT: &'static str = <M as LocalMessage>::WHAT;
    fn payload_len(&self) -> u64 {
        LocalMessage::payload_len(self)
    }
}

/// Appends `msg` as a length-prefixed header frame; its payload (if any) is
/// written by the caller right after, so it need not be copied here.
pub fn encode_local_header<M: LocalMessage>(msg: &M, out: &mut BytesMut) {
    put_header(msg, out);
}

/// Appends a whole frame: header and payload.
///
/// # Panics
/// In debug builds, when `payload` is not as long as the header declares.
pub fn encode_local<M: LocalMessage>(msg: &M, payload: &[u8], out: &mut BytesMut) {
    debug_assert_eq!(msg.payload_len(), payload.len() as u64, "payload length must match its header");
    encode_local_header(msg, out);
    out.extend_from_slice(payload);
}

/// One decoded frame of the local protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalFrame<M> {
    /// The header.
    pub message: M,
    /// The bytes that followed it.
    pub payload: Bytes,
}

/// Incremental decoder for one direction of one connection: the same
/// framing as [`crate::FrameDecoder`], with memory reserved ahead of a
/// payload only as its bytes arrive.
#[derive(Debug)]
pub struct LocalDecoder<M>(Decoder<M>);

impl<M: LocalMessage> LocalDecoder<M> {
    /// A decoder with these limits.
    pub fn new(limits: Limits) -> Self {
        LocalDecoder(Decoder::new(limits, RESERVE_AHEAD))
    }

    /// Whether a header was decoded whose payload is still arriving.
    pub fn is_mid_frame(&self) -> bool {
        self.0.is_mid_frame()
    }

    /// Takes the next whole frame off the front of `buf`; `Ok(None)` means
    /// "need more bytes".
    ///
    /// # Errors
    /// Any [`DecodeError`]: the connection is unusable after one.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<LocalFrame<M>>, DecodeError> {
        Ok(self.0.decode(buf)?.map(|(message, payload)| LocalFrame { message, payload }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use bytes::BufMut;

    use super::*;

    fn job() -> WrapperMsg {
        WrapperMsg::Job(Job {
            version: LOCAL_PROTOCOL_VERSION,
            compiler: b"/usr/bin/gcc".to_vec(),
            spec: TaskSpec { args: vec!["-O2".into()], input_path: "a.c".into(), cwd: None, env: vec![], inputs: None },
            pid: 42,
            direct: Some(DirectJob {
                cwd: b"/w".to_vec(),
                args: vec![b"-c".to_vec(), b"a.c".to_vec()],
                input: b"/w/a.c".to_vec(),
                dep_file: None,
                deps_user_only: false,
                include_dirs: vec![b"/w/inc".to_vec()],
                env: vec![("CPATH".into(), b"/x".to_vec())],
                colors: false,
                cxx: false,
                started_ns: 1,
            }),
            inputs_args: None,
            text_refused: None,
        })
    }

    #[test]
    fn a_session_decodes_byte_by_byte() {
        let mut wire = BytesMut::new();
        encode_local(&job(), b"", &mut wire);
        encode_local(
            &WrapperMsg::Source(SourceHeader {
                cacheable: true,
                len: 5,
                files: vec![b"a.h".to_vec()],
                text_refused: None,
            }),
            b"int x",
            &mut wire,
        );
        encode_local(&WrapperMsg::Abandon { reason: "pragma".into() }, b"", &mut wire);
        let mut dec = LocalDecoder::<WrapperMsg>::new(WRAPPER_LIMITS);
        let mut buf = BytesMut::new();
        let mut out = vec![];
        for b in wire.iter() {
            buf.put_u8(*b);
            while let Some(f) = dec.decode(&mut buf).unwrap() {
                out.push(f);
            }
        }
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].message, job());
        assert_eq!(&out[1].payload[..], b"int x");
        assert_eq!(out[2].message, WrapperMsg::Abandon { reason: "pragma".into() });
        assert!(buf.is_empty() && !dec.is_mid_frame());
    }

    #[test]
    fn compiled_parts_round_trip() {
        let parts = CompiledParts {
            stdout: Bytes::from_static(b"out"),
            stderr: Bytes::from_static(b"warning: x\n"),
            object: Bytes::from_static(b"\x7fELF...."),
        };
        let header = CompiledHeader::of(0, &parts);
        let mut wire = BytesMut::new();
        let payload = [&parts.stdout[..], &parts.stderr[..], &parts.object[..]].concat();
        encode_local(&ConsumerdMsg::Compiled(header), &payload, &mut wire);
        let f = LocalDecoder::<ConsumerdMsg>::new(CONSUMERD_LIMITS).decode(&mut wire).unwrap().unwrap();
        let ConsumerdMsg::Compiled(h) = f.message else { panic!("{:?}", f.message) };
        assert_eq!(h.split(f.payload).unwrap(), parts);
        assert_eq!(h.split(Bytes::from_static(b"short")), None);
    }

    #[test]
    fn oversized_frames_and_payloads_are_refused_before_allocation() {
        let mut buf = BytesMut::new();
        buf.put_u32_le(WRAPPER_LIMITS.max_header + 1);
        let err = LocalDecoder::<WrapperMsg>::new(WRAPPER_LIMITS).decode(&mut buf).unwrap_err();
        assert_eq!(err.to_string(), "frame of 1048577 bytes exceeds limit 1048576");

        let mut buf = BytesMut::new();
        encode_local_header(
            &WrapperMsg::Source(SourceHeader { cacheable: false, len: u64::MAX, files: vec![], text_refused: None }),
            &mut buf,
        );
        let err = LocalDecoder::<WrapperMsg>::new(WRAPPER_LIMITS).decode(&mut buf).unwrap_err();
        assert_eq!(err, DecodeError::PayloadTooLarge { len: u64::MAX, max: 256 << 20 });

        // Lengths that overflow when added still fail the limit.
        let h =
            CompiledHeader { exit_status: 0, stdout_len: u64::MAX, stderr_len: 2, object_len: 3, from_inputs: false };
        let mut buf = BytesMut::new();
        encode_local_header(&ConsumerdMsg::Compiled(h), &mut buf);
        let err = LocalDecoder::<ConsumerdMsg>::new(CONSUMERD_LIMITS).decode(&mut buf).unwrap_err();
        assert!(matches!(err, DecodeError::PayloadTooLarge { len: u64::MAX, .. }));
    }

    #[test]
    fn garbage_is_malformed() {
        let mut buf = BytesMut::new();
        buf.put_u32_le(4);
        buf.put_slice(&[0xff, 0xff, 0xff, 0xff]);
        let err = LocalDecoder::<WrapperMsg>::new(WRAPPER_LIMITS).decode(&mut buf).unwrap_err();
        assert!(matches!(err, DecodeError::Malformed { what: "wrapper message", .. }), "{err}");
    }
}
