//! A deterministic, CFS-like agent driven by the optimizer, to show that the
//! law settles where it should and stays there.
//!
//! The model: `running` compiles each want `d` CPUs; they can run on at most
//! the host's CPUs. With a quota of `C` CPUs the group gets at most `C` per
//! 100 ms period, and a period in which it wanted more counts as throttled,
//! with the work held back added to the throttled time — so throttled time
//! is proportional to the excess until every CPU of the host is busy, and
//! then stops growing, as the kernel's does. Without a quota the group gets
//! the host, and the host reports pressure that grows with the excess. There
//! is always a backlog: a raised limit fills at once; after a cut, compiles
//! already running finish with a time constant (`drain_s`). Demand may be
//! made noisy, per second, from a fixed-seed xorshift. Samples come every
//! second, the optimizer ticks every five.

use ccroute_wire::CpuSample;

use super::{AgentInput, Optimizer, TickInput, MAX_TOKENS};

const PERIOD_NS: u64 = 100_000_000;
const SECONDS_PER_INTERVAL: u64 = 5;

/// One agent's host.
#[derive(Debug, Clone)]
struct Host {
    cpus: u32,
    quota: Option<f64>,
    task_cpu: f64,
    drain_s: f64,
    psi: bool,
    /// Each second, every task's demand is `task_cpu` times a factor drawn
    /// from `1 ± jitter` (a fixed-seed xorshift, so runs repeat exactly).
    jitter: f64,
    rng: u64,
    burst: f64,
    running: f64,
    wall_ns: u64,
    usage_ns: f64,
    periods: u64,
    throttled_periods: u64,
    throttled_ns: f64,
    pressure_us: f64,
}

impl Host {
    fn new(cpus: u32, quota: Option<f64>, task_cpu: f64, drain_s: f64) -> Self {
        Host {
            cpus,
            quota,
            task_cpu,
            drain_s,
            psi: quota.is_none(),
            jitter: 0.0,
            rng: 0x9e37_79b9_7f4a_7c15,
            burst: 1.0,
            running: 0.0,
            wall_ns: 1_000 * PERIOD_NS,
            usage_ns: 0.0,
            periods: 0,
            throttled_periods: 0,
            throttled_ns: 0.0,
            pressure_us: 0.0,
        }
    }

    fn capacity(&self) -> f64 {
        let cpus = f64::from(self.cpus);
        self.quota.map_or(cpus, |q| q.min(cpus))
    }

    fn sample(&self) -> CpuSample {
        CpuSample {
            wall_ns: self.wall_ns,
            usage_ns: self.usage_ns as u64,
            quota_us: self.quota.map(|q| (q * 100_000.0).round() as u64),
            period_us: 100_000,
            nr_periods: self.periods,
            nr_throttled: self.throttled_periods,
            throttled_ns: self.throttled_ns as u64,
            pressure_some_us: self.psi.then_some(self.pressure_us as u64),
            online_cpus: self.cpus,
            tasks_running: self.running.round() as u32,
            tasks_started: 0,
        }
    }

    fn second(&mut self, limit: u32) {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let unit = (self.rng >> 11) as f64 / (1u64 << 53) as f64;
        self.burst = 1.0 + self.jitter * (2.0 * unit - 1.0);
        for _ in 0..(1_000_000_000 / PERIOD_NS) {
            self.period(f64::from(limit));
        }
    }

    fn period(&mut self, limit: f64) {
        let p = PERIOD_NS as f64;
        if self.running <= limit || self.drain_s <= 0.0 {
            self.running = limit;
        } else {
            self.running = limit + (self.running - limit) * (-(p / 1e9) / self.drain_s).exp();
            if self.running - limit < 0.5 {
                self.running = limit;
            }
        }
        let cpus = f64::from(self.cpus);
        let demand = self.running * self.task_cpu * self.burst;
        let wanted = demand.min(cpus);
        let capacity = self.capacity();
        self.wall_ns += PERIOD_NS;
        self.usage_ns += wanted.min(capacity) * p;
        if self.quota.is_some() {
            if self.running > 0.0 {
                self.periods += 1;
            }
            if wanted > capacity {
                self.throttled_periods += 1;
                self.throttled_ns += (wanted - capacity) * p;
            }
        } else if demand > cpus {
            self.pressure_us += (2.0 * (demand - cpus) / cpus).min(1.0) * p / 1e3;
        }
    }
}

/// Limits after each interval, and a printable trace for failures.
struct Run {
    limits: Vec<u32>,
    trace: String,
}

/// Drives `host` for `intervals` intervals from limit `start`; `event` may
/// change the host at the start of any second.
fn run(host: &mut Host, start: u32, max_limit: u32, intervals: usize, mut event: impl FnMut(u64, &mut Host)) -> Run {
    let mut opt = Optimizer::<u32>::default();
    let mut limit = start;
    let mut samples = vec![host.sample()];
    let mut second = 0;
    let mut out = Run { limits: Vec::new(), trace: String::new() };
    for i in 0..intervals {
        for _ in 0..SECONDS_PER_INTERVAL {
            event(second, host);
            host.second(limit);
            second += 1;
            samples.push(host.sample());
        }
        let held = host.running.round() as u32;
        let agents = [AgentInput {
            agent: 0,
            samples: &samples,
            limit,
            max_limit,
            tokens_in_use: held,
            tokens_all_taken: held >= limit,
            tasks_waiting: true,
        }];
        let tick = opt.tick(&TickInput { agents: &agents, consumerd_demand: &[], cache_hit_ratio: 0.0 });
        let d = &tick.agents[0];
        assert!((1..=max_limit.clamp(1, MAX_TOKENS)).contains(&d.limit), "limit {} out of range", d.limit);
        out.trace.push_str(&format!("{i:3}: {:4} -> {:4}  {}\n", limit, d.limit, d.reason));
        limit = d.limit;
        out.limits.push(limit);
        samples.clear();
    }
    out
}

/// Limits within 10 % of `target`; when that holds no whole number (a small
/// target such as 2.5), the whole numbers on either side.
fn band(target: f64, max_limit: u32) -> (u32, u32) {
    let (lo, hi) = ((0.9 * target).ceil(), (1.1 * target).floor());
    let (lo, hi) = if lo <= hi { (lo, hi) } else { (target.floor().max(1.0), target.ceil()) };
    let max = f64::from(max_limit);
    (lo.min(max) as u32, hi.min(max) as u32)
}

/// Every limit decided in `intervals` is in the band, and it changes at
/// most `changes` times there.
fn assert_settled(r: &Run, intervals: std::ops::Range<usize>, (lo, hi): (u32, u32), changes: usize, what: &str) {
    let tail = &r.limits[intervals.clone()];
    assert!(tail.iter().all(|l| (lo..=hi).contains(l)), "{what}: not within {lo}..={hi} in {intervals:?}\n{}", r.trace);
    let moved = tail.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(moved <= changes, "{what}: {moved} changes after settling\n{}", r.trace);
}

const CAPACITIES: [u32; 5] = [1, 2, 4, 16, 64];
const TASK_CPUS: [f64; 3] = [0.5, 0.8, 1.0];

#[test]
fn settles_from_one_and_from_max_under_a_quota() {
    for c in CAPACITIES {
        for d in TASK_CPUS {
            for host_cpus in [c + 1, 4 * c] {
                for drain_s in [0.0, 2.0] {
                    for start in [1, MAX_TOKENS] {
                        let mut host = Host::new(host_cpus, Some(f64::from(c)), d, drain_s);
                        let r = run(&mut host, start, MAX_TOKENS, 65, |_, _| {});
                        let what = format!("C={c} d={d} host={host_cpus} drain={drain_s} start={start}");
                        assert_settled(&r, 14..65, band(f64::from(c) / d, MAX_TOKENS), 1, &what);
                    }
                }
            }
        }
    }
}

#[test]
fn settles_without_a_quota_from_pressure() {
    for c in CAPACITIES {
        for d in TASK_CPUS {
            for start in [1, MAX_TOKENS] {
                let mut host = Host::new(c, None, d, 2.0);
                let r = run(&mut host, start, MAX_TOKENS, 65, |_, _| {});
                let what = format!("no quota, C={c} d={d} start={start}");
                assert_settled(&r, 14..65, band(f64::from(c) / d, MAX_TOKENS), 1, &what);
            }
        }
    }
}

#[test]
fn settles_without_a_quota_or_pressure() {
    for c in CAPACITIES {
        for d in TASK_CPUS {
            for start in [1, MAX_TOKENS] {
                let mut host = Host { psi: false, ..Host::new(c, None, d, 2.0) };
                let r = run(&mut host, start, MAX_TOKENS, 65, |_, _| {});
                let what = format!("saturation only, C={c} d={d} start={start}");
                assert_settled(&r, 14..65, band(f64::from(c) / d, MAX_TOKENS), 1, &what);
            }
        }
    }
}

#[test]
fn capacity_drop_is_followed_within_five_intervals() {
    for d in TASK_CPUS {
        for drain_s in [0.0, 2.0] {
            let mut host = Host::new(16, Some(8.0), d, drain_s);
            // Mid-interval 20, the quota drops from 8 CPUs to 2.
            let drop_at = 20 * SECONDS_PER_INTERVAL + 2;
            let r = run(&mut host, 1, MAX_TOKENS, 70, |s, h| {
                if s == drop_at {
                    h.quota = Some(2.0);
                }
            });
            let what = format!("8 -> 2 cpus, d={d} drain={drain_s}");
            assert_settled(&r, 14..20, band(8.0 / d, MAX_TOKENS), 0, &what);
            assert_settled(&r, 24..70, band(2.0 / d, MAX_TOKENS), 1, &what);
        }
    }
}

#[test]
fn capacity_rise_is_followed() {
    let mut host = Host::new(16, Some(2.0), 0.8, 2.0);
    let r = run(&mut host, 1, MAX_TOKENS, 70, |s, h| {
        if s == 20 * SECONDS_PER_INTERVAL + 2 {
            h.quota = Some(8.0);
        }
    });
    assert_settled(&r, 34..70, band(8.0 / 0.8, MAX_TOKENS), 1, "2 -> 8 cpus");
}

#[test]
fn a_low_maximum_is_where_it_sits() {
    for start in [1, MAX_TOKENS] {
        for host_quota in [Some(16.0), None] {
            let mut host = Host::new(16, host_quota, 0.8, 2.0);
            let r = run(&mut host, start, 8, 65, |_, _| {});
            assert_settled(&r, 14..65, (8, 8), 0, &format!("max 8, quota {host_quota:?}, start {start}"));
        }
    }
}

#[test]
fn noisy_demand_stays_near_the_filling_limit_without_flapping() {
    // Every second each compile's demand is off by up to 30 %: the limit
    // cannot sit still, but it must stay near C/d and not flip back and
    // forth.
    for c in CAPACITIES {
        for d in TASK_CPUS {
            for quota in [true, false] {
                for start in [1, MAX_TOKENS] {
                    let host_cpus = if quota { 2 * c } else { c };
                    let mut host = Host { jitter: 0.3, ..Host::new(host_cpus, quota.then_some(f64::from(c)), d, 2.0) };
                    let r = run(&mut host, start, MAX_TOKENS, 80, |_, _| {});
                    let what = format!("noisy, C={c} d={d} quota={quota} start={start}");
                    let t = f64::from(c) / d;
                    // Without a quota the estimate learns only from seconds
                    // without pressure, the lighter ones, so it sits higher.
                    let over = if quota { 1.05 } else { 1.25 };
                    let band = ((0.8 * t).floor().min(t.ceil() - 1.0).max(1.0) as u32, (over * t).ceil() as u32);
                    assert_settled(&r, 15..80, band, 20, &what);
                    let flips = r.limits[15..].windows(3).filter(|w| w[0] == w[2] && w[0] != w[1]).count();
                    assert!(flips <= 2, "{what}: {flips} flips\n{}", r.trace);
                }
            }
        }
    }
}

#[test]
fn heavier_then_lighter_compiles_are_followed() {
    let mut host = Host::new(32, Some(16.0), 0.5, 2.0);
    // Settled at 32 for 0.5 each; then each compile wants 1.0 (fill: 16),
    // then 0.4 (fill: 40).
    let (heavier, lighter) = (20 * SECONDS_PER_INTERVAL + 1, 40 * SECONDS_PER_INTERVAL + 1);
    let r = run(&mut host, 1, MAX_TOKENS, 70, |s, h| {
        if s == heavier {
            h.task_cpu = 1.0;
        } else if s == lighter {
            h.task_cpu = 0.4;
        }
    });
    assert_settled(&r, 14..20, band(32.0, MAX_TOKENS), 1, "0.5 per task");
    assert_settled(&r, 22..40, band(16.0, MAX_TOKENS), 1, "1.0 per task");
    assert_settled(&r, 52..70, band(40.0, MAX_TOKENS), 1, "0.4 per task");
}
