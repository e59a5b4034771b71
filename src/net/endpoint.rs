//! QUIC endpoints with mutual TLS: the scheduler's server endpoint, the
//! clients' endpoints, dialling and accepting.
//!
//! - [`TransportOptions`]: idle timeout, keep-alive, stream counts and
//!   receive windows.
//! - [`server_endpoint`] / [`accept`]: the scheduler's side; a client whose
//!   certificate does not chain to the cluster CA never becomes a connection.
//! - [`client_endpoint`] / [`connect`] / [`knock`]: everyone else's; the
//!   server must present a scheduler certificate of the cluster.
//!
//! The scheduler keys its stateless resets with a secret derived from its
//! private key: restarted (even after `kill -9`), it answers the first packet
//! of a connection its previous run held with a reset the peer recognises,
//! and the peer reconnects at once instead of waiting out its idle timeout.
//!
//! Both sides log a failed TLS handshake once, as a sentence. Left out:
//! connection limits (the scheduler refuses an [`quinn::Incoming`] itself),
//! backoff after a refusal (the daemons'), and 0-RTT.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
            // Half a second: a restarted scheduler answers the next one with
            // a reset, so its peers are back within about a second.
            keep_alive: Duration::from_millis(500),
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
            // Streams of one priority are sent first come, first served, not
            // round-robin: on a link the host can just fill, round-robin
            // shares it among every payload in flight, so each arrives as
            // late as the last (a consumerd with 40 sources on the way: each
            // took ~40x its own time, and agents idled waiting for them).
            // FIFO finishes the first payload first and lets its agent start.
            // The control stream stays ahead at priority 0; every bulk
            // stream (payloads, results, fetch answers) sends at -1.
            .send_fairness(false)
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
    let reset_key = identity.derived_secret("ccroute 1 QUIC stateless reset key");
    let mut endpoint_config =
        quinn::EndpointConfig::new(Arc::new(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &reset_key)));
    // Connection ids carry a check keyed the same way: a packet of the
    // previous run's connections passes it, and is answered with a reset
    // rather than dropped as forged.
    let cid_secret = identity.derived_secret("ccroute 1 QUIC connection id key");
    let cid_key = u64::from_le_bytes(cid_secret[..8].try_into().unwrap_or_default());
    endpoint_config.cid_generator(move || Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key)));
    // A reset is always smaller than the packet that prompted it (no loop,
    // no amplification): a farm's agents may all be told in the same second.
    endpoint_config.min_reset_interval(Duration::from_millis(1));
    endpoint_on(addr, endpoint_config, Some(config))
}

/// An endpoint on a socket of [`bind_udp`], on the running async runtime.
fn endpoint_on(
    addr: SocketAddr,
    config: quinn::EndpointConfig,
    server: Option<quinn::ServerConfig>,
) -> Result<Endpoint, NetError> {
    let socket = bind_udp(addr)?;
    let runtime = quinn::default_runtime()
        .ok_or_else(|| NetError::Bind { addr, source: std::io::Error::other("no async runtime") })?;
    Endpoint::new(config, server, socket, runtime).map_err(|source| NetError::Bind { addr, source })
}

/// The socket buffers every endpoint asks for, each way: a burst of a few
/// thousand datagrams (a scheduler hearing from many peers at once, an
/// agent or consumerd receiving a large payload) must wait in the buffer,
/// not be dropped there. Linux's default (208 KiB) drops them: each drop
/// is a loss to QUIC, whose congestion window then shrinks, and on a link
/// of tens of milliseconds it grows back slowly (the farm harness's `wan`
/// saw ~1,000 such drops and a window stuck at ~10 MB/s).
pub const SOCKET_BUFFER: usize = 8 << 20;

/// Binds a UDP socket on `addr` with [`SOCKET_BUFFER`]s. The kernel caps
/// the sizes at `net.core.rmem_max` / `wmem_max`: below a quarter of what
/// was asked (Linux reports twice what it grants), says once what to raise.
pub(super) fn bind_udp(addr: SocketAddr) -> Result<std::net::UdpSocket, NetError> {
    use quinn::udp::{UdpSockRef, UdpSocketState};
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let socket = std::net::UdpSocket::bind(addr).map_err(|source| NetError::Bind { addr, source })?;
    let state = UdpSocketState::new(UdpSockRef::from(&socket)).map_err(|source| NetError::Bind { addr, source })?;
    // Failing to enlarge is not failing to bind: the sizes are checked below.
    let _ = state.set_recv_buffer_size(UdpSockRef::from(&socket), SOCKET_BUFFER);
    let _ = state.set_send_buffer_size(UdpSockRef::from(&socket), SOCKET_BUFFER);
    let got = state.recv_buffer_size(UdpSockRef::from(&socket)).unwrap_or(0);
    if got < SOCKET_BUFFER / 4 && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            asked = SOCKET_BUFFER,
            granted = got,
            "the kernel gave this QUIC socket a small receive buffer: bursts will be dropped and transfers slowed; \
             raise it with `sysctl -w net.core.rmem_max={SOCKET_BUFFER} net.core.wmem_max={SOCKET_BUFFER}` \
             (and in /etc/sysctl.d to keep it)"
        );
    }
    Ok(socket)
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
    let mut endpoint = endpoint_on(addr, quinn::EndpointConfig::default(), None)?;
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

/// How often [`knock`] tries again while nothing answers (each knock
/// stretched by up to 25 % at random, so a farm does not knock in step).
pub const KNOCK_EVERY: Duration = Duration::from_millis(500);
/// Unanswered knocks at once, at most: each lasts until the idle timeout.
const KNOCKS_IN_FLIGHT: usize = 16;
/// After this long without an answer, [`knock`] says so, once.
const KNOCK_QUIET: Duration = Duration::from_secs(5);

/// Like [`connect`], for a daemon that keeps one connection: while nothing
/// answers (the scheduler down, restarting, or cut off), a new attempt
/// starts every [`KNOCK_EVERY`] beside those still waiting, so the
/// connection is made within about half a second of the scheduler listening
/// again, however long it was gone — not after a retransmission timer or a
/// backoff has run out. Returns when an attempt connects or fails for a
/// reason other than silence; drop it to stop knocking.
///
/// # Errors
/// As [`connect`], except a timeout.
pub async fn knock(endpoint: &Endpoint, addr: SocketAddr) -> Result<Connection, NetError> {
    let mut attempts = tokio::task::JoinSet::new();
    let started = Instant::now();
    let mut next = tokio::time::Instant::now();
    let mut said = false;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next), if attempts.len() < KNOCKS_IN_FLIGHT => {
                let endpoint = endpoint.clone();
                attempts.spawn(async move { connect(&endpoint, addr).await });
                let jitter = 1.0 + 0.25 * f64::from((super::random_id() % 1000) as u32) / 1000.0;
                next += KNOCK_EVERY.mul_f64(jitter);
                if !said && started.elapsed() >= KNOCK_QUIET {
                    tracing::warn!(scheduler = %addr, "no answer from the scheduler; knocking every {KNOCK_EVERY:?} until it answers");
                    said = true;
                }
            }
            Some(done) = attempts.join_next() => match done {
                // Dropping the set abandons the other attempts.
                Ok(Ok(conn)) => return Ok(conn),
                Ok(Err(NetError::ConnectionLost { source: quinn::ConnectionError::TimedOut, .. })) => {}
                Ok(Err(e)) => return Err(e),
                Err(join) => std::panic::resume_unwind(join.into_panic()),
            },
        }
    }
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
