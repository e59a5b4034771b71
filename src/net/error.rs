//! Errors of the network layer, the application close codes, and the
//! sentences a failed TLS handshake is explained with.
//!
//! - [`NetError`]: everything a connection or stream can fail with, each
//!   message naming the peer's address.
//! - [`CloseReason`]: the application close codes ccroute uses, with their
//!   reasons.
//! - `handshake_failure`: turns a quinn error that carries a TLS alert into
//!   a sentence ("client certificate not signed by the cluster CA"), from the
//!   point of view of the side that saw it.

use std::net::SocketAddr;
use std::time::Duration;

use ccroute_wire::{DecodeError, Refusal, RefusalKind};
use quinn::{ConnectionError, VarInt};
use thiserror::Error;

use super::tls::TlsError;

/// Why a connection or stream failed.
#[derive(Debug, Error)]
pub enum NetError {
    /// The UDP socket could not be bound.
    #[error("cannot bind a quic endpoint on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The transport options cannot be used.
    #[error("invalid transport options: {0}")]
    Options(String),
    /// The certificates could not be turned into a configuration.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// quinn could not start a connection.
    #[error("cannot connect to {peer}: {source}")]
    Connect {
        /// The address dialled.
        peer: SocketAddr,
        /// quinn's reason.
        #[source]
        source: quinn::ConnectError,
    },
    /// The TLS handshake failed; `reason` says why in a sentence.
    #[error("tls handshake with {peer} failed: {reason}")]
    Handshake {
        /// The other side.
        peer: SocketAddr,
        /// Why.
        reason: String,
    },
    /// The scheduler refused the hello.
    #[error("{peer} refused the connection: {refusal}")]
    Refused {
        /// The scheduler.
        peer: SocketAddr,
        /// Its refusal; its message names both versions for a version refusal.
        refusal: Refusal,
    },
    /// The connection ended: closed by either side, timed out, reset.
    #[error("connection with {peer} lost: {source}")]
    ConnectionLost {
        /// The other side.
        peer: SocketAddr,
        /// quinn's reason.
        #[source]
        source: ConnectionError,
    },
    /// The peer sent bytes that are not a valid frame.
    #[error("malformed data from {peer}: {source}")]
    Decode {
        /// The sender.
        peer: SocketAddr,
        /// What was wrong.
        #[source]
        source: DecodeError,
    },
    /// A stream ended part-way through a frame.
    #[error("stream from {peer} ended in the middle of a frame ({buffered} bytes of it buffered)")]
    EndedMidFrame {
        /// The sender.
        peer: SocketAddr,
        /// Bytes of the unfinished frame that were still buffered.
        buffered: usize,
    },
    /// The peer abandoned a stream it was sending.
    #[error("{peer} reset the stream with code {code}")]
    Reset {
        /// The sender.
        peer: SocketAddr,
        /// Its error code.
        code: VarInt,
    },
    /// The peer stopped reading a stream we were sending.
    #[error("{peer} stopped reading the stream with code {code}")]
    Stopped {
        /// The receiver.
        peer: SocketAddr,
        /// Its error code.
        code: VarInt,
    },
    /// The stream was already finished or reset on our side.
    #[error("stream with {peer} is already closed")]
    StreamClosed {
        /// The other side.
        peer: SocketAddr,
    },
    /// A payload on a stream of its own stopped arriving: not all of its
    /// `len` bytes came within `after` ([`crate::net::queued_payload_deadline`]).
    /// Its budget is given back; the frame's header is here so that its
    /// task can be answered.
    #[error(
        "the {len}-byte payload of a {} from {peer} did not arrive within {after:?} \
         ({received} bytes of it came; its connection received {meanwhile} other bytes meanwhile)",
        message.name()
    )]
    PayloadStalled {
        /// The other side.
        peer: SocketAddr,
        /// The frame's header.
        message: Box<ccroute_wire::Message>,
        /// The payload's declared size.
        len: u64,
        /// How long it was given.
        after: Duration,
        /// How much of the payload had come.
        received: u64,
        /// What its connection received in that time besides its bytes: a
        /// queued payload's time grows with it ([`crate::net::queued_payload_deadline`]).
        meanwhile: u64,
    },
    /// A frame on a stream of its own whose header was read but whose
    /// payload could not be (the stream was reset, ended short, or carried
    /// more than one frame). The header is here so that what it names can
    /// be answered at once; the connection goes on.
    #[error("the {} from {peer} could not be read past its header: {source}", message.name())]
    Unfinished {
        /// The other side.
        peer: SocketAddr,
        /// The frame's header.
        message: Box<ccroute_wire::Message>,
        /// What went wrong after the header.
        #[source]
        source: Box<NetError>,
    },
    /// Something did not arrive in time.
    #[error("no {what} from {peer} within {after:?}")]
    Timeout {
        /// The other side.
        peer: SocketAddr,
        /// What was awaited.
        what: &'static str,
        /// How long we waited.
        after: Duration,
    },
    /// The peer's certificate is valid for no client role.
    #[error("{peer} presented no certificate for a ccroute client role")]
    NoRole {
        /// The client.
        peer: SocketAddr,
    },
    /// A header's declared payload length differs from the payload given
    /// with it (a bug of the sender; nothing was written).
    #[error("a {message} to {peer} declares {declared} payload bytes but carries {actual}")]
    PayloadMismatch {
        /// The receiver.
        peer: SocketAddr,
        /// The message's name.
        message: &'static str,
        /// Length in the header.
        declared: u64,
        /// Length of the bytes given.
        actual: usize,
    },
    /// The peer broke a rule of the protocol above the framing.
    #[error("protocol error with {peer}: {detail}")]
    Protocol {
        /// The other side.
        peer: SocketAddr,
        /// What happened.
        detail: String,
    },
}

impl NetError {
    /// What to do about a refusal that no retry can change (this peer's
    /// certificate is not one the scheduler's cluster accepts, or the
    /// versions cannot talk); `None` for anything a retry may fix.
    pub fn final_refusal(&self) -> Option<&'static str> {
        match self {
            NetError::Handshake { .. } => Some(
                "the certificates do not belong together: give this daemon the cluster's CA and a certificate \
                 the same CA issued for its role (`ccroute certs init` writes a set; copy ca.pem and the role's \
                 pem and key from the scheduler's set), then start it again",
            ),
            NetError::Refused { refusal, .. } => match refusal.kind {
                RefusalKind::WrongRole => Some(
                    "this daemon's certificate is issued for another role: give it the certificate of its own \
                     role from the cluster's set, then start it again",
                ),
                RefusalKind::IncompatibleVersion => {
                    Some("upgrade the older of this daemon and the scheduler so that their versions match, then start it again")
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// For a frame whose header arrived on a stream of its own and whose
    /// payload did not ([`NetError::PayloadStalled`], [`NetError::Unfinished`]):
    /// the header, and why, in words fit for an answer. `Err(self)` for
    /// anything else.
    pub fn into_unfinished(self) -> Result<(ccroute_wire::Message, String), NetError> {
        match self {
            NetError::PayloadStalled { message, after, .. } => {
                Ok((*message, format!("its payload stopped arriving (not whole within {after:?})")))
            }
            NetError::Unfinished { message, source, .. } => {
                Ok((*message, format!("its payload could not be read: {source}")))
            }
            other => Err(other),
        }
    }

    /// Maps a failed read to an error naming `peer`.
    pub(crate) fn from_read(peer: SocketAddr, err: quinn::ReadError) -> NetError {
        match err {
            quinn::ReadError::Reset(code) => NetError::Reset { peer, code },
            quinn::ReadError::ConnectionLost(source) => NetError::ConnectionLost { peer, source },
            quinn::ReadError::ClosedStream => NetError::StreamClosed { peer },
            // Neither 0-RTT nor unordered reads are used.
            quinn::ReadError::ZeroRttRejected | quinn::ReadError::IllegalOrderedRead => {
                NetError::Protocol { peer, detail: format!("unexpected read error: {err}") }
            }
        }
    }

    /// Maps a failed write to an error naming `peer`.
    pub(crate) fn from_write(peer: SocketAddr, err: quinn::WriteError) -> NetError {
        match err {
            quinn::WriteError::Stopped(code) => NetError::Stopped { peer, code },
            quinn::WriteError::ConnectionLost(source) => NetError::ConnectionLost { peer, source },
            quinn::WriteError::ClosedStream => NetError::StreamClosed { peer },
            quinn::WriteError::ZeroRttRejected => {
                NetError::Protocol { peer, detail: format!("unexpected write error: {err}") }
            }
        }
    }

    /// The [`CloseReason`] the peer closed the connection with, if that is
    /// what ended it.
    pub fn close_reason(&self) -> Option<CloseReason> {
        match self {
            NetError::ConnectionLost { source, .. } => CloseReason::of(source),
            _ => None,
        }
    }
}

/// Why ccroute closes a connection: each has its application close code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The conversation is over (e.g. `status` got its answer).
    Done,
    /// The closing side is shutting down.
    Shutdown,
    /// The scheduler refused the hello (the refusal itself went on the
    /// control stream), or the client read a refusal.
    Refused,
    /// The peer broke the protocol: malformed frames, a missing hello.
    ProtocolError,
}

impl CloseReason {
    const ALL: [CloseReason; 4] =
        [CloseReason::Done, CloseReason::Shutdown, CloseReason::Refused, CloseReason::ProtocolError];

    /// The application close (and stream stop/reset) code.
    pub const fn code(self) -> VarInt {
        VarInt::from_u32(match self {
            CloseReason::Done => 0,
            CloseReason::Shutdown => 1,
            CloseReason::Refused => 2,
            CloseReason::ProtocolError => 3,
        })
    }

    /// The reason text sent with the code.
    pub const fn reason(self) -> &'static str {
        match self {
            CloseReason::Done => "done",
            CloseReason::Shutdown => "shutting down",
            CloseReason::Refused => "refused",
            CloseReason::ProtocolError => "protocol error",
        }
    }

    /// Closes `conn` with this code and reason.
    pub fn close(self, conn: &quinn::Connection) {
        conn.close(self.code(), self.reason().as_bytes());
    }

    /// Closes `conn` with this code and a specific reason (e.g. the decode
    /// error), cut to fit one packet.
    pub fn close_with(self, conn: &quinn::Connection, reason: &str) {
        let mut end = reason.len().min(256);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        conn.close(self.code(), &reason.as_bytes()[..end]);
    }

    /// The reason a peer closed the connection with, if it is one of ours.
    pub fn of(err: &ConnectionError) -> Option<CloseReason> {
        match err {
            ConnectionError::ApplicationClosed(close) => {
                CloseReason::ALL.into_iter().find(|r| r.code() == close.error_code)
            }
            _ => None,
        }
    }
}

/// Which end of a connection we are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// We dialled the scheduler.
    Client,
    /// We are the scheduler.
    Server,
}

// TLS alert descriptions (RFC 8446 §6) that rustls sends for certificate
// problems; quinn carries them as transport error code 0x100 + alert.
const ALERT_HANDSHAKE_FAILURE: u8 = 40;
const ALERT_BAD_CERTIFICATE: u8 = 42;
const ALERT_UNSUPPORTED_CERTIFICATE: u8 = 43;
const ALERT_CERTIFICATE_EXPIRED: u8 = 45;
const ALERT_UNKNOWN_CA: u8 = 48;
const ALERT_DECRYPT_ERROR: u8 = 51;
const ALERT_CERTIFICATE_REQUIRED: u8 = 116;
const ALERT_NO_APPLICATION_PROTOCOL: u8 = 120;

fn alert_of(code: quinn::TransportErrorCode) -> Option<u8> {
    let code = u64::from(code);
    // Lazily: below 0x100 the subtraction would overflow.
    (0x100..=0x1ff).contains(&code).then(|| (code - 0x100) as u8)
}

/// A TLS handshake failure explained, when `err` is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HandshakeFailure {
    /// The sentence for the log and the error.
    pub(crate) reason: String,
    /// The TLS library's own words, when they are ours.
    pub(crate) detail: String,
}

/// Explains `err` as a failed TLS handshake, as seen from `side`: `None`
/// when it is not one.
///
/// A failure we detected carries our own alert ("the peer's certificate is
/// bad"); one the peer detected arrives as its close ("our certificate was
/// rejected").
pub(crate) fn handshake_failure(err: &ConnectionError, side: Side) -> Option<HandshakeFailure> {
    let (their, them) = match side {
        Side::Client => ("server", "the scheduler"),
        Side::Server => ("client", "the client"),
    };
    match err {
        ConnectionError::TransportError(e) => {
            let alert = alert_of(e.code)?;
            let reason = match alert {
                ALERT_UNKNOWN_CA | ALERT_DECRYPT_ERROR => format!("{their} certificate not signed by the cluster CA"),
                ALERT_BAD_CERTIFICATE | ALERT_UNSUPPORTED_CERTIFICATE => match side {
                    Side::Client => "server certificate is not a scheduler certificate".to_string(),
                    Side::Server => "client certificate is not issued for a ccroute client role".to_string(),
                },
                ALERT_CERTIFICATE_EXPIRED => {
                    format!("{their} certificate has expired or is not valid yet (check both clocks)")
                }
                ALERT_CERTIFICATE_REQUIRED => format!("{their} sent no certificate"),
                ALERT_NO_APPLICATION_PROTOCOL => format!("{their} does not speak ccroute/1"),
                ALERT_HANDSHAKE_FAILURE => format!("no tls parameters in common with the {their}"),
                other => format!("tls alert {other}"),
            };
            Some(HandshakeFailure { reason, detail: e.reason.clone() })
        }
        ConnectionError::ConnectionClosed(close) => {
            let alert = alert_of(close.error_code)?;
            let what = match alert {
                ALERT_UNKNOWN_CA | ALERT_DECRYPT_ERROR => "it is not signed by their cluster CA".to_string(),
                ALERT_BAD_CERTIFICATE | ALERT_UNSUPPORTED_CERTIFICATE => match side {
                    Side::Client => "it is not issued for a ccroute client role".to_string(),
                    Side::Server => "it is not a scheduler certificate".to_string(),
                },
                ALERT_CERTIFICATE_EXPIRED => "it has expired or is not valid yet (check both clocks)".to_string(),
                ALERT_CERTIFICATE_REQUIRED => "we sent none".to_string(),
                ALERT_NO_APPLICATION_PROTOCOL => {
                    return Some(HandshakeFailure {
                        reason: format!("{them} does not speak ccroute/1"),
                        detail: String::from_utf8_lossy(&close.reason).into_owned(),
                    })
                }
                other => format!("tls alert {other}"),
            };
            Some(HandshakeFailure {
                reason: format!("{them} rejected our certificate: {what}"),
                detail: String::from_utf8_lossy(&close.reason).into_owned(),
            })
        }
        _ => None,
    }
}

/// Maps an error of a connection still in its handshake, logging a TLS
/// failure once, with its sentence.
pub(crate) fn handshake_error(peer: SocketAddr, err: ConnectionError, side: Side) -> NetError {
    match handshake_failure(&err, side) {
        Some(failure) => {
            tracing::warn!(%peer, detail = %failure.detail, "tls handshake failed: {}", failure.reason);
            NetError::Handshake { peer, reason: failure.reason }
        }
        None => NetError::ConnectionLost { peer, source: err },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn remote(alert: u8) -> ConnectionError {
        ConnectionError::ConnectionClosed(quinn::ConnectionClose {
            error_code: quinn::TransportErrorCode::crypto(alert),
            frame_type: None,
            reason: Bytes::from_static(b"invalid peer certificate: UnknownIssuer"),
        })
    }

    // Failures we detect ourselves carry quinn's TransportError, which quinn
    // does not export: the end-to-end tests in `tests.rs` cover those.
    #[test]
    fn a_peer_rejection_is_explained_from_our_side() {
        let f = handshake_failure(&remote(ALERT_UNKNOWN_CA), Side::Client).unwrap();
        assert_eq!(f.reason, "the scheduler rejected our certificate: it is not signed by their cluster CA");
        let f = handshake_failure(&remote(ALERT_UNSUPPORTED_CERTIFICATE), Side::Server).unwrap();
        assert_eq!(f.reason, "the client rejected our certificate: it is not a scheduler certificate");
        assert_eq!(handshake_failure(&ConnectionError::TimedOut, Side::Client), None);
    }

    #[test]
    fn close_reasons_round_trip_through_their_codes() {
        for reason in CloseReason::ALL {
            let err = ConnectionError::ApplicationClosed(quinn::ApplicationClose {
                error_code: reason.code(),
                reason: Bytes::from_static(reason.reason().as_bytes()),
            });
            assert_eq!(CloseReason::of(&err), Some(reason));
        }
        let other = ConnectionError::ApplicationClosed(quinn::ApplicationClose {
            error_code: VarInt::from_u32(99),
            reason: Bytes::new(),
        });
        assert_eq!(CloseReason::of(&other), None);
    }
}
