//! The scheduler's Prometheus metrics, scraped during a real build of the
//! bundled sample: every scrape parses with Prometheus' own parser (the
//! Python client's OpenMetrics parser), and once the build is over the task
//! counters, connections and tokens equal what `ccroute status --json` says.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ccroute, make, Cluster};

/// Parses an exposition with `prometheus_client`'s OpenMetrics parser and
/// returns each sample as `name{label="v",...}` → value (labels sorted).
fn parse(text: &str) -> Result<BTreeMap<String, f64>, String> {
    const SCRIPT: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
        out[f"{s.name}{{{labels}}}"] = s.value
print(json.dumps(out))
"#;
    // Debian's package installs it for the system interpreter.
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("python3: {e} (./scripts/test installs python3-prometheus-client)"))?;
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(serde_json::from_slice(&out.stdout).unwrap())
}

fn scrape(addr: &str) -> String {
    let out =
        Command::new("curl").args(["-sSf", "--max-time", "10", &format!("http://{addr}/metrics")]).output().unwrap();
    assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Where each daemon is told to serve metrics: any free port, read back
/// from its log ([`common::Daemon::metrics_addr`]).
const ANY_PORT: &str = "127.0.0.1:0";

#[test]
fn metrics_scraped_during_a_build_parse_and_match_the_status() {
    let mut c = Cluster::new();
    c.start_scheduler(&["--no-cache", "--no-optimizer", "--metrics", ANY_PORT]);
    c.start_agent(&["--jobs", "8", "--metrics", ANY_PORT]);
    c.start_consumerd_with(1, true, &["--metrics", ANY_PORT]);
    let metrics = c.scheduler.as_ref().unwrap().metrics_addr();
    let agent_metrics = c.agents[0].metrics_addr();
    let consumerd_metrics = c.consumerd.as_ref().unwrap().metrics_addr();
    c.wait_ready(1);

    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample");
    let build = c.dir.path().join("build");
    let args = [
        format!("BUILD={}", build.display()),
        "-j8".into(),
        format!("CC={} gcc", ccroute().display()),
        format!("CXX={} g++", ccroute().display()),
    ];
    let env = c.wrapper_env();
    let scrapes = std::thread::scope(|s| {
        let builder = s.spawn(|| make(&sample, &args, &env));
        let mut scrapes = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(300);
        while !builder.is_finished() && Instant::now() < deadline {
            scrapes.push(scrape(&metrics));
            scrapes.push(scrape(&agent_metrics));
            scrapes.push(scrape(&consumerd_metrics));
            std::thread::sleep(Duration::from_millis(200));
        }
        let out = builder.join().unwrap();
        assert!(out.status.success(), "build: {}\n{}", String::from_utf8_lossy(&out.stderr), c.logs());
        scrapes
    });
    assert!(!scrapes.is_empty(), "no scrape during the build");
    for text in &scrapes {
        if let Err(e) = parse(text) {
            panic!("a scrape during the build does not parse: {e}\n{text}");
        }
    }

    // Idle now: the counters hold still, and equal the status's.
    let status = c.assert_each_task_ended_once();
    let m = parse(&scrape(&metrics)).unwrap();
    let get = |k: &str| *m.get(k).unwrap_or_else(|| panic!("no sample {k} in {m:?}"));
    assert_eq!(get("ccroute_task_requests_total{}"), status["requests"].as_f64().unwrap());
    for outcome in ["completed", "failed", "retried", "intercepted", "cancelled"] {
        assert_eq!(
            get(&format!("ccroute_tasks_total{{outcome=\"{outcome}\"}}")),
            status[outcome].as_f64().unwrap(),
            "{outcome}"
        );
    }
    assert!(get("ccroute_tasks_total{outcome=\"completed\"}") > 0.0, "nothing went remote: {m:?}");
    let st = c.status();
    let host = st["agents"][0]["host_name"].as_str().unwrap();
    assert_eq!(get("ccroute_connections{role=\"agent\"}"), 1.0);
    assert_eq!(get("ccroute_connections{role=\"consumerd\"}"), 1.0);
    assert_eq!(
        get(&format!("ccroute_agent_tokens_limit{{agent=\"{host}\"}}")),
        st["agents"][0]["token_limit"].as_f64().unwrap()
    );
    assert_eq!(get(&format!("ccroute_agent_tokens_in_use{{agent=\"{host}\"}}")), 0.0);
    assert_eq!(get("ccroute_agent_tokens_leaked_total{}"), 0.0, "no leaked token, and the counter is there");
    // Every remote compile was waited for and timed.
    let completed = get("ccroute_tasks_total{outcome=\"completed\"}") + get("ccroute_tasks_total{outcome=\"failed\"}");
    // Waits are per route: their counts add up to every dispatch.
    let waited: f64 =
        m.iter().filter(|(k, _)| k.starts_with("ccroute_task_wait_seconds_count{route=")).map(|(_, v)| v).sum();
    assert_eq!(waited, completed, "{m:?}");
    assert_eq!(get("ccroute_task_compile_seconds_count{}"), completed);
    assert!(get("ccroute_payload_received_bytes_total{}") > 0.0);
    assert!(get("ccroute_payload_sent_bytes_total{}") > 0.0);
    let info = |daemon: &str| {
        format!(
            "ccroute_build_info{{daemon=\"{daemon}\",protocol=\"{}\",version=\"{}\"}}",
            ccroute_wire::PROTOCOL_VERSION,
            env!("CARGO_PKG_VERSION")
        )
    };
    assert_eq!(get(&info("scheduler")), 1.0);

    // The agent's own: every compile it started ended, as many succeeded
    // as the scheduler counted completed, and each was timed.
    let a = parse(&scrape(&agent_metrics)).unwrap();
    let aget = |k: &str| *a.get(k).unwrap_or_else(|| panic!("no sample {k} in the agent's {a:?}"));
    assert_eq!(aget(&info("agent")), 1.0);
    let started = aget("ccroute_agent_compiles_started_total{}");
    let ended: f64 = ["success", "compile_failed", "not_compiled"]
        .iter()
        .map(|o| aget(&format!("ccroute_agent_compiles_ended_total{{outcome=\"{o}\"}}")))
        .sum();
    assert_eq!(started, ended, "{a:?}");
    assert_eq!(started, get(&format!("ccroute_agent_tasks_started_total{{agent=\"{host}\"}}")));
    // One agent: nothing to copy a straggler to.
    assert_eq!(get(&format!("ccroute_agent_copies_started_total{{agent=\"{host}\"}}")), 0.0);
    assert_eq!(get(&format!("ccroute_agent_copies_won_total{{agent=\"{host}\"}}")), 0.0);
    assert_eq!(
        aget("ccroute_agent_compiles_ended_total{outcome=\"success\"}"),
        get("ccroute_tasks_total{outcome=\"completed\"}")
    );
    assert_eq!(aget("ccroute_agent_compiles_running{}"), 0.0);
    assert_eq!(aget("ccroute_agent_jobs{}"), 8.0);
    assert_eq!(aget("ccroute_agent_compile_seconds_count{}"), started);

    // The consumerd's: its remote compiles are the scheduler's completed
    // ones, nothing is held now, and its slots are what it was given.
    let d = parse(&scrape(&consumerd_metrics)).unwrap();
    let dget = |k: &str| *d.get(k).unwrap_or_else(|| panic!("no sample {k} in the consumerd's {d:?}"));
    assert_eq!(dget(&info("consumerd")), 1.0);
    assert_eq!(
        dget("ccroute_consumerd_compiles_total{ran=\"remote\"}"),
        get("ccroute_tasks_total{outcome=\"completed\"}")
    );
    let ran: f64 = ["local", "remote", "local_after_remote", "direct_cache"]
        .iter()
        .map(|w| dget(&format!("ccroute_consumerd_compiles_total{{ran=\"{w}\"}}")))
        .sum();
    assert!(ran >= get("ccroute_task_requests_total{}"), "every task the scheduler saw ended at the consumerd: {d:?}");
    assert_eq!(dget("ccroute_consumerd_jobs_in_flight{}"), 0.0);
    assert_eq!(dget("ccroute_consumerd_slots_in_use{kind=\"remote\"}"), 0.0);
    assert_eq!(dget("ccroute_consumerd_slots{kind=\"local\"}"), 1.0);
    assert!(dget("ccroute_consumerd_slots{kind=\"remote\"}") > 0.0);

    // Anything but /metrics is a 404, not a hang or a crash.
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", &format!("http://{metrics}/nothing")])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "404");
}

#[test]
fn the_optimizers_decisions_are_counted_by_kind() {
    let mut c = Cluster::new();
    c.start_scheduler(&["--no-cache", "--metrics", ANY_PORT]);
    let metrics = c.scheduler.as_ref().unwrap().metrics_addr();
    c.start_agent(&["--jobs", "4"]);
    c.wait_ready(1);
    // The optimizer decides once a second per agent; an idle agent's
    // decisions are holds, counted under their kind.
    let deadline = Instant::now() + Duration::from_secs(30);
    let m = loop {
        let m = parse(&scrape(&metrics)).unwrap();
        let total: f64 =
            m.iter().filter(|(k, _)| k.starts_with("ccroute_optimizer_decisions_total{")).map(|(_, v)| *v).sum();
        if total >= 2.0 {
            break m;
        }
        assert!(Instant::now() < deadline, "no decision counted in 30 s: {m:?}\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(250));
    };
    // Every kind is listed (a bounded label set), even those never taken.
    for kind in ccroute_core::optimizer::Reason::KINDS {
        let key = format!("ccroute_optimizer_decisions_total{{reason=\"{kind}\"}}");
        assert!(m.contains_key(&key), "no {key} in {m:?}");
    }
    // The sentence `status` shows for the last decision is counted under a
    // kind of the same verb.
    let last = c.status()["agents"][0]["last_decision"].as_str().unwrap_or_default().to_owned();
    let kinds: &[&str] = if last.starts_with("hold") {
        &["no_data", "at_minimum", "draining", "contended", "at_target", "remembered", "busy", "at_max", "idle"]
    } else if last.starts_with("raise") {
        &["raise", "probe"]
    } else {
        &["above_max", "lower"]
    };
    let counted: f64 = kinds.iter().map(|k| m[&format!("ccroute_optimizer_decisions_total{{reason=\"{k}\"}}")]).sum();
    assert!(counted >= 1.0, "the last decision ({last}) under none of {kinds:?}: {m:?}");
}
