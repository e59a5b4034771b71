//! QUIC endpoints, mutual TLS and framed streams: the glue between the
//! sans-IO protocol (`ccroute_wire`) and tokio.
//!
//! Every consumerd and agent keeps one long-lived connection to the
//! scheduler; `status` opens short ones. Each connection carries:
//!
//! - one bidi control stream, opened by the client, that starts with the
//!   version handshake ([`handshake`]) and then carries frames both ways
//!   ([`FrameWriter`], [`FrameReader`]);
//! - one uni stream per large payload ([`send_on_new_stream`],
//!   [`accept_frames`]), so that an object file never holds up small
//!   messages.
//!
//! Modules:
//!
//! - [`tls`]: the cluster CA and role certificates ([`tls::init`],
//!   [`tls::load`]), TLS configurations, and the peer's role from its
//!   certificate ([`peer_role`]).
//! - [`endpoint`]: [`TransportOptions`], server and client endpoints,
//!   [`connect`] and [`accept`].
//! - [`framed`]: frames on streams, with a coalescing writer.
//! - [`handshake`]: the hello and its reply on the control stream.
//! - [`error`]: [`NetError`], the [`CloseReason`] codes, and the sentences
//!   for failed TLS handshakes.
//!
//! Left out: what the daemons say to each other (their sessions), retries
//! and reconnection, connection limits.

pub mod backoff;
pub mod endpoint;
pub mod error;
pub mod exposition;
pub mod framed;
pub mod handshake;
pub mod tls;

#[cfg(test)]
mod tests;

pub use backoff::Backoff;
pub use endpoint::{accept, client_endpoint, connect, knock, server_endpoint, shutdown, TransportOptions, KNOCK_EVERY};
pub use error::{CloseReason, NetError};
pub use framed::{
    accept_frames, accept_gated_frames, send_on_new_stream, send_on_new_stream_then, send_sized, Admission,
    FrameReader, FrameWriter, Gated, GatedFrames, Outgoing, StreamOptions, TrySendError, UniFrames, INLINE_PAYLOAD_MAX,
};
pub use framed::{payload_deadline, queued_payload_deadline, PAYLOAD_DEADLINE_FLOOR, PAYLOAD_MIN_RATE};
pub use handshake::{accept_hello, client_handshake, dial, random_id, system_info, ServerHandshake, HANDSHAKE_TIMEOUT};
/// The QUIC types the API above hands out.
pub use quinn::{Connection, Endpoint};
pub use tls::{peer_role, verify_role, CertRole, Identity, TlsError};
