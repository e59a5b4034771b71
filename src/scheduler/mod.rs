//! The scheduler daemon: the core behind QUIC.
//!
//! One task per connection. After the version handshake (and the role check:
//! the role a peer claims must be the role its certificate was issued for),
//! each connection is served by one owner task that holds the peer's
//! session — [`consumerd::serve`], [`agent::serve`] or [`admin::serve`].
//! Frames reach the owner through a channel from the stream readers; what
//! the core has for the peer (answers, assignments, cancels) comes from the
//! session's outbox, whose waker the owner registers. Nothing blocks across
//! peers: a slow consumerd stalls only its own connection (kubecc B13).
//!
//! Payloads are never decoded here. A task's compressed source is held (and
//! counted against [`ServerConfig::payload_budget`]) from the moment its
//! header says how big it is until the task ends; past the budget a task is
//! answered "retry locally" and its payload is never read.
//!
//! Shutdown ([`Server::serve`]'s future): stop accepting, answer waiting
//! and new tasks "run locally", let tasks on agents finish until
//! [`ServerConfig::shutdown_grace`], then close every connection at once so
//! that peers learn it immediately.

pub mod admin;
pub mod agent;
pub mod budget;
pub mod cache_hook;
pub mod consumerd;
mod inbound;
pub mod job;
pub mod metrics;
pub mod optimizer;
mod resume;
mod shipping;
mod web;

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ccroute_wire::{HelloOutcome, Limits, Refusal, RefusalKind, Role, PROTOCOL_VERSION};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use self::budget::Budget;
pub use self::cache_hook::{CacheHook, CacheLookup};
pub use self::job::{AgentAnswer, NetJob, TaskBody};
use self::optimizer::{DriverConfig, OptimizerThread};
use crate::cache::{Storage, StorageConfig};
use crate::memory;
use crate::net::{self, CloseReason, Identity, NetError, StreamOptions, TransportOptions, INLINE_PAYLOAD_MAX};
use ccroute_core::{Config, Hook, Scheduler};

/// Everything the scheduler daemon is configured with.
#[derive(Debug)]
pub struct ServerConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The scheduler's certificate and the cluster CA.
    pub identity: Identity,
    /// QUIC settings.
    pub transport: TransportOptions,
    /// The core's bounds.
    pub core: Config,
    /// Payload bytes held in memory at most (sources and objects in flight).
    pub payload_budget: u64,
    /// Connections at once; past it a new one is refused as busy.
    pub max_connections: usize,
    /// The optimizer thread; `None` keeps every agent at its own limit.
    pub optimizer: Option<DriverConfig>,
    /// How long tasks on agents may finish after shutdown begins.
    pub shutdown_grace: Duration,
    /// The result cache; `None`: no cache.
    pub cache: Option<StorageConfig>,
    /// Where to serve Prometheus metrics; `None`: nowhere.
    pub metrics: Option<SocketAddr>,
    /// Where the cost model is kept across restarts (the cache's
    /// directory); `None`: in memory only.
    pub costs_dir: Option<std::path::PathBuf>,
    /// Copy a task that runs well past its expected time to an idle agent
    /// when nothing waits for that agent (straggler hedging; `agent::hedge_stragglers`).
    pub hedging: bool,
    /// Each consumerd's remote window is this many times its fair share of
    /// the tokens (1: the share itself): with more, its build runs ahead and
    /// the units beyond the tokens wait here, their texts held in the
    /// payload budget ([`optimizer::Tuner::lookahead`]).
    pub lookahead: f64,
}

impl ServerConfig {
    /// Defaults around an address and an identity: 256 MiB of payloads,
    /// 4096 connections, the optimizer every second, 10 s of grace.
    pub fn new(listen: SocketAddr, identity: Identity) -> Self {
        ServerConfig {
            listen,
            identity,
            transport: TransportOptions::default(),
            core: Config::default(),
            payload_budget: 256 << 20,
            max_connections: 4096,
            optimizer: Some(DriverConfig::default()),
            shutdown_grace: Duration::from_secs(10),
            cache: None,
            metrics: None,
            costs_dir: None,
            hedging: true,
            lookahead: 1.0,
        }
    }
}

/// Why the scheduler could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The endpoint could not be set up.
    #[error(transparent)]
    Net(#[from] NetError),
    /// The optimizer thread could not start.
    #[error("cannot start the optimizer thread: {0}")]
    Optimizer(std::io::Error),
    /// The result cache could not be opened.
    #[error("cannot open the result cache: {0}")]
    Cache(#[from] crate::cache::StorageError),
    /// The metrics address could not be bound.
    #[error("cannot listen for metrics on {addr}: {error}")]
    Metrics {
        /// The address.
        addr: SocketAddr,
        /// Why.
        error: std::io::Error,
    },
}

/// Counters of the daemon itself, beside the core's.
#[derive(Debug, Default)]
pub struct ServerCounters {
    /// Tasks answered "retry locally" because the payload budget was spent.
    pub over_budget: AtomicU64,
}

/// What every connection task shares.
pub(crate) struct ServerState {
    pub(crate) scheduler: Scheduler<NetJob>,
    pub(crate) budget: Budget,
    pub(crate) id: u128,
    pub(crate) started: Instant,
    pub(crate) optimizer: Option<OptimizerThread>,
    pub(crate) cache: Option<CacheHook>,
    pub(crate) counters: ServerCounters,
    /// Who supplies shipped toolchains and who runs them.
    pub(crate) shipping: shipping::Shipping,
    /// Tasks carried over from an earlier scheduler by its peers.
    pub(crate) resumes: Arc<resume::Resumes>,
    /// What `/metrics` counts as it happens.
    pub(crate) metrics: metrics::Metrics,
    /// What the web view keeps, while the metrics listener is on.
    pub(crate) web: Option<web::Web>,
    /// What each unit is expected to cost, learnt from results.
    pub(crate) costs: crate::cost::Costs,
    /// Cancelled when shutdown begins.
    pub(crate) shutdown: CancellationToken,
    /// Straggler hedging is on ([`ServerConfig::hedging`]).
    pub(crate) hedging: bool,
    /// [`ServerConfig::lookahead`].
    pub(crate) lookahead: f64,
}

impl ServerState {
    /// Control streams carry small frames only; payloads above
    /// [`INLINE_PAYLOAD_MAX`] travel on their own streams.
    pub(crate) fn control_stream() -> StreamOptions {
        StreamOptions {
            limits: Limits { max_header: Limits::DEFAULT.max_header, max_payload: INLINE_PAYLOAD_MAX as u64 },
            writer_queue: 1024,
        }
    }
}

/// A bound scheduler, ready to serve.
pub struct Server {
    endpoint: quinn::Endpoint,
    metrics: Option<tokio::net::TcpListener>,
    state: Arc<ServerState>,
    max_connections: usize,
    grace: Duration,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.endpoint.local_addr().ok()).finish_non_exhaustive()
    }
}

impl Server {
    /// Opens the cache, binds the endpoint and starts the optimizer thread.
    ///
    /// # Errors
    /// [`ServerError`] when the cache cannot be opened, the address cannot
    /// be bound or the thread not started.
    pub async fn bind(config: ServerConfig) -> Result<Server, ServerError> {
        let costs = crate::cost::Costs::open(config.costs_dir.as_deref());
        let cache = match config.cache {
            Some(storage) => Some(CacheHook::new(Arc::new(Storage::open(storage).await?))),
            None => None,
        };
        let endpoint = net::server_endpoint(config.listen, &config.identity, &config.transport)?;
        let metrics = match config.metrics {
            Some(addr) => Some(metrics::bind(addr).await.map_err(|error| ServerError::Metrics { addr, error })?),
            None => None,
        };
        // Resumed tasks go to the agents that still hold them before anything
        // else looks at them (a cache hit would compile nothing, but the
        // agent's copy is already paid for).
        let resumes = Arc::new(resume::Resumes::new());
        let mut hooks: Vec<Arc<dyn Hook<NetJob>>> = vec![Arc::new(resume::ResumeHook { resumes: resumes.clone() })];
        hooks.extend(cache.iter().map(|c| Arc::new(c.clone()) as Arc<dyn Hook<NetJob>>));
        // Each consumerd's window is `lookahead` times its share of the
        // tokens, and what it sends past them waits on its route: the
        // route's bound grows with it, or a build run ahead has its last
        // units refused ("the route's queue is full") and compiled locally
        // (181 of 5,000 in the farm's lan-64-lookahead, at 10 × 512 tokens).
        let mut core = config.core;
        // (A float's cast to an integer saturates.)
        core.max_queued_per_route = (core.max_queued_per_route as f64 * config.lookahead.max(1.0)).ceil() as usize;
        let scheduler = Scheduler::with_hooks(core, hooks);
        let lookahead = config.lookahead;
        let optimizer = match config.optimizer {
            Some(driver) => Some(
                OptimizerThread::spawn(scheduler.clone(), DriverConfig { lookahead, ..driver })
                    .map_err(ServerError::Optimizer)?,
            ),
            None => None,
        };
        let shutdown = CancellationToken::new();
        let state = Arc::new(ServerState {
            scheduler,
            budget: Budget::new(config.payload_budget),
            id: net::random_id(),
            started: Instant::now(),
            optimizer,
            cache,
            counters: ServerCounters::default(),
            shipping: shipping::Shipping::default(),
            resumes,
            metrics: metrics::Metrics::default(),
            web: metrics.is_some().then(web::Web::default),
            costs,
            shutdown,
            hedging: config.hedging,
            lookahead,
        });
        Ok(Server { endpoint, metrics, state, max_connections: config.max_connections, grace: config.shutdown_grace })
    }

    /// The address it listens on (port 0 resolved).
    ///
    /// # Errors
    /// When the socket cannot say.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }

    /// The address metrics are served on (port 0 resolved), when asked for.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The core, for status and tests.
    pub fn scheduler(&self) -> &Scheduler<NetJob> {
        &self.state.scheduler
    }

    /// Serves until `shutdown` is cancelled, then shuts down as the module doc says.
    pub async fn serve(self, shutdown: CancellationToken) {
        let Server { endpoint, metrics, state, max_connections, grace } = self;
        let permits = Arc::new(Semaphore::new(max_connections));
        let mut connections = JoinSet::new();
        let metrics_stop = state.shutdown.child_token();
        let metrics = metrics.map(|l| tokio::spawn(metrics::serve(l, state.clone(), metrics_stop.clone())));
        // Freed memory goes back to the system once a load has ended (see `crate::memory`).
        let mut idle_trim = memory::IdleTrim::new();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tracing::info!(addr = ?endpoint.local_addr().ok(), "scheduler listening");
        let mut save_costs = tokio::time::interval(crate::cost::SAVE_EVERY);
        save_costs.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut sweep = tokio::time::interval(resume::SWEEP_EVERY);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                incoming = endpoint.accept() => {
                    let Some(incoming) = incoming else { break };
                    let state = state.clone();
                    let permit = permits.clone().try_acquire_owned().ok();
                    connections.spawn(async move {
                        handle(state, incoming, permit.is_some()).await;
                        drop(permit);
                    });
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                _ = sweep.tick() => state.resumes.sweep(),
                _ = save_costs.tick() => {
                    let state = state.clone();
                    connections.spawn_blocking(move || state.costs.save());
                }
                _ = tick.tick() => {
                    let requests = state.scheduler.totals().requests;
                    if idle_trim.observe(Instant::now(), requests, in_flight(&state.scheduler)) {
                        connections.spawn_blocking(memory::release_free_memory);
                    }
                }
                () = shutdown.cancelled() => break,
            }
        }
        tracing::info!("scheduler shutting down");
        state.shutdown.cancel();
        state.scheduler.shutdown();
        state.resumes.place_waiting();
        let deadline = tokio::time::Instant::now() + grace;
        while in_flight(&state.scheduler) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        net::shutdown(&endpoint, CloseReason::Shutdown).await;
        connections.abort_all();
        while connections.join_next().await.is_some() {}
        metrics_stop.cancel();
        if let Some(m) = metrics {
            let _ = m.await;
        }
        let saving = state.clone();
        let _ = tokio::task::spawn_blocking(move || saving.costs.save()).await;
        if let Some(cache) = &state.cache {
            // Lookups still running answer nobody now; results already taken
            // reach their tiers before the scheduler is gone.
            cache.close().await;
        }
    }
}

/// Tasks submitted and not yet ended, across connected consumerds.
fn in_flight(scheduler: &Scheduler<NetJob>) -> u64 {
    scheduler.consumerds().iter().map(|c| c.in_flight).sum()
}

/// One connection: TLS, the handshake, the role check, then its session.
async fn handle(state: Arc<ServerState>, incoming: quinn::Incoming, admitted: bool) {
    let Ok(conn) = net::accept(incoming).await else {
        return; // the net layer logged why
    };
    let peer = conn.remote_address();
    let (outcome, hs) = match net::accept_hello(&conn, net::HANDSHAKE_TIMEOUT).await {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "no usable hello");
            return;
        }
    };
    let hello = match outcome {
        HelloOutcome::Incompatible(refusal) => {
            tracing::warn!(%peer, %refusal, "refused");
            let _ = hs.refuse(refusal).await;
            return;
        }
        HelloOutcome::Hello(hello) => hello,
    };
    let refuse = |kind, reason: String| Refusal { kind, ours: PROTOCOL_VERSION, theirs: hello.version, reason };
    let refusal = if !admitted {
        Some(refuse(RefusalKind::Busy, "the scheduler is at its connection limit".into()))
    } else if state.shutdown.is_cancelled() {
        Some(refuse(RefusalKind::ShuttingDown, "the scheduler is shutting down".into()))
    } else {
        net::verify_role(&conn, &hello).err()
    };
    if let Some(refusal) = refusal {
        tracing::warn!(%peer, role = %hello.body.role, %refusal, "refused");
        let _ = hs.refuse(refusal).await;
        return;
    }
    // The node as `ccroute status` shortens it: its top 32 bits.
    let span = tracing::info_span!("peer", %peer, role = %hello.body.role, node = %format_args!("{:08x}", (hello.body.node_id >> 96) as u32));
    match hello.body.role {
        Role::Consumerd => consumerd::serve(state, conn, hello, hs).instrument(span).await,
        Role::Agent => agent::serve(state, conn, hello, hs).instrument(span).await,
        Role::Admin => admin::serve(state, conn, hs).instrument(span).await,
    }
}

/// Why the scheduler ends a peer's session itself (a peer that simply goes
/// away ends it with `Ok`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionEnd {
    /// The peer sent a message its role may not send.
    #[error("a {role} may not send a {message}")]
    NotForRole {
        /// The peer's role.
        role: &'static str,
        /// The message's name.
        message: &'static str,
    },
    /// A stream failed for a reason that is the peer's fault (a malformed or
    /// oversized frame, a stalled payload, ...), or writing to it failed.
    #[error(transparent)]
    Net(#[from] NetError),
}

/// How a peer's session loop ended: `Ok` when the peer went away, `Err` when
/// the scheduler closes the connection for a protocol violation.
pub(crate) type SessionOutcome = Result<(), SessionEnd>;

/// The outcome a failed stream means: a lost connection is the peer leaving, any other
/// failure is the peer's fault.
pub(crate) fn failure_outcome(e: NetError) -> SessionOutcome {
    if matches!(e, NetError::ConnectionLost { .. }) {
        Ok(())
    } else {
        Err(SessionEnd::Net(e))
    }
}

/// Logs how a `who` session ended and closes its connection when it broke the protocol.
pub(crate) fn finish(conn: &quinn::Connection, who: &str, outcome: SessionOutcome, in_flight: usize) {
    match outcome {
        Ok(()) => tracing::info!(in_flight, "{who} left"),
        Err(why) => {
            tracing::warn!(error = %why, in_flight, "closing the {who}'s connection");
            CloseReason::ProtocolError.close_with(conn, &why.to_string());
        }
    }
}

/// The `PeerInfo` the core keeps for a hello.
pub(crate) fn peer_info(hello: &ccroute_wire::Hello) -> ccroute_core::PeerInfo {
    ccroute_core::PeerInfo { node_id: hello.body.node_id, host_name: hello.body.host_name.clone() }
}
