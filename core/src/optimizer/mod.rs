//! The optimizer: each agent's token limit from its CPU samples, and each
//! consumerd's share of the cluster.
//!
//! Pure computation: no threads, no I/O, no clocks, no atomics. The
//! scheduler's optimizer thread drains every agent's ring of
//! [`CpuSample`]s once per interval (a few seconds; agents sample every
//! second), calls [`Optimizer::tick`] once, and applies what comes back.
//!
//! Main types: [`Optimizer`] (per-agent state, one [`Optimizer::tick`]);
//! [`TickInput`] and [`AgentInput`] in, [`TickOutput`] and [`AgentDecision`]
//! out, each decision with a [`Reason`] for `ccroute status`; [`Meter`] and
//! [`Factors`] (what one interval's samples say, see [`factors`]);
//! [`fair_remote_limits`] (see [`fair`]); [`Params`], the law's knobs.
//!
//! # Factors
//!
//! From consecutive pairs of samples, weighted by the wall time each pair
//! covers: CPU use against capacity (quota over period when a quota is set,
//! capped at the online CPUs, else the online CPUs); throttling as two
//! numbers — the fraction of enforcement periods throttled
//! (`Δnr_throttled/Δnr_periods`), which says *whether* demand passed the
//! quota (it is near 1 as soon as demand passes it at all), and the
//! throttled work (`Δthrottled_ns/Δwall`, CPUs' worth held back), which says
//! *by how much*, as long as the host has CPUs to spare (with every host CPU
//! busy it stops growing); PSI `some` pressure; the compiles running; and
//! what each running compile wanted, where that shows. Resets, gaps,
//! duplicates and clock jumps are handled there.
//!
//! # The law
//!
//! Compiles are not purely CPU-bound: a compile uses `d` CPUs on average (it
//! also waits on its input and its output), so the limit that fills a
//! capacity of `C` CPUs is `C/d` tasks. The optimizer keeps a moving average
//! (weight [`Params::estimate_weight`]) of `d`, learnt from the pairs whose
//! demand shows: unthrottled ones without pressure (usage is demand) and
//! throttled ones with host CPUs to spare (usage plus throttled work is).
//! Its target is `T = ⌊C/d + target_slack⌋`, the largest limit that fits.
//!
//! Per agent and interval, the first rule that applies decides:
//!
//! 1. A limit above the agent's maximum comes down to it. No usable sample:
//!    hold.
//! 2. **Overloaded** — throttled work at least [`Params::lower_excess`] of
//!    capacity (or, with every host CPU busy, throttled in at least
//!    [`Params::lower_throttled_full`] of periods), or pressure at least
//!    [`Params::lower_pressure`]: lower. The running compiles wanted at
//!    least what they got plus what was held back; with `d` the larger of
//!    that and the estimate, cut toward `T` by [`Params::gain_down`] of the
//!    gap. If the overload's size is unknown (pressure, saturation, every
//!    host CPU busy) also cut blind — [`Params::backoff`] × severity off the
//!    compiles that were running, not off the limit, so that a cut is not
//!    repeated for tasks admitted before it — and keep the lower. If the
//!    measured demand fits at this limit, the throttling is bursts: hold.
//! 3. Not every token taken: hold — there is no demand to raise for.
//! 4. CPU saturated, nothing to tell "exactly full" from "far over", and no
//!    estimate yet: cut blind, to find one.
//! 5. **Dead band** — throttled in at least [`Params::raise_max_throttled`]
//!    of periods, or pressure at least [`Params::raise_max_pressure`], but
//!    not overloaded: hold.
//! 6. At the agent's maximum, or CPU at least [`Params::raise_max_use`]: hold.
//! 7. **Raise** toward `T` by [`Params::gain_up`] of the gap, at most
//!    [`Params::max_raise_factor`] times the limit (doubling while there is
//!    no estimate); hold when `T` is within [`Params::dead_band`] above the
//!    limit; raise by one only when nothing waits on the agent's routes.
//!    A limit that was cut for overload is not raised to again for
//!    [`Params::probe_after`] intervals, doubling each time it fails again
//!    (up to [`Params::max_probe_after`]); a new capacity forgets it.
//!
//! Why it settles instead of oscillating: raising and lowering aim at the
//! same `T`, computed to fit, so the limit approaches it from either side and
//! stops; steps are proportional to the distance, so they shrink near it; a
//! raise needs a clear gap and no sign of contention, a cut needs a clear
//! overload, and between the two thresholds the limit holds; a limit found
//! over capacity is not tried again at once, so noise cannot flip the limit
//! between two values every other interval.
//!
//! # Parameters
//!
//! Defaults are in [`Params::default`]; each field says why it is what it is.
//! They were checked against a deterministic CFS-like model (in the tests):
//! capacities of 1 to 64 CPUs, 0.5 to 1 CPU per compile, with and without a
//! quota or pressure, steady and ±30 % noisy demand.
//!
//! # Fair remote limits
//!
//! The cluster's total (the sum of the agents' new limits) is raised by
//! `1/(1 - hit ratio)` (capped) and a headroom, then split among consumerds
//! by water-filling; see [`fair`].
//!
//! Left out: the time a token spends on a task in transit (the law counts
//! running compiles, which is what the agent reports); memory as a resource;
//! an idle agent's limit (it keeps its limit while not all tokens are taken,
//! so the scheduler should start agents at a modest limit, not at their
//! maximum); per-route fairness. Without a quota, `d` is learnt only from
//! seconds without pressure, the lighter ones, so the limit settles up to a
//! fifth above `C/d` under very noisy demand.

pub mod factors;
pub mod fair;
mod law;
#[cfg(test)]
mod simulation;

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use ccroute_wire::CpuSample;

pub use factors::{capacity_of, Factors, Meter, Reading};
pub use fair::{fair_remote_limits, remote_total};
pub use law::{fill_target, Overload, Reason, Step};

pub use super::tokens::MAX_TOKENS;

/// The control law's knobs. Values are fractions unless named otherwise.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// A pair of samples further apart than this is dropped as stale. 30 s:
    /// agents sample every second, so a longer silence means the agent was
    /// stalled or cut off, and its average says nothing about now.
    pub max_gap: Duration,
    /// CPU at or above this fraction of capacity is saturated: usage there is
    /// what the compiles got, not what they wanted. 0.97: the kernel's
    /// accounting and the sampling instants differ by a few percent.
    pub saturated_use: f64,
    /// A pair with more pressure than this does not teach the per-task
    /// estimate. 0.10, the same as `raise_max_pressure`.
    pub clean_max_pressure: f64,
    /// Lower when throttled work reaches this fraction of capacity. 0.05:
    /// bursty compiles get throttled now and then even when the limit fits;
    /// 5 % of capacity is past noise, and at the target (largest limit that
    /// fits) the excess is at most one task's share.
    pub lower_excess: f64,
    /// When every CPU of the host is busy, lower when throttled in this
    /// fraction of periods or more. 0.5: throttled time stops growing then
    /// and cannot show the excess; at a limit that fits, bursts throttle
    /// some periods, not most.
    pub lower_throttled_full: f64,
    /// Lower when PSI `some` pressure reaches this. 0.40: below capacity a
    /// compile farm's pressure stays low; near 1 means tasks always wait.
    pub lower_pressure: f64,
    /// No raise while throttled in this fraction of periods or more. 0.10:
    /// the start of the dead band on the throttling side.
    pub raise_max_throttled: f64,
    /// No raise while pressure is this or more. 0.10: the start of the dead
    /// band on the pressure side, well below `lower_pressure`.
    pub raise_max_pressure: f64,
    /// No raise while CPU use is this fraction of capacity or more. 0.95: the
    /// capacity is as good as full, whatever the estimate says.
    pub raise_max_use: f64,
    /// A raise covers this fraction of the gap to the target (at least one
    /// token). 0.5: a demand measured with few tasks may not hold with many
    /// (they share disks and memory), so each step re-measures before the
    /// next; the gap halves every interval.
    pub gain_up: f64,
    /// A cut covers this fraction of the gap to the target. 1.0: the target
    /// is drawn from the capacity measured now and a demand that is a lower
    /// bound, so it errs high; going straight to it cannot undershoot.
    pub gain_down: f64,
    /// A raise reaches at most this many times the limit. 2.0: like TCP's
    /// slow start, from 1 to 1000 takes ten intervals.
    pub max_raise_factor: f64,
    /// No raise when the target is less than this fraction of the limit
    /// above it (and at least one token). 0.03: a noisy estimate moves the
    /// target by a few percent; following it would jitter the limit.
    pub dead_band: f64,
    /// A blind cut removes this fraction of the running compiles at full
    /// severity. 0.5: halving, as TCP does, reaches any limit from 1000 in
    /// ten intervals; severity scales it down for milder overloads
    /// (pressure just past `lower_pressure` cuts by little).
    pub backoff: f64,
    /// A limit found over capacity is not raised to again for this many
    /// intervals. 6 (half a minute at 5 s intervals): long enough that a
    /// noisy estimate cannot flap the limit every other interval, short
    /// enough to follow a build whose compiles get lighter.
    pub probe_after: u32,
    /// Each time the same limit is found over capacity again, the wait
    /// doubles, up to this many intervals. 96 (8 minutes at 5 s).
    pub max_probe_after: u32,
    /// Weight of a new interval's per-task CPU in the estimate. 0.5: a
    /// build's mix of compiles changes over seconds; the estimate should
    /// follow within a few intervals, not jump with one.
    pub estimate_weight: f64,
    /// Tokens added to `C/d` before rounding down. 0.1: `C/d` that is a
    /// whole number, measured with rounding noise, must not lose a token.
    pub target_slack: f64,
    /// The cache hit ratio raises the consumerds' total by at most this
    /// factor. 4.0 (a hit ratio of 0.75): hits are answered at once, but a
    /// ratio measured in the past may not hold for the next tasks, and every
    /// miss beyond the agents' tokens waits in the scheduler's memory.
    pub max_cache_boost: f64,
    /// The consumerds' total is the agents' limits times this. 1.25: a short
    /// queue at the scheduler refills a returned token without a round trip
    /// to a consumerd, and lets the optimizer see demand past the limits.
    pub remote_headroom: f64,
    /// A consumerd that wants nothing remote is counted as wanting this many.
    /// 2: enough to start a build without waiting an interval.
    pub idle_floor: u32,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            max_gap: Duration::from_secs(30),
            saturated_use: 0.97,
            clean_max_pressure: 0.10,
            lower_excess: 0.05,
            lower_throttled_full: 0.5,
            lower_pressure: 0.40,
            raise_max_throttled: 0.10,
            raise_max_pressure: 0.10,
            raise_max_use: 0.95,
            gain_up: 0.5,
            gain_down: 1.0,
            max_raise_factor: 2.0,
            dead_band: 0.03,
            backoff: 0.5,
            probe_after: 6,
            max_probe_after: 96,
            estimate_weight: 0.5,
            target_slack: 0.1,
            max_cache_boost: 4.0,
            remote_headroom: 1.25,
            idle_floor: 2,
        }
    }
}

/// One agent's interval, as the caller saw it.
#[derive(Debug, Clone, Copy)]
pub struct AgentInput<'a, A> {
    /// The agent.
    pub agent: A,
    /// Samples drained from its ring since the last tick, oldest first
    /// (empty when none came).
    pub samples: &'a [CpuSample],
    /// Its token limit during the interval.
    pub limit: u32,
    /// The most it allows (its `--jobs`).
    pub max_limit: u32,
    /// Tokens held now.
    pub tokens_in_use: u32,
    /// Whether all of its tokens were taken during the interval.
    pub tokens_all_taken: bool,
    /// Whether tasks waited on its routes during the interval.
    pub tasks_waiting: bool,
}

/// Everything one tick needs.
#[derive(Debug, Clone, Copy)]
pub struct TickInput<'a, A> {
    /// Every connected agent: an agent left out is forgotten.
    pub agents: &'a [AgentInput<'a, A>],
    /// Tasks each connected consumerd wants remote now.
    pub consumerd_demand: &'a [u32],
    /// The result cache's hit ratio, 0..1.
    pub cache_hit_ratio: f64,
}

/// One agent's new limit.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentDecision<A> {
    /// The agent.
    pub agent: A,
    /// Its limit during the interval.
    pub previous: u32,
    /// Its limit from now on, in `1..=min(max_limit, MAX_TOKENS)`.
    pub limit: u32,
    /// Why.
    pub reason: Reason,
    /// What its samples said, when they said anything.
    pub factors: Option<Factors>,
    /// The estimate of CPUs per running compile, once there is one.
    pub task_cpu: Option<f64>,
}

/// What one tick decided.
#[derive(Debug, Clone, PartialEq)]
pub struct TickOutput<A> {
    /// One decision per input agent, in input order.
    pub agents: Vec<AgentDecision<A>>,
    /// The sum of the agents' new limits.
    pub cluster_limit: u64,
    /// Each consumerd's preferred remote limit, in input order.
    pub remote_limits: Vec<u32>,
}

/// The optimizer's memory of one agent.
#[derive(Debug, Clone, Default)]
struct AgentState {
    meter: Meter,
    memory: law::Memory,
    /// The tick that last saw the agent.
    seen: u64,
}

/// Per-agent state and the tick that turns samples into limits.
#[derive(Debug, Clone)]
pub struct Optimizer<A> {
    params: Params,
    agents: HashMap<A, AgentState>,
    ticks: u64,
}

impl<A: Eq + Hash + Clone> Optimizer<A> {
    /// An optimizer that knows no agent yet.
    pub fn new(params: Params) -> Self {
        Optimizer { params, agents: HashMap::new(), ticks: 0 }
    }

    /// Its parameters.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Agents it keeps state for.
    pub fn agent_count(&self) -> usize {
        self.agents.len()
    }

    /// Its estimate of CPUs per running compile on `agent`.
    pub fn task_cpu(&self, agent: &A) -> Option<f64> {
        self.agents.get(agent).and_then(|s| s.memory.task_cpu)
    }

    /// Forgets an agent at once (it also goes when a tick leaves it out).
    pub fn forget(&mut self, agent: &A) {
        self.agents.remove(agent);
    }

    /// Folds in one interval: new limits for the agents, shares for the
    /// consumerds.
    pub fn tick(&mut self, input: &TickInput<'_, A>) -> TickOutput<A> {
        self.ticks += 1;
        let mut decisions = Vec::with_capacity(input.agents.len());
        for a in input.agents {
            let state = self.agents.entry(a.agent.clone()).or_default();
            state.seen = self.ticks;
            for s in a.samples {
                state.meter.push(*s, &self.params);
            }
            let token_use = f64::from(a.tokens_in_use) / f64::from(a.limit.max(1));
            let reading = state.meter.finish(token_use);
            let view = law::View {
                limit: a.limit,
                max_limit: a.max_limit,
                tokens_in_use: a.tokens_in_use,
                tokens_all_taken: a.tokens_all_taken,
                tasks_waiting: a.tasks_waiting,
            };
            let (limit, reason) = law::decide(&self.params, &reading, &mut state.memory, &view);
            decisions.push(AgentDecision {
                agent: a.agent.clone(),
                previous: a.limit,
                limit,
                reason,
                factors: reading.factors,
                task_cpu: state.memory.task_cpu,
            });
        }
        let ticks = self.ticks;
        self.agents.retain(|_, s| s.seen == ticks);
        let cluster_limit = decisions.iter().map(|d| u64::from(d.limit)).sum();
        let remote_limits =
            fair_remote_limits(cluster_limit, input.cache_hit_ratio, input.consumerd_demand, &self.params);
        TickOutput { agents: decisions, cluster_limit, remote_limits }
    }
}

impl<A: Eq + Hash + Clone> Default for Optimizer<A> {
    fn default() -> Self {
        Self::new(Params::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    /// Samples of an agent on `cpus` unlimited CPUs, `running` compiles
    /// using `per_task` CPU each, one a second from `from` seconds.
    fn samples(from: u64, count: u64, cpus: u32, running: u32, per_task: f64) -> Vec<CpuSample> {
        (0..count)
            .map(|i| {
                let t = from + i;
                CpuSample {
                    wall_ns: t * S,
                    usage_ns: (t as f64 * f64::from(running) * per_task * S as f64) as u64,
                    quota_us: None,
                    period_us: 100_000,
                    online_cpus: cpus,
                    pressure_some_us: Some(0),
                    tasks_running: running,
                    ..CpuSample::default()
                }
            })
            .collect()
    }

    fn input(agent: u32, samples: &[CpuSample], limit: u32) -> AgentInput<'_, u32> {
        AgentInput {
            agent,
            samples,
            limit,
            max_limit: 1000,
            tokens_in_use: limit,
            tokens_all_taken: true,
            tasks_waiting: true,
        }
    }

    #[test]
    fn tick_decides_each_agent_and_shares_the_sum() {
        let mut opt = Optimizer::default();
        let a = samples(0, 6, 8, 2, 0.5);
        let b = samples(0, 6, 8, 4, 1.0);
        let agents = [input(1, &a, 2), input(2, &b, 4)];
        let out = opt.tick(&TickInput { agents: &agents, consumerd_demand: &[1_000, 1_000], cache_hit_ratio: 0.0 });
        assert_eq!(out.agents.len(), 2);
        // 8 cpus at 0.5 per task: 16 fill them; half the gap of 14, capped at
        // double the limit.
        assert_eq!((out.agents[0].agent, out.agents[0].previous, out.agents[0].limit), (1, 2, 4));
        assert_eq!(out.agents[0].task_cpu, Some(0.5));
        assert_eq!(out.agents[1].limit, 6, "{}", out.agents[1].reason);
        assert_eq!(out.cluster_limit, 10);
        // 10 tokens with 25 % headroom, split evenly.
        assert_eq!(out.remote_limits, vec![6, 6]);
        assert_eq!(opt.task_cpu(&2), Some(1.0));
        let f = out.agents[1].factors.expect("factors");
        assert!((f.cpu_use - 0.5).abs() < 1e-9);
        assert!((f.token_use - 1.0).abs() < 1e-9);
    }

    #[test]
    fn agents_left_out_are_forgotten() {
        let mut opt = Optimizer::default();
        let a = samples(0, 3, 8, 2, 0.5);
        opt.tick(&TickInput {
            agents: &[input(1, &a, 2), input(2, &a, 2)],
            consumerd_demand: &[],
            cache_hit_ratio: 0.0,
        });
        assert_eq!(opt.agent_count(), 2);
        opt.tick(&TickInput { agents: &[input(2, &[], 2)], consumerd_demand: &[], cache_hit_ratio: 0.0 });
        assert_eq!(opt.agent_count(), 1);
        assert_eq!(opt.task_cpu(&1), None);
        opt.forget(&2);
        assert_eq!(opt.agent_count(), 0);
    }

    #[test]
    fn an_empty_interval_holds_and_the_next_continues_from_the_last_sample() {
        let mut opt = Optimizer::default();
        let all = samples(0, 9, 8, 4, 0.5);
        let first =
            opt.tick(&TickInput { agents: &[input(1, &all[..4], 4)], consumerd_demand: &[], cache_hit_ratio: 0.0 });
        assert_eq!(first.agents[0].factors.expect("factors").pairs, 3);
        let empty = opt.tick(&TickInput { agents: &[input(1, &[], 5)], consumerd_demand: &[], cache_hit_ratio: 0.0 });
        assert_eq!(empty.agents[0].limit, 5);
        assert_eq!(empty.agents[0].reason.to_string(), "hold: no cpu samples this interval");
        let next =
            opt.tick(&TickInput { agents: &[input(1, &all[4..], 5)], consumerd_demand: &[], cache_hit_ratio: 0.0 });
        let f = next.agents[0].factors.expect("factors");
        assert_eq!(f.pairs, 5, "the pair across the empty interval counts");
    }

    #[test]
    fn no_agents_means_nothing_remote() {
        let mut opt: Optimizer<u32> = Optimizer::default();
        let out = opt.tick(&TickInput { agents: &[], consumerd_demand: &[3, 0], cache_hit_ratio: 0.5 });
        assert_eq!(out.cluster_limit, 0);
        assert_eq!(out.remote_limits, vec![0, 0]);
    }
}
