//! A run's figures, checked for honesty, as a table row and as FARM.md.

use std::fmt::Write as _;
use std::time::Duration;

use crate::replay::Answer;
use crate::scale::ScaleReport;
use crate::trace::Trace;
use crate::Scenario;

/// One build's answers, summed up.
#[derive(Debug, Clone)]
pub struct Build {
    pub units: usize,
    pub answered: usize,
    pub distinct: usize,
    pub remote: usize,
    pub local: usize,
    pub failed: usize,
    pub size_bad: usize,
    /// Σ of the times the units asked for (µs), and what the trace says they must be.
    pub asked_us: u64,
    pub expected_us: u64,
    /// Remote answers whose hold is not their time ÷ their agent's speed.
    pub hold_bad: usize,
    /// Submission to start on an agent, ns, of remote units.
    pub dispatch_ns: Vec<u64>,
    /// The same, of units whose compressed text travels inline (≤ 64 KiB,
    /// on the control stream) and of those sent on a stream of their own.
    pub dispatch_inline_ns: Vec<u64>,
    pub dispatch_stream_ns: Vec<u64>,
    /// From its start to its last answer, farm seconds (÷ dilation).
    pub makespan_s: f64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub work_us: u64,
    pub longest_us: u64,
    pub critical_us: u64,
    /// Σ of the units' compressed texts and objects, bytes.
    pub text_wire: u64,
    pub object_wire: u64,
    pub local_reasons: Vec<String>,
}

impl Build {
    pub fn of(trace: &Trace, answers: &[Answer], start_ns: u64, dilate: f64) -> Build {
        let mut seen = vec![false; trace.units.len()];
        let mut b = Build {
            units: trace.units.len(),
            answered: answers.len(),
            distinct: 0,
            remote: 0,
            local: 0,
            failed: 0,
            size_bad: 0,
            asked_us: 0,
            expected_us: trace.units.iter().map(|u| (u.cpu_us as f64 * dilate).round() as u64).sum(),
            hold_bad: 0,
            dispatch_ns: Vec::new(),
            dispatch_inline_ns: Vec::new(),
            dispatch_stream_ns: Vec::new(),
            makespan_s: 0.0,
            start_ns,
            end_ns: start_ns,
            work_us: trace.work_us(),
            longest_us: trace.units.iter().map(|u| u.cpu_us).max().unwrap_or(0),
            critical_us: trace.critical_path_us(),
            text_wire: trace.units.iter().map(|u| u.pp_wire).sum(),
            object_wire: trace.units.iter().map(|u| u.obj_wire).sum(),
            local_reasons: Vec::new(),
        };
        for a in answers {
            if let Some(s) = seen.get_mut(a.seq as usize) {
                if !*s {
                    b.distinct += 1;
                }
                *s = true;
            }
            b.asked_us += a.asked_us;
            b.end_ns = b.end_ns.max(a.answered_ns);
            if !a.size_ok {
                b.size_bad += 1;
            }
            if a.how == "remote" {
                b.remote += 1;
                let d = a.started_ns.saturating_sub(a.submitted_ns);
                b.dispatch_ns.push(d);
                let inline = trace.units.get(a.seq as usize).is_some_and(|u| u.pp_wire <= 64 << 10);
                if inline {
                    b.dispatch_inline_ns.push(d)
                } else {
                    b.dispatch_stream_ns.push(d)
                }
                let want = a.asked_us as f64 * 1000.0 / a.speed_milli.max(1) as f64;
                if (a.held_us as f64 - want).abs() > 2.0 {
                    b.hold_bad += 1;
                }
            } else if let Some(why) = a.how.strip_prefix("local:") {
                b.local += 1;
                if !b.local_reasons.iter().any(|r| r == why) {
                    b.local_reasons.push(why.to_owned());
                }
            } else {
                b.failed += 1;
            }
        }
        b.dispatch_ns.sort_unstable();
        b.dispatch_inline_ns.sort_unstable();
        b.dispatch_stream_ns.sort_unstable();
        b.makespan_s = (b.end_ns - b.start_ns) as f64 / 1e9 / dilate;
        b
    }
}

/// What the harness read from the machine.
#[derive(Debug, Clone, Default)]
pub struct Machine {
    pub sched_cpu_s: f64,
    pub rss_idle: u64,
    pub rss_agents: u64,
    pub rss_peak: u64,
    pub agents_completed: u64,
    pub requeued: u64,
    /// The relay's own added round trip, p50 and p99, µs.
    pub relay_added: (u64, u64),
    pub relay_cpu_s: f64,
    /// Compiles the agents started during the run (their own count,
    /// across reconnections): with the units compiled locally, more than the
    /// units means a unit compiled twice.
    pub agents_started: u64,
    /// Packets the links' queues dropped.
    pub link_drops: u64,
    /// Datagrams dropped at a full socket receive buffer: in the hub's
    /// namespace (the scheduler's and the relay's sockets), in the hosts'.
    pub socket_drops: (u64, u64),
    /// The relay's datagrams: forwarded, dropped, sent over a millisecond
    /// late, and the latest of them (µs); `None` when it did not say.
    pub relay_counts: Option<[u64; 4]>,
    /// Stragglers copied to an idle agent during the run, and of those
    /// copies, the ones that answered first.
    pub copies: (u64, u64),
}

impl Machine {
    /// What the network lost or held up in the run, in a sentence.
    pub fn losses(&self) -> String {
        let relay = match self.relay_counts {
            Some([forwarded, dropped, late, worst]) => format!(
                "the relay forwarded {forwarded} datagrams, dropped {dropped}, and sent {late} ({:.2} %) over 1 ms \
                 after they were due (at worst {:.1} ms)",
                late as f64 * 100.0 / forwarded.max(1) as f64,
                worst as f64 / 1000.0
            ),
            None => "the relay's counts were not read".into(),
        };
        format!(
            "Stragglers copied: {} (the copy answered first: {}). The links' queues dropped {} packets; full socket \
             buffers {} datagrams in the scheduler's namespace and {} in the hosts'; {relay}.",
            self.copies.0, self.copies.1, self.link_drops, self.socket_drops.0, self.socket_drops.1
        )
    }
}

/// A run's figures.
#[derive(Debug, Clone)]
pub struct Figures {
    pub units: usize,
    pub remote: usize,
    pub local: usize,
    pub makespan_s: f64,
    pub bound_s: f64,
    /// One build's in-order reference (`Trace::in_order_makespan_us` on
    /// this farm's tokens and its link's rate, no less than the link's term
    /// of the bound), farm seconds; none for several builds.
    pub reference_s: Option<f64>,
    pub dispatch_ms: (f64, f64, f64),
    pub tasks_per_s: f64,
    pub sched_us_per_task: f64,
    pub builds: Vec<Build>,
    pub machine: Machine,
    pub agents: usize,
}

/// Every text goes up the build's link and every object comes down it:
/// neither direction faster than the link's rate. Seconds; 0 on an
/// unshaped link.
fn link_s(s: &Scenario, b: &Build) -> f64 {
    if s.rate_bps == 0 {
        return 0.0;
    }
    b.text_wire.max(b.object_wire) as f64 * 8.0 / s.rate_bps as f64
}

fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

impl Figures {
    pub fn of(s: &Scenario, builds: Vec<Build>, machine: Machine) -> Figures {
        let capacity = s.capacity().max(1e-9);
        let fastest = (0..s.agents).map(|i| s.speed(i)).fold(0.0, f64::max).max(1e-9);
        // The bound: no build ends before its longest chain (or unit, on
        // the fastest host) is done after its start, and from each start
        // on, the work of the builds started then or later needs the whole
        // capacity.
        let mut bound_s: f64 = 0.0;
        let offsets: Vec<f64> = s.builds.iter().map(|(_, o)| *o).collect();
        for (k, b) in builds.iter().enumerate() {
            let longest = (b.critical_us as f64).max(b.longest_us as f64 / fastest) / 1e6;
            bound_s = bound_s.max(offsets[k] + longest);
            let later: f64 =
                builds.iter().zip(&offsets).filter(|(_, o)| **o >= offsets[k]).map(|(b, _)| b.work_us as f64).sum();
            bound_s = bound_s.max(offsets[k] + later / 1e6 / capacity);
            bound_s = bound_s.max(offsets[k] + link_s(s, b));
        }
        let reference_s = match (s.builds.as_slice(), builds.as_slice()) {
            ([(trace, _)], [b]) => {
                let speeds: Vec<f64> =
                    (0..s.agents).flat_map(|i| std::iter::repeat_n(s.speed(i), s.tokens as usize)).collect();
                Some((trace.in_order_makespan_us(s.jobs, &speeds, s.rate_bps) / 1e6).max(link_s(s, b)))
            }
            _ => None,
        };
        let start = builds.iter().map(|b| b.start_ns).min().unwrap_or(0);
        let end = builds.iter().map(|b| b.end_ns).max().unwrap_or(0);
        let wall_s = (end - start) as f64 / 1e9;
        let mut all: Vec<u64> = builds.iter().flat_map(|b| b.dispatch_ns.iter().copied()).collect();
        all.sort_unstable();
        let ms = |ns: u64| ns as f64 / 1e6;
        let remote: usize = builds.iter().map(|b| b.remote).sum();
        Figures {
            units: builds.iter().map(|b| b.units).sum(),
            remote,
            local: builds.iter().map(|b| b.local).sum(),
            makespan_s: wall_s / s.dilate,
            bound_s,
            reference_s,
            dispatch_ms: (ms(quantile(&all, 0.5)), ms(quantile(&all, 0.99)), ms(all.last().copied().unwrap_or(0))),
            tasks_per_s: remote as f64 / wall_s.max(1e-9),
            sched_us_per_task: machine.sched_cpu_s * 1e6 / (machine.agents_completed.max(1)) as f64,
            builds,
            machine,
            agents: s.agents,
        }
    }

    /// The harness's own checks: every unit answered once, with its
    /// recorded size, after exactly its recorded time; the agents compiled
    /// as many units as came back from them.
    pub fn honest(&self) -> Result<(), String> {
        for (i, b) in self.builds.iter().enumerate() {
            let what = format!("build {i}");
            if b.answered != b.units || b.distinct != b.units {
                return Err(format!(
                    "{what}: {} units, {} answers for {} distinct units",
                    b.units, b.answered, b.distinct
                ));
            }
            if b.failed > 0 || b.size_bad > 0 {
                return Err(format!("{what}: {} failed, {} objects not of their recorded size", b.failed, b.size_bad));
            }
            if b.asked_us != b.expected_us {
                return Err(format!("{what}: the units asked {} µs, the trace says {} µs", b.asked_us, b.expected_us));
            }
            if b.hold_bad > 0 {
                return Err(format!("{what}: {} units held their token for other than their time ÷ speed", b.hold_bad));
            }
        }
        if self.machine.agents_completed != self.remote as u64 {
            return Err(format!(
                "the agents reported {} results, the builds got {} remote answers",
                self.machine.agents_completed, self.remote
            ));
        }
        Ok(())
    }
}

/// A table row: the scenario, its figures, and (for `shared`) the build alone.
#[derive(Debug, Clone)]
pub struct Row {
    pub scenario: Scenario,
    pub figures: Figures,
    pub alone: Vec<f64>,
}

/// "relay ready: N links, adds A µs p50 / B µs p99 per round trip".
pub fn parse_relay(line: &str) -> (u64, u64) {
    let nums: Vec<u64> =
        line.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).filter_map(|s| s.parse().ok()).collect();
    (nums.get(1).copied().unwrap_or(0), nums.get(3).copied().unwrap_or(0))
}

fn rate(bps: u64) -> String {
    if bps >= 1_000_000_000 {
        format!("{} Gbit/s", bps / 1_000_000_000)
    } else {
        format!("{} Mbit/s", bps / 1_000_000)
    }
}

pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| scenario | agents × tokens | RTT | rate | units | dilation | makespan s | lower bound s | ratio | in-order reference s | ÷ reference | dispatch p50 / p99 / max ms | p99 − RTT ms | tasks/s | scheduler CPU µs/task | local | builds vs alone |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let (s, f) = (&r.scenario, &r.figures);
        let rtt_ms = s.rtt_us as f64 * s.dilate / 1000.0;
        let shared = if r.alone.is_empty() {
            "–".to_owned()
        } else {
            f.builds.iter().map(|b| format!("{:.2}×", b.makespan_s / r.alone[0])).collect::<Vec<_>>().join(" ")
        };
        let (reference, vs_reference) = match f.reference_s {
            Some(r) => (format!("{r:.2}"), format!("{:.3}", f.makespan_s / r.max(1e-9))),
            None => ("–".to_owned(), "–".to_owned()),
        };
        let speeds = if s.slow > 0 { format!(" ({} at {})", s.slow, s.slow_speed) } else { String::new() };
        let jitter = if s.jitter_us > 0 { format!(" ± {} ms", s.jitter_us as f64 / 2000.0) } else { String::new() };
        let _ = writeln!(
            out,
            "| {} | {} × {}{speeds} | {} ms{jitter} | {} | {} | {}× | {:.2} | {:.2} | {:.3} | {reference} | {vs_reference} | {:.2} / {:.2} / {:.2} | {:.2} | {:.0} | {:.1} | {} | {shared} |",
            s.name,
            s.agents,
            s.tokens,
            s.rtt_us as f64 / 1000.0,
            rate(s.rate_bps),
            f.units,
            s.dilate,
            f.makespan_s,
            f.bound_s,
            f.makespan_s / f.bound_s.max(1e-9),
            f.dispatch_ms.0,
            f.dispatch_ms.1,
            f.dispatch_ms.2,
            f.dispatch_ms.1 - rtt_ms,
            f.tasks_per_s,
            f.sched_us_per_task,
            f.local,
        );
    }
    out
}

fn commit() -> String {
    std::process::Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| s.lines().next().and_then(|l| l.split_whitespace().nth(1)).and_then(|k| k.parse::<u64>().ok()))
        .map_or(0, |kb| kb >> 20);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{} CPUs ({cpu}), {mem} GiB, Linux {}", ccroute::host::online_cpus(), kernel.trim())
}

pub fn markdown(rows: &[Row], scale: Option<&ScaleReport>, took: Duration) -> String {
    let mut md = format!(
        "# The farm on one machine\n\n\
         Written by `cargo bench --bench farm` (as root) at commit {} on {}; the run took {:.0} min.\n\
         Each row is one preset of `benches/farm/main.rs`; `cargo bench --bench farm -- NAME...` reruns single rows\n\
         (printing the table, not writing this file). The machine is shared and noisy: read ratios, not absolute times.\n\n",
        commit(),
        machine(),
        took.as_secs_f64() / 60.0
    );
    md.push_str(&table(rows));
    md.push_str(
        "\n## What the columns mean\n\n\
         - **makespan**: from a build's start to its last answer (for `shared`, from the first start to the last answer),\n  \
           in farm seconds: wall seconds ÷ the dilation.\n\
         - **lower bound**: the most of total recorded work ÷ capacity (Σ tokens × speed), the longest unit on the fastest\n  \
           host, the longest chain of dependencies, and the build's compressed texts (or objects) over its link's rate;\n  \
           for `shared`, the same from each build's start on. **ratio** =\n  \
           makespan ÷ bound (no placement does better than 1.00, but the build's own order may keep any from reaching it).\n\
         - **in-order reference**: the makespan if the build's units, submitted in its own order as `make -jN` submits\n  \
           them (a new one as soon as one is answered), were each placed with no latency on the token that finishes it\n  \
           first (`Trace::in_order_makespan_us`); on a shaped link the texts go up it one after another in that order\n  \
           and the objects come down one after another, and the reference is no less than the link's term of the bound.\n  \
           On equal hosts with N no more than the tokens every unit starts when its text is across whatever the\n  \
           placement, so this is what the build's order allows and **÷ reference** is what placement and transport\n  \
           lose; on unequal hosts, or where texts share the link rather than take turns (QUIC streams do), it is a\n  \
           reference, not a bound. The gap between the reference and the lower bound is the order's: a long unit the\n  \
           build submits late ends late. A build that runs ahead of the tokens (the `*-lookahead` rows: its window,\n  \
           and so the replay's N, ten times its share) has the same in-order reference, and ÷ reference below 1 is what\n  \
           starting its waiting units longest first gained.\n\
         - **dispatch**: from the replay client's submission to the unit's start on an agent (both read `CLOCK_MONOTONIC`),\n  \
           over every remote unit, in wall milliseconds as measured; it includes the payload's transfer. **p99 − RTT**\n  \
           subtracts the link's round trip as dilated (the goal: ≤ 1 ms).\n\
         - **tasks/s**: units answered remotely ÷ wall makespan. **scheduler CPU µs/task**: the scheduler process's user +\n  \
           system time (`/proc/PID/stat`) over the build ÷ the results its agents reported.\n\
         - **local**: units the scheduler sent back, replayed by the client at speed 1.0 as a consumerd would compile them,\n  \
           at most 8 at once (its local slots).\n\
         - **builds vs alone** (`shared`): each build's makespan ÷ the same build's makespan alone on the same farm.\n\
         - **dilation** K: recorded times and link delays × K, link rates ÷ K, so that the whole farm's own CPU work fits\n  \
           two cores; the makespans and bounds above are divided by K again.\n\n",
    );
    md.push_str("## Each run\n\n");
    for r in rows {
        let (s, f) = (&r.scenario, &r.figures);
        let gather = |pick: fn(&Build) -> &Vec<u64>| {
            let mut v: Vec<u64> = f.builds.iter().flat_map(|b| pick(b).iter().copied()).collect();
            v.sort_unstable();
            v
        };
        let (inline, stream) = (gather(|b| &b.dispatch_inline_ns), gather(|b| &b.dispatch_stream_ns));
        let first = &s.builds[0].0;
        let traces: Vec<String> = if s.builds.len() > 1 && s.builds.iter().all(|(t, _)| t == first) {
            let starts: Vec<String> = s.builds.iter().map(|(_, o)| format!("{o}")).collect();
            vec![format!(
                "{} builds of {} ({} units each), started at {} s",
                s.builds.len(),
                first.about,
                first.units.len(),
                starts.join(", ")
            )]
        } else {
            s.builds.iter().map(|(t, o)| format!("{} ({} units, from {o} s)", t.about, t.units.len())).collect()
        };
        let mut traces = traces;
        if !s.scheduler_flags.is_empty() {
            traces.push(format!("the scheduler run with `{}`", s.scheduler_flags.join(" ")));
        }
        if s.warm_costs {
            traces.push("its cost model taught the build's units by a first, unmeasured run".into());
        }
        let _ = writeln!(
            md,
            "- **{}**: {}. Scheduler RSS {:.1} MiB idle, {:.1} KiB more per connected agent, {:.1} MiB at peak; \
             {} results from agents, {} requeued, {} sent back; relay adds {} µs p50 / {} µs p99 per round trip and \
             used {:.2} CPU s ({:.2} ms per unit); the scheduler used {:.2} CPU s. Dispatch p50 / p99 of the {} units whose compressed text travels inline (≤ 64 KiB): {:.1} / {:.1} ms; of the {} sent on a stream of their own: {:.1} / {:.1} ms.{}",
            s.name,
            traces.join("; "),
            f.machine.rss_idle as f64 / 1048576.0,
            (f.machine.rss_agents.saturating_sub(f.machine.rss_idle)) as f64 / 1024.0 / f.agents.max(1) as f64,
            f.machine.rss_peak as f64 / 1048576.0,
            f.machine.agents_completed,
            f.machine.requeued,
            f.local,
            f.machine.relay_added.0,
            f.machine.relay_added.1,
            f.machine.relay_cpu_s,
            f.machine.relay_cpu_s * 1000.0 / f.units.max(1) as f64,
            f.machine.sched_cpu_s,
            inline.len(),
            quantile(&inline, 0.5) as f64 / 1e6,
            quantile(&inline, 0.99) as f64 / 1e6,
            stream.len(),
            quantile(&stream, 0.5) as f64 / 1e6,
            quantile(&stream, 0.99) as f64 / 1e6,
            if r.alone.is_empty() { String::new() } else { format!(" Alone: {:.2} s.", r.alone[0]) },
        );
        let _ = writeln!(md, "  {}", f.machine.losses());
    }
    if let Some(s) = scale {
        md.push_str("\n## scale: the scheduler itself\n\n");
        md.push_str(&s.render());
        md.push('\n');
    }
    md.push_str(
        "\n## How it is built\n\n\
         Hosts are network namespaces joined to the scheduler's by veth pairs on a bridge, each end's egress shaped with\n\
         `tbf`; delay and jitter come from a userspace UDP relay in the scheduler's namespace (the kernel has no `netem`),\n\
         its threads at real-time priority, whose own added round trip is measured at its start (above). Agents are `ccroute agent --test-toolchain\n\
         --replay-speed S` processes; each unit holds its token for its recorded CPU time ÷ S and returns an object of its\n\
         recorded size. Builds are replay clients driving the consumerd's link like `make -jN` (N = the farm's tokens),\n\
         with preprocessed payloads of each unit's recorded size and compressibility. Traces are in\n\
         `benches/farm/traces/` (recorded by `cargo bench --bench farm -- record`); the large projects are drawn from\n\
         them (the row says so). The harness checks that every unit was answered once with its recorded object size\n\
         after its recorded time, and that it leaves no namespace or process behind.\n",
    );
    md
}
