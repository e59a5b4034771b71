//! The version handshake every connection opens with.
//!
//! The connecting peer sends a [`Hello`]; the scheduler answers with a
//! [`Welcome`] or a [`Refusal`]. Both frames start with a fixed prefix —
//! magic and protocol version — that never changes shape, so a peer of any
//! version can read the other's version and the refusal that names both,
//! even when the rest of the encoding has moved on.
//!
//! ```text
//! hello   = len:u32 ‖ "CCRH" ‖ version:u32 ‖ body (codec)
//! reply   = len:u32 ‖ "CCRR" ‖ version:u32 ‖ 0 ‖ welcome (codec)
//!         | len:u32 ‖ "CCRR" ‖ version:u32 ‖ 1 ‖ kind:u8 ‖ ours:u32 ‖ theirs:u32 ‖ reason (UTF-8)
//! ```

use std::fmt;

use bytes::{Buf, BufMut, BytesMut};
use serde::{Deserialize, Serialize};

use crate::codec;
use crate::error::DecodeError;
use crate::frame::LEN_PREFIX;
use crate::toolchain::Toolchain;

/// This build's protocol version.
pub const PROTOCOL_VERSION: u32 = 8;
/// The oldest peer version this build talks to: 8 added a field to the
/// hello's body, which older bodies do not decode as.
pub const MIN_COMPATIBLE_VERSION: u32 = 8;
/// Largest handshake frame.
pub const MAX_HANDSHAKE: u32 = 1 << 20;

const HELLO_MAGIC: &[u8; 4] = b"CCRH";
const REPLY_MAGIC: &[u8; 4] = b"CCRR";

/// What a peer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Role {
    /// Runs compiles.
    Agent,
    /// Sends compiles on behalf of a developer machine.
    Consumerd,
    /// Asks for status.
    Admin,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Agent => "agent",
            Role::Consumerd => "consumerd",
            Role::Admin => "admin",
        })
    }
}

/// The host a peer runs on.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SystemInfo {
    /// `std::env::consts::ARCH` of the sender.
    pub arch: String,
    /// CPUs online.
    pub cpus: u32,
    /// Physical memory in bytes.
    pub memory_bytes: u64,
}

/// The first frame of every connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The sender's protocol version.
    pub version: u32,
    /// Everything else.
    pub body: HelloBody,
}

/// The version-dependent part of a [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelloBody {
    /// What the sender is. The scheduler checks it against the role in the
    /// sender's certificate.
    pub role: Role,
    /// A random id the peer keeps for its lifetime.
    pub node_id: u128,
    /// The sender's host name.
    pub host_name: String,
    /// The sender's host.
    pub system: SystemInfo,
    /// Toolchains the sender has (agents: can run; consumerds: will send).
    pub toolchains: Vec<Toolchain>,
    /// Agents: the most tasks they run at once (`--jobs`). Others: 0.
    pub usage_limit: u32,
    /// Agents: their speed as pinned in their configuration (`--speed`),
    /// thousandths of the nominal; 0: the scheduler learns it from their
    /// results. Others: 0.
    pub speed_milli: u32,
    /// Agents: their speed as measured when they started, by compiling a
    /// fixed unit (`ccroute agent --no-speed-probe` turns it off),
    /// thousandths of the nominal; the scheduler places by it until their
    /// results tell it better. 0: not measured. Others: 0.
    pub probed_speed_milli: u32,
    /// Agents: whether they run toolchains shipped to them. Others: `Off`.
    pub shipping: Shipping,
    /// Agents: the tasks they still run, or have finished, for a scheduler
    /// they lost; the new scheduler adopts those their consumerds send again.
    pub resumed: Vec<crate::message::ResumedTask>,
}

/// Whether an agent runs toolchains shipped to it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Shipping {
    /// Not asked for (`--no-shipping`), or not an agent.
    #[default]
    Off,
    /// Yes, in this sandbox (e.g. `bubblewrap 0.8.0`).
    Ready(String),
    /// Asked for, but the sandbox cannot be made here, for this reason: the
    /// agent serves only the compilers it has installed.
    Unavailable(String),
}

impl std::fmt::Display for Shipping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shipping::Off => f.write_str("off"),
            Shipping::Ready(sandbox) => write!(f, "ready ({sandbox})"),
            Shipping::Unavailable(why) => write!(f, "unavailable: {why}"),
        }
    }
}

/// The scheduler accepted the connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The scheduler's node id.
    pub scheduler_id: u128,
    /// Agents: the token limit it starts with. Consumerds: the preferred
    /// remote limit it starts with.
    pub limit: u32,
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// The versions cannot talk.
    IncompatibleVersion,
    /// The role in the hello is not the role the certificate was issued for.
    WrongRole,
    /// The hello was malformed or not acceptable.
    BadHello,
    /// The scheduler is at its connection limit.
    Busy,
    /// The scheduler is shutting down.
    ShuttingDown,
}

impl RefusalKind {
    fn to_u8(self) -> u8 {
        match self {
            RefusalKind::IncompatibleVersion => 1,
            RefusalKind::WrongRole => 2,
            RefusalKind::BadHello => 3,
            RefusalKind::Busy => 4,
            RefusalKind::ShuttingDown => 5,
        }
    }

    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => RefusalKind::IncompatibleVersion,
            2 => RefusalKind::WrongRole,
            3 => RefusalKind::BadHello,
            4 => RefusalKind::Busy,
            5 => RefusalKind::ShuttingDown,
            _ => return None,
        })
    }
}

/// A refusal, readable by a peer of any version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Why.
    pub kind: RefusalKind,
    /// The scheduler's protocol version.
    pub ours: u32,
    /// The version the peer sent.
    pub theirs: u32,
    /// A sentence for the log.
    pub reason: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            RefusalKind::IncompatibleVersion => {
                write!(f, "incompatible protocol version: scheduler speaks {}, peer speaks {}", self.ours, self.theirs)
            }
            _ => f.write_str(&self.reason),
        }
    }
}

/// The scheduler's answer to a [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelloReply {
    /// Accepted.
    Welcome(Welcome),
    /// Refused.
    Refused(Refusal),
}

/// Checks a peer's version against ours.
///
/// # Errors
/// A [`Refusal`] that names both versions.
pub fn check_version(theirs: u32) -> Result<(), Refusal> {
    if (MIN_COMPATIBLE_VERSION..=PROTOCOL_VERSION).contains(&theirs) {
        Ok(())
    } else {
        Err(Refusal { kind: RefusalKind::IncompatibleVersion, ours: PROTOCOL_VERSION, theirs, reason: String::new() })
    }
}

fn begin(out: &mut BytesMut, magic: &[u8; 4], version: u32) -> usize {
    let start = out.len();
    out.put_u32_le(0);
    out.put_slice(magic);
    out.put_u32_le(version);
    start
}

fn finish(out: &mut BytesMut, start: usize) {
    let len = (out.len() - start - LEN_PREFIX) as u32;
    out[start..start + LEN_PREFIX].copy_from_slice(&len.to_le_bytes());
}

/// Appends a framed hello.
pub fn encode_hello(hello: &Hello, out: &mut BytesMut) {
    let start = begin(out, HELLO_MAGIC, hello.version);
    codec::encode_hello_body(&hello.body, out);
    finish(out, start);
}

/// Appends a framed reply.
pub fn encode_reply(reply: &HelloReply, out: &mut BytesMut) {
    match reply {
        HelloReply::Welcome(w) => {
            let start = begin(out, REPLY_MAGIC, PROTOCOL_VERSION);
            out.put_u8(0);
            codec::encode_value(w, out);
            finish(out, start);
        }
        HelloReply::Refused(r) => {
            let start = begin(out, REPLY_MAGIC, r.ours);
            out.put_u8(1);
            out.put_u8(r.kind.to_u8());
            out.put_u32_le(r.ours);
            out.put_u32_le(r.theirs);
            out.put_slice(r.reason.as_bytes());
            finish(out, start);
        }
    }
}

/// Splits one handshake frame off `buf`: `Ok(None)` until it is whole.
fn take_frame(buf: &mut BytesMut) -> Result<Option<BytesMut>, DecodeError> {
    if buf.len() < LEN_PREFIX {
        return Ok(None);
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if len > MAX_HANDSHAKE {
        return Err(DecodeError::FrameTooLarge { len: u64::from(len), max: u64::from(MAX_HANDSHAKE) });
    }
    let len = len as usize;
    if buf.len() < LEN_PREFIX + len {
        return Ok(None);
    }
    buf.advance(LEN_PREFIX);
    Ok(Some(buf.split_to(len)))
}

fn take_prefix(frame: &mut BytesMut, magic: &[u8; 4], expected: &'static str) -> Result<u32, DecodeError> {
    if frame.len() < 8 || &frame[..4] != magic {
        return Err(DecodeError::BadMagic { expected });
    }
    frame.advance(4);
    Ok(frame.get_u32_le())
}

/// What a scheduler makes of a hello frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelloOutcome {
    /// A hello of a version we speak.
    Hello(Hello),
    /// A well-formed hello of a version we do not speak: answer with this.
    Incompatible(Refusal),
}

/// Decodes a hello frame off `buf`. The version is read, and checked, before
/// the body: a peer of another version gets a refusal naming both versions,
/// not a decode error.
///
/// # Errors
/// A [`DecodeError`] for bytes that are not a hello.
pub fn decode_hello(buf: &mut BytesMut) -> Result<Option<HelloOutcome>, DecodeError> {
    let Some(mut frame) = take_frame(buf)? else {
        return Ok(None);
    };
    let version = take_prefix(&mut frame, HELLO_MAGIC, "hello")?;
    if let Err(refusal) = check_version(version) {
        return Ok(Some(HelloOutcome::Incompatible(refusal)));
    }
    let body = codec::decode_hello_body(&frame)?;
    Ok(Some(HelloOutcome::Hello(Hello { version, body })))
}

/// Decodes a reply frame off `buf`.
///
/// # Errors
/// A [`DecodeError`] for bytes that are not a reply.
pub fn decode_reply(buf: &mut BytesMut) -> Result<Option<HelloReply>, DecodeError> {
    let Some(mut frame) = take_frame(buf)? else {
        return Ok(None);
    };
    let version = take_prefix(&mut frame, REPLY_MAGIC, "reply")?;
    if frame.is_empty() {
        return Err(DecodeError::Malformed { what: "reply", detail: "no status byte".into() });
    }
    match frame.get_u8() {
        0 => {
            if check_version(version).is_err() {
                // A welcome from a scheduler we cannot talk to: say so in its terms.
                return Ok(Some(HelloReply::Refused(Refusal {
                    kind: RefusalKind::IncompatibleVersion,
                    ours: version,
                    theirs: PROTOCOL_VERSION,
                    reason: String::new(),
                })));
            }
            Ok(Some(HelloReply::Welcome(codec::decode_value(&frame, "welcome")?)))
        }
        1 => {
            if frame.len() < 9 {
                return Err(DecodeError::Malformed { what: "refusal", detail: "too short".into() });
            }
            let kind = RefusalKind::from_u8(frame.get_u8()).unwrap_or(RefusalKind::BadHello);
            let ours = frame.get_u32_le();
            let theirs = frame.get_u32_le();
            let reason = String::from_utf8_lossy(&frame).into_owned();
            Ok(Some(HelloReply::Refused(Refusal { kind, ours, theirs, reason })))
        }
        other => Err(DecodeError::Malformed { what: "reply", detail: format!("unknown status {other}") }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(version: u32) -> Hello {
        Hello {
            version,
            body: HelloBody {
                role: Role::Agent,
                node_id: 77,
                host_name: "build-7".into(),
                system: SystemInfo { arch: "x86_64".into(), cpus: 64, memory_bytes: 1 << 37 },
                toolchains: vec![],
                usage_limit: 64,
                speed_milli: 1500,
                probed_speed_milli: 700,
                shipping: Shipping::Ready("bubblewrap 0.8.0".into()),
                resumed: vec![crate::message::ResumedTask {
                    handle: 1 << 63 | 4,
                    origin: crate::message::Origin { consumerd: 9, task_id: 12 },
                    toolchain: crate::toolchain::ToolchainKey(5),
                }],
            },
        }
    }

    #[test]
    fn hello_and_welcome_round_trip() {
        let mut buf = BytesMut::new();
        encode_hello(&hello(PROTOCOL_VERSION), &mut buf);
        assert_eq!(decode_hello(&mut buf).unwrap(), Some(HelloOutcome::Hello(hello(PROTOCOL_VERSION))));
        let w = HelloReply::Welcome(Welcome { scheduler_id: 5, limit: 8 });
        encode_reply(&w, &mut buf);
        assert_eq!(decode_reply(&mut buf).unwrap(), Some(w));
        assert!(buf.is_empty());
    }

    #[test]
    fn a_future_version_gets_a_refusal_naming_both_versions() {
        let mut buf = BytesMut::new();
        let mut h = hello(PROTOCOL_VERSION + 7);
        encode_hello(&h, &mut buf);
        // Whatever a future body looks like, the prefix is read first.
        buf.extend_from_slice(b"");
        h.version = PROTOCOL_VERSION + 7;
        let Some(HelloOutcome::Incompatible(refusal)) = decode_hello(&mut buf).unwrap() else {
            panic!("expected a refusal");
        };
        let mut wire = BytesMut::new();
        encode_reply(&HelloReply::Refused(refusal), &mut wire);
        let Some(HelloReply::Refused(r)) = decode_reply(&mut wire).unwrap() else { panic!("expected refused") };
        assert_eq!(
            r.to_string(),
            format!(
                "incompatible protocol version: scheduler speaks {PROTOCOL_VERSION}, peer speaks {}",
                PROTOCOL_VERSION + 7
            )
        );
    }

    #[test]
    fn partial_and_bad_frames() {
        let mut buf = BytesMut::new();
        encode_hello(&hello(PROTOCOL_VERSION), &mut buf);
        let mut half = BytesMut::from(&buf[..buf.len() / 2]);
        assert_eq!(decode_hello(&mut half).unwrap(), None);
        let mut bad = BytesMut::from(&b"\x08\x00\x00\x00NOPE\x01\x00\x00\x00"[..]);
        assert_eq!(decode_hello(&mut bad).unwrap_err(), DecodeError::BadMagic { expected: "hello" });
    }
}
