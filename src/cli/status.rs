//! `ccroute status`: asks the scheduler (as role admin) for a snapshot and
//! prints it as tables, or as JSON with `--json`; `--watch` asks again every
//! second (see [`super::watch`]) over the same [`AdminLink`].

use std::fmt::Write as _;
use std::net::SocketAddr;

use bytes::Bytes;
use ccroute_wire::{Hello, HelloBody, Message, Query, Reply, Role, StatusReport, PROTOCOL_VERSION};

use super::args::{self, StatusArgs};
use super::BoxError;
use crate::net::{self, tls, CertRole, Endpoint, FrameReader, FrameWriter, Identity, StreamOptions, TransportOptions};

/// Runs `ccroute status`, once or (`--watch`) every second.
pub(crate) async fn run(a: StatusArgs) -> Result<(), BoxError> {
    let file = args::load_file()?;
    let addr = args::scheduler_addr(a.scheduler.as_ref(), &file)?;
    let identity = tls::load(&args::tls_dir(&a.tls, &file), CertRole::Admin)?;
    if a.watch {
        return super::watch::run(addr, &identity, a.json).await;
    }
    let report = fetch(addr, &identity).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&json(&report))?);
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

/// Fetches one status report.
///
/// # Errors
/// Connection, handshake or protocol failures, as sentences.
pub async fn fetch(addr: SocketAddr, identity: &Identity) -> Result<StatusReport, BoxError> {
    let endpoint = net::client_endpoint(identity, &TransportOptions::default(), addr)?;
    let mut link = AdminLink::open(&endpoint, addr).await?;
    let report = link.status().await;
    link.finish().await;
    net::shutdown(&endpoint, net::CloseReason::Done).await;
    report
}

/// An admin connection to the scheduler, which answers one status query
/// after another on it.
#[derive(Debug)]
pub(crate) struct AdminLink {
    writer: FrameWriter,
    reader: FrameReader,
}

impl AdminLink {
    /// Connects to the scheduler at `addr` through `endpoint` and says hello
    /// as an admin.
    ///
    /// # Errors
    /// Connection or handshake failures. While nothing answers this waits
    /// for the endpoint's idle timeout: bound it with a timeout of your own.
    pub(crate) async fn open(endpoint: &Endpoint, addr: SocketAddr) -> Result<AdminLink, BoxError> {
        let conn = net::connect(endpoint, addr).await?;
        let hello = Hello {
            version: PROTOCOL_VERSION,
            body: HelloBody {
                role: Role::Admin,
                node_id: crate::net::random_id(),
                host_name: crate::host::host_name(),
                system: net::system_info(),
                toolchains: vec![],
                usage_limit: 0,
                speed_milli: 0,
                probed_speed_milli: 0,
                shipping: ccroute_wire::Shipping::Off,
                resumed: Vec::new(),
            },
        };
        let (writer, reader, _) = net::client_handshake(&conn, &hello, &StreamOptions::default()).await?;
        Ok(AdminLink { writer, reader })
    }

    /// Asks for a report and waits for it.
    ///
    /// # Errors
    /// A lost connection or an answer that is not a report.
    pub(crate) async fn status(&mut self) -> Result<StatusReport, BoxError> {
        self.writer.send(Message::Query(Query::Status), Bytes::new()).await?;
        let frame = self.reader.next().await?.ok_or("the scheduler closed the stream without answering")?;
        match frame.message {
            Message::Reply(reply) => match *reply {
                Reply::Status(r) => Ok(r),
            },
            other => Err(format!("the scheduler answered with a {}", other.name()).into()),
        }
    }

    /// Ends the stream: the scheduler's side of it ends too.
    pub(crate) async fn finish(self) {
        let _ = self.writer.finish().await;
    }
}

/// The report as JSON, with 128-bit ids as hex strings (JSON numbers would
/// round them).
pub fn json(r: &StatusReport) -> serde_json::Value {
    // Through text: `to_value` refuses integers past u64, text takes them
    // (as rounded floats, replaced below).
    let mut v: serde_json::Value =
        serde_json::to_string(r).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default();
    let hex = |n: u128| serde_json::Value::String(format!("{n:032x}"));
    let mut set = |pointer: String, value: serde_json::Value| {
        if let Some(slot) = v.pointer_mut(&pointer) {
            *slot = value;
        }
    };
    set("/scheduler_id".into(), hex(r.scheduler_id));
    for (i, route) in r.routes.iter().enumerate() {
        set(format!("/routes/{i}/toolchain"), serde_json::Value::String(route.toolchain.to_string()));
        set(format!("/routes/{i}/agents"), route.agents.iter().map(|n| hex(*n)).collect());
        set(format!("/routes/{i}/consumerds"), route.consumerds.iter().map(|n| hex(*n)).collect());
        set(format!("/routes/{i}/shipped_to"), route.shipped_to.iter().map(|n| hex(*n)).collect());
    }
    for (i, a) in r.agents.iter().enumerate() {
        set(format!("/agents/{i}/node_id"), hex(a.node_id));
    }
    for (i, c) in r.consumerds.iter().enumerate() {
        set(format!("/consumerds/{i}/node_id"), hex(c.node_id));
    }
    v
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

fn short(node: u128) -> String {
    format!("{:08x}", (node >> 96) as u32)
}

/// The report as text tables.
pub fn render(r: &StatusReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "scheduler {}  up {}s  payload {} of {}",
        short(r.scheduler_id),
        r.uptime_s,
        bytes(r.payload_bytes),
        bytes(r.payload_budget)
    );
    let c = &r.costs;
    let hits = if c.predictions > 0 { 100.0 * c.from_history as f64 / c.predictions as f64 } else { 0.0 };
    let error = c.median_error.map_or_else(|| "–".into(), |e| format!("{:.0}%", e * 100.0));
    let _ = writeln!(
        out,
        "cost model: {} units; {} results, {hits:.0}% expected from their history, median error {error}",
        c.units, c.predictions
    );
    let _ = writeln!(out, "\nroutes");
    let _ = writeln!(
        out,
        "  {:<12}  {:<36}  {:>6}  {:>10}  {:>6}",
        "TOOLCHAIN", "COMPILER", "AGENTS", "CONSUMERDS", "QUEUED"
    );
    for route in &r.routes {
        let what = route.description.as_ref().map_or_else(|| "?".into(), |t| t.to_string());
        let _ = writeln!(
            out,
            "  {:<12}  {:<36}  {:>6}  {:>10}  {:>6}",
            route.toolchain.to_string(),
            what,
            route.agents.len(),
            route.consumerds.len(),
            route.queued
        );
        if !route.agents.is_empty() {
            let names = |ids: Vec<u128>| {
                if ids.is_empty() {
                    "none".to_owned()
                } else {
                    ids.into_iter().map(short).collect::<Vec<_>>().join(" ")
                }
            };
            let native = route.agents.iter().copied().filter(|a| !route.shipped_to.contains(a)).collect();
            let _ = writeln!(out, "      native on {}; shipped to {}", names(native), names(route.shipped_to.clone()));
        }
    }
    let _ = writeln!(out, "\nagents");
    let _ = writeln!(
        out,
        "  {:<8}  {:<16}  {:>6}  {:>9}  {:>5}  {:>8}  {:>8}  {:>6}  {:>5}  {:>9}  {:<24}  LAST DECISION",
        "NODE",
        "HOST",
        "TOKENS",
        "LIMIT/MAX",
        "SPEED",
        "ASSIGNED",
        "DONE",
        "FAILED",
        "CPU",
        "THROTTLED",
        "SHIPPED TOOLCHAINS"
    );
    for a in &r.agents {
        let _ = writeln!(
            out,
            "  {:<8}  {:<16}  {:>6}  {:>9}  {:>5.2}  {:>8}  {:>8}  {:>6}  {:>4.0}%  {:>8.0}%  {:<24}  {}",
            short(a.node_id),
            a.host_name,
            a.tokens_in_use,
            format!("{}/{}", a.token_limit, a.max_limit),
            f64::from(a.speed_milli) / 1000.0,
            a.assigned,
            a.completed,
            a.failed,
            a.cpu_use * 100.0,
            a.throttled * 100.0,
            a.shipping.to_string(),
            a.last_decision
        );
    }
    let _ = writeln!(out, "\nconsumerds");
    let _ = writeln!(
        out,
        "  {:<8}  {:<16}  {:>9}  {:>9}  {:>12}",
        "NODE", "HOST", "SUBMITTED", "IN FLIGHT", "REMOTE LIMIT"
    );
    for c in &r.consumerds {
        let _ = writeln!(
            out,
            "  {:<8}  {:<16}  {:>9}  {:>9}  {:>12}",
            short(c.node_id),
            c.host_name,
            c.submitted,
            c.in_flight,
            c.remote_limit
        );
    }
    let t = &r.totals;
    let _ = writeln!(
        out,
        "\ntotals: {} requests, {} completed, {} failed, {} sent back to run locally, {} answered by the cache, {} cancelled, {} placed again, {} adopted from the agent holding them (after a restart or a cut); {} results from agents",
        t.requests, t.completed, t.failed, t.retried, t.intercepted, t.cancelled, t.requeued, t.adopted, t.agent_results
    );
    if let Some(cache) = &r.cache {
        let _ = writeln!(
            out,
            "\ncache: hit ratio {:.0}%, {} deduplicated, {} poisoning attempts refused",
            cache.hit_ratio * 100.0,
            cache.deduplicated,
            cache.poison_rejected
        );
        let _ = writeln!(
            out,
            "  {:<8}  {:>8}  {:>8}  {:>10}  {:>8}  {:>9}  {:>6}",
            "TIER", "HITS", "MISSES", "BYTES", "ENTRIES", "EVICTIONS", "ERRORS"
        );
        for tier in &cache.tiers {
            let _ = writeln!(
                out,
                "  {:<8}  {:>8}  {:>8}  {:>10}  {:>8}  {:>9}  {:>6}",
                tier.name,
                tier.hits,
                tier.misses,
                bytes(tier.bytes),
                tier.entries,
                tier.evictions,
                tier.errors
            );
        }
    }
    out
}
