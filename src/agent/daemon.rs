//! The agent daemon: connects to the scheduler, runs what it is given,
//! reports its CPU every second.
//!
//! One long-lived QUIC connection, re-established for as long as the agent
//! runs: while nothing answers, a knock every 0.5 s (`net::knock`), so the
//! agent is back within about half a second of the scheduler listening
//! again; after a refusal or a connection that ended early, backoff (0.5 s,
//! ×√2, at most 5 s, with jitter). Each task runs in
//! its own scratch directory through the [`Executor`] (allow-list first,
//! nothing written or run before it passes); a cancel from the scheduler
//! kills the compiler's process group and still answers, so that its token
//! comes back. When the connection drops, the compiles go on and what they
//! produce is kept: the next scheduler adopts what its consumerds still
//! want ([`super::work`]). A connection that carried a load and has been
//! quiet since, nothing running and nothing in doubt, is replaced by a new
//! one at once, to give back the buffers both ends kept for it
//! ([`crate::memory::Recycling`]) — unless the scheduler had cut its token
//! limit, which a new connection would start above again.
//!
//! An agent whose scratch filesystem is nearly full ([`SCRATCH_LOW`] free
//! while it compiles nothing, so the space is not its own compiles') would
//! fail every unit it is given — each then compiled by its consumerd after
//! a wasted round trip — and, answering at once, would look the least
//! loaded agent of the farm and draw ever more of them. It leaves the
//! scheduler instead, says so with what to free, and joins again once it
//! has twice that free ([`ROOM_TO_COME_BACK`]); it does not join while it
//! lacks it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ccroute_wire::{Frame, HelloBody, Message, Role, Toolchain};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::executor::{free_bytes, Executor, ExecutorConfig, ExecutorError, SCRATCH_LOW};
use super::sampler::CpuSampler;
use super::shipped::{self, Sandbox, Shipping, Store};
use super::work::Work;
use crate::memory;
use crate::net::tls::{self, CertRole};
use crate::net::{self, Identity, NetError, TransportOptions};
use crate::toolchain::{discover, test_toolchain};

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The scheduler's address.
    pub scheduler: SocketAddr,
    /// The agent's certificate and the cluster CA.
    pub identity: Arc<Identity>,
    /// QUIC settings.
    pub transport: TransportOptions,
    /// The most compiles at once (`--jobs`; default: online CPUs).
    pub jobs: u32,
    /// Its speed pinned for the scheduler's placement, thousandths of the
    /// nominal (`--speed 2.5` is 2500); 0: the scheduler learns it.
    pub speed_milli: u32,
    /// Whether to measure this host's speed at start when it is not pinned
    /// ([`super::speed_probe`]).
    pub speed_probe: bool,
    /// Compilers to offer besides those found in `PATH`.
    pub compilers: Vec<PathBuf>,
    /// Whether to look in `PATH` for gcc, g++, cc, c++, clang, clang++.
    pub discover: bool,
    /// Whether to offer the no-op test toolchain.
    pub test_toolchain: bool,
    /// This host's speed for the test toolchain's replayed units (1.0: as
    /// recorded; 0.5: twice as long).
    pub replay_speed: f64,
    /// Where scratch directories are made.
    pub scratch_parent: PathBuf,
    /// This agent's node id.
    pub node_id: u128,
    /// This host's name.
    pub host_name: String,
    /// Whether to run toolchains shipped to it (in a sandbox), and where
    /// to keep them; `None` serves only installed compilers.
    pub shipping: Option<StoreConfig>,
    /// When the scheduler refuses this agent for good (a certificate of
    /// another cluster or role), wait for new certificates in this directory
    /// and try again with them, instead of exiting with an error.
    pub wait_for_certificates: Option<PathBuf>,
    /// Where to serve Prometheus metrics (`/metrics`); `None`: nowhere.
    pub metrics: Option<SocketAddr>,
}

/// The scratch filesystem's free bytes an agent that left for want of
/// them waits for before it joins again: twice what made it leave, so that
/// one compile's temporary files do not make it come and go.
pub const ROOM_TO_COME_BACK: u64 = 2 * SCRATCH_LOW;

/// `scratch`'s free bytes when under `needed`; `None` when there is room
/// (or the filesystem cannot be asked).
fn short_of_room(scratch: &Path, needed: u64) -> Option<u64> {
    free_bytes(scratch).filter(|free| *free < needed)
}

/// How a connection's service ended.
enum Ended {
    /// The agent is shutting down.
    Shutdown,
    /// The connection was lost: why.
    Lost(String),
    /// The scratch filesystem is nearly full, with nothing compiling: the
    /// agent leaves until it has room.
    NoRoom,
    /// The connection carried a load and has been quiet since, with
    /// nothing in doubt: it is replaced by a new one
    /// ([`memory::Recycling`]).
    Recycle,
}

/// The agent's `/metrics`: its compiles, read from the executor at scrape time.
fn metrics_source(executor: Arc<Executor>, jobs: u32) -> net::exposition::Source {
    use net::exposition::{build_info, Family};
    use prometheus_client::metrics::MetricType;
    Arc::new(move || {
        let mut ended = Family::new(
            "ccroute_agent_compiles_ended",
            "Compiles this agent ended, by outcome (not_compiled: refused, cancelled or failed to run)",
            MetricType::Counter,
        );
        for (outcome, n) in Executor::OUTCOMES.iter().zip(executor.ended()) {
            ended = ended.row(vec![("outcome", (*outcome).into())], n as f64);
        }
        vec![
            build_info("agent"),
            Family::new("ccroute_agent_compiles_started", "Compiles this agent started", MetricType::Counter)
                .row(vec![], executor.started() as f64),
            Family::new("ccroute_agent_compiles_running", "Compiles running on this agent now", MetricType::Gauge)
                .row(vec![], f64::from(executor.running())),
            Family::new("ccroute_agent_jobs", "Compiles this agent allows at once (--jobs)", MetricType::Gauge)
                .row(vec![], f64::from(jobs)),
            ended,
            Family::histogram(
                "ccroute_agent_compile",
                "A compile's time on this agent (inputs fetched, compiler run, object read)",
                executor.durations(),
            ),
        ]
    })
}

/// How often an agent waiting for new certificates looks at their files.
const CERTIFICATE_CHECK: Duration = Duration::from_secs(2);

/// Where an agent keeps shipped toolchains.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// The store's directory.
    pub dir: PathBuf,
    /// Its bound in bytes.
    pub max_bytes: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig { dir: shipped::default_store_dir(), max_bytes: shipped::DEFAULT_MAX_BYTES }
    }
}

impl AgentConfig {
    /// The defaults, for an agent of `scheduler` with `identity`: a job per
    /// online CPU, compilers discovered in `PATH`, no test toolchain, scratch
    /// on a memory file system when there is one, a random node id, this
    /// host's name. The command line and the in-process cluster both start
    /// here, so a new setting has one default.
    pub fn new(scheduler: SocketAddr, identity: Arc<Identity>) -> AgentConfig {
        AgentConfig {
            scheduler,
            identity,
            transport: TransportOptions::default(),
            jobs: crate::host::online_cpus(),
            speed_milli: 0,
            speed_probe: true,
            compilers: Vec::new(),
            discover: true,
            test_toolchain: false,
            replay_speed: 1.0,
            scratch_parent: crate::agent::executor::default_scratch_parent(),
            node_id: crate::net::random_id(),
            host_name: crate::host::host_name(),
            shipping: Some(StoreConfig::default()),
            wait_for_certificates: None,
            metrics: None,
        }
    }
}

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The scratch root could not be made.
    #[error(transparent)]
    Executor(#[from] ExecutorError),
    /// The scheduler will never admit this agent as it is configured.
    #[error("the scheduler at {scheduler} will never admit this agent: {error}; {what_to_do}")]
    Refused {
        /// The scheduler.
        scheduler: SocketAddr,
        /// Its refusal, or the TLS failure.
        error: String,
        /// What the operator must change.
        what_to_do: &'static str,
    },
    /// The metrics listener could not be bound.
    #[error("{0}")]
    Metrics(std::io::Error),
    /// Nothing to offer.
    #[error(
        "no compiler found to offer (looked in PATH and --compiler) and no shipped toolchains can run here; \
         nothing to do"
    )]
    NoToolchains,
}

/// `path` from the agent's working directory when relative (as typed on
/// its command line); as given when that directory cannot be read.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// Runs the agent until `shutdown` is cancelled.
///
/// # Errors
/// [`AgentError`] when it cannot start; connection trouble is retried, not returned.
pub async fn run(mut config: AgentConfig, shutdown: CancellationToken) -> Result<(), AgentError> {
    // The sandbox and the compilers are handed these by path, from other
    // working directories: a relative one is taken from here, once.
    config.scratch_parent = absolute(&config.scratch_parent);
    if let Some(store) = &mut config.shipping {
        store.dir = absolute(&store.dir);
    }
    let (toolchains, paths, packages) = offered(&config).await;
    let (shipping, shipping_state) = start_shipping(config.shipping.as_ref()).await;
    if toolchains.is_empty() && shipping.is_none() {
        return Err(AgentError::NoToolchains);
    }
    for t in &toolchains {
        tracing::info!(toolchain = %t, key = %t.key(), "offering");
    }
    let executor = Arc::new(Executor::new(ExecutorConfig {
        scratch_parent: config.scratch_parent.clone(),
        toolchains: paths,
        offer_test_toolchain: config.test_toolchain,
        replay_speed: config.replay_speed,
        shipping,
        packages,
        ..ExecutorConfig::default()
    })?);
    if let Some(addr) = config.metrics {
        let listener = net::exposition::bind(addr).await.map_err(AgentError::Metrics)?;
        // Port 0 resolved: the address a scraper is to be given.
        let addr = listener.local_addr().unwrap_or(addr);
        tracing::info!("metrics on http://{addr}/metrics");
        let source = metrics_source(executor.clone(), config.jobs);
        tokio::spawn(net::exposition::serve(listener, source, shutdown.clone()));
    }
    // Pinned, it is not measured; a failed probe leaves it to the results.
    let mut probed = 0;
    if config.speed_milli == 0 && config.speed_probe {
        tokio::select! {
            p = super::speed_probe::measure(&executor, &toolchains) => probed = p.unwrap_or(0),
            () = shutdown.cancelled() => return Ok(()),
        }
    }
    let mut work = Work::new(executor);
    let mut sampler = CpuSampler::new();
    let mut backoff = net::Backoff::new();
    let mut last_error: Option<String> = None;
    let mut identity = config.identity.clone();
    // Whether it waits for room on its scratch filesystem (and has said so).
    let mut short = false;
    while !shutdown.is_cancelled() {
        let scratch = work.executor().scratch_root().to_owned();
        let needed = if short { ROOM_TO_COME_BACK } else { SCRATCH_LOW };
        if let Some(free) = short_of_room(&scratch, needed) {
            if !short {
                tracing::warn!(
                    scratch = %scratch.display(),
                    free_kib = free >> 10,
                    "the scratch filesystem is nearly full, and every compile here would fail: this agent is out of \
                     the scheduler until it has {} MiB free (free space there, or give --scratch-dir another \
                     filesystem)",
                    ROOM_TO_COME_BACK >> 20
                );
                short = true;
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                () = shutdown.cancelled() => {}
            }
            continue;
        }
        if short {
            tracing::info!(scratch = %scratch.display(), "the scratch filesystem has room again: joining the scheduler");
            short = false;
        }
        let started = Instant::now();
        // Dialling knocks for as long as nothing answers: shutdown stops it.
        let dialled = tokio::select! {
            d = connect(&config, &identity, (&toolchains, probed), &shipping_state, work.resumable()) => d,
            () = shutdown.cancelled() => break,
        };
        let pause = match dialled {
            Ok((conn, writer, reader, limit)) => {
                tracing::info!(scheduler = %config.scheduler, limit, "connected to the scheduler");
                last_error = None;
                let connected = Instant::now();
                match serve(&conn, (writer, reader, limit), &mut work, &mut sampler, &shutdown).await {
                    Ended::Lost(e) => {
                        work.orphan();
                        tracing::warn!(
                            scheduler = %config.scheduler,
                            error = %e,
                            running = work.running(),
                            kept = work.held(),
                            "scheduler connection lost; compiles go on, for the next scheduler to adopt"
                        );
                    }
                    Ended::Shutdown => conn.close(net::CloseReason::Done.code(), b"agent leaving"),
                    Ended::NoRoom => {
                        // The check at the loop's top says why, and waits for room.
                        conn.close(net::CloseReason::Done.code(), b"agent leaving: its scratch filesystem is full");
                        continue;
                    }
                    Ended::Recycle => {
                        conn.close(net::CloseReason::Done.code(), b"agent recycling its connection");
                        // A long connection: the next loss is met without delay.
                        let _ = backoff.after_lost(connected.elapsed());
                        // Ids of tasks it answered were the connection's.
                        work.orphan();
                        tracing::info!(
                            scheduler = %config.scheduler,
                            "connection quiet after a load: replaced by a new one, to give back the buffers it kept"
                        );
                        continue;
                    }
                }
                backoff.after_lost(connected.elapsed())
            }
            Err(e) => {
                // No retry can change a certificate or a version: say so once and stop.
                if let Some(what_to_do) = e.final_refusal() {
                    let Some(dir) = &config.wait_for_certificates else {
                        return Err(AgentError::Refused {
                            scheduler: config.scheduler,
                            error: e.to_string(),
                            what_to_do,
                        });
                    };
                    tracing::error!(
                        scheduler = %config.scheduler,
                        error = %e,
                        "the scheduler will never admit this agent with its certificate: {what_to_do}; \
                         waiting for new certificates in {} (checked every {CERTIFICATE_CHECK:?})",
                        dir.display()
                    );
                    match wait_for_certificates(dir, &shutdown).await {
                        Some(new) => identity = Arc::new(new),
                        None => break,
                    }
                    continue;
                }
                let text = e.to_string();
                if last_error.as_deref() != Some(text.as_str()) {
                    tracing::warn!(scheduler = %config.scheduler, error = %text, "cannot reach the scheduler; retrying");
                    last_error = Some(text);
                }
                backoff.after(started.elapsed())
            }
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = shutdown.cancelled() => {}
        }
    }
    work.stop();
    Ok(())
}

/// Installed compilers' identities and files, by toolchain key.
type Packages = HashMap<ccroute_wire::ToolchainKey, (Toolchain, Arc<crate::toolchain::Package>)>;

/// The toolchains to offer, the compiler behind each, and its files.
async fn offered(config: &AgentConfig) -> (Vec<Toolchain>, HashMap<ccroute_wire::ToolchainKey, PathBuf>, Packages) {
    let discover_in_path = config.discover;
    let extra = config.compilers.clone();
    let began = Instant::now();
    let found = tokio::task::spawn_blocking(move || {
        let path = if discover_in_path { std::env::var_os("PATH") } else { Some(std::ffi::OsString::new()) };
        discover(path.as_deref(), &extra)
    })
    .await
    .unwrap_or_default();
    tracing::info!(
        compilers = found.len(),
        took_ms = began.elapsed().as_millis() as u64,
        "compilers found and digested"
    );
    let mut toolchains = Vec::new();
    let mut paths = HashMap::new();
    let mut packages = HashMap::new();
    for d in found {
        if paths.insert(d.toolchain.key(), d.path).is_none() {
            packages.insert(d.toolchain.key(), (d.toolchain.clone(), d.package));
            toolchains.push(d.toolchain);
        }
    }
    if config.test_toolchain {
        toolchains.push(test_toolchain());
    }
    (toolchains, paths, packages)
}

/// The sandbox and store, when shipping is asked for and works here; the
/// state to announce either way.
async fn start_shipping(config: Option<&StoreConfig>) -> (Option<Shipping>, ccroute_wire::Shipping) {
    let Some(config) = config.cloned() else { return (None, ccroute_wire::Shipping::Off) };
    let made = tokio::task::spawn_blocking(move || {
        let sandbox = Sandbox::probe()?;
        let store = Store::open(&config.dir, config.max_bytes)
            .map_err(|e| format!("cannot open the toolchain store {}: {e}", config.dir.display()))?;
        Ok::<_, String>(Shipping { sandbox, store })
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()));
    match made {
        Ok(shipping) => {
            let what = shipping.sandbox.describe();
            tracing::info!(sandbox = %what, "running shipped toolchains in a sandbox");
            (Some(shipping), ccroute_wire::Shipping::Ready(what))
        }
        Err(why) => {
            tracing::warn!(
                reason = %why,
                "cannot run shipped toolchains: serving only the compilers installed here (--no-shipping silences this)"
            );
            (None, ccroute_wire::Shipping::Unavailable(why))
        }
    }
}

/// Waits until the agent's certificate files in `dir` are replaced and load;
/// `None` on shutdown.
async fn wait_for_certificates(dir: &Path, shutdown: &CancellationToken) -> Option<Identity> {
    let mut seen = tls::files_stamp(dir, CertRole::Agent);
    let mut said: Option<String> = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(CERTIFICATE_CHECK) => {}
            () = shutdown.cancelled() => return None,
        }
        let now = tls::files_stamp(dir, CertRole::Agent);
        if now == seen {
            continue;
        }
        seen = now;
        match tls::load(dir, CertRole::Agent) {
            Ok(identity) => {
                tracing::info!(dir = %dir.display(), "new certificates; trying the scheduler again");
                return Some(identity);
            }
            Err(e) => {
                // Half-written, say: said once, and looked at again when it changes.
                let text = e.to_string();
                if said.as_deref() != Some(text.as_str()) {
                    tracing::warn!(dir = %dir.display(), error = %text, "the new certificates do not load yet");
                    said = Some(text);
                }
            }
        }
    }
}

async fn connect(
    config: &AgentConfig,
    identity: &Identity,
    (toolchains, probed_speed_milli): (&[Toolchain], u32),
    shipping: &ccroute_wire::Shipping,
    resumed: Vec<ccroute_wire::ResumedTask>,
) -> Result<(quinn::Connection, net::FrameWriter, net::FrameReader, u32), NetError> {
    let body = HelloBody {
        role: Role::Agent,
        node_id: config.node_id,
        host_name: config.host_name.clone(),
        system: net::system_info(),
        toolchains: toolchains.to_vec(),
        usage_limit: config.jobs,
        speed_milli: config.speed_milli,
        probed_speed_milli,
        shipping: shipping.clone(),
        resumed,
    };
    let (conn, writer, reader, welcome) = net::dial(identity, &config.transport, config.scheduler, body).await?;
    Ok((conn, writer, reader, welcome.limit))
}

/// Serves one connection until shutdown, its loss, or a scratch
/// filesystem too full to compile on.
async fn serve(
    conn: &quinn::Connection,
    (writer, mut reader, first_limit): (net::FrameWriter, net::FrameReader, u32),
    work: &mut Work,
    sampler: &mut CpuSampler,
    shutdown: &CancellationToken,
) -> Ended {
    let mut uni = net::accept_frames(conn.clone(), ccroute_wire::Limits::DEFAULT);
    let mut senders = JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Freed memory goes back to the system while compiles go on, and once
    // they stop (see `crate::memory`).
    let mut trim = memory::IdleTrim::every(memory::AGENT_TRIM_EVERY);
    // Packets from the scheduler (keep-alives included) say it still hears
    // us: results sent well before the last are not in doubt.
    work.heard(Instant::now());
    let mut received = conn.stats().udp_rx.datagrams;
    let mut recycling = memory::Recycling::new(Instant::now(), work.executor().started());
    // The token limit the scheduler set last. One it cut below the first
    // keeps the connection: a new one would start at the first again, and
    // the optimizer learn the cut anew during the next build.
    let mut limit = first_limit;
    let lost = loop {
        let frame: Frame = tokio::select! {
            next = reader.next() => match next {
                Ok(Some(f)) => f,
                Ok(None) => break Ended::Lost("the scheduler closed the control stream".to_string()),
                Err(e) => break Ended::Lost(e.to_string()),
            },
            next = uni.next() => match next {
                Some(Ok(f)) => f,
                Some(Err(e @ NetError::ConnectionLost { .. })) => break Ended::Lost(e.to_string()),
                None => break Ended::Lost("connection ended".to_string()),
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "a task stream failed");
                    // A task whose source did not come whole is answered at
                    // once: the scheduler holds its token, and any later run
                    // of it here, until it is.
                    let Ok((Message::Task(t), why)) = e.into_unfinished() else { continue };
                    let (header, _) = work.refuse(t.task_id, format!("the task's source did not reach the agent whole: {why}"));
                    if let Err(e) = writer.send(Message::TaskResult(header), Bytes::new()).await {
                        break Ended::Lost(e.to_string());
                    }
                    continue;
                }
            },
            Some((header, object)) = work.next_finished() => {
                if let Err(e) = net::send_sized(conn, &writer, &mut senders, Message::TaskResult(header), object, ()).await {
                    break Ended::Lost(e.to_string());
                }
                continue;
            }
            Some(_) = senders.join_next(), if !senders.is_empty() => continue,
            _ = tick.tick() => {
                let now_received = conn.stats().udp_rx.datagrams;
                if now_received != received {
                    received = now_received;
                    work.heard(Instant::now());
                }
                let executor = work.executor();
                if trim.observe(Instant::now(), executor.started(), u64::from(executor.running())) {
                    tokio::task::spawn_blocking(memory::release_free_memory);
                }
                if executor.running() == 0 && short_of_room(executor.scratch_root(), SCRATCH_LOW).is_some() {
                    break Ended::NoRoom;
                }
                // A result in doubt (sent within `work::RETAIN` of the last
                // packet heard) waits, without counting as work.
                let busy = work.running() > 0 || work.held() > 0 || !senders.is_empty();
                let replaceable = !work.results_in_doubt() && limit >= first_limit;
                if recycling.observe(Instant::now(), work.executor().started(), busy) && replaceable {
                    break Ended::Recycle;
                }
                let sample = sampler.sample(executor.running(), executor.started());
                if let Err(e) = writer.send(Message::CpuSample(sample), Bytes::new()).await {
                    break Ended::Lost(e.to_string());
                }
                continue;
            }
            e = writer.failed() => break Ended::Lost(e.to_string()),
            () = shutdown.cancelled() => break Ended::Shutdown,
        };
        match frame.message {
            Message::Task(header) => {
                if let Some((header, _)) = work.start(header, frame.payload, Some(conn.clone())) {
                    if let Err(e) = writer.send(Message::TaskResult(header), Bytes::new()).await {
                        break Ended::Lost(e.to_string());
                    }
                }
            }
            Message::Cancel(c) => work.cancel(c.task_id),
            Message::Adopt(a) => {
                if let Some((header, object)) = work.adopt(a.handle, a.task_id) {
                    if let Err(e) =
                        net::send_sized(conn, &writer, &mut senders, Message::TaskResult(header), object, ()).await
                    {
                        break Ended::Lost(e.to_string());
                    }
                }
            }
            Message::UsageLimit(u) => {
                tracing::debug!(limit = u.limit, "token limit");
                limit = u.limit;
            }
            other => tracing::warn!(message = other.name(), "unexpected message from the scheduler"),
        }
    };
    if matches!(lost, Ended::Shutdown | Ended::NoRoom) {
        work.stop();
    }
    // Results still being written on streams of their own are in `recent`.
    senders.abort_all();
    lost
}
