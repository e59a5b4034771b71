//! The farm harness: ccroute's real daemons as a farm of hosts on one
//! machine, replaying recorded builds, measured against the lower bound.
//!
//! ```text
//! cargo bench --bench farm                 # every preset; writes FARM.md (as root)
//! cargo bench --bench farm -- lan-64 wan   # the named presets; prints the table
//! cargo bench --bench farm -- record       # re-records benches/farm/traces/
//! cargo test --bench farm                  # the CI smoke: 8 agents, 400 units
//! FARM_SCHEDULER_FLAGS=--no-speed-aware cargo bench --bench farm -- mixed
//!                                          # the same farm with a placement policy off (or --longest-first on)
//! FARM_PIN_SPEEDS=1 cargo bench --bench farm -- mixed
//!                                          # each agent told its speed (--speed), not left to learn it
//! FARM_SEND_IN_ORDER=1 cargo bench --bench farm -- lan-64-lookahead
//!                                          # each build's link sends its waiting units in the order
//!                                          # they came, not longest expected first
//! FARM_AGENT_FLAGS=--no-speed-probe cargo bench --bench farm -- mixed
//!                                          # extra flags for every agent: here, no speed measured at start
//! FARM_COSTS=DIR cargo bench --bench farm -- mixed
//!                                          # the scheduler's cost model kept in DIR across runs: run it
//!                                          # twice, and the second knows the build's units (a farm's steady state)
//! FARM_JOBS=2 cargo bench --bench farm -- lan-64
//!                                          # each build submits up to 2 x the farm's tokens at once, not 1 x
//! cargo bench --bench farm -- lan-64-lookahead mixed-lookahead
//!                                          # run ahead (--lookahead 10 --longest-first), cost model warmed first
//! FARM_ORDER=critical cargo bench --bench farm -- lan-64
//!                                          # each build submits its units longest chain first (by recorded
//!                                          # times), not in make's order
//! FARM_LOOKAHEAD=4 cargo bench --bench farm -- lan-256
//!                                          # any preset run ahead as the *-lookahead presets are, at
//!                                          # --lookahead 4 (the row `lan-256-lookahead-4`)
//! ```
//!
//! Each agent host is a network namespace joined to the hub (the
//! scheduler's namespace) by a veth pair shaped with `tbf`; delay and jitter
//! come from a userspace relay in the hub ([`relay`]). The scheduler and
//! every agent are `ccroute` processes; each build is a replay client
//! ([`replay`]) in a namespace of its own, driving the consumerd's link as
//! `make -jN`. Agents run the test toolchain's replayed units: each holds
//! its token for the unit's recorded compile time and answers with an object
//! of its recorded size. `scale` instead runs 1,000 agents and 200
//! consumerds inside this process against a scheduler process on loopback
//! ([`scale`]).
//!
//! Time may be dilated: with a factor K every recorded time and delay is K
//! times longer and every rate K times lower, so that the farm's CPU work
//! per wall second (payload compression, TLS, the daemons' own work) fits two
//! cores; makespans and bounds are reported divided by K (the ratio is the
//! same), latencies as measured against the link's RTT as dilated.

mod netns;
mod record;
mod relay;
mod replay;
mod report;
mod scale;
mod trace;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use report::{Figures, Row};
use trace::Trace;

/// The ccroute binary cargo built beside this one.
const CCROUTE: &str = env!("CARGO_BIN_EXE_ccroute");
const SCHEDULER_PORT: u16 = 7300;
const FIRST_LINK_PORT: u16 = 20_000;
/// A build's local slots: the units its consumerd compiles on its own
/// machine at once, at most (a workstation's 8 cores). A unit sent back or
/// given up on waits for one.
const LOCAL_SLOTS: usize = 8;

/// One farm to run.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub agents: usize,
    pub tokens: u32,
    pub rtt_us: u64,
    pub jitter_us: u64,
    pub rate_bps: u64,
    /// Agent speeds: the first `slow` agents run at `slow_speed`.
    pub slow: usize,
    pub slow_speed: f64,
    /// The trace each build replays, and when it starts (s, farm time).
    pub builds: Vec<(Trace, f64)>,
    pub jobs: usize,
    pub dilate: f64,
    /// Also run each distinct build alone (the `shared` comparison).
    pub alone: bool,
    /// Packets dropped on every host's link, ‰ each way (nftables).
    pub loss_permille: u32,
    /// Faults applied during the run, in time order.
    pub faults: Vec<Fault>,
    /// The scheduler's flags beyond the harness's own (a policy on or off).
    pub scheduler_flags: Vec<String>,
    /// Each build submits up to the remote window the scheduler gives it
    /// when that is more than `jobs` (as `ccroute make`'s jobserver follows
    /// the window).
    pub follow_window: bool,
    /// Run the scenario once first, unmeasured, so that the scheduler's
    /// cost model knows the build's units (a farm's steady state).
    pub warm_costs: bool,
    /// Where the scheduler keeps its cost model across runs (`FARM_COSTS`
    /// wins); `None`: a fresh one in the run's own directory.
    pub costs_dir: Option<PathBuf>,
}

/// One step of a fault: from `at_s` seconds after the builds start (real
/// time), `on`'s link drops `permille`‰ of its packets (1000: a partition;
/// 0: healed).
#[derive(Debug, Clone)]
pub struct Fault {
    pub at_s: f64,
    pub on: FaultOn,
    pub permille: u32,
}

/// Whose link a [`Fault`] is on.
#[derive(Debug, Clone, Copy)]
pub enum FaultOn {
    /// One agent's host.
    Agent(usize),
    /// One build's host (its consumerd).
    Build(usize),
    /// The hub: every link, and the scheduler with them.
    Hub,
    /// The scheduler process: `kill -9`ed and a new one started on its
    /// address at once (`permille` is unused).
    SchedulerRestart,
}

impl Scenario {
    pub fn speed(&self, agent: usize) -> f64 {
        if agent < self.slow {
            self.slow_speed
        } else {
            1.0
        }
    }

    /// Σ tokens × speed.
    pub fn capacity(&self) -> f64 {
        (0..self.agents).map(|i| f64::from(self.tokens) * self.speed(i)).sum()
    }
}

/// Directories and namespaces to remove if the run is interrupted.
static INTERRUPTED_CLEANUP: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let first = args.first().and_then(|a| a.to_str()).unwrap_or("");
    let result = match first {
        "relay" => relay_main(&args[1..]),
        "replay" => replay_main(&args[1..]),
        "record-cc" => return record::record_cc(&args[1..]),
        "record" => record_main(&args[1..]),
        _ => harness_main(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("farm: {e}");
            ExitCode::FAILURE
        }
    }
}

fn strs(args: &[OsString]) -> Vec<String> {
    args.iter().map(|a| a.to_string_lossy().into_owned()).collect()
}

/// `relay LISTEN_IP UPSTREAM LINKS_FILE`.
fn relay_main(args: &[OsString]) -> Result<(), String> {
    let a = strs(args);
    let [ip, upstream, file] = a.as_slice() else {
        return Err("usage: relay LISTEN_IP UPSTREAM LINKS_FILE".into());
    };
    let ip = ip.parse().map_err(|e| format!("{ip}: {e}"))?;
    let upstream = upstream.parse().map_err(|e| format!("{upstream}: {e}"))?;
    let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
    let specs: Vec<relay::LinkSpec> = text
        .lines()
        .map(|l| relay::LinkSpec::parse(l).ok_or(format!("bad link line {l:?}")))
        .collect::<Result<_, _>>()?;
    relay::run(ip, upstream, &specs).map_err(|e| format!("relay: {e}"))
}

/// `replay --scheduler A --tls-dir D --trace F --jobs N [--follow-window] --local-slots L --dilate K --start-at NS --name S --out F [--costs F] [--send-in-order]`.
fn replay_main(args: &[OsString]) -> Result<(), String> {
    let a = strs(args);
    let get = |k: &str| {
        a.iter().position(|x| x == k).and_then(|i| a.get(i + 1)).cloned().ok_or(format!("replay: {k} missing"))
    };
    let config = replay::ReplayConfig {
        scheduler: get("--scheduler")?.parse().map_err(|e| format!("--scheduler: {e}"))?,
        tls_dir: get("--tls-dir")?.into(),
        trace: Trace::load(Path::new(&get("--trace")?))?,
        jobs: get("--jobs")?.parse().map_err(|e| format!("--jobs: {e}"))?,
        follow_window: a.iter().any(|x| x == "--follow-window"),
        local_slots: get("--local-slots")?.parse().map_err(|e| format!("--local-slots: {e}"))?,
        dilate: get("--dilate")?.parse().map_err(|e| format!("--dilate: {e}"))?,
        start_at: get("--start-at")?.parse().map_err(|e| format!("--start-at: {e}"))?,
        name: get("--name")?,
        costs_file: get("--costs").ok().map(PathBuf::from),
        send_in_order: a.iter().any(|x| x == "--send-in-order"),
    };
    let out = get("--out")?;
    logs();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let answers = rt.block_on(replay::run(config))?;
    std::fs::write(&out, replay::render(&answers)).map_err(|e| format!("{out}: {e}"))
}

/// Log lines to stderr, as `RUST_LOG` says (warnings by default).
fn logs() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter: tracing_subscriber::filter::Targets = std::env::var("RUST_LOG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| "warn".parse().unwrap_or_default());
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_ansi(false).with_writer(std::io::stderr))
        .try_init();
}

/// `record [PROJECT...]`: runs record.sh, then turns each raw file into a trace.
fn record_main(args: &[OsString]) -> Result<(), String> {
    let projects: Vec<String> = strs(args).into_iter().filter(|a| !a.starts_with('-')).collect();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let raw = tempfile::tempdir().map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let status = Command::new("bash")
        .arg(repo.join("benches/farm/record.sh"))
        .args(&projects)
        .env("FARM_BIN", &exe)
        .env("FARM_RAW_DIR", raw.path())
        .status()
        .map_err(|e| format!("record.sh: {e}"))?;
    if !status.success() {
        return Err("record.sh failed".into());
    }
    for entry in std::fs::read_dir(raw.path()).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("raw") {
            continue;
        }
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("trace").to_owned();
        let about = std::fs::read_to_string(path.with_extension("about")).unwrap_or_default();
        let out = repo.join("benches/farm/traces").join(format!("{stem}.trace"));
        let t = record::finish(&path, &out, about.trim())?;
        println!(
            "record: {} units, {:.1} CPU s, longest {:.2} s -> {}",
            t.units.len(),
            t.work_us() as f64 / 1e6,
            t.units.iter().map(|u| u.cpu_us).max().unwrap_or(0) as f64 / 1e6,
            out.strip_prefix(repo).unwrap_or(&out).display()
        );
    }
    Ok(())
}

/// The recorded traces, by name.
fn traces() -> Result<BTreeMap<String, Trace>, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/farm/traces");
    let mut out = BTreeMap::new();
    for name in ["sample", "lua", "lzma", "libgit2"] {
        let t = Trace::load(&dir.join(format!("{name}.trace")))?;
        out.insert(name.to_owned(), t);
    }
    Ok(out)
}

fn generated(traces: &BTreeMap<String, Trace>, n: usize, seed: u64) -> Trace {
    let all: Vec<Trace> = traces.values().cloned().collect();
    Trace::generate(n, &all, seed)
}

/// The named presets.
fn presets(traces: &BTreeMap<String, Trace>) -> Vec<Scenario> {
    let base = |name: &str, agents: usize, trace: Trace, dilate: f64| Scenario {
        name: name.into(),
        agents,
        tokens: 8,
        rtt_us: 200,
        jitter_us: 0,
        rate_bps: 10_000_000_000,
        slow: 0,
        slow_speed: 1.0,
        jobs: agents * 8,
        builds: vec![(trace, 0.0)],
        dilate,
        alone: false,
        loss_permille: 0,
        faults: vec![],
        scheduler_flags: vec![],
        follow_window: false,
        warm_costs: false,
        costs_dir: None,
    };
    let gen5k = generated(traces, 5_000, 1);
    let lan64 = base("lan-64", 64, gen5k.clone(), 4.0);
    let wan =
        Scenario { rtt_us: 10_000, jitter_us: 1_000, rate_bps: 1_000_000_000, ..base("wan", 64, gen5k.clone(), 4.0) };
    let thin = Scenario { rate_bps: 100_000_000, ..base("thin", 64, gen5k.clone(), 4.0) };
    let mixed = Scenario { slow: 32, slow_speed: 0.4, ..base("mixed", 64, gen5k.clone(), 4.0) };
    let lan256 = base("lan-256", 256, generated(traces, 20_000, 2), 16.0);
    vec![
        base("lan-8", 8, traces["libgit2"].clone(), 1.0),
        lan64.clone(),
        lan256.clone(),
        wan.clone(),
        thin.clone(),
        mixed.clone(),
        // The same builds longest chain first, as a build tool that weighs
        // its critical path by recorded times would start them: what
        // placement does when the build's order does not hold it back.
        base("lan-64-critical", 64, gen5k.in_critical_path_order(), 4.0),
        // The build's order kept, but run ahead.
        run_ahead(lan64, 10),
        run_ahead(lan256, 10),
        run_ahead(wan, 10),
        run_ahead(thin, 10),
        run_ahead(mixed, 10),
        Scenario { slow: 32, slow_speed: 0.4, ..base("mixed-critical", 64, gen5k.in_critical_path_order(), 4.0) },
        {
            let t = generated(traces, 2_000, 3);
            let builds = (0..4).map(|i| (t.clone(), 5.0 * f64::from(i))).collect();
            Scenario { builds, alone: true, ..base("shared", 64, t, 4.0) }
        },
    ]
}

/// `s` run ahead, named `<name>-lookahead` (`<name>-lookahead-L` but for
/// 10): each consumerd's window (and so its build's jobserver) `l` times its
/// share, the units beyond the tokens waiting at the scheduler longest
/// expected first, by a cost model that knows them (warmed by a first run),
/// their texts held in a budget that holds them all.
fn run_ahead(s: Scenario, l: u32) -> Scenario {
    let mut flags = s.scheduler_flags;
    flags
        .extend(["--lookahead", &l.to_string(), "--longest-first", "--payload-budget", "4294967296"].map(String::from));
    let name = if l == 10 { format!("{}-lookahead", s.name) } else { format!("{}-lookahead-{l}", s.name) };
    Scenario { name, scheduler_flags: flags, follow_window: true, warm_costs: true, ..s }
}

/// The CI smoke: 8 agents, 400 units drawn from the traces, no dilation.
fn smoke(traces: &BTreeMap<String, Trace>) -> Scenario {
    Scenario {
        name: "smoke".into(),
        agents: 8,
        tokens: 8,
        rtt_us: 200,
        jitter_us: 0,
        rate_bps: 1_000_000_000,
        slow: 4,
        slow_speed: 0.5,
        jobs: 64,
        builds: vec![(generated(traces, 400, 9), 0.0)],
        dilate: 1.0,
        alone: false,
        // Loss on every link: nftables works here, and QUIC's recovery loses nothing.
        loss_permille: 5,
        faults: vec![],
        scheduler_flags: vec![],
        follow_window: false,
        warm_costs: false,
        costs_dir: None,
    }
}

/// The fault scenarios (`-- faults`): one build of 1,000 units on 8 agents
/// of 8 tokens, fault-free and then under each fault, starting 3 s in.
fn fault_scenarios(traces: &BTreeMap<String, Trace>) -> Vec<Scenario> {
    let base = Scenario {
        name: "fault-free".into(),
        slow: 0,
        loss_permille: 0,
        builds: vec![(generated(traces, 1_000, 11), 0.0)],
        ..smoke(traces)
    };
    let cut = |on: FaultOn, from: f64, secs: f64| {
        vec![Fault { at_s: from, on, permille: 1000 }, Fault { at_s: from + secs, on, permille: 0 }]
    };
    // The scheduler's link down 2 s (QUIC rides it out), then 7 s (past the
    // 5 s idle timeout: every connection is lost and dialled again).
    let flap: Vec<Fault> = [cut(FaultOn::Hub, 2.0, 2.0), cut(FaultOn::Hub, 6.0, 7.0)].concat();
    vec![
        base.clone(),
        Scenario { name: "agent-cut-10s".into(), faults: cut(FaultOn::Agent(0), 3.0, 10.0), ..base.clone() },
        Scenario { name: "scheduler-flap".into(), faults: flap, ..base.clone() },
        Scenario { name: "loss-5pct".into(), loss_permille: 50, ..base.clone() },
        Scenario { name: "consumerd-cut-10s".into(), faults: cut(FaultOn::Build(0), 3.0, 10.0), ..base },
    ]
}

/// What a fault scenario does, in words.
fn fault_words(s: &Scenario) -> String {
    if s.loss_permille > 0 && s.faults.is_empty() {
        return format!("{:.1} % of packets dropped on every link, each way", f64::from(s.loss_permille) / 10.0);
    }
    let mut words = Vec::new();
    for pair in s.faults.chunks(2) {
        if let FaultOn::SchedulerRestart = pair[0].on {
            words.push(format!("the scheduler kill -9ed at {:.1} s and started again at once", pair[0].at_s));
            continue;
        }
        let on = match pair[0].on {
            FaultOn::SchedulerRestart => String::new(),
            FaultOn::Agent(i) => format!("agent {i}'s link"),
            FaultOn::Build(i) => format!("build {i}'s link (its consumerd)"),
            FaultOn::Hub => "the scheduler's link (all traffic)".into(),
        };
        let until = pair.get(1).map_or(f64::INFINITY, |f| f.at_s);
        words.push(format!("{on} dropped {:.0}–{:.0} s", pair[0].at_s, until));
    }
    if words.is_empty() {
        "none".into()
    } else {
        words.join("; ")
    }
}

/// The scheduler `kill -9`ed at `pcts` of the fault-free build's time and
/// started again at once, one scenario each.
fn restart_scenarios(base: &Scenario, fault_free_s: f64, pcts: &[u32]) -> Vec<Scenario> {
    pcts.iter()
        .map(|pct| Scenario {
            name: format!("scheduler-killed-at-{pct}pct"),
            faults: vec![Fault {
                at_s: fault_free_s * f64::from(*pct) / 100.0,
                on: FaultOn::SchedulerRestart,
                permille: 0,
            }],
            ..base.clone()
        })
        .collect()
}

/// Runs the fault scenarios and prints (and writes to `out`) their table:
/// lost, answered twice, compiled twice (the agents' own counts of compiles
/// started, which outlive their connections, plus the units compiled
/// locally, against the units) and how many of those were straggler copies
/// (hedging's, on purpose), compiled locally, build time against the
/// fault-free run. A scheduler restart that compiles any unit twice other
/// than by a copy fails the run, as a lost or twice-answered unit does
/// anywhere.
fn run_faults(traces: &BTreeMap<String, Trace>, out: Option<&Path>, only: &[&String]) -> Result<(), String> {
    let mut lines = vec![
        "| scenario | what was done | lost | answered twice | compiled twice | of which straggler copies | local | build time | ÷ fault-free |"
            .to_owned(),
        "|---|---|---|---|---|---|---|---|---|".to_owned(),
    ];
    let mut free_s = None;
    let mut failures = Vec::new();
    let mut scenarios: std::collections::VecDeque<Scenario> = fault_scenarios(traces).into();
    while let Some(s) = scenarios.pop_front() {
        if free_s.is_some() && !only.is_empty() && !only.iter().any(|n| **n == s.name) {
            continue;
        }
        eprintln!("farm: {} ({})", s.name, fault_words(&s));
        let row = run_scenario(&s)?;
        let b = &row.figures.builds[0];
        let lost = b.units.saturating_sub(b.distinct);
        let twice = b.answered.saturating_sub(b.distinct);
        let compiled_twice = (row.figures.machine.agents_started + b.local as u64).saturating_sub(b.units as u64);
        // Hedged on purpose; counted per agent session by the last
        // scheduler (a copy made before a restart or a reconnection is not
        // in it, so it counts against the restart below).
        let copies = row.figures.machine.copies.0;
        let base = match free_s {
            Some(base) => base,
            None => {
                // The restarts are timed against the fault-free build.
                for r in restart_scenarios(&s, b.makespan_s, &[25, 50, 90]).into_iter().rev() {
                    scenarios.push_front(r);
                }
                *free_s.insert(b.makespan_s)
            }
        };
        let line = format!(
            "| {} | {} | {lost} | {twice} | {compiled_twice} | {copies} | {} | {:.1} s | {:.2}× ({:+.1} s) |",
            s.name,
            fault_words(&s),
            b.local,
            b.makespan_s,
            b.makespan_s / base,
            b.makespan_s - base
        );
        eprintln!("{line}");
        lines.push(line);
        if lost > 0 || twice > 0 || b.failed > 0 || b.size_bad > 0 {
            failures.push(format!("{}: {lost} lost, {twice} answered twice, {} failed", s.name, b.failed));
        }
        let restarted = s.faults.iter().any(|f| matches!(f.on, FaultOn::SchedulerRestart));
        if restarted && compiled_twice > copies {
            failures
                .push(format!("{}: {compiled_twice} units compiled twice, {copies} of them straggler copies", s.name));
        }
    }
    let table = lines.join("\n");
    println!("{table}");
    if let Some(out) = out {
        let commit = std::process::Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| "(unknown)".into());
        let md = format!(
            "# Faults on the farm\n\n\
             Written by `cargo bench --bench farm -- faults` (as root) at commit {commit}: one build of 1,000 units drawn from the recorded traces \
             (8 agents × 8 tokens in network namespaces, 0.2 ms RTT), first fault-free, then with each fault \
             starting 3 s in (nftables drops in the host's namespace). Lost: units never answered; answered \
             twice: a unit with two answers; compiled twice: the agents' own counts of compiles started (which \
             outlive their connections) plus the units compiled locally, less the units; of which straggler copies: \
             copies the scheduler started on purpose (hedging), the first answer winning, as the agents' \
             sessions on the last scheduler count them (copies made before a restart or a reconnection \
             are not in it); local: units the \
             consumerd compiled itself (told to, or its link down), at most {LOCAL_SLOTS} at once (its local slots). The scheduler restarts are timed at 25, 50 \
             and 90 % of the fault-free build. The figures are of one run on a shared 2-core machine.\n\n{table}\n"
        );
        std::fs::write(out, md).map_err(|e| format!("{}: {e}", out.display()))?;
        eprintln!("farm: wrote {}", out.display());
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

fn harness_main(args: &[OsString]) -> Result<(), String> {
    let a = strs(args);
    // `cargo bench` passes --bench; `cargo test` passes nothing (or a filter).
    let full = a.iter().any(|x| x == "--bench");
    let out_at = a.iter().position(|x| x == "--out");
    let out = out_at.and_then(|i| a.get(i + 1)).map(PathBuf::from);
    let names: Vec<&String> = a
        .iter()
        .enumerate()
        .filter(|(i, x)| !x.starts_with('-') && out_at.map(|o| o + 1) != Some(*i))
        .map(|(_, x)| x)
        .collect();
    netns::check_tools()?;
    install_interrupt_cleanup();
    let traces = traces()?;
    let started = Instant::now();
    if !full {
        let s = smoke(&traces);
        let row = run_scenario(&s)?;
        println!("{}", report::table(std::slice::from_ref(&row)));
        row.figures.honest().map_err(|e| format!("smoke: {e}"))?;
        let left = leftovers();
        if !left.is_empty() {
            return Err(format!("smoke: left behind: {}", left.join(", ")));
        }
        println!(
            "farm smoke: {} units, each answered once; no namespace or process left ({:.0} s)",
            row.figures.units,
            started.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    if names.iter().any(|n| *n == "faults") {
        let out = out.or_else(|| Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("FAULTS.md")));
        // Names after `faults` pick scenarios (the fault-free run always
        // comes first: the others are judged, and the restarts timed, by it);
        // a partial run prints its table and writes nothing.
        let only: Vec<&String> = names.iter().copied().filter(|n| *n != "faults").collect();
        let out = if only.is_empty() { out } else { None };
        run_faults(&traces, out.as_deref(), &only)?;
        let left = leftovers();
        if !left.is_empty() {
            return Err(format!("left behind: {}", left.join(", ")));
        }
        return Ok(());
    }
    let mut all = presets(&traces);
    match std::env::var("FARM_ORDER").as_deref() {
        Ok("critical") => {
            for s in &mut all {
                for (t, _) in &mut s.builds {
                    *t = t.in_critical_path_order();
                }
            }
        }
        Ok(other) => return Err(format!("FARM_ORDER={other:?}: the only other order is \"critical\"")),
        Err(_) => {}
    }
    if let Some(f) = std::env::var("FARM_JOBS").ok().and_then(|v| v.parse::<f64>().ok()) {
        for s in &mut all {
            s.jobs = ((s.agents * s.tokens as usize) as f64 * f).round().max(1.0) as usize;
        }
    }
    let wanted: Vec<&Scenario> = if names.is_empty() {
        all.iter().collect()
    } else {
        let known: Vec<&str> = all.iter().map(|s| s.name.as_str()).chain(["scale"]).collect();
        if let Some(bad) = names.iter().find(|n| !known.contains(&n.as_str())) {
            return Err(format!("unknown preset {bad:?} (known: {})", known.join(", ")));
        }
        all.iter().filter(|s| names.contains(&&s.name)).collect()
    };
    let mut wanted: Vec<Scenario> = wanted.into_iter().cloned().collect();
    if let Some(l) = std::env::var("FARM_LOOKAHEAD").ok().and_then(|v| v.parse::<u32>().ok()) {
        wanted = wanted.into_iter().map(|s| run_ahead(s, l)).collect();
    }
    let mut rows = Vec::new();
    for s in &wanted {
        eprintln!(
            "farm: {} ({} agents × {} tokens, {} build(s), dilation {}×)",
            s.name,
            s.agents,
            s.tokens,
            s.builds.len(),
            s.dilate
        );
        let row = run_scenario(s)?;
        eprintln!("{}", report::table(std::slice::from_ref(&row)));
        if let Err(e) = row.figures.honest() {
            return Err(format!("{}: {e}", s.name));
        }
        rows.push(row);
    }
    let scale_row = if names.is_empty() || names.iter().any(|n| *n == "scale") {
        eprintln!("farm: scale");
        let r = scale::run(&scale::ScaleConfig::preset())?;
        eprintln!("{}", r.render());
        Some(r)
    } else {
        None
    };
    let left = leftovers();
    if !left.is_empty() {
        return Err(format!("left behind: {}", left.join(", ")));
    }
    println!("{}", report::table(&rows));
    if let Some(s) = &scale_row {
        println!("{}", s.render());
    }
    let out = out.or_else(|| names.is_empty().then(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("FARM.md")));
    if let Some(out) = out {
        let md = report::markdown(&rows, scale_row.as_ref(), started.elapsed());
        std::fs::write(&out, md).map_err(|e| format!("{}: {e}", out.display()))?;
        eprintln!("farm: wrote {}", out.display());
    }
    Ok(())
}

/// Namespaces of this run and processes started from its work directories
/// that are still there.
fn leftovers() -> Vec<String> {
    let tag = format!("{}{}-", netns::PREFIX, std::process::id());
    let mut left: Vec<String> = netns::listed().into_iter().filter(|n| n.starts_with(&tag)).collect();
    let marker = format!("ccfarm-work-{}", std::process::id());
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else { continue };
            if String::from_utf8_lossy(&cmd).contains(&marker) && e.file_name() != "self" {
                left.push(format!("process {}", e.file_name().to_string_lossy()));
            }
        }
    }
    left
}

fn install_interrupt_cleanup() {
    std::thread::spawn(|| {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        rt.block_on(async {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                () = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
            }
        });
        eprintln!("farm: interrupted; removing the farm's namespaces, processes and files");
        netns::remove_own();
        for dir in INTERRUPTED_CLEANUP.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter() {
            let _ = std::fs::remove_dir_all(dir);
        }
        std::process::exit(130);
    });
}

/// A work directory, removed at the end unless kept.
enum KeptOrTemp {
    Kept(PathBuf),
    Temp(tempfile::TempDir),
}

impl KeptOrTemp {
    fn path(&self) -> &Path {
        match self {
            KeptOrTemp::Kept(p) => p,
            KeptOrTemp::Temp(t) => t.path(),
        }
    }
}

/// A child process, killed when dropped.
struct Proc {
    child: Child,
    what: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// The relay's counts at the end of a run ([`relay::parse_counts`]): its
/// stdin closed, it prints them once more and exits (within 5 s).
fn relay_counts(relay: &mut Proc, log: &Path) -> Option<[u64; 4]> {
    drop(relay.child.stdin.take());
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && !matches!(relay.child.try_wait(), Ok(Some(_))) {
        std::thread::sleep(Duration::from_millis(20));
    }
    relay::parse_counts(&std::fs::read_to_string(log).ok()?)
}

/// SIGTERM, then up to `wait` for the process to exit (it is killed when
/// dropped if it did not).
fn stop_gracefully(p: &mut Proc, wait: Duration) {
    let _ = Command::new("kill").args(["-TERM", &p.pid().to_string()]).status();
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        if matches!(p.child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `program args` in namespace `ns` (`ip netns exec` execs, so the
/// child's pid is the program's), its output to `log`.
fn spawn_in(ns: &str, program: &Path, args: &[String], log: &Path, piped: bool) -> Result<Proc, String> {
    let file = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns])
        .arg(program)
        .args(args)
        .env("RUST_LOG", std::env::var("FARM_LOG").unwrap_or_else(|_| "warn".into()))
        .stderr(err);
    if piped {
        cmd.stdout(Stdio::piped()).stdin(Stdio::piped());
    } else {
        cmd.stdout(file).stdin(Stdio::null());
    }
    let child = cmd.spawn().map_err(|e| format!("cannot start {}: {e}", program.display()))?;
    Ok(Proc { child, what: format!("{} in {ns}", program.file_name().unwrap_or_default().to_string_lossy()) })
}

/// Reads lines of a piped child's stdout until one starts with `prefix`.
fn wait_line(p: &mut Proc, prefix: &str, within: Duration) -> Result<String, String> {
    let Some(out) = p.child.stdout.take() else { return Err(format!("{}: no stdout", p.what)) };
    let (tx, rx) = std::sync::mpsc::channel();
    let want = prefix.to_owned();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.starts_with(&want) {
                let _ = tx.send(line);
                return;
            }
        }
    });
    rx.recv_timeout(within).map_err(|_| format!("{} did not print {prefix:?} within {within:?}", p.what))
}

/// `/proc/<pid>/stat` utime + stime, seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    let Some(rest) = stat.rsplit(')').next() else { return 0.0 };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // After the name: state is field 0, utime 11, stime 12.
    (ticks(11) + ticks(12)) / 100.0
}

/// `/proc/<pid>/status` VmRSS, bytes.
pub fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
        .map_or(0, |kb| kb * 1024)
}

/// The scheduler's status, asked from inside the hub.
fn status(hub: &str, tls: &Path) -> Result<serde_json::Value, String> {
    let addr = format!("{}:{SCHEDULER_PORT}", netns::HUB_IP);
    let out = Command::new("ip")
        .args(["netns", "exec", hub, CCROUTE, "status", "--json", "--scheduler", &addr, "--tls-dir"])
        .arg(tls)
        .env("RUST_LOG", "error")
        .output()
        .map_err(|e| format!("ccroute status: {e}"))?;
    if !out.status.success() {
        return Err(format!("ccroute status: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("ccroute status: {e}"))
}

fn agents_joined(s: &serde_json::Value) -> usize {
    s["agents"].as_array().map_or(0, Vec::len)
}

/// Results the agents returned that answered their task, over every
/// session (an agent that reconnected during the build keeps its count).
fn agents_completed(s: &serde_json::Value) -> u64 {
    s["totals"]["agent_results"].as_u64().unwrap_or(0)
}

/// A counter of the status's agents, summed.
fn agents_sum(s: &serde_json::Value, field: &str) -> u64 {
    s["agents"].as_array().map_or(0, |a| a.iter().filter_map(|x| x[field].as_u64()).sum())
}

/// Compiles the agents say they started since they started (their CPU
/// samples carry the count, whatever scheduler they report to).
fn agents_started(s: &serde_json::Value) -> u64 {
    agents_sum(s, "tasks_started")
}

/// [`agents_started`] once it holds still (samples come every second) and
/// every agent is connected.
fn agents_started_settled(hub: &str, tls: &Path, agents: usize) -> Result<u64, String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = None;
    loop {
        let st = status(hub, tls)?;
        let n = agents_started(&st);
        if agents_joined(&st) == agents && last == Some(n) {
            return Ok(n);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the agents' counts of compiles started did not settle ({} joined)",
                agents_joined(&st)
            ));
        }
        last = Some(n).filter(|_| agents_joined(&st) == agents);
        std::thread::sleep(Duration::from_millis(1_200));
    }
}

/// Runs one scenario (and, when asked, each distinct build alone after it).
fn run_scenario(s: &Scenario) -> Result<Row, String> {
    // The cost model a first run teaches, kept to the end of the row.
    let warm_dir = if s.warm_costs && s.costs_dir.is_none() && std::env::var_os("FARM_COSTS").is_none() {
        Some(tempfile::Builder::new().prefix("ccfarm-costs-").tempdir().map_err(|e| e.to_string())?)
    } else {
        None
    };
    let warmed = warm_dir.as_ref().map(|d| Scenario { costs_dir: Some(d.path().to_owned()), ..s.clone() });
    let s = match &warmed {
        Some(w) => {
            eprintln!("farm: {}: a first run teaches the cost model the build's units", s.name);
            run_farm(w)?;
            w
        }
        None => s,
    };
    let figures = run_farm(s)?;
    let mut alone = Vec::new();
    if s.alone {
        let (trace, _) = &s.builds[0];
        let one = Scenario {
            builds: vec![(trace.clone(), 0.0)],
            alone: false,
            name: format!("{}-alone", s.name),
            ..s.clone()
        };
        let f = run_farm(&one)?;
        alone.push(f.builds[0].makespan_s);
    }
    Ok(Row { scenario: s.clone(), figures, alone })
}

/// Starts the farm, replays every build, stops the farm; its figures.
fn run_farm(s: &Scenario) -> Result<Figures, String> {
    let work = tempfile::Builder::new()
        .prefix(&format!("ccfarm-work-{}-", std::process::id()))
        .tempdir()
        .map_err(|e| e.to_string())?;
    INTERRUPTED_CLEANUP.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(work.path().to_owned());
    // FARM_KEEP=1 keeps every log and answer file (the path is printed).
    let work = if std::env::var_os("FARM_KEEP").is_some() {
        let kept = work.keep();
        eprintln!("farm: keeping {}", kept.display());
        KeptOrTemp::Kept(kept)
    } else {
        KeptOrTemp::Temp(work)
    };
    let w = work.path();
    let tls = w.join("tls");
    netns::run(CCROUTE, &["certs", "init", &tls.to_string_lossy()])?;
    std::fs::create_dir_all(w.join("scratch")).map_err(|e| e.to_string())?;
    let mut net = netns::Net::new()?;
    let hosts = s.agents + s.builds.len();
    let rate = (s.rate_bps as f64 / s.dilate) as u64;
    net.add_hosts(hosts, |_| netns::Shape { rate_bps: rate })?;
    if s.loss_permille > 0 {
        for h in 0..hosts {
            net.set_loss(h, s.loss_permille)?;
        }
    }

    let mut procs: Vec<Proc> = Vec::new();
    let sched_addr = format!("{}:{SCHEDULER_PORT}", netns::HUB_IP);
    let tls_s = tls.to_string_lossy().into_owned();
    // Its cost model starts empty in this run's own directory, or is kept
    // across runs in FARM_COSTS; extra flags (a policy turned off, say) come
    // from FARM_SCHEDULER_FLAGS.
    let kept_costs = std::env::var_os("FARM_COSTS").map(PathBuf::from).or_else(|| s.costs_dir.clone());
    let cache_dir = kept_costs.clone().unwrap_or_else(|| w.join("cache")).to_string_lossy().into_owned();
    let mut scheduler_args: Vec<String> = [
        "scheduler",
        "--listen",
        &sched_addr,
        "--no-cache",
        "--no-optimizer",
        "--tls-dir",
        &tls_s,
        "--cache-dir",
        &cache_dir,
    ]
    .map(String::from)
    .to_vec();
    scheduler_args.extend(s.scheduler_flags.iter().cloned());
    scheduler_args
        .extend(std::env::var("FARM_SCHEDULER_FLAGS").unwrap_or_default().split_whitespace().map(String::from));
    let mut scheduler = spawn_in(&net.hub, Path::new(CCROUTE), &scheduler_args, &w.join("scheduler.log"), true)?;
    wait_line(&mut scheduler, "ccroute scheduler listening", Duration::from_secs(20))?;
    let mut sched_pid = scheduler.pid();
    let rss_idle = rss_bytes(sched_pid);

    // Every host's link through the relay, with the dilated delay.
    let one_way = (s.rtt_us as f64 * s.dilate / 2.0) as u64;
    let jitter = (s.jitter_us as f64 * s.dilate) as u64;
    let links: String = (0..hosts).map(|i| format!("{}:{one_way}:{jitter}\n", FIRST_LINK_PORT as usize + i)).collect();
    std::fs::write(w.join("links"), links).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut relay = spawn_in(
        &net.hub,
        &exe,
        &[
            "relay".into(),
            netns::HUB_IP.to_string(),
            sched_addr.clone(),
            w.join("links").to_string_lossy().into_owned(),
        ],
        &w.join("relay.log"),
        true,
    )?;
    let ready = wait_line(&mut relay, "relay ready", Duration::from_secs(30))?;
    let relay_added = report::parse_relay(&ready);
    let relay_pid = relay.pid();
    let link_addr = |i: usize| format!("{}:{}", netns::HUB_IP, FIRST_LINK_PORT as usize + i);

    let pin_speeds = std::env::var("FARM_PIN_SPEEDS").is_ok_and(|v| v == "1");
    for i in 0..s.agents {
        let mut args = vec![
            "agent".to_owned(),
            "--scheduler".into(),
            link_addr(i),
            "--tls-dir".into(),
            tls_s.clone(),
            "--jobs".into(),
            s.tokens.to_string(),
            "--no-discover".into(),
            "--test-toolchain".into(),
            "--no-shipping".into(),
            "--replay-speed".into(),
            s.speed(i).to_string(),
            "--name".into(),
            format!("farm-a{i}"),
            "--scratch-dir".into(),
            w.join("scratch").to_string_lossy().into_owned(),
        ];
        if pin_speeds {
            args.extend(["--speed".into(), s.speed(i).to_string()]);
        }
        args.extend(std::env::var("FARM_AGENT_FLAGS").unwrap_or_default().split_whitespace().map(String::from));
        procs.push(spawn_in(&net.hosts[i], Path::new(CCROUTE), &args, &w.join(format!("agent-{i}.log")), false)?);
    }
    let deadline = Instant::now() + Duration::from_secs(60 + s.agents as u64 / 2);
    loop {
        let st = status(&net.hub, &tls)?;
        if agents_joined(&st) == s.agents {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{} of {} agents joined within the time allowed", agents_joined(&st), s.agents));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let rss_agents = rss_bytes(sched_pid);
    let before = status(&net.hub, &tls)?;
    let started_before = agents_started_settled(&net.hub, &tls, s.agents)?;
    let mut restarts = 0;

    let t0 = ccroute::host::monotonic_ns() + 3_000_000_000 + s.agents as u64 * 10_000_000;
    let mut clients = Vec::new();
    for (b, (trace, offset_s)) in s.builds.iter().enumerate() {
        let host = s.agents + b;
        let tfile = w.join(format!("build-{b}.trace"));
        std::fs::write(&tfile, trace.render()).map_err(|e| e.to_string())?;
        let start_at = t0 + (offset_s * s.dilate * 1e9) as u64;
        let mut args = vec![
            "replay".to_owned(),
            "--scheduler".into(),
            link_addr(host),
            "--tls-dir".into(),
            tls_s.clone(),
            "--trace".into(),
            tfile.to_string_lossy().into_owned(),
            "--jobs".into(),
            s.jobs.to_string(),
            "--local-slots".into(),
            LOCAL_SLOTS.to_string(),
            "--dilate".into(),
            s.dilate.to_string(),
            "--start-at".into(),
            start_at.to_string(),
            "--name".into(),
            format!("build-{b}"),
            "--out".into(),
            w.join(format!("answers-{b}.tsv")).to_string_lossy().into_owned(),
            // The link's own cost model, beside the scheduler's: a first
            // run teaches both.
            "--costs".into(),
            Path::new(&cache_dir)
                .join(format!("build-{b}-{}", ccroute::consumerd::link::COSTS_FILE))
                .to_string_lossy()
                .into_owned(),
        ];
        if s.follow_window {
            args.push("--follow-window".into());
        }
        if std::env::var_os("FARM_SEND_IN_ORDER").is_some() {
            args.push("--send-in-order".into());
        }
        clients.push((spawn_in(&net.hosts[host], &exe, &args, &w.join(format!("replay-{b}.log")), false)?, start_at));
    }
    let cpu_before = cpu_seconds(sched_pid);
    let relay_cpu_before = cpu_seconds(relay_pid);
    // Each build may take ten times its bound and a minute.
    let longest: f64 =
        s.builds.iter().map(|(t, off)| off + t.work_us() as f64 / 1e6 / s.capacity().max(1.0)).fold(0.0, f64::max);
    let deadline = Instant::now() + Duration::from_secs_f64(60.0 + 10.0 * longest * s.dilate + 5.0);
    let mut rss_peak = 0;
    let mut faults = s.faults.iter().peekable();
    for (c, _) in &mut clients {
        loop {
            while let Some(f) = faults.next_if(|f| ccroute::host::monotonic_ns() >= t0 + (f.at_s * 1e9) as u64) {
                match f.on {
                    FaultOn::Agent(i) => net.set_loss(i, f.permille)?,
                    FaultOn::Build(b) => net.set_loss(s.agents + b, f.permille)?,
                    FaultOn::Hub => net.set_hub_loss(f.permille)?,
                    FaultOn::SchedulerRestart => {
                        let _ = scheduler.child.kill();
                        let _ = scheduler.child.wait();
                        restarts += 1;
                        let log = w.join(format!("scheduler-{restarts}.log"));
                        scheduler = spawn_in(&net.hub, Path::new(CCROUTE), &scheduler_args, &log, true)?;
                        wait_line(&mut scheduler, "ccroute scheduler listening", Duration::from_secs(20))?;
                        sched_pid = scheduler.pid();
                    }
                }
            }
            rss_peak = rss_peak.max(rss_bytes(sched_pid));
            match c.child.try_wait() {
                Ok(Some(st)) if st.success() => break,
                Ok(Some(st)) => {
                    let log = std::fs::read_to_string(w.join("replay-0.log")).unwrap_or_default();
                    return Err(format!("{} exited with {st}: {}", c.what, log.trim()));
                }
                Ok(None) if Instant::now() > deadline => return Err(format!("{} did not finish in time", c.what)),
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return Err(e.to_string()),
            }
        }
    }
    // Faults not reached before the builds ended (a cut's healing, say) take
    // effect now, so that every agent is back to be counted.
    for f in faults {
        match f.on {
            FaultOn::Agent(i) => net.set_loss(i, f.permille)?,
            FaultOn::Build(b) => net.set_loss(s.agents + b, f.permille)?,
            FaultOn::Hub => net.set_hub_loss(f.permille)?,
            FaultOn::SchedulerRestart => {}
        }
    }
    let cpu_after = cpu_seconds(sched_pid);
    let relay_cpu = cpu_seconds(relay_pid) - relay_cpu_before;
    let link_drops = net.link_drops()?;
    let socket_drops = net.socket_drops()?;
    let after = status(&net.hub, &tls)?;
    let agents_started = agents_started_settled(&net.hub, &tls, s.agents)? - started_before;
    let mut builds = Vec::new();
    for (b, (trace, _)) in s.builds.iter().enumerate() {
        let text = std::fs::read_to_string(w.join(format!("answers-{b}.tsv"))).map_err(|e| e.to_string())?;
        let answers: Vec<replay::Answer> = text.lines().filter_map(replay::Answer::parse).collect();
        builds.push(report::Build::of(trace, &answers, clients[b].1, s.dilate));
    }
    let completed = agents_completed(&after).saturating_sub(agents_completed(&before));
    let requeued = after["totals"]["requeued"].as_u64().unwrap_or(0);
    let figures = Figures::of(
        s,
        builds,
        report::Machine {
            sched_cpu_s: cpu_after - cpu_before,
            rss_idle,
            rss_agents,
            rss_peak,
            agents_completed: completed,
            requeued,
            relay_added,
            relay_cpu_s: relay_cpu,
            agents_started,
            link_drops,
            socket_drops,
            relay_counts: relay_counts(&mut relay, &w.join("relay.log")),
            copies: (
                agents_sum(&after, "copies_started").saturating_sub(agents_sum(&before, "copies_started")),
                agents_sum(&after, "copies_won").saturating_sub(agents_sum(&before, "copies_won")),
            ),
        },
    );
    drop(clients);
    drop(procs);
    drop(relay);
    if kept_costs.is_some() {
        // Stopped, not killed, so that it writes its cost model out.
        stop_gracefully(&mut scheduler, Duration::from_secs(15));
    }
    drop(scheduler);
    net.remove();
    drop(net);
    Ok(figures)
}
