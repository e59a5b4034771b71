//! Prometheus metrics of the scheduler, on an HTTP listener of their own
//! (`ccroute scheduler --metrics ADDR`; off unless given).
//!
//! Most figures are read at scrape time from the same snapshot `ccroute
//! status` answers with ([`super::admin::report`]), so `/metrics` and
//! `status --json` never disagree: tasks by outcome, tokens in use and
//! limit per agent, tasks waiting per route, connections by role, the cache's
//! lookups by tier and result, the payload budget. What only exists as a
//! stream of events — how long tasks waited before an agent took them, how
//! long agents took, bytes through the scheduler — is counted as it happens
//! in [`Metrics`], with atomics only (no lock on the hot path), and encoded
//! through `prometheus-client`'s encoder as histograms with fixed buckets.
//!
//! Names follow Prometheus' conventions: one `ccroute_` prefix, base units
//! (seconds, bytes), `_total` on counters, `_info` for build data. Labels are
//! bounded: outcome, role, tier and result are fixed sets; `route` is a
//! toolchain key (one per toolchain the farm serves) and `agent` an agent's
//! host name (one per agent) — no paths, task ids or digests.
//!
//! The optimizer's decisions are counted by their kind (`lower`, `raise`,
//! `busy`, … — a fixed set), not by their sentence, which carries figures.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::ServerState;

/// Upper bounds of the wait histogram's buckets, seconds: from a fraction
/// of a millisecond (a free token) to minutes (a farm full for a while).
const WAIT_BUCKETS: [f64; 14] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 120.0];
/// Upper bounds of the compile histogram's buckets, seconds.
const COMPILE_BUCKETS: [f64; 13] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];

/// A histogram of durations with fixed buckets, each an atomic counter:
/// observing is a few relaxed adds, never a lock.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Per bucket (not cumulative), the last one for values past every bound.
    counts: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram { bounds, counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(), sum_ns: AtomicU64::new(0) }
    }

    /// Counts one duration.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = self.bounds.iter().position(|b| secs <= *b).unwrap_or(self.bounds.len());
        // Relaxed: counters read only to be displayed; a scrape may see one
        // observation's bucket before its sum, which Prometheus tolerates.
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The sum of the observations, seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9
    }
}

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        // Per bucket: the encoder makes them cumulative.
        let buckets: Vec<(f64, u64)> = self
            .counts
            .iter()
            .enumerate()
            .map(|(i, c)| (self.bounds.get(i).copied().unwrap_or(f64::INFINITY), c.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// What the scheduler counts as it happens, for `/metrics`.
#[derive(Debug)]
pub struct Metrics {
    /// From a task's arrival at the scheduler to its dispatch to an agent.
    pub wait: Histogram,
    /// From a task's dispatch to its agent's result.
    pub compile: Histogram,
    /// Payload bytes received (sources from consumerds, objects from agents).
    pub bytes_in: AtomicU64,
    /// Payload bytes sent (sources to agents, objects to consumerds).
    pub bytes_out: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            wait: Histogram::new(&WAIT_BUCKETS),
            compile: Histogram::new(&COMPILE_BUCKETS),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    /// Counts payload bytes received.
    pub fn received(&self, bytes: usize) {
        // Relaxed: a display counter.
        self.bytes_in.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Counts payload bytes sent.
    pub fn sent(&self, bytes: usize) {
        // Relaxed: a display counter.
        self.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

/// A value encoded as a gauge or a counter, for figures read at scrape time.
#[derive(Debug)]
struct Value {
    value: f64,
    kind: MetricType,
}

impl EncodeMetric for Value {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        match self.kind {
            MetricType::Counter => encoder.encode_counter::<NoLabelSet, _, u64>(&(self.value as u64), None),
            _ => encoder.encode_gauge(&self.value),
        }
    }

    fn metric_type(&self) -> MetricType {
        self.kind
    }
}

/// Labels of one row of a family.
type Labels = Vec<(&'static str, String)>;

/// A metric family: a name, its help, and one value per label set.
struct Family {
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    kind: MetricType,
    rows: Vec<(Labels, f64)>,
}

impl Family {
    fn new(name: &'static str, help: &'static str, kind: MetricType) -> Self {
        Family { name, help, unit: None, kind, rows: Vec::new() }
    }

    fn unit(mut self, unit: Unit) -> Self {
        self.unit = Some(unit);
        self
    }

    fn row(mut self, labels: Labels, value: f64) -> Self {
        self.rows.push((labels, value));
        self
    }

    fn encode(&self, out: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let mut metric = out.encode_descriptor(self.name, self.help, self.unit.as_ref(), self.kind)?;
        for (labels, value) in &self.rows {
            let labels: Vec<(String, String)> = labels.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
            if matches!(self.kind, MetricType::Info) {
                metric.encode_info(&labels)?;
                continue;
            }
            let v = Value { value: *value, kind: self.kind };
            v.encode(metric.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// The scrape's collector: every family, read from the scheduler now.
struct Exposition {
    state: Arc<ServerState>,
}

impl std::fmt::Debug for Exposition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exposition").finish_non_exhaustive()
    }
}

impl Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in families(&self.state) {
            f.encode(&mut encoder)?;
        }
        let m = &self.state.metrics;
        let wait = encoder.encode_descriptor(
            "ccroute_task_wait",
            "From a task's arrival to its dispatch to an agent",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        m.wait.encode(wait)?;
        let compile = encoder.encode_descriptor(
            "ccroute_task_compile",
            "From a task's dispatch to its agent's result",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        m.compile.encode(compile)
    }
}

/// The families read from the status snapshot and the counters.
fn families(state: &ServerState) -> Vec<Family> {
    let r = super::admin::report(state);
    let m = &state.metrics;
    let t = &r.totals;
    let counter = MetricType::Counter;
    let gauge = MetricType::Gauge;
    let mut families = vec![
        Family::new("ccroute_build", "The scheduler's version and protocol", MetricType::Info).row(
            vec![
                ("version", env!("CARGO_PKG_VERSION").into()),
                ("protocol", ccroute_wire::PROTOCOL_VERSION.to_string()),
            ],
            1.0,
        ),
        Family::new("ccroute_task_requests", "Tasks consumerds submitted", counter).row(vec![], t.requests as f64),
        Family::new("ccroute_tasks", "Tasks ended, by how they ended", counter)
            .row(vec![("outcome", "completed".into())], t.completed as f64)
            .row(vec![("outcome", "failed".into())], t.failed as f64)
            .row(vec![("outcome", "retried".into())], t.retried as f64)
            .row(vec![("outcome", "intercepted".into())], t.intercepted as f64)
            .row(vec![("outcome", "cancelled".into())], t.cancelled as f64),
        Family::new("ccroute_tasks_requeued", "Placements again after an agent was lost", counter)
            .row(vec![], t.requeued as f64),
        Family::new(
            "ccroute_tasks_adopted",
            "Tasks a restarted scheduler gave to the agent still running them",
            counter,
        )
        .row(vec![], t.adopted as f64),
        Family::new("ccroute_tasks_in_flight", "Tasks submitted and not yet ended", gauge)
            .row(vec![], r.consumerds.iter().map(|c| c.in_flight).sum::<u64>() as f64),
        Family::new("ccroute_payload_budget_used", "Payload bytes held in memory now", gauge)
            .unit(Unit::Bytes)
            .row(vec![], r.payload_bytes as f64),
        Family::new("ccroute_payload_budget_limit", "The payload budget", gauge)
            .unit(Unit::Bytes)
            .row(vec![], r.payload_budget as f64),
        Family::new("ccroute_payload_received", "Payload bytes received (sources and objects)", counter)
            .unit(Unit::Bytes)
            .row(vec![], m.bytes_in.load(Ordering::Relaxed) as f64),
        Family::new("ccroute_payload_sent", "Payload bytes sent (sources and objects)", counter)
            .unit(Unit::Bytes)
            .row(vec![], m.bytes_out.load(Ordering::Relaxed) as f64),
        Family::new("ccroute_connections", "Connected peers, by role", gauge)
            .row(vec![("role", "agent".into())], r.agents.len() as f64)
            .row(vec![("role", "consumerd".into())], r.consumerds.len() as f64),
        Family::new("ccroute_uptime", "Time since the scheduler started", gauge)
            .unit(Unit::Seconds)
            .row(vec![], r.uptime_s as f64),
    ];
    let mut tokens_in_use = Family::new("ccroute_agent_tokens_in_use", "Tokens an agent holds now", gauge);
    let mut tokens_limit = Family::new("ccroute_agent_tokens_limit", "An agent's token limit now", gauge);
    let mut started = Family::new("ccroute_agent_tasks_started", "Compiles an agent started since it started", counter);
    for a in &r.agents {
        let agent = || vec![("agent", a.host_name.clone())];
        tokens_in_use = tokens_in_use.row(agent(), f64::from(a.tokens_in_use));
        tokens_limit = tokens_limit.row(agent(), f64::from(a.token_limit));
        started = started.row(agent(), a.tasks_started as f64);
    }
    let mut queued = Family::new("ccroute_route_queued_tasks", "Tasks waiting for a token, per route", gauge);
    for route in &r.routes {
        queued = queued.row(vec![("route", route.toolchain.to_string())], route.queued as f64);
    }
    families.extend([tokens_in_use, tokens_limit, started, queued]);
    if let Some(optimizer) = &state.optimizer {
        let mut decisions = Family::new(
            "ccroute_optimizer_decisions",
            "The optimizer's decisions on agents' token limits, by kind",
            counter,
        );
        for (kind, n) in optimizer.decisions_by_kind() {
            decisions = decisions.row(vec![("reason", kind.into())], n as f64);
        }
        families.push(decisions);
    }
    if let Some(cache) = &r.cache {
        let mut lookups = Family::new("ccroute_cache_lookups", "Result cache lookups, by tier and result", counter);
        let mut bytes =
            Family::new("ccroute_cache_stored", "Bytes the result cache holds, by tier", gauge).unit(Unit::Bytes);
        for tier in &cache.tiers {
            lookups = lookups
                .row(vec![("tier", tier.name.clone()), ("result", "hit".into())], tier.hits as f64)
                .row(vec![("tier", tier.name.clone()), ("result", "miss".into())], tier.misses as f64);
            bytes = bytes.row(vec![("tier", tier.name.clone())], tier.bytes as f64);
        }
        families.extend([lookups, bytes]);
    }
    families
}

/// The whole exposition, in the OpenMetrics text format.
///
/// # Errors
/// When a value cannot be encoded.
pub(crate) fn render(state: &Arc<ServerState>) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Exposition { state: state.clone() }));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)?;
    Ok(out)
}

/// Serves `/metrics` and the web view on `listener` until `shutdown` is cancelled.
pub(crate) async fn serve(listener: TcpListener, state: Arc<ServerState>, shutdown: CancellationToken) {
    let mut connections = JoinSet::new();
    let recent = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
    connections.spawn(super::web::tick(state.clone(), recent.clone(), shutdown.clone()));
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let state = state.clone();
                let recent = recent.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |req| answer(req, state.clone(), recent.clone()));
                    let io = hyper_util::rt::TokioIo::new(stream);
                    if let Err(e) = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await {
                        tracing::debug!(error = %e, "metrics connection");
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = shutdown.cancelled() => break,
        }
    }
    connections.abort_all();
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn answer(
    req: Request<Incoming>,
    state: Arc<ServerState>,
    recent: Arc<std::sync::Mutex<std::collections::VecDeque<super::web::Shown>>>,
) -> Result<Response<Body>, Infallible> {
    let with = |status: StatusCode, kind: &str, body: Body| {
        let mut r = Response::new(body);
        *r.status_mut() = status;
        if let Ok(v) = kind.parse() {
            r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
        }
        r
    };
    let reply = |status: StatusCode, kind: &str, body: String| with(status, kind, Full::new(Bytes::from(body)).boxed());
    Ok(match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => match render(&state) {
            Ok(text) => reply(StatusCode::OK, "application/openmetrics-text; version=1.0.0; charset=utf-8", text),
            Err(e) => {
                reply(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", format!("cannot encode the metrics: {e}\n"))
            }
        },
        (&Method::GET, "/") => reply(StatusCode::OK, "text/html; charset=utf-8", super::web::INDEX_HTML.into()),
        (&Method::GET, "/snapshot.json") => {
            reply(StatusCode::OK, "application/json", super::web::snapshot(&state, &recent).to_string())
        }
        (&Method::GET, "/events") => match state.web.as_ref().and_then(|w| w.attach(&state, &recent)) {
            Some(events) => {
                let mut r = with(StatusCode::OK, "text/event-stream", events.boxed());
                r.headers_mut()
                    .insert(hyper::header::CACHE_CONTROL, hyper::header::HeaderValue::from_static("no-cache"));
                r
            }
            None => reply(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "ccroute: too many pages attached\n".into()),
        },
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "ccroute: not found (try / or /metrics)\n".into()),
    })
}

/// Binds the metrics listener.
///
/// # Errors
/// When the address cannot be bound.
pub(crate) async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
