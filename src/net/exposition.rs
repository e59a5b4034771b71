//! Prometheus metrics for every daemon: the pieces the scheduler, the agent
//! and the consumerd build their `/metrics` from, encoded by
//! `prometheus-client` (no hand-written exposition format), and the small
//! HTTP listener the agent and the consumerd serve them on (the scheduler's
//! also serves the web view: [`crate::scheduler`]).
//!
//! A daemon reads its figures at scrape time into [`Family`]s — a name, its
//! help, one value per bounded label set — and counts what only exists as
//! a stream of events (durations) in a [`Histogram`] of atomics, copied
//! into a family when scraped.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The content type of an OpenMetrics text exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds of compile-duration buckets, seconds: a cached or tiny unit
/// to a template-heavy one.
pub const COMPILE_BUCKETS: [f64; 13] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];

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
    /// Empty, with these bucket bounds (seconds, increasing).
    pub fn new(bounds: &'static [f64]) -> Self {
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

    /// Its buckets now, each (upper bound, observations in it alone).
    fn buckets(&self) -> Vec<(f64, u64)> {
        self.counts
            .iter()
            .enumerate()
            .map(|(i, c)| (self.bounds.get(i).copied().unwrap_or(f64::INFINITY), c.load(Ordering::Relaxed)))
            .collect()
    }
}

/// Labels of one row of a family: a fixed name, a value from a bounded set.
pub type Labels = Vec<(&'static str, String)>;

/// One row's value.
#[derive(Debug, Clone)]
enum Row {
    Number(f64),
    /// Per bucket (the encoder makes them cumulative), and the sum in seconds.
    Histogram {
        buckets: Vec<(f64, u64)>,
        sum: f64,
    },
}

/// A metric family: a name, its help, and one value per label set.
#[derive(Debug, Clone)]
pub struct Family {
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    kind: MetricType,
    rows: Vec<(Labels, Row)>,
}

impl Family {
    /// An empty family of this kind (counter, gauge or info).
    pub fn new(name: &'static str, help: &'static str, kind: MetricType) -> Self {
        Family { name, help, unit: None, kind, rows: Vec::new() }
    }

    /// A histogram family of one row: `h` as it is now.
    pub fn histogram(name: &'static str, help: &'static str, h: &Histogram) -> Self {
        Family::histograms(name, help, vec![(Vec::new(), h)])
    }

    /// A histogram family of one row per label set.
    pub fn histograms(name: &'static str, help: &'static str, rows: Vec<(Labels, &Histogram)>) -> Self {
        let rows = rows
            .into_iter()
            .map(|(labels, h)| (labels, Row::Histogram { buckets: h.buckets(), sum: h.sum_seconds() }))
            .collect();
        Family { name, help, unit: Some(Unit::Seconds), kind: MetricType::Histogram, rows }
    }

    /// In this unit (the name gets its suffix).
    pub fn unit(mut self, unit: Unit) -> Self {
        self.unit = Some(unit);
        self
    }

    /// Adds a row.
    pub fn row(mut self, labels: Labels, value: f64) -> Self {
        self.rows.push((labels, Row::Number(value)));
        self
    }

    fn encode(&self, out: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let mut metric = out.encode_descriptor(self.name, self.help, self.unit.as_ref(), self.kind)?;
        for (labels, row) in &self.rows {
            let labels: Vec<(String, String)> = labels.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
            if matches!(self.kind, MetricType::Info) {
                metric.encode_info(&labels)?;
                continue;
            }
            let encoder = metric.encode_family(&labels)?;
            match row {
                Row::Number(v) => Value { value: *v, kind: self.kind }.encode(encoder)?,
                Row::Histogram { buckets, sum } => encode_histogram(encoder, buckets, *sum)?,
            }
        }
        Ok(())
    }
}

fn encode_histogram(mut encoder: MetricEncoder<'_>, buckets: &[(f64, u64)], sum: f64) -> Result<(), std::fmt::Error> {
    let count = buckets.iter().map(|(_, n)| n).sum();
    encoder.encode_histogram::<NoLabelSet>(sum, count, buckets, None)
}

/// A value encoded as a gauge or a counter.
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

/// The families of one scrape, as a collector.
#[derive(Debug)]
struct Scrape(Vec<Family>);

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.0 {
            f.encode(&mut encoder)?;
        }
        Ok(())
    }
}

/// `families` in the OpenMetrics text format.
///
/// # Errors
/// When a value cannot be encoded.
pub fn render(families: Vec<Family>) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(families)));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)?;
    Ok(out)
}

/// The `ccroute_build_info` family: version and wire protocol.
pub fn build_info(daemon: &'static str) -> Family {
    Family::new("ccroute_build", "The daemon's version and protocol", MetricType::Info).row(
        vec![
            ("daemon", daemon.into()),
            ("version", env!("CARGO_PKG_VERSION").into()),
            ("protocol", ccroute_wire::PROTOCOL_VERSION.to_string()),
        ],
        1.0,
    )
}

/// What a daemon answers a scrape with: its families now.
pub type Source = Arc<dyn Fn() -> Vec<Family> + Send + Sync>;

/// Serves `GET /metrics` from `source` on `listener` until `shutdown`;
/// anything else is a 404.
pub async fn serve(listener: TcpListener, source: Source, shutdown: CancellationToken) {
    serve_http(listener, shutdown, move |req| answer(req, source.clone())).await;
}

/// Serves HTTP/1 on `listener` until `shutdown`, each request answered by
/// `answer` (the scheduler's listener also serves the web view through it).
pub async fn serve_http<F, Fut, B>(listener: TcpListener, shutdown: CancellationToken, answer: F)
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let answer = answer.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(answer);
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

/// A reply of `status` with a body of `kind`.
pub fn reply<B>(status: StatusCode, kind: &str, body: B) -> Response<B> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    if let Ok(v) = kind.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

/// The answer to a scrape of `families`.
pub fn scrape_reply(families: Vec<Family>) -> Response<Full<Bytes>> {
    match render(families) {
        Ok(text) => reply(StatusCode::OK, CONTENT_TYPE, Full::new(Bytes::from(text))),
        Err(e) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            Full::new(Bytes::from(format!("cannot encode the metrics: {e}\n"))),
        ),
    }
}

async fn answer(req: Request<Incoming>, source: Source) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => scrape_reply(source()),
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            Full::new(Bytes::from_static(b"ccroute: not found (try /metrics)\n")),
        ),
    })
}

/// Binds a metrics listener, saying what to do when it cannot.
///
/// # Errors
/// When the address cannot be bound.
pub async fn bind(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot listen for metrics on {addr}: {e} (choose another --metrics address)"),
        )
    })
}
