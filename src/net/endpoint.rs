//! QUIC endpoints with mutual TLS: the scheduler's server endpoint, the
//! clients' endpoints, dialling and accepting.
//!
//! - [`TransportOptions`]: idle timeout, keep-alive, stream counts and
//!   receive windows.
//! - [`server_endpoint`] / [`accept`]: the scheduler's side; a client whose
//!   certificate does not chain to the cluster CA never becomes a connection.
//! - [`client_endpoint`] / [`connect`]: everyone else's; the server must
//!   present a scheduler certificate of the cluster.
//!
//! Both sides log a failed TLS handshake once, as a sentence. Left out:
//! connection limits (the scheduler refuses an [`quinn::Incoming`] itself),
//! reconnecting, and 0-RTT.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{Connection, Endpoint, IdleTimeout, TransportConfig, VarInt};

use super::error::{handshake_error, NetError, Side};
use super::tls::{self, Identity, TlsError, SCHEDULER_NAME};

/// Transport settings of a connection; both ends should agree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportOptions {
    /// A connection with no packets for this long is dead (the smaller of the
    /// two sides' values applies).
    pub idle_timeout: Duration,
    /// How often an idle connection sends a keep-alive; well under
    /// `idle_timeout`, so that only a dead peer times out.
    pub keep_alive: Duration,
    /// Uni streams (large payloads) the peer may have open at once.
    pub max_concurrent_uni_streams: u32,
    /// Bidi streams the peer may have open at once: the control stream, and
    /// the fetch streams of shipped toolchains (an agent's to the scheduler,
    /// the scheduler's relays to a consumerd), one per toolchain fetched and
    /// one per unit whose inputs an agent lacks.
    pub max_concurrent_bidi_streams: u32,
    /// Bytes one stream may have in flight towards us.
    pub stream_receive_window: u32,
    /// Bytes all streams together may have in flight towards us.
    pub receive_window: u32,
    /// Bytes we keep in flight towards the peer, all streams together.
    pub send_window: u64,
}

impl Default for TransportOptions {
    /// 5 s idle timeout, 1 s keep-alive, and windows for ~90 MB/s: at that
    /// rate a 4 MiB stream window covers ~45 ms of scheduling hiccups on a
    /// busy host, and 16 MiB lets four large payloads run at full speed.
    fn default() -> Self {
        TransportOptions {
            idle_timeout: Duration::from_secs(5),
            keep_alive: Duration::from_secs(1),
            max_concurrent_uni_streams: 64,
            max_concurrent_bidi_streams: 256,
            stream_receive_window: 4 << 20,
            receive_window: 16 << 20,
            send_window: 16 << 20,
        }
    }
}

impl TransportOptions {
    /// quinn's transport configuration for these options.
    ///
    /// # Errors
    /// [`NetError::Options`] when `idle_timeout` is too large for QUIC.
    fn transport_config(&self) -> Result<TransportConfig, NetError> {
        let mut config = TransportConfig::default();
        let idle = IdleTimeout::try_from(self.idle_timeout)
            .map_err(|_| NetError::Options(format!("idle timeout of {:?} is too large for quic", self.idle_timeout)))?;
        config
            .max_idle_timeout(Some(idle))
            .keep_alive_interval(Some(self.keep_alive))
            .max_concurrent_uni_streams(VarInt::from_u32(self.max_concurrent_uni_streams))
            .max_concurrent_bidi_streams(VarInt::from_u32(self.max_concurrent_bidi_streams))
            .stream_receive_window(VarInt::from_u32(self.stream_receive_window))
            .receive_window(VarInt::from_u32(self.receive_window))
            .send_window(self.send_window)
            // ccroute sends no datagrams.
            .datagram_receive_buffer_size(None);
        Ok(config)
    }
}

/// The scheduler's endpoint on `addr`: it presents `identity` and accepts
/// only clients with a certificate from the same cluster CA.
///
/// # Errors
/// [`NetError::Tls`] for an unusable identity, [`NetError::Options`] for
/// unusable options, [`NetError::Bind`] when the socket cannot be bound.
pub fn server_endpoint(addr: SocketAddr, identity: &Identity, opts: &TransportOptions) -> Result<Endpoint, NetError> {
    let crypto = QuicServerConfig::try_from(tls::server_config(identity)?).map_err(|_| TlsError::NoQuicCipherSuite)?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    config.transport_config(Arc::new(opts.transport_config()?));
    Endpoint::server(config, addr).map_err(|source| NetError::Bind { addr, source })
}

/// A client endpoint for dialling `target`: bound to an ephemeral port of
/// the same address family, presenting `identity`, trusting only the
/// cluster CA.
///
/// # Errors
/// [`NetError::Tls`] for an unusable identity, [`NetError::Options`] for
/// unusable options, [`NetError::Bind`] when the socket cannot be bound.
pub fn client_endpoint(identity: &Identity, opts: &TransportOptions, target: SocketAddr) -> Result<Endpoint, NetError> {
    let crypto = QuicClientConfig::try_from(tls::client_config(identity)?).map_err(|_| TlsError::NoQuicCipherSuite)?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(Arc::new(opts.transport_config()?));
    let addr = match target {
        SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
    };
    let mut endpoint = Endpoint::client(addr).map_err(|source| NetError::Bind { addr, source })?;
    endpoint.set_default_client_config(config);
    Ok(endpoint)
}

/// Dials the scheduler at `addr` and completes the TLS handshake, checking
/// that it presents the cluster's scheduler certificate.
///
/// With TLS 1.3 the scheduler checks our certificate after we consider the
/// handshake done: a rejection of ours shows on the first use of the
/// connection (the hello), as [`NetError::Handshake`].
///
/// # Errors
/// [`NetError::Handshake`] (logged once) when the server's certificate is
/// not acceptable, [`NetError::Connect`] or [`NetError::ConnectionLost`]
/// otherwise.
pub async fn connect(endpoint: &Endpoint, addr: SocketAddr) -> Result<Connection, NetError> {
    let connecting =
        endpoint.connect(addr, SCHEDULER_NAME).map_err(|source| NetError::Connect { peer: addr, source })?;
    connecting.await.map_err(|e| handshake_error(addr, e, Side::Client))
}

/// Completes the TLS handshake of an incoming connection. A client whose
/// certificate does not chain to the cluster CA fails here and never
/// becomes a connection.
///
/// # Errors
/// [`NetError::Handshake`] (logged once) for a TLS failure,
/// [`NetError::ConnectionLost`] otherwise.
pub async fn accept(incoming: quinn::Incoming) -> Result<Connection, NetError> {
    let peer = incoming.remote_address();
    let connecting = incoming.accept().map_err(|source| NetError::ConnectionLost { peer, source })?;
    connecting.await.map_err(|e| handshake_error(peer, e, Side::Server))
}

/// How long [`shutdown`] waits for peers to learn of the close.
pub const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Closes every connection of `endpoint` with `reason` and waits, at most
/// [`CLOSE_GRACE`], until the peers were told: they learn at once instead of
/// waiting out their idle timeout.
pub async fn shutdown(endpoint: &Endpoint, reason: super::CloseReason) {
    endpoint.close(reason.code(), reason.reason().as_bytes());
    let _ = tokio::time::timeout(CLOSE_GRACE, endpoint.wait_idle()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_options_make_a_transport_config() {
        let opts = TransportOptions::default();
        assert!(opts.keep_alive < opts.idle_timeout);
        opts.transport_config().unwrap();
        let absurd = TransportOptions { idle_timeout: Duration::from_secs(u64::MAX / 4), ..opts };
        let err = absurd.transport_config().unwrap_err();
        assert!(err.to_string().starts_with("invalid transport options: idle timeout of"), "{err}");
    }
}
