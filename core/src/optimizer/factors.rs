//! What one interval of an agent's CPU samples says: its [`Factors`].
//!
//! A [`Meter`] folds an agent's [`CpuSample`]s in as they are drained, one
//! consecutive pair at a time, and [`Meter::finish`] turns the interval's sums
//! into a [`Reading`]. The last sample of an interval stays in the meter as the
//! first of the next, so no second between two intervals goes uncounted.
//!
//! Every factor is a ratio of sums over the accepted pairs, so each pair
//! weighs by the wall time it covers: a pair that spans a missing sample
//! counts for the two seconds it covers, not as one sample.
//!
//! A pair is accepted only when its counters can be trusted:
//!
//! - equal wall clocks (a duplicated sample, or two readings at one instant)
//!   are skipped, and the older sample stays the baseline, so nothing is lost;
//! - a clock going backwards, any cumulative counter going down (the agent or
//!   its cgroup restarted), a gap longer than [`Params::max_gap`], a change of
//!   quota, period or online CPUs (the capacity during the pair is unknown),
//!   an unknown capacity, or a counter that grew faster than the host could
//!   make it grow: the pair is dropped and the newer sample becomes the
//!   baseline.
//!
//! Left out: per-task CPU as a token sees it (a token also covers the time a
//! task's source and object are in transit; the agent counts only compiles
//! that run), and any smoothing across intervals: that is the control law's.

use ccroute_wire::CpuSample;

use super::Params;

/// How much faster than the host's CPUs a counter may seem to grow before a
/// pair is called implausible; the slack covers counters read a little apart
/// from the wall clock.
const PLAUSIBLE_SLACK: f64 = 1.25;

/// What an agent's samples say about one interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Factors {
    /// Seconds covered by the accepted pairs.
    pub wall_s: f64,
    /// CPUs the agent may use now: its CFS quota over period when it has one
    /// (at most its online CPUs), else its online CPUs.
    pub capacity: f64,
    /// The host's online CPUs now (0 when unknown).
    pub host_cpus: f64,
    /// CPU used relative to the capacity in force during each pair, 0..=1.
    pub cpu_use: f64,
    /// CPUs used, on average.
    pub cpu_used: f64,
    /// Fraction of CFS enforcement periods in which the agent was throttled,
    /// 0..=1 (0 without a quota).
    pub throttled: f64,
    /// Throttled time per wall time: roughly the CPUs' worth of runnable work
    /// that the quota held back (the kernel sums it over CPUs).
    pub throttled_cpus: f64,
    /// Fraction of the time some task waited for a CPU (PSI `some`), when
    /// the agent reports pressure.
    pub pressure: Option<f64>,
    /// Compiles running, averaged over the interval.
    pub tasks_running: f64,
    /// CPUs each running compile wanted, from the pairs whose demand shows:
    /// unthrottled pairs without pressure, where usage is demand, and
    /// throttled pairs with CPUs of the host to spare, where usage plus
    /// throttled work is; `None` when there was no such pair.
    pub task_cpu: Option<f64>,
    /// Whether demand past capacity could show for most of the interval:
    /// a quota below the host's CPUs (throttling shows it) or pressure
    /// reported. Without either, a saturated CPU may be exactly full or far
    /// over.
    pub excess_visible: bool,
    /// Tokens in use over the token limit, as the caller saw them.
    pub token_use: f64,
    /// Pairs that made up these factors.
    pub pairs: u32,
    /// Pairs dropped as untrustworthy.
    pub dropped: u32,
}

impl Factors {
    /// Whether the agent ran compiles (about one or more on average) this
    /// interval: only then does its CPU say anything about them.
    pub fn ran_tasks(&self) -> bool {
        self.tasks_running >= 0.5
    }

    /// Throttled work relative to capacity: how far demand passed it.
    pub fn excess(&self) -> f64 {
        if self.capacity > 0.0 {
            self.throttled_cpus / self.capacity
        } else {
            0.0
        }
    }
}

/// The outcome of one interval: factors when any pair was usable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// `None` when no pair was accepted: no data, the limit holds.
    pub factors: Option<Factors>,
    /// Pairs dropped as untrustworthy.
    pub dropped: u32,
}

/// Folds an agent's samples into one interval's [`Factors`].
#[derive(Debug, Clone, Default)]
pub struct Meter {
    last: Option<CpuSample>,
    sums: Sums,
}

/// Sums over the accepted pairs of one interval (nanoseconds unless named).
#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    wall: f64,
    usage: f64,
    capacity_wall: f64,
    periods: f64,
    throttled_periods: f64,
    throttled: f64,
    pressure_wall: f64,
    pressure: f64,
    running_wall: f64,
    demand: f64,
    demand_running_wall: f64,
    visible_wall: f64,
    capacity: f64,
    pairs: u32,
    dropped: u32,
}

/// Counter differences over one accepted pair.
#[derive(Debug, Clone, Copy)]
struct Delta {
    wall: f64,
    usage: f64,
    capacity: f64,
    periods: f64,
    throttled_periods: f64,
    throttled: f64,
    pressure: Option<f64>,
    running: f64,
    host: f64,
    visible: bool,
}

/// What to do with a pair of consecutive samples.
#[derive(Debug, Clone, Copy)]
enum Pair {
    /// Same instant: keep the older sample as the baseline.
    Skip,
    /// Untrustworthy: the newer sample becomes the baseline.
    Drop,
    Accept(Delta),
}

impl Meter {
    /// A meter with no baseline.
    pub fn new() -> Self {
        Self::default()
    }

    /// The sample that the next pair will start from.
    pub fn baseline(&self) -> Option<&CpuSample> {
        self.last.as_ref()
    }

    /// Folds in the next sample.
    pub fn push(&mut self, sample: CpuSample, params: &Params) {
        let Some(prev) = self.last else {
            self.last = Some(sample);
            return;
        };
        match classify(&prev, &sample, params) {
            Pair::Skip => {}
            Pair::Drop => {
                self.sums.dropped += 1;
                self.last = Some(sample);
            }
            Pair::Accept(d) => {
                self.sums.add(&d, params);
                self.last = Some(sample);
            }
        }
    }

    /// Ends the interval: its factors, and fresh sums for the next one. The
    /// baseline sample is kept.
    pub fn finish(&mut self, token_use: f64) -> Reading {
        let s = std::mem::take(&mut self.sums);
        if s.pairs == 0 || s.wall <= 0.0 {
            return Reading { factors: None, dropped: s.dropped };
        }
        // The capacity in force now, which may differ from the last accepted
        // pair's when the quota changed at the last sample.
        let capacity = self.last.as_ref().and_then(capacity_of).unwrap_or(s.capacity);
        let host_cpus = self.last.as_ref().map_or(0.0, |l| f64::from(l.online_cpus));
        let ratio = |num: f64, den: f64| if den > 0.0 { num / den } else { 0.0 };
        let factors = Factors {
            wall_s: s.wall / 1e9,
            capacity,
            host_cpus,
            cpu_use: ratio(s.usage, s.capacity_wall),
            cpu_used: ratio(s.usage, s.wall),
            throttled: ratio(s.throttled_periods, s.periods).clamp(0.0, 1.0),
            throttled_cpus: ratio(s.throttled, s.wall),
            pressure: (s.pressure_wall > 0.0).then(|| ratio(s.pressure, s.pressure_wall).clamp(0.0, 1.0)),
            tasks_running: ratio(s.running_wall, s.wall),
            task_cpu: (s.demand_running_wall > 0.0).then(|| s.demand / s.demand_running_wall),
            excess_visible: s.visible_wall * 2.0 >= s.wall,
            token_use: if token_use.is_finite() { token_use.max(0.0) } else { 0.0 },
            pairs: s.pairs,
            dropped: s.dropped,
        };
        Reading { factors: Some(factors), dropped: s.dropped }
    }
}

impl Sums {
    fn add(&mut self, d: &Delta, params: &Params) {
        self.wall += d.wall;
        self.usage += d.usage;
        self.capacity_wall += d.wall * d.capacity;
        self.periods += d.periods;
        self.throttled_periods += d.throttled_periods;
        self.throttled += d.throttled;
        if let Some(p) = d.pressure {
            self.pressure_wall += d.wall;
            self.pressure += p;
        }
        self.running_wall += d.running * d.wall;
        if d.visible {
            self.visible_wall += d.wall;
        }
        self.capacity = d.capacity;
        self.pairs += 1;

        // What the compiles wanted, where that shows. Throttled, they wanted
        // what they got plus what the quota held back — unless every CPU of
        // the host was busy, where throttled time stops growing. Not
        // throttled, usage is demand unless tasks waited (pressure), or the
        // CPU was saturated with neither a quota nor pressure to tell
        // "exactly full" from "far over".
        let wanted = d.usage + d.throttled;
        let shows = if d.throttled_periods > 0.0 || d.throttled > 0.0 {
            !(d.host > 0.0 && wanted >= params.saturated_use * d.host * d.wall)
        } else {
            let saturated = d.usage >= params.saturated_use * d.capacity * d.wall;
            let waited = d.pressure.is_some_and(|p| p >= params.clean_max_pressure * d.wall);
            let exactly_full_or_under = !saturated || d.visible;
            !waited && exactly_full_or_under
        };
        if shows && d.running >= 0.5 {
            self.demand += wanted;
            self.demand_running_wall += d.running * d.wall;
        }
    }
}

/// CPUs the sample says the agent may use, `None` when it cannot tell.
pub fn capacity_of(s: &CpuSample) -> Option<f64> {
    let online = (s.online_cpus > 0).then_some(f64::from(s.online_cpus));
    match (quota_cpus(s), online) {
        (Some(q), Some(o)) => Some(q.min(o)),
        (q, o) => q.or(o),
    }
}

/// The CFS quota in CPUs, when one is set and its period known.
fn quota_cpus(s: &CpuSample) -> Option<f64> {
    match s.quota_us {
        Some(q) if q > 0 && s.period_us > 0 => Some(q as f64 / s.period_us as f64),
        _ => None,
    }
}

fn classify(a: &CpuSample, b: &CpuSample, params: &Params) -> Pair {
    if b.wall_ns == a.wall_ns {
        return Pair::Skip;
    }
    let Some(wall) = b.wall_ns.checked_sub(a.wall_ns) else {
        return Pair::Drop;
    };
    if u128::from(wall) > params.max_gap.as_nanos() {
        return Pair::Drop;
    }
    if (a.quota_us, a.period_us, a.online_cpus) != (b.quota_us, b.period_us, b.online_cpus) {
        return Pair::Drop;
    }
    let Some(capacity) = capacity_of(b) else {
        return Pair::Drop;
    };
    let counters = (
        b.usage_ns.checked_sub(a.usage_ns),
        b.nr_periods.checked_sub(a.nr_periods),
        b.nr_throttled.checked_sub(a.nr_throttled),
        b.throttled_ns.checked_sub(a.throttled_ns),
    );
    let (Some(usage), Some(periods), Some(throttled_periods), Some(throttled)) = counters else {
        return Pair::Drop;
    };
    let pressure = match (a.pressure_some_us, b.pressure_some_us) {
        (Some(pa), Some(pb)) => match pb.checked_sub(pa) {
            Some(us) => Some(us as f64 * 1e3),
            None => return Pair::Drop,
        },
        _ => None,
    };
    let wall = wall as f64;
    let host = if b.online_cpus > 0 { f64::from(b.online_cpus) } else { capacity };
    let most = wall * host * PLAUSIBLE_SLACK;
    let plausible = (usage as f64) <= most
        && (throttled as f64) <= most
        && throttled_periods <= periods
        && pressure.is_none_or(|p| p <= wall * PLAUSIBLE_SLACK);
    if !plausible {
        return Pair::Drop;
    }
    Pair::Accept(Delta {
        wall,
        usage: usage as f64,
        capacity,
        periods: periods as f64,
        throttled_periods: throttled_periods as f64,
        throttled: throttled as f64,
        pressure,
        running: (f64::from(a.tasks_running) + f64::from(b.tasks_running)) / 2.0,
        host: f64::from(b.online_cpus),
        // A quota the host could exceed gets throttled when demand passes it.
        visible: pressure.is_some() || quota_cpus(b).is_some_and(|q| b.online_cpus == 0 || q < host),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    /// A 4-CPU quota on an 8-CPU host, 100 ms periods.
    fn base() -> CpuSample {
        CpuSample {
            wall_ns: 100 * S,
            usage_ns: 1_000 * S,
            quota_us: Some(400_000),
            period_us: 100_000,
            nr_periods: 5_000,
            nr_throttled: 100,
            throttled_ns: 7 * S,
            pressure_some_us: Some(1_000_000),
            online_cpus: 8,
            tasks_running: 3,
            tasks_started: 0,
        }
    }

    /// `s` advanced by `secs` seconds, using `cpus` CPUs, with `running`
    /// compiles, throttled in `thr_periods` of its periods for `thr_cpus`
    /// CPUs' worth, and stalled 5 % of the time.
    fn after(s: &CpuSample, secs: u64, cpus: f64, running: u32, thr_periods: u64, thr_cpus: f64) -> CpuSample {
        CpuSample {
            wall_ns: s.wall_ns + secs * S,
            usage_ns: s.usage_ns + (cpus * (secs * S) as f64) as u64,
            nr_periods: s.nr_periods + secs * 10,
            nr_throttled: s.nr_throttled + thr_periods,
            throttled_ns: s.throttled_ns + (thr_cpus * (secs * S) as f64) as u64,
            pressure_some_us: s.pressure_some_us.map(|p| p + secs * 50_000),
            tasks_running: running,
            ..*s
        }
    }

    fn read(samples: &[CpuSample]) -> Reading {
        let params = Params::default();
        let mut m = Meter::new();
        for s in samples {
            m.push(*s, &params);
        }
        m.finish(0.5)
    }

    fn factors(samples: &[CpuSample]) -> Factors {
        read(samples).factors.expect("factors")
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn normal_interval_gives_each_factor() {
        let s0 = base();
        let s1 = after(&s0, 1, 2.0, 3, 0, 0.0);
        let s2 = after(&s1, 1, 2.0, 3, 0, 0.0);
        let s3 = after(&s2, 1, 4.0, 5, 10, 1.0);
        let f = factors(&[s0, s1, s2, s3]);
        assert_eq!(f.pairs, 3);
        assert_eq!(f.dropped, 0);
        assert!(close(f.wall_s, 3.0));
        assert!(close(f.capacity, 4.0));
        assert!(close(f.host_cpus, 8.0));
        assert!(close(f.cpu_used, 8.0 / 3.0), "{}", f.cpu_used);
        assert!(close(f.cpu_use, 8.0 / 12.0), "{}", f.cpu_use);
        assert!(close(f.throttled, 10.0 / 30.0), "{}", f.throttled);
        assert!(close(f.throttled_cpus, 1.0 / 3.0), "{}", f.throttled_cpus);
        assert!(close(f.excess(), 1.0 / 12.0));
        assert!(close(f.pressure.expect("pressure"), 0.05));
        // Two pairs of 3 running, one pair going from 3 to 5.
        assert!(close(f.tasks_running, (3.0 + 3.0 + 4.0) / 3.0));
        // The throttled pair wanted 4 cpus plus the 1 held back, with 4
        // compiles running on average.
        assert!(close(f.task_cpu.expect("task cpu"), (2.0 + 2.0 + 5.0) / (3.0 + 3.0 + 4.0)));
        assert!(close(f.token_use, 0.5));
    }

    #[test]
    fn no_samples_is_no_data() {
        let r = read(&[]);
        assert_eq!(r, Reading { factors: None, dropped: 0 });
        // One sample makes a baseline but no pair.
        assert_eq!(read(&[base()]).factors, None);
    }

    #[test]
    fn last_sample_carries_into_the_next_interval() {
        let params = Params::default();
        let mut m = Meter::new();
        let s0 = base();
        let s1 = after(&s0, 1, 1.0, 2, 0, 0.0);
        m.push(s0, &params);
        m.push(s1, &params);
        assert_eq!(m.finish(0.0).factors.expect("first").pairs, 1);
        assert_eq!(m.finish(0.0).factors, None, "an empty interval has no data");
        let s2 = after(&s1, 1, 3.0, 4, 0, 0.0);
        m.push(s2, &params);
        let f = m.finish(0.0).factors.expect("second");
        assert_eq!(f.pairs, 1);
        assert!(close(f.cpu_used, 3.0));
        assert_eq!(m.baseline(), Some(&s2));
    }

    #[test]
    fn counter_reset_drops_the_pair_and_restarts_from_the_new_sample() {
        let s0 = base();
        let s1 = after(&s0, 1, 2.0, 3, 0, 0.0);
        // The agent restarted: every counter starts again near zero.
        let s2 = CpuSample {
            wall_ns: s1.wall_ns + S,
            usage_ns: S / 2,
            nr_periods: 10,
            nr_throttled: 0,
            throttled_ns: 0,
            pressure_some_us: Some(10),
            ..s1
        };
        let s3 = after(&s2, 1, 2.0, 3, 0, 0.0);
        let f = factors(&[s0, s1, s2, s3]);
        assert_eq!((f.pairs, f.dropped), (2, 1));
        assert!(close(f.cpu_used, 2.0), "no negative or huge usage: {}", f.cpu_used);
        assert!(close(f.throttled, 0.0));
    }

    #[test]
    fn one_counter_going_down_drops_the_pair() {
        let s0 = base();
        let mut s1 = after(&s0, 1, 2.0, 3, 0, 0.0);
        s1.throttled_ns = s0.throttled_ns - 1;
        let r = read(&[s0, s1]);
        assert_eq!(r, Reading { factors: None, dropped: 1 });
        let mut s1 = after(&s0, 1, 2.0, 3, 0, 0.0);
        s1.pressure_some_us = Some(0);
        assert_eq!(read(&[s0, s1]).dropped, 1);
    }

    #[test]
    fn gap_weighs_by_wall_time() {
        let s0 = base();
        let s1 = after(&s0, 1, 1.0, 1, 0, 0.0);
        // Three samples lost: one pair covering four seconds at 3 CPUs.
        let s2 = after(&s1, 4, 3.0, 4, 0, 0.0);
        let f = factors(&[s0, s1, s2]);
        assert_eq!(f.pairs, 2);
        assert!(close(f.wall_s, 5.0));
        assert!(close(f.cpu_used, (1.0 + 12.0) / 5.0), "{}", f.cpu_used);
    }

    #[test]
    fn gap_longer_than_the_limit_is_stale() {
        let s0 = base();
        let s1 = after(&s0, 60, 1.0, 1, 0, 0.0);
        let s2 = after(&s1, 1, 3.0, 3, 0, 0.0);
        let f = factors(&[s0, s1, s2]);
        assert_eq!((f.pairs, f.dropped), (1, 1));
        assert!(close(f.cpu_used, 3.0));
    }

    #[test]
    fn zero_wall_and_duplicates_are_skipped_without_losing_time() {
        let s0 = base();
        let s1 = after(&s0, 1, 2.0, 3, 0, 0.0);
        let s2 = after(&s1, 1, 4.0, 3, 0, 0.0);
        let plain = factors(&[s0, s1, s2]);
        let dup = factors(&[s0, s0, s1, s1, s1, s2, s2]);
        assert_eq!(plain, dup);
        // Same instant, other counters: the older sample stays the baseline.
        let odd = CpuSample { usage_ns: s1.usage_ns + S, ..s1 };
        let f = factors(&[s0, s1, odd, s2]);
        assert_eq!((f.pairs, f.dropped), (2, 0));
        assert!(close(f.cpu_used, 3.0));
    }

    #[test]
    fn clock_going_backwards_drops_the_pair() {
        let s0 = base();
        let s1 = after(&s0, 1, 2.0, 3, 0, 0.0);
        // A new monotonic origin, counters still growing.
        let back = CpuSample { wall_ns: 5 * S, ..after(&s1, 1, 2.0, 3, 0, 0.0) };
        let s3 = after(&back, 1, 1.0, 3, 0, 0.0);
        let f = factors(&[s0, s1, back, s3]);
        assert_eq!((f.pairs, f.dropped), (2, 1));
        assert!(close(f.cpu_used, 1.5));
        assert!(close(f.wall_s, 2.0));
    }

    #[test]
    fn quota_change_drops_the_pair_and_uses_the_new_capacity() {
        let s0 = base();
        let s1 = after(&s0, 1, 4.0, 5, 0, 0.0);
        // The quota drops from 4 CPUs to 2.
        let s2 = CpuSample { quota_us: Some(200_000), ..after(&s1, 1, 3.0, 5, 10, 1.0) };
        let s3 = after(&s2, 1, 2.0, 5, 10, 2.0);
        let f = factors(&[s0, s1, s2, s3]);
        assert_eq!((f.pairs, f.dropped), (2, 1));
        assert!(close(f.capacity, 2.0));
        // 4 of 4 then 2 of 2.
        assert!(close(f.cpu_use, 1.0), "{}", f.cpu_use);
    }

    #[test]
    fn quota_appearing_and_disappearing() {
        let unlimited = CpuSample { quota_us: None, tasks_running: 6, ..base() };
        let s1 = after(&unlimited, 1, 6.0, 6, 0, 0.0);
        let f = factors(&[unlimited, s1]);
        assert!(close(f.capacity, 8.0), "no quota: online cpus");
        assert!(close(f.cpu_use, 0.75));
        assert!(close(f.task_cpu.expect("task cpu"), 1.0));

        let limited = CpuSample { quota_us: Some(300_000), ..after(&s1, 1, 6.0, 6, 0, 0.0) };
        let s3 = after(&limited, 1, 3.0, 6, 10, 3.0);
        let f = factors(&[unlimited, s1, limited, s3]);
        assert_eq!((f.pairs, f.dropped), (2, 1));
        assert!(close(f.capacity, 3.0));
        // Weighted by capacity: 6 + 3 cpus used of 8 + 3.
        assert!(close(f.cpu_use, 9.0 / 11.0), "{}", f.cpu_use);

        // A quota larger than the host counts as the host.
        let big = CpuSample { quota_us: Some(2_000_000), ..base() };
        assert_eq!(capacity_of(&big), Some(8.0));
        // Nothing known about capacity: the pair cannot be judged.
        let blind = CpuSample { quota_us: None, online_cpus: 0, ..base() };
        assert_eq!(capacity_of(&blind), None);
        let r = read(&[blind, after(&blind, 1, 1.0, 1, 0, 0.0)]);
        assert_eq!(r, Reading { factors: None, dropped: 1 });
    }

    #[test]
    fn implausible_growth_is_dropped() {
        let s0 = base();
        // 20 CPUs' worth in one second on an 8-CPU host.
        let s1 = after(&s0, 1, 20.0, 3, 0, 0.0);
        assert_eq!(read(&[s0, s1]).dropped, 1);
        // More throttled periods than periods.
        let s1 = CpuSample { nr_throttled: s0.nr_throttled + 50, ..after(&s0, 1, 1.0, 3, 0, 0.0) };
        assert_eq!(read(&[s0, s1]).dropped, 1);
        // Pressure stalls longer than the wall time.
        let s1 =
            CpuSample { pressure_some_us: s0.pressure_some_us.map(|p| p + 5_000_000), ..after(&s0, 1, 1.0, 3, 0, 0.0) };
        assert_eq!(read(&[s0, s1]).dropped, 1);
    }

    #[test]
    fn pressure_needs_both_ends() {
        let s0 = CpuSample { pressure_some_us: None, ..base() };
        let s1 = CpuSample { pressure_some_us: Some(5), ..after(&s0, 1, 1.0, 1, 0, 0.0) };
        let s2 = CpuSample { pressure_some_us: Some(5 + 300_000), ..after(&s1, 1, 1.0, 1, 0, 0.0) };
        let f = factors(&[s0, s1, s2]);
        assert_eq!(f.pairs, 2);
        assert!(close(f.pressure.expect("pressure"), 0.3));
        assert_eq!(factors(&[s0, after(&s0, 1, 1.0, 1, 0, 0.0)]).pressure, None);
    }

    #[test]
    fn saturated_or_idle_pairs_give_no_task_estimate() {
        let s0 = CpuSample { tasks_running: 8, ..base() };
        // At the quota and not throttled: exactly full, demand is usage.
        let s1 = after(&s0, 1, 4.0, 8, 0, 0.0);
        let f = factors(&[s0, s1]);
        assert!(f.excess_visible);
        assert!(close(f.task_cpu.expect("task cpu"), 0.5));
        // All of an unlimited host, nothing to tell how far over: what they got.
        let blind = CpuSample { quota_us: None, pressure_some_us: None, ..s0 };
        let s1 = after(&blind, 1, 8.0, 8, 0, 0.0);
        let f = factors(&[blind, s1]);
        assert!(!f.excess_visible);
        assert_eq!(f.task_cpu, None);
        // The same with pressure reported, and none: exactly full.
        let told = CpuSample { pressure_some_us: Some(0), ..blind };
        let s1 = CpuSample { pressure_some_us: Some(0), ..after(&told, 1, 8.0, 16, 0, 0.0) };
        assert!(close(factors(&[told, s1]).task_cpu.expect("task cpu"), 8.0 / 12.0));
        // No compile running: the agent's own CPU is no compile's.
        let idle = CpuSample { tasks_running: 0, ..s0 };
        let s1 = after(&idle, 1, 0.1, 0, 0, 0.0);
        assert_eq!(factors(&[idle, s1]).task_cpu, None);
        // Stalled half the time.
        let s1 =
            CpuSample { pressure_some_us: s0.pressure_some_us.map(|p| p + 500_000), ..after(&s0, 1, 1.0, 2, 0, 0.0) };
        assert_eq!(factors(&[s0, s1]).task_cpu, None);
    }
}
