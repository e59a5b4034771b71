//! The control law: one agent's next token limit from its [`Factors`].
//!
//! `decide` is a function of the interval's [`Reading`], what the caller
//! saw of the agent's tokens (`View`), and a small `Memory` it updates in
//! place: the estimate of CPU per compile, and the last limit found over
//! capacity. Every answer carries a [`Reason`] whose `Display` is what
//! `ccroute status` shows. The law itself and its parameters are documented
//! on the parent module.
//!
//! Left out: anything across agents (each agent is decided alone) and any
//! notion of time beyond "one interval".

use std::fmt;

use super::factors::{Factors, Reading};
use super::{Params, MAX_TOKENS};

/// What the caller saw of an agent's tokens over the interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct View {
    /// The limit in force during the interval.
    pub limit: u32,
    /// The agent's own maximum.
    pub max_limit: u32,
    /// Tokens held at the end of the interval.
    pub tokens_in_use: u32,
    /// Whether every token was taken.
    pub tokens_all_taken: bool,
    /// Whether tasks waited on the agent's routes.
    pub tasks_waiting: bool,
}

/// What says an agent is over its capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Overload {
    /// The CFS quota held work back.
    Throttled {
        /// Fraction of enforcement periods throttled.
        periods: f64,
        /// CPUs' worth of work held back.
        cpus: f64,
        /// `cpus` relative to capacity.
        excess: f64,
    },
    /// Tasks waited for a CPU (PSI `some`), fraction of the time.
    Pressure(f64),
    /// The CPU was saturated and nothing tells by how much demand passed it.
    Saturated(f64),
}

impl fmt::Display for Overload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Overload::Throttled { periods, cpus, .. } => {
                write!(f, "throttled in {:.0}% of periods ({cpus:.2} cpus held back)", periods * 100.0)
            }
            Overload::Pressure(p) => write!(f, "cpu pressure {:.0}%", p * 100.0),
            Overload::Saturated(u) => write!(f, "cpu at {:.0}%", u * 100.0),
        }
    }
}

/// How a lowered limit was chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// Toward the limit that fills the capacity at this CPU per task.
    Target {
        /// CPUs per task the target assumes.
        task_cpu: f64,
        /// The limit that fills the capacity.
        target: u32,
    },
    /// By this fraction, with nothing to size the step by.
    Backoff(f64),
}

/// Why the optimizer chose a limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reason {
    /// No usable sample this interval: the limit holds.
    NoData {
        /// Pairs of samples dropped as untrustworthy.
        dropped: u32,
    },
    /// The limit was above the agent's maximum.
    AboveMax {
        /// The agent's maximum.
        max: u32,
    },
    /// Over capacity: lowered.
    Lower {
        /// What showed it.
        overload: Overload,
        /// CPUs the agent may use.
        capacity: f64,
        /// How far.
        step: Step,
    },
    /// Over capacity, already at 1.
    AtMinimum {
        /// What showed it.
        overload: Overload,
    },
    /// Over capacity, but compiles admitted under an earlier, higher limit
    /// are still running: the last cut has not taken effect yet.
    Draining {
        /// What showed it.
        overload: Overload,
        /// Compiles running, on average.
        running: f64,
        /// The limit.
        limit: u32,
    },
    /// Mildly over: inside the dead band between raising and lowering.
    Contended {
        /// What showed it.
        overload: Overload,
    },
    /// Under-used with every token taken: raised.
    Raise {
        /// Fraction of capacity used.
        cpu_use: f64,
        /// CPUs the agent may use.
        capacity: f64,
        /// Tokens taken (the old limit).
        tokens: u32,
        /// The limit that fills the capacity, when a per-task estimate exists
        /// (without one the limit doubles).
        target: Option<u32>,
    },
    /// Under-used with every token taken but nothing waiting: raised by one.
    Probe {
        /// Fraction of capacity used.
        cpu_use: f64,
        /// CPUs the agent may use.
        capacity: f64,
        /// Tokens taken (the old limit).
        tokens: u32,
    },
    /// The limit fills the capacity, within the dead band.
    AtTarget {
        /// The limit.
        limit: u32,
        /// CPUs the agent may use.
        capacity: f64,
        /// CPUs per task.
        task_cpu: f64,
    },
    /// A higher limit was over capacity lately: not tried again yet.
    Remembered {
        /// The limit that was over capacity.
        over: u32,
        /// Intervals until it may be tried again.
        left: u32,
    },
    /// The CPU is close to full: no raise.
    Busy {
        /// Fraction of capacity used.
        cpu_use: f64,
        /// CPUs the agent may use.
        capacity: f64,
    },
    /// At the agent's own maximum.
    AtMax {
        /// The agent's maximum.
        max: u32,
        /// Fraction of capacity used.
        cpu_use: f64,
        /// CPUs the agent may use.
        capacity: f64,
    },
    /// Not every token was taken: no demand to raise for.
    Idle {
        /// Tokens held.
        in_use: u32,
        /// The limit.
        limit: u32,
    },
}

impl Reason {
    /// Every [`Reason::kind`], in declaration order: a bounded set, for
    /// counting decisions by kind (a metric label).
    pub const KINDS: [&'static str; 13] = [
        "no_data",
        "above_max",
        "lower",
        "at_minimum",
        "draining",
        "contended",
        "raise",
        "probe",
        "at_target",
        "remembered",
        "busy",
        "at_max",
        "idle",
    ];

    /// The kind of decision, without its figures: one of [`Reason::KINDS`].
    pub fn kind(&self) -> &'static str {
        let i = match self {
            Reason::NoData { .. } => 0,
            Reason::AboveMax { .. } => 1,
            Reason::Lower { .. } => 2,
            Reason::AtMinimum { .. } => 3,
            Reason::Draining { .. } => 4,
            Reason::Contended { .. } => 5,
            Reason::Raise { .. } => 6,
            Reason::Probe { .. } => 7,
            Reason::AtTarget { .. } => 8,
            Reason::Remembered { .. } => 9,
            Reason::Busy { .. } => 10,
            Reason::AtMax { .. } => 11,
            Reason::Idle { .. } => 12,
        };
        Self::KINDS[i]
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = |x: f64| x * 100.0;
        match *self {
            Reason::NoData { dropped: 0 } => f.write_str("hold: no cpu samples this interval"),
            Reason::NoData { dropped } => write!(f, "hold: no usable cpu samples ({dropped} pairs dropped)"),
            Reason::AboveMax { max } => write!(f, "lower: above the agent's maximum of {max}"),
            Reason::Lower { overload, capacity, step: Step::Target { task_cpu, target } } => {
                write!(f, "lower: {overload} on {capacity:.1} cpus; {target} fill it at {} cpu per task", PerTask(task_cpu))
            }
            Reason::Lower { overload, capacity, step: Step::Backoff(by) } => {
                write!(f, "lower: {overload} on {capacity:.1} cpus; backing off by {:.0}%", pct(by))
            }
            Reason::AtMinimum { overload } => write!(f, "hold: at the minimum of 1 while {overload}"),
            Reason::Draining { overload, running, limit } => {
                write!(f, "hold: {running:.0} compiles still running above the limit of {limit} while {overload}")
            }
            Reason::Contended { overload } => write!(f, "hold: {overload}"),
            Reason::Raise { cpu_use, capacity, tokens, target: Some(t) } => {
                write!(f, "raise: cpu {:.0}% of {capacity:.1} with all {tokens} tokens taken, aiming at {t}", pct(cpu_use))
            }
            Reason::Raise { cpu_use, capacity, tokens, target: None } => write!(
                f,
                "raise: cpu {:.0}% of {capacity:.1} with all {tokens} tokens taken, doubling until a per-task estimate exists",
                pct(cpu_use)
            ),
            Reason::Probe { cpu_use, capacity, tokens } => write!(
                f,
                "raise by one: cpu {:.0}% of {capacity:.1} with all {tokens} tokens taken and nothing waiting",
                pct(cpu_use)
            ),
            Reason::AtTarget { limit, capacity, task_cpu } => {
                write!(f, "hold: {limit} fill {capacity:.1} cpus at {} cpu per task", PerTask(task_cpu))
            }
            Reason::Remembered { over, left } => {
                write!(f, "hold: {over} tokens were over capacity lately; trying again in {left} intervals")
            }
            Reason::Busy { cpu_use, capacity } => write!(f, "hold: cpu {:.0}% of {capacity:.1}", pct(cpu_use)),
            Reason::AtMax { max, cpu_use, capacity } => {
                write!(f, "hold: at the agent's maximum of {max} (cpu {:.0}% of {capacity:.1})", pct(cpu_use))
            }
            Reason::Idle { in_use, limit } => write!(f, "hold: {in_use} of {limit} tokens in use"),
        }
    }
}

/// CPUs per task, with the digits that matter when it is small.
struct PerTask(f64);

impl fmt::Display for PerTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 < 0.1 {
            write!(f, "{:.3}", self.0)
        } else {
            write!(f, "{:.2}", self.0)
        }
    }
}

/// The limit whose tasks, at `task_cpu` each, fill `capacity`.
pub fn fill_target(capacity: f64, task_cpu: f64, params: &Params) -> u32 {
    // NaN falls here too.
    if task_cpu.is_nan() || task_cpu <= 1e-9 || !capacity.is_finite() {
        return MAX_TOKENS;
    }
    let t = (capacity / task_cpu + params.target_slack).floor();
    // In range before the cast, so it neither saturates nor truncates.
    t.clamp(1.0, f64::from(MAX_TOKENS)) as u32
}

/// What the law remembers of one agent between intervals.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Memory {
    /// CPUs per running compile, a moving average.
    pub task_cpu: Option<f64>,
    /// The last limit found over capacity.
    overreach: Option<Overreach>,
}

impl Memory {
    /// A memory holding only an estimate.
    #[cfg(test)]
    pub fn with_estimate(task_cpu: Option<f64>) -> Self {
        Memory { task_cpu, overreach: None }
    }
}

/// A limit found over capacity, kept off-limits for a while.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Overreach {
    limit: u32,
    /// The capacity it was found on: another capacity voids it.
    capacity: f64,
    /// Intervals since.
    since: u32,
    /// Intervals it stays off-limits.
    wait: u32,
}

/// The next limit for one agent, and why.
pub(super) fn decide(params: &Params, reading: &Reading, memory: &mut Memory, v: &View) -> (u32, Reason) {
    let ceiling = v.max_limit.clamp(1, MAX_TOKENS);
    let limit = v.limit.clamp(1, MAX_TOKENS);
    if limit > ceiling {
        return (ceiling, Reason::AboveMax { max: ceiling });
    }
    let Some(f) = reading.factors else {
        return (limit, Reason::NoData { dropped: reading.dropped });
    };
    if let Some(d) = f.task_cpu.filter(|d| d.is_finite() && *d > 0.0) {
        memory.task_cpu = Some(match memory.task_cpu {
            Some(e) => e + params.estimate_weight * (d - e),
            None => d,
        });
    }
    if let Some(o) = memory.overreach.as_mut() {
        o.since = o.since.saturating_add(1);
        let moved = (f.capacity - o.capacity).abs() > 0.01 * o.capacity;
        if moved || o.since > o.wait.saturating_mul(2) {
            memory.overreach = None;
        }
    }
    let (new, reason) = choose(params, &f, memory, limit, ceiling, v);
    // A cut for saturation alone is a probe for an estimate, not evidence
    // that the limit was over.
    let over = matches!(reason, Reason::Lower { overload: Overload::Throttled { .. } | Overload::Pressure(_), .. });
    if new < limit && over {
        // Found over capacity again at the same limit: wait longer before
        // trying it once more.
        let wait = match memory.overreach {
            Some(o) if o.limit == limit => o.wait.saturating_mul(2).min(params.max_probe_after),
            _ => params.probe_after,
        };
        memory.overreach = Some(Overreach { limit, capacity: f.capacity, since: 0, wait });
    }
    (new, reason)
}

fn choose(params: &Params, f: &Factors, memory: &Memory, limit: u32, ceiling: u32, v: &View) -> (u32, Reason) {
    if let Some(overload) = overload(params, f) {
        return lower(params, f, overload, memory.task_cpu, limit);
    }
    if !v.tokens_all_taken {
        return (limit, Reason::Idle { in_use: v.tokens_in_use, limit });
    }
    if f.cpu_use >= params.saturated_use && !f.excess_visible && memory.task_cpu.is_none() {
        return lower(params, f, Overload::Saturated(f.cpu_use), None, limit);
    }
    if let Some(overload) = contention(params, f) {
        return (limit, Reason::Contended { overload });
    }
    let (cpu_use, capacity) = (f.cpu_use, f.capacity);
    if limit == ceiling {
        return (limit, Reason::AtMax { max: ceiling, cpu_use, capacity });
    }
    if cpu_use >= params.raise_max_use {
        return (limit, Reason::Busy { cpu_use, capacity });
    }
    // A limit found over capacity lately stays off-limits for a while.
    let overreach = memory.overreach.filter(|o| o.since < o.wait);
    let bound = |want: u32| match overreach {
        Some(o) if want >= o.limit => {
            let below = o.limit.saturating_sub(1);
            if below > limit {
                Ok(below)
            } else {
                Err((limit, Reason::Remembered { over: o.limit, left: o.wait - o.since }))
            }
        }
        _ => Ok(want),
    };
    // A demand measured with `limit` tasks is trusted up to this many.
    let reach = ((f64::from(limit) * params.max_raise_factor).floor() as u32).max(limit + 1).min(ceiling);
    let Some(task_cpu) = memory.task_cpu else {
        return match bound(reach) {
            Ok(new) => (new, Reason::Raise { cpu_use, capacity, tokens: limit, target: None }),
            Err(hold) => hold,
        };
    };
    let target = fill_target(capacity, task_cpu, params).min(ceiling);
    let band = ((params.dead_band * f64::from(limit)).ceil() as u32).max(1);
    if target < limit.saturating_add(band) {
        return (limit, Reason::AtTarget { limit, capacity, task_cpu });
    }
    if !v.tasks_waiting {
        return match bound(limit + 1) {
            Ok(new) => (new, Reason::Probe { cpu_use, capacity, tokens: limit }),
            Err(hold) => hold,
        };
    }
    let aim = match bound(target) {
        Ok(aim) => aim,
        Err(hold) => return hold,
    };
    let step = ((params.gain_up * f64::from(aim - limit)).ceil() as u32).max(1);
    let new = (limit + step).min(aim).min(reach);
    (new, Reason::Raise { cpu_use, capacity, tokens: limit, target: Some(target) })
}

/// The overload that calls for a lower limit, if any.
fn overload(params: &Params, f: &Factors) -> Option<Overload> {
    let excess = f.excess();
    // With every CPU of the host busy the throttled time cannot grow, so a
    // large excess may look small: count throttled periods instead.
    let capped = host_full(params, f) && f.throttled >= params.lower_throttled_full;
    let throttled = (excess >= params.lower_excess || capped).then_some(Overload::Throttled {
        periods: f.throttled,
        cpus: f.throttled_cpus,
        excess,
    });
    // Pressure is the host's (or the cgroup's) whole: while the agent runs
    // nothing, it is someone else's and no reason to lower this agent.
    let pressure = f.pressure.filter(|p| *p >= params.lower_pressure && f.ran_tasks()).map(Overload::Pressure);
    // Throttling, when there is some, is the measured one (and pressure
    // may count the throttled time too).
    throttled.or(pressure)
}

/// Whether every CPU of the host was busy with the agent's work, wanted or
/// got.
fn host_full(params: &Params, f: &Factors) -> bool {
    f.host_cpus > 0.0 && f.cpu_used + f.throttled_cpus >= params.saturated_use * f.host_cpus
}

/// Signs of contention too mild to lower for, too strong to raise through.
fn contention(params: &Params, f: &Factors) -> Option<Overload> {
    if f.throttled >= params.raise_max_throttled {
        return Some(Overload::Throttled { periods: f.throttled, cpus: f.throttled_cpus, excess: f.excess() });
    }
    f.pressure.filter(|p| *p >= params.raise_max_pressure).map(Overload::Pressure)
}

fn lower(params: &Params, f: &Factors, overload: Overload, estimate: Option<f64>, limit: u32) -> (u32, Reason) {
    let capacity = f.capacity;
    let running = f.tasks_running;
    if limit == 1 {
        return (1, Reason::AtMinimum { overload });
    }
    // What the running tasks asked for: what they got plus what the quota
    // held back. When every CPU of the host was busy that is only a lower
    // bound on the demand per task, so the target drawn from it is an upper
    // bound on the right limit.
    let implied = f.ran_tasks().then(|| (f.cpu_used + f.throttled_cpus) / running);
    let task_cpu = match (estimate, implied) {
        (Some(e), Some(i)) => Some(e.max(i)),
        (e, i) => e.or(i),
    };
    let mut best: Option<(u32, Step)> = None;
    if let Some(task_cpu) = task_cpu {
        let target = fill_target(capacity, task_cpu, params);
        if target < limit {
            let step = ((params.gain_down * f64::from(limit - target)).ceil() as u32).clamp(1, limit - 1);
            best = Some((limit - step, Step::Target { task_cpu, target }));
        }
    }
    let throttled = matches!(overload, Overload::Throttled { .. });
    let host_full = host_full(params, f);
    if throttled && !host_full && task_cpu.is_some() && best.is_none() {
        // The demand is measured and fits on average: the throttling is
        // bursts, and a cut would be undone by the next raise.
        return (limit, Reason::Contended { overload });
    }
    // The overload's size is unknown when only pressure or saturation shows
    // it, or when every CPU of the host was busy: cut blind as well, and
    // keep the lower.
    if host_full || !throttled || best.is_none() {
        let severity = match overload {
            Overload::Throttled { excess, .. } if host_full => f.throttled.max(excess),
            Overload::Throttled { excess, .. } => excess,
            Overload::Pressure(p) => (p - params.lower_pressure) / (1.0 - params.lower_pressure).max(1e-9),
            Overload::Saturated(_) => 1.0,
        };
        let by = (params.backoff * severity).clamp(0.0, 1.0);
        // From the concurrency that showed the overload, not from the limit:
        // tasks admitted before an earlier cut may still be running, and
        // cutting the limit again for them would overshoot. At least one
        // task fewer than ran.
        let base = if f.ran_tasks() { running } else { f64::from(limit) };
        let cut = (base * (1.0 - by)).floor().min(base.ceil() - 1.0).max(1.0);
        if cut < f64::from(best.map_or(limit, |b| b.0)) {
            best = Some((cut as u32, Step::Backoff(by)));
        }
    }
    match best {
        Some((new, step)) => (new, Reason::Lower { overload, capacity, step }),
        None => (limit, Reason::Draining { overload, running, limit }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_reason_is_named_once_and_says_what_it_did() {
        let o = Overload::Pressure(0.5);
        let all = [
            Reason::NoData { dropped: 0 },
            Reason::AboveMax { max: 4 },
            Reason::Lower { overload: o, capacity: 4.0, step: Step::Backoff(0.25) },
            Reason::AtMinimum { overload: o },
            Reason::Draining { overload: o, running: 3.0, limit: 2 },
            Reason::Contended { overload: o },
            Reason::Raise { cpu_use: 0.5, capacity: 4.0, tokens: 2, target: None },
            Reason::Probe { cpu_use: 0.5, capacity: 4.0, tokens: 2 },
            Reason::AtTarget { limit: 4, capacity: 4.0, task_cpu: 1.0 },
            Reason::Remembered { over: 8, left: 3 },
            Reason::Busy { cpu_use: 0.95, capacity: 4.0 },
            Reason::AtMax { max: 8, cpu_use: 0.5, capacity: 4.0 },
            Reason::Idle { in_use: 1, limit: 4 },
        ];
        let kinds: Vec<&str> = all.iter().map(Reason::kind).collect();
        assert_eq!(kinds, Reason::KINDS, "one kind per variant, in order");
        for r in &all {
            // The sentence starts with what the limit did, which the kind refines.
            let verb = r.to_string().split(':').next().unwrap_or_default().to_owned();
            let expected = match r.kind() {
                "above_max" | "lower" => "lower",
                "raise" => "raise",
                "probe" => "raise by one",
                _ => "hold",
            };
            assert_eq!(verb, expected, "{}: {r}", r.kind());
        }
    }

    /// An interval on 4 CPUs with `running` compiles using `cpus`.
    fn reading(cpus: f64, running: f64) -> Reading {
        let factors = Factors {
            wall_s: 5.0,
            capacity: 4.0,
            host_cpus: 16.0,
            cpu_use: cpus / 4.0,
            cpu_used: cpus,
            throttled: 0.0,
            throttled_cpus: 0.0,
            pressure: Some(0.0),
            tasks_running: running,
            excess_visible: true,
            task_cpu: (running > 0.0 && cpus < 3.8).then(|| cpus / running),
            token_use: 1.0,
            pairs: 5,
            dropped: 0,
        };
        Reading { factors: Some(factors), dropped: 0 }
    }

    fn throttled(r: Reading, periods: f64, cpus: f64) -> Reading {
        let f = r.factors.expect("factors");
        Reading { factors: Some(Factors { throttled: periods, throttled_cpus: cpus, task_cpu: None, ..f }), ..r }
    }

    fn pressured(r: Reading, p: f64) -> Reading {
        let f = r.factors.expect("factors");
        Reading { factors: Some(Factors { pressure: Some(p), task_cpu: None, ..f }), ..r }
    }

    fn busy(limit: u32) -> View {
        View { limit, max_limit: 1000, tokens_in_use: limit, tokens_all_taken: true, tasks_waiting: true }
    }

    fn run(r: &Reading, est: &mut Memory, v: View) -> (u32, Reason) {
        decide(&Params::default(), r, est, &v)
    }

    #[test]
    fn raises_toward_the_filling_limit_in_shrinking_steps() {
        let mut est = Memory::with_estimate(None);
        // 2 tasks use 1.6 cpus: 0.8 each, 5 fill 4 cpus.
        let (l, why) = run(&reading(1.6, 2.0), &mut est, busy(2));
        assert_eq!(l, 4, "half the gap of 3, rounded up");
        assert_eq!(why.to_string(), "raise: cpu 40% of 4.0 with all 2 tokens taken, aiming at 5");
        let (l, _) = run(&reading(3.2, 4.0), &mut est, busy(4));
        assert_eq!(l, 5);
        let (l, why) = run(&reading(3.99 * 0.95, 5.0), &mut est, busy(5));
        assert_eq!(l, 5);
        assert!(matches!(why, Reason::AtTarget { limit: 5, .. }), "{why}");
    }

    #[test]
    fn raise_without_an_estimate_doubles() {
        let mut est = Memory::with_estimate(None);
        let r = reading(0.5, 0.0);
        let (l, why) = run(&r, &mut est, busy(3));
        assert_eq!(l, 6);
        assert!(why.to_string().contains("doubling"), "{why}");
    }

    #[test]
    fn holds_without_demand_and_probes_without_waiting() {
        let mut est = Memory::with_estimate(None);
        let v = View { tokens_in_use: 1, tokens_all_taken: false, ..busy(4) };
        let (l, why) = run(&reading(0.8, 1.0), &mut est, v);
        assert_eq!((l, why.to_string().as_str()), (4, "hold: 1 of 4 tokens in use"));
        let v = View { tasks_waiting: false, ..busy(2) };
        let (l, why) = run(&reading(1.6, 2.0), &mut est, v);
        assert_eq!(l, 3);
        assert!(matches!(why, Reason::Probe { tokens: 2, .. }), "{why}");
    }

    #[test]
    fn lowers_to_the_target_when_throttled() {
        let mut est = Memory::with_estimate(Some(0.8));
        // 10 tasks on 4 cpus, 4 more cpus' worth held back.
        let r = throttled(reading(4.0, 10.0), 1.0, 4.0);
        let (l, why) = run(&r, &mut est, busy(10));
        assert_eq!(l, 5);
        assert_eq!(
            why.to_string(),
            "lower: throttled in 100% of periods (4.00 cpus held back) on 4.0 cpus; 5 fill it at 0.80 cpu per task"
        );
        assert_eq!(est.task_cpu, Some(0.8), "a throttled interval does not teach the estimate");
    }

    #[test]
    fn heavier_tasks_than_estimated_are_seen_under_throttling() {
        // Estimated 0.4 per task (target 10); 10 tasks now want 8 cpus.
        let mut est = Memory::with_estimate(Some(0.4));
        let r = throttled(reading(4.0, 10.0), 1.0, 4.0);
        let (l, why) = run(&r, &mut est, busy(10));
        assert_eq!(l, 5, "{why}");
    }

    #[test]
    fn bursts_that_fit_on_average_are_held_through() {
        // 4 tasks using 3.5 of 4 cpus, bursts held back 0.3: the demand per
        // task (0.95) fits 4.
        let mut est = Memory::with_estimate(None);
        let r = throttled(reading(3.5, 4.0), 0.5, 0.3);
        let (l, why) = run(&r, &mut est, busy(4));
        assert_eq!((l, why.to_string().as_str()), (4, "hold: throttled in 50% of periods (0.30 cpus held back)"));
    }

    #[test]
    fn a_full_host_hides_the_excess_and_is_cut_blind() {
        // A quota of 64 on a 65-cpu host: 1000 tasks can only show 1 cpu
        // held back, which alone would say 984 fit.
        let f = Factors {
            capacity: 64.0,
            host_cpus: 65.0,
            cpu_use: 1.0,
            cpu_used: 64.0,
            throttled: 1.0,
            throttled_cpus: 1.0,
            pressure: None,
            tasks_running: 1000.0,
            task_cpu: None,
            ..reading(1.0, 1.0).factors.expect("factors")
        };
        let mut est = Memory::with_estimate(None);
        let (l, why) = run(&Reading { factors: Some(f), dropped: 0 }, &mut est, busy(1000));
        assert_eq!(l, 500);
        assert!(why.to_string().ends_with("backing off by 50%"), "{why}");
    }

    #[test]
    fn a_limit_found_over_is_not_tried_again_at_once() {
        let mut m = Memory::with_estimate(Some(0.8));
        // 5 tasks on 4 cpus wanting 0.9 each.
        let over = throttled(reading(4.0, 5.0), 1.0, 0.5);
        assert_eq!(run(&over, &mut m, busy(5)).0, 4);
        // Lighter again (0.75 each): 5 would fit, but 5 was over.
        let fine = reading(3.0, 4.0);
        for left in (1..=5).rev() {
            let (l, why) = run(&fine, &mut m, busy(4));
            assert_eq!(l, 4);
            assert_eq!(
                why.to_string(),
                format!("hold: 5 tokens were over capacity lately; trying again in {left} intervals")
            );
        }
        assert_eq!(run(&fine, &mut m, busy(4)).0, 5);
        // Over again at 5: it waits twice as long.
        assert_eq!(run(&over, &mut m, busy(5)).0, 4);
        let held = (0..20).take_while(|_| run(&fine, &mut m, busy(4)).0 == 4).count();
        assert_eq!(held, 11);
        // Another capacity voids the memory.
        assert_eq!(run(&over, &mut m, busy(5)).0, 4);
        let bigger = Reading { factors: fine.factors.map(|f| Factors { capacity: 8.0, ..f }), dropped: 0 };
        let (l, why) = run(&bigger, &mut m, busy(4));
        assert!(l > 5, "{why}");
    }

    #[test]
    fn mild_throttling_is_the_dead_band() {
        let mut est = Memory::with_estimate(Some(0.8));
        // Every period throttled a little: hold, neither raise nor lower.
        let r = throttled(reading(4.0, 5.0), 1.0, 0.1);
        let (l, why) = run(&r, &mut est, busy(5));
        assert_eq!(l, 5);
        assert!(matches!(why, Reason::Contended { .. }), "{why}");
        let r = pressured(reading(3.0, 4.0), 0.2);
        let (l, why) = run(&r, &mut est, busy(4));
        assert_eq!((l, why.to_string().as_str()), (4, "hold: cpu pressure 20%"));
    }

    #[test]
    fn pressure_while_running_nothing_is_not_ours_to_cut_for() {
        // Other work on the host, with every token free: hold.
        let mut est = Memory::with_estimate(None);
        let idle = View { tokens_in_use: 0, tokens_all_taken: false, tasks_waiting: false, ..busy(8) };
        let (l, _) = run(&pressured(reading(0.0, 0.0), 1.0), &mut est, idle);
        assert_eq!(l, 8);
        // The same pressure while the agent runs its compiles: lower.
        let (l, _) = run(&pressured(reading(4.0, 8.0), 1.0), &mut est, busy(8));
        assert!(l < 8, "{l}");
    }

    #[test]
    fn pressure_with_no_size_backs_off_once_per_round_trip() {
        let mut est = Memory::with_estimate(None);
        let r = pressured(reading(4.0, 100.0), 1.0);
        let (l, why) = run(&r, &mut est, busy(100));
        assert_eq!(l, 50);
        assert_eq!(why.to_string(), "lower: cpu pressure 100% on 4.0 cpus; backing off by 50%");
        // The 100 compiles from before the cut still ran all interval.
        let (l, why) = run(&r, &mut est, busy(50));
        assert_eq!(l, 50);
        assert_eq!(why.to_string(), "hold: 100 compiles still running above the limit of 50 while cpu pressure 100%");
        // Half of them had finished: cut from there.
        let r = pressured(reading(4.0, 60.0), 1.0);
        let (l, _) = run(&r, &mut est, busy(50));
        assert_eq!(l, 30);
    }

    #[test]
    fn saturation_without_estimate_backs_off() {
        let mut est = Memory::with_estimate(None);
        let r = Reading {
            factors: reading(4.0, 40.0).factors.map(|f| Factors { pressure: None, excess_visible: false, ..f }),
            dropped: 0,
        };
        let (l, why) = run(&r, &mut est, busy(40));
        assert_eq!(l, 20, "{why}");
        // With an estimate, saturation at the target is where it should be.
        let mut est = Memory::with_estimate(Some(0.8));
        let (l, why) = run(&r, &mut est, busy(5));
        assert_eq!(l, 5, "{why}");
    }

    #[test]
    fn bounds_hold() {
        let mut est = Memory::with_estimate(Some(0.01));
        let (l, why) = run(&reading(0.04, 4.0), &mut est, View { max_limit: 8, ..busy(8) });
        assert_eq!(l, 8);
        assert!(matches!(why, Reason::AtMax { max: 8, .. }), "{why}");
        let (l, why) = run(&reading(0.04, 4.0), &mut est, View { max_limit: 8, ..busy(20) });
        assert_eq!((l, why.to_string().as_str()), (8, "lower: above the agent's maximum of 8"));
        let mut est = Memory::with_estimate(Some(0.001));
        let (l, why) = run(&reading(0.004, 4.0), &mut est, View { max_limit: 5000, ..busy(600) });
        assert_eq!(l, 800, "half the gap to MAX_TOKENS: {why}");
        let (l, why) = run(&reading(0.004, 4.0), &mut est, View { max_limit: 5000, ..busy(MAX_TOKENS) });
        assert_eq!(l, MAX_TOKENS);
        assert!(matches!(why, Reason::AtMax { max: MAX_TOKENS, .. }), "{why}");
        let (l, _) = run(&reading(0.04, 4.0), &mut est, View { max_limit: 0, ..busy(0) });
        assert_eq!(l, 1);
        let mut est = Memory::with_estimate(Some(0.8));
        let r = throttled(reading(4.0, 1.0), 1.0, 4.0);
        let (l, why) = run(&r, &mut est, busy(1));
        assert_eq!(l, 1);
        assert!(matches!(why, Reason::AtMinimum { .. }), "{why}");
    }

    #[test]
    fn no_data_holds() {
        let mut est = Memory::with_estimate(Some(0.8));
        let (l, why) = run(&Reading { factors: None, dropped: 2 }, &mut est, busy(7));
        assert_eq!((l, why.to_string().as_str()), (7, "hold: no usable cpu samples (2 pairs dropped)"));
        assert_eq!(est.task_cpu, Some(0.8));
    }

    #[test]
    fn fill_target_rounds_down_with_slack() {
        let p = Params::default();
        assert_eq!(fill_target(4.0, 0.8, &p), 5);
        assert_eq!(fill_target(2.0, 0.8, &p), 2);
        assert_eq!(fill_target(1.0, 0.8, &p), 1);
        assert_eq!(fill_target(0.5, 0.8, &p), 1);
        assert_eq!(fill_target(64.0, 0.0, &p), MAX_TOKENS);
        assert_eq!(fill_target(64.0, f64::NAN, &p), MAX_TOKENS);
        assert_eq!(fill_target(1e9, 0.5, &p), MAX_TOKENS);
    }
}
