//! The live web view, served on the metrics listener (`--metrics ADDR`):
//! one page (`/`, its HTML, CSS and script embedded in the binary: no build
//! step, nothing fetched from elsewhere) fed by server-sent events
//! (`/events`, a snapshot every second) — agents with their slots coloured
//! by the consumerd whose job runs in each, consumerds, routes and their
//! queues, a rolling chart of tasks per second and queue wait, and the last
//! tasks with their phases. `/snapshot.json` answers the same snapshot once.
//!
//! What the page needs beyond `ccroute status` is kept here only while the
//! listener is on: the tasks running on each agent (a sharded map, one entry
//! per task between its dispatch and its result) and the last tasks to end
//! (a bounded lock-free ring that drops its oldest). One ticker builds the
//! snapshot once a second for every page attached, and nothing at all when
//! none is.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use crossbeam_queue::ArrayQueue;
use dashmap::DashMap;
use hyper::body::Frame;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::ServerState;

/// The page.
pub(crate) const INDEX_HTML: &str = include_str!("web/index.html");

/// How many ended tasks the page lists.
const RECENT: usize = 40;
/// How often the page is sent a snapshot.
const TICK: Duration = Duration::from_secs(1);
/// Pages attached at once; past it a new one is refused.
const MAX_PAGES: usize = 64;

/// A task running on an agent, for its slot on the page.
#[derive(Debug, Clone, Copy)]
struct Running {
    agent: u128,
    consumerd: u128,
}

/// A task that ended, for the page's list.
#[derive(Debug)]
pub(crate) struct Ended {
    /// Its encoded spec (decoded for its file name only when shown).
    pub(crate) spec: Bytes,
    pub(crate) consumerd: u128,
    pub(crate) agent: Arc<str>,
    pub(crate) queue: Duration,
    pub(crate) transfer: Duration,
    pub(crate) compile: Duration,
    pub(crate) outcome: &'static str,
}

/// What the web view keeps while the listener is on.
#[derive(Debug)]
pub(crate) struct Web {
    running: DashMap<u64, Running>,
    ended: ArrayQueue<Ended>,
    pages: Mutex<Vec<mpsc::Sender<Bytes>>>,
}

impl Default for Web {
    fn default() -> Self {
        Web { running: DashMap::new(), ended: ArrayQueue::new(RECENT * 4), pages: Mutex::new(Vec::new()) }
    }
}

impl Web {
    /// A task was dispatched to `agent` for `consumerd`.
    pub(crate) fn started(&self, task: u64, agent: u128, consumerd: u128) {
        self.running.insert(task, Running { agent, consumerd });
    }

    /// A task left its agent (answered, cancelled, or the agent lost).
    pub(crate) fn stopped(&self, task: u64) {
        self.running.remove(&task);
    }

    /// An agent left: none of its slots is busy any more.
    pub(crate) fn agent_left(&self, agent: u128) {
        self.running.retain(|_, r| r.agent != agent);
    }

    /// A task ended on an agent.
    pub(crate) fn ended(&self, e: Ended) {
        self.ended.force_push(e);
    }

    /// Attaches a page: its events, starting with a snapshot now.
    pub(crate) fn attach(&self, state: &ServerState, recent: &Mutex<VecDeque<Shown>>) -> Option<Events> {
        let mut pages = self.pages.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        pages.retain(|p| !p.is_closed());
        if pages.len() >= MAX_PAGES {
            return None;
        }
        let (tx, rx) = mpsc::channel(4);
        let first = event(&snapshot(state, recent));
        pages.push(tx);
        Some(Events { rx, first: Some(first) })
    }
}

/// An ended task as the page shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Shown {
    file: String,
    client: String,
    agent: String,
    queue_ms: f64,
    transfer_ms: f64,
    compile_ms: f64,
    outcome: &'static str,
}

/// The snapshot the page renders, as JSON.
pub(crate) fn snapshot(state: &ServerState, recent: &Mutex<VecDeque<Shown>>) -> serde_json::Value {
    let report = super::admin::report(state);
    let mut recent = recent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(web) = &state.web {
        while let Some(e) = web.ended.pop() {
            let file = ccroute_wire::codec::decode_spec(&e.spec)
                .map(|s| s.input_path)
                .unwrap_or_else(|_| "(unreadable spec)".into());
            let ms = |d: Duration| (d.as_secs_f64() * 1e4).round() / 10.0;
            if recent.len() == RECENT {
                recent.pop_back();
            }
            recent.push_front(Shown {
                file,
                client: format!("{:032x}", e.consumerd),
                agent: e.agent.to_string(),
                queue_ms: ms(e.queue),
                transfer_ms: ms(e.transfer),
                compile_ms: ms(e.compile),
                outcome: e.outcome,
            });
        }
    }
    let mut slots: std::collections::HashMap<String, Vec<String>> = std::collections::HashMap::new();
    if let Some(web) = &state.web {
        for r in web.running.iter() {
            slots.entry(format!("{:032x}", r.agent)).or_default().push(format!("{:032x}", r.consumerd));
        }
    }
    for v in slots.values_mut() {
        v.sort();
    }
    let (waited, wait_s) = state.metrics.waits();
    serde_json::json!({
        "status": crate::cli::status::json(&report),
        "slots": slots,
        "recent": recent.iter().collect::<Vec<_>>(),
        "wait": { "count": waited, "sum_s": wait_s },
    })
}

fn event(v: &serde_json::Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

/// Sends every attached page a snapshot each second until `shutdown`.
pub(crate) async fn tick(state: Arc<ServerState>, recent: Arc<Mutex<VecDeque<Shown>>>, shutdown: CancellationToken) {
    let Some(web) = &state.web else { return };
    let mut every = tokio::time::interval(TICK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            () = shutdown.cancelled() => return,
        }
        let pages: Vec<mpsc::Sender<Bytes>> = {
            let mut pages = web.pages.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            pages.retain(|p| !p.is_closed());
            pages.clone()
        };
        if pages.is_empty() {
            continue;
        }
        let started = Instant::now();
        let e = event(&snapshot(&state, &recent));
        for p in pages {
            // A page that has not read the last ones is sent nothing this time.
            let _ = p.try_send(e.clone());
        }
        tracing::trace!(took = ?started.elapsed(), "web snapshot");
    }
}

/// A page's events: a body that ends when the page goes away.
#[derive(Debug)]
pub(crate) struct Events {
    rx: mpsc::Receiver<Bytes>,
    first: Option<Bytes>,
}

impl hyper::body::Body for Events {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        self.rx.poll_recv(cx).map(|e| e.map(|b| Ok(Frame::data(b))))
    }
}
