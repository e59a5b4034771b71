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

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::ServerState;
pub use crate::net::exposition::Histogram;
use crate::net::exposition::{self, Family, Labels, COMPILE_BUCKETS};
use ccroute_wire::ToolchainKey;
use dashmap::DashMap;
use std::time::Duration;

/// Upper bounds of the wait histogram's buckets, seconds: from a fraction
/// of a millisecond (a free token) to minutes (a farm full for a while).
const WAIT_BUCKETS: [f64; 14] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 120.0];

/// What the scheduler counts as it happens, for `/metrics`.
#[derive(Debug)]
pub struct Metrics {
    /// From a task's arrival at the scheduler to its dispatch to an agent,
    /// per route (one per toolchain the farm serves).
    route_wait: DashMap<ToolchainKey, Histogram>,
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
            route_wait: DashMap::new(),
            compile: Histogram::new(&COMPILE_BUCKETS),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    /// Counts a task of `route` dispatched after waiting `d`.
    pub fn waited(&self, route: ToolchainKey, d: Duration) {
        match self.route_wait.get(&route) {
            Some(h) => h.observe(d),
            None => self.route_wait.entry(route).or_insert_with(|| Histogram::new(&WAIT_BUCKETS)).observe(d),
        }
    }

    /// Tasks dispatched so far over every route, and their summed wait in seconds.
    pub fn waits(&self) -> (u64, f64) {
        self.route_wait.iter().fold((0, 0.0), |(n, s), h| (n + h.count(), s + h.sum_seconds()))
    }

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

/// The families read from the status snapshot and the counters.
fn families(state: &ServerState) -> Vec<Family> {
    let r = super::admin::report(state);
    let m = &state.metrics;
    let t = &r.totals;
    let counter = MetricType::Counter;
    let gauge = MetricType::Gauge;
    let mut families = vec![
        exposition::build_info("scheduler"),
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
            "ccroute_agent_tokens_leaked",
            "Tokens a leaving agent's session ended without, after waiting for them: a bug in ccroute (alert on any)",
            counter,
        )
        .row(vec![], state.scheduler.leaked_tokens() as f64),
        Family::new(
            "ccroute_tasks_adopted",
            "Tasks given to the agent still holding them: after a restart, or as their copy when it came back from a cut",
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
    let c = &r.costs;
    families.extend([
        Family::new("ccroute_cost_model_units", "Units whose cost the scheduler knows", gauge)
            .row(vec![], c.units as f64),
        Family::new("ccroute_cost_predictions", "Results checked against their expected cost, by its basis", counter)
            .row(vec![("basis", "history".into())], c.from_history as f64)
            .row(vec![("basis", "size_or_cold".into())], c.predictions.saturating_sub(c.from_history) as f64),
    ]);
    if let Some(error) = c.median_error {
        families.push(
            Family::new(
                "ccroute_cost_median_error_ratio",
                "Median |expected - took| / took of recent results expected from history",
                gauge,
            )
            .row(vec![], f64::from(error)),
        );
    }
    let mut tokens_in_use = Family::new("ccroute_agent_tokens_in_use", "Tokens an agent holds now", gauge);
    let mut tokens_limit = Family::new("ccroute_agent_tokens_limit", "An agent's token limit now", gauge);
    let mut started = Family::new("ccroute_agent_tasks_started", "Compiles an agent started since it started", counter);
    let mut copies = Family::new(
        "ccroute_agent_copies_started",
        "Copies of an agent's tasks started on other agents (straggler hedging) in its connection",
        counter,
    );
    let mut won = Family::new(
        "ccroute_agent_copies_won",
        "Copies of other agents' tasks an agent ran that answered first, in its connection",
        counter,
    );
    for a in &r.agents {
        let agent = || vec![("agent", a.host_name.clone())];
        tokens_in_use = tokens_in_use.row(agent(), f64::from(a.tokens_in_use));
        tokens_limit = tokens_limit.row(agent(), f64::from(a.token_limit));
        started = started.row(agent(), a.tasks_started as f64);
        copies = copies.row(agent(), a.copies_started as f64);
        won = won.row(agent(), a.copies_won as f64);
    }
    let mut queued = Family::new("ccroute_route_queued_tasks", "Tasks waiting for a token, per route", gauge);
    for route in &r.routes {
        queued = queued.row(vec![("route", route.toolchain.to_string())], route.queued as f64);
    }
    families.extend([tokens_in_use, tokens_limit, started, copies, won, queued]);
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
    let waits: Vec<_> = m.route_wait.iter().collect();
    let mut routes: Vec<(Labels, &Histogram)> =
        waits.iter().map(|w| (vec![("route", w.key().to_string())], w.value())).collect();
    routes.sort_by(|a, b| a.0.cmp(&b.0));
    families.push(Family::histograms(
        "ccroute_task_wait",
        "From a task's arrival to its dispatch to an agent, per route",
        routes,
    ));
    families.push(Family::histogram(
        "ccroute_task_compile",
        "From a task's dispatch to its agent's result",
        &m.compile,
    ));
    families
}

/// Serves `/metrics` and the web view on `listener` until `shutdown` is cancelled.
pub(crate) async fn serve(listener: TcpListener, state: Arc<ServerState>, shutdown: CancellationToken) {
    let recent = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
    let ticker = tokio::spawn(super::web::tick(state.clone(), recent.clone(), shutdown.clone()));
    exposition::serve_http(listener, shutdown, move |req| answer(req, state.clone(), recent.clone())).await;
    let _ = ticker.await;
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn answer(
    req: Request<Incoming>,
    state: Arc<ServerState>,
    recent: Arc<std::sync::Mutex<std::collections::VecDeque<super::web::Shown>>>,
) -> Result<Response<Body>, Infallible> {
    let with = exposition::reply::<Body>;
    let reply = |status: StatusCode, kind: &str, body: String| with(status, kind, Full::new(Bytes::from(body)).boxed());
    Ok(match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => exposition::scrape_reply(families(&state)).map(BodyExt::boxed),
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
    exposition::bind(addr).await
}
