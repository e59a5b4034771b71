//! `ccroute stats` and `ccroute cache clear`: the local consumerd's
//! direct-mode cache and local tier, asked over its socket.
//!
//! With no consumerd running, `stats` says so and `cache clear` removes the
//! cache's directory itself (the one a consumerd started with the same
//! settings would use).

use std::path::PathBuf;

use ccroute_wire::local::{CacheReport, ConsumerdMsg, Query, WrapperMsg};

use super::args::LocalCacheArgs;
use super::BoxError;
use crate::local_socket::SocketPath;
use crate::wrapper::session::Session;

/// Runs the query and prints its answer.
///
/// # Errors
/// When no consumerd answers `stats`, or the cache cannot be removed.
pub fn run(a: &LocalCacheArgs, q: Query) -> Result<(), BoxError> {
    let socket = a.socket.clone().map_or_else(SocketPath::from_env, SocketPath::explicit);
    let report = match std::os::unix::net::UnixStream::connect(&socket.path) {
        Ok(stream) => ask(stream, q)?,
        Err(e) => {
            if q == Query::Stats {
                return Err(format!(
                    "no consumerd answers at {} ({e}); it starts with the first compile through ccroute",
                    socket.path.display()
                )
                .into());
            }
            let dir: PathBuf = a
                .local_cache_dir
                .clone()
                .or_else(crate::consumerd::default_cache_dir)
                .ok_or("no cache directory: set HOME or pass --local-cache-dir")?;
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => println!("ccroute: removed {}", dir.display()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    println!("ccroute: {} is already empty", dir.display())
                }
                Err(e) => return Err(format!("cannot remove {}: {e}", dir.display()).into()),
            }
            return Ok(());
        }
    };
    if a.json {
        println!("{}", to_json(&report));
    } else {
        print!("{}", render(&report, q == Query::Clear));
    }
    Ok(())
}

fn ask(stream: std::os::unix::net::UnixStream, q: Query) -> Result<CacheReport, BoxError> {
    let mut session = Session::new(stream);
    session.send(&WrapperMsg::Query(q), b"")?;
    match session.recv()?.message {
        ConsumerdMsg::Report(r) => Ok(r),
        other => Err(format!("the consumerd answered {other:?}").into()),
    }
}

/// The report as one JSON object: `{"counters": {...}, "refusals": {...}, "sizes": {...}, "dir": "..."}`.
pub fn to_json(r: &CacheReport) -> String {
    let map =
        |v: &[(String, u64)]| serde_json::Value::Object(v.iter().map(|(k, n)| (k.clone(), (*n).into())).collect());
    serde_json::json!({
        "counters": map(&r.counters),
        "refusals": map(&r.refusals),
        "sizes": map(&r.sizes),
        "dir": r.dir,
    })
    .to_string()
}

/// The report for a terminal.
pub fn render(r: &CacheReport, cleared: bool) -> String {
    use std::fmt::Write;
    let get = |v: &[(String, u64)], k: &str| v.iter().find(|(n, _)| n == k).map_or(0, |(_, n)| *n);
    let mut out = String::new();
    if cleared {
        let _ = writeln!(out, "cleared");
    }
    if r.dir.is_empty() {
        let _ = writeln!(out, "direct-mode cache: off (consumerd --no-local-cache)");
    } else {
        let _ = writeln!(out, "direct-mode cache:  {}", r.dir);
    }
    let (hit, miss) = (get(&r.counters, "direct_hit"), get(&r.counters, "direct_miss"));
    let ratio = if hit + miss == 0 { 0.0 } else { 100.0 * hit as f64 / (hit + miss) as f64 };
    let _ = writeln!(out, "  direct hits       {hit:>10}  ({ratio:.1} %)");
    let _ = writeln!(out, "  direct misses     {miss:>10}");
    let _ = writeln!(out, "  recorded          {:>10}", get(&r.counters, "recorded"));
    let _ = writeln!(out, "  indexed on lookup {:>10}", get(&r.counters, "indexed_on_lookup"));
    for (k, v) in &r.refusals {
        let _ = writeln!(out, "  not cached: {k}: {v}");
    }
    let _ = writeln!(out, "compiles since the consumerd started");
    let _ = writeln!(out, "  preprocessed hits (scheduler's cache) {:>4}", get(&r.counters, "preprocessed_hit"));
    let _ = writeln!(out, "  remote (agent or scheduler's cache) {:>6}", get(&r.counters, "remote"));
    let _ = writeln!(out, "  local                               {:>6}", get(&r.counters, "local"));
    let _ = writeln!(out, "  fell back to local                  {:>6}", get(&r.counters, "fallback"));
    let _ = writeln!(out, "sizes");
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let _ = writeln!(
        out,
        "  results           {:>10}  ({:.1} MiB of {:.0} MiB)",
        get(&r.sizes, "results"),
        mib(get(&r.sizes, "result_bytes")),
        mib(get(&r.sizes, "result_max_bytes"))
    );
    let _ = writeln!(
        out,
        "  manifests         {:>10}  ({} entries)",
        get(&r.sizes, "manifests"),
        get(&r.sizes, "manifest_entries")
    );
    let _ = writeln!(out, "  file digests      {:>10}", get(&r.sizes, "digests"));
    let _ = writeln!(
        out,
        "  awaiting index    {:>10}  (-MMD units: their system headers are learnt when the CPU is idle, or at their next lookup)",
        get(&r.sizes, "awaiting_index")
    );
    out
}
