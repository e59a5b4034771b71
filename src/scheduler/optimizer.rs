//! The optimizer thread: a plain `std::thread` that, once per interval,
//! drains every agent's ring of CPU samples, runs one [`Optimizer::tick`],
//! and applies each agent's new token limit; and, ten times as often, gives
//! each consumerd its preferred remote limit — its fair share of the agents'
//! limits, raised by the share of its own recent tasks the cache answered
//! (those never take a token). The shares follow faster than the limits
//! because a build's demand changes within a second (a warm rebuild asks the
//! cache for everything at once), while a CPU verdict needs seconds of
//! samples. It keeps the last decision per agent for status pages.
//!
//! It touches the core only through [`Scheduler`]'s methods: the rings are
//! lock-free (`ArrayQueue`), limits are atomics, and the decisions it keeps
//! sit behind a mutex that only it writes, once per interval, and status
//! pages read. Nothing here is on the task hot path.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use ccroute_core::optimizer::{AgentInput, Optimizer, Params, Reason, TickInput};
use ccroute_core::{AgentId, ConsumerdId, Job, Scheduler};

/// How the optimizer thread runs.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// Time between agent-limit ticks (agents sample every second).
    pub interval: Duration,
    /// Time between consumerd-share ticks.
    pub share_interval: Duration,
    /// The control law's knobs.
    pub params: Params,
    /// Whether agents' token limits follow the control law; when false each
    /// agent keeps its own limit and only consumerds' shares are computed.
    pub tune_agents: bool,
    /// Each consumerd's window is this many times its share (see
    /// [`Tuner::lookahead`]).
    pub lookahead: f64,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            interval: Duration::from_secs(1),
            share_interval: Duration::from_millis(100),
            params: Params::default(),
            tune_agents: true,
            lookahead: 1.0,
        }
    }
}

/// A consumerd's window from its `share` (tokens, maybe boosted) and a
/// lookahead (at least 1 whatever it says): whole tasks, rounded up.
pub(crate) fn widen(share: f64, lookahead: f64) -> u32 {
    (share * lookahead.max(1.0)).ceil().min(f64::from(u32::MAX)) as u32
}

/// The optimizer's last word on one agent, for `ccroute status`.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionView {
    /// The limit it set.
    pub limit: u32,
    /// Why, as a sentence.
    pub reason: String,
    /// The kind of decision, without its figures (one of
    /// [`Reason::KINDS`](ccroute_core::optimizer::Reason::KINDS)).
    pub kind: &'static str,
    /// CPU use against capacity over the last interval.
    pub cpu_use: Option<f64>,
    /// Fraction of enforcement periods throttled over the last interval.
    pub throttled: Option<f64>,
    /// PSI pressure over the last interval.
    pub pressure: Option<f64>,
}

struct Shared {
    stop: AtomicBool,
    decisions: Mutex<HashMap<AgentId, DecisionView>>,
    /// Decisions since the start, by kind (indexed as `Reason::KINDS`).
    by_kind: [AtomicU64; Reason::KINDS.len()],
}

/// The running optimizer thread; dropping it stops the thread.
pub struct OptimizerThread {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for OptimizerThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OptimizerThread").finish_non_exhaustive()
    }
}

impl OptimizerThread {
    /// Starts the thread.
    ///
    /// # Errors
    /// When the OS refuses a thread.
    pub fn spawn<J: Job>(scheduler: Scheduler<J>, config: DriverConfig) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            decisions: Mutex::new(HashMap::new()),
            by_kind: std::array::from_fn(|_| AtomicU64::new(0)),
        });
        let thread_shared = shared.clone();
        let handle = std::thread::Builder::new().name("ccroute-optimizer".into()).spawn(move || {
            let mut tuner = Tuner::new(config.params);
            tuner.tune_agents = config.tune_agents;
            tuner.lookahead = config.lookahead;
            let step = config.share_interval.min(config.interval).max(Duration::from_millis(1));
            let mut next_tick = std::time::Instant::now() + config.interval;
            while !thread_shared.stop.load(Ordering::Acquire) {
                std::thread::park_timeout(step);
                if thread_shared.stop.load(Ordering::Acquire) {
                    break;
                }
                if std::time::Instant::now() < next_tick {
                    tuner.shares(&scheduler);
                    continue;
                }
                next_tick += config.interval;
                let decisions = tuner.tick(&scheduler);
                for d in decisions.values() {
                    if let Some(i) = Reason::KINDS.iter().position(|k| *k == d.kind) {
                        // Relaxed: a display counter.
                        thread_shared.by_kind[i].fetch_add(1, Ordering::Relaxed);
                    }
                }
                match thread_shared.decisions.lock() {
                    Ok(mut d) => *d = decisions,
                    Err(poisoned) => *poisoned.into_inner() = decisions,
                }
            }
        })?;
        Ok(OptimizerThread { shared, handle: Some(handle) })
    }

    /// Decisions taken since the start, per kind, every kind listed.
    pub fn decisions_by_kind(&self) -> Vec<(&'static str, u64)> {
        Reason::KINDS.iter().zip(&self.shared.by_kind).map(|(k, n)| (*k, n.load(Ordering::Relaxed))).collect()
    }

    /// The last decision per agent.
    pub fn decisions(&self) -> HashMap<AgentId, DecisionView> {
        match self.shared.decisions.lock() {
            Ok(d) => d.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

impl Drop for OptimizerThread {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

/// One optimizer over one scheduler: what the thread runs each interval.
/// Public so that tests can step it without a thread or a clock.
pub struct Tuner {
    optimizer: Optimizer<AgentId>,
    /// See [`DriverConfig::tune_agents`].
    pub tune_agents: bool,
    /// Each consumerd's window (its preferred remote limit) is this many
    /// times its share (at least 1): its build runs that far ahead, the
    /// units beyond the tokens waiting here, where longest-first ranks them.
    pub lookahead: f64,
    /// Per consumerd: its counts at the last share tick, and its recent hit ratio.
    hits: HashMap<ConsumerdId, HitMemory>,
}

#[derive(Debug, Clone, Copy, Default)]
struct HitMemory {
    submitted: u64,
    intercepted: u64,
    ratio: f64,
}

/// Fewer new tasks than this in a share tick say too little to move the ratio.
const HIT_SAMPLE: u64 = 4;

impl std::fmt::Debug for Tuner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tuner").field("agents", &self.optimizer.agent_count()).finish()
    }
}

impl Tuner {
    /// A tuner with these knobs.
    pub fn new(params: Params) -> Self {
        Tuner { optimizer: Optimizer::new(params), tune_agents: true, lookahead: 1.0, hits: HashMap::new() }
    }

    /// One interval: every agent's samples, a decision each, then the shares.
    pub fn tick<J: Job>(&mut self, scheduler: &Scheduler<J>) -> HashMap<AgentId, DecisionView> {
        let loads = scheduler.agent_loads();
        let inputs: Vec<AgentInput<'_, AgentId>> = loads
            .iter()
            .map(|l| AgentInput {
                agent: l.id,
                samples: &l.samples,
                limit: l.limit,
                max_limit: l.max_limit,
                tokens_in_use: l.tokens_in_use,
                tokens_all_taken: l.all_taken,
                tasks_waiting: l.tasks_waited,
            })
            .collect();
        // The law's own consumerd shares are left aside: `shares` computes
        // them per consumerd, with each one's own hit ratio.
        let out = self.optimizer.tick(&TickInput { agents: &inputs, consumerd_demand: &[], cache_hit_ratio: 0.0 });
        let mut views = HashMap::with_capacity(out.agents.len());
        for d in &out.agents {
            let applied = if self.tune_agents {
                if d.limit != d.previous {
                    tracing::info!(agent = ?d.agent, from = d.previous, to = d.limit, reason = %d.reason, "token limit");
                }
                scheduler.set_agent_limit(d.agent, d.limit).unwrap_or(d.limit)
            } else {
                d.previous
            };
            views.insert(
                d.agent,
                DecisionView {
                    limit: applied,
                    reason: d.reason.to_string(),
                    kind: d.reason.kind(),
                    cpu_use: d.factors.as_ref().map(|f| f.cpu_use),
                    throttled: d.factors.as_ref().map(|f| f.throttled),
                    pressure: d.factors.as_ref().and_then(|f| f.pressure),
                },
            );
        }
        self.shares(scheduler);
        views
    }

    /// Each consumerd's preferred remote limit: its fair share of the
    /// agents' current limits (by what each wants), times `1/(1 - r)` for
    /// its recent hit ratio `r` (capped at [`Params::max_cache_boost`]),
    /// times [`Tuner::lookahead`].
    pub fn shares<J: Job>(&mut self, scheduler: &Scheduler<J>) {
        let total = u64::from(scheduler.cluster_limit());
        let consumerds = scheduler.consumerd_loads();
        let wanted: Vec<u32> = consumerds.iter().map(|c| c.wanted).collect();
        let params = self.optimizer.params();
        let base = ccroute_core::optimizer::fair_remote_limits(total, 0.0, &wanted, params);
        let cap = params.max_cache_boost.max(1.0);
        let mut seen = HashMap::with_capacity(consumerds.len());
        for (c, share) in consumerds.iter().zip(base) {
            let mut m = self.hits.get(&c.id).copied().unwrap_or_default();
            let new = c.submitted.saturating_sub(m.submitted);
            if new >= HIT_SAMPLE {
                let hits = c.intercepted.saturating_sub(m.intercepted).min(new);
                m.ratio = 0.5 * m.ratio + 0.5 * (hits as f64 / new as f64);
                m.submitted = c.submitted;
                m.intercepted = c.intercepted;
            }
            seen.insert(c.id, m);
            let boost = (1.0 / (1.0 - m.ratio.clamp(0.0, 0.999))).min(cap);
            let limit = widen(f64::from(share) * boost, self.lookahead);
            scheduler.set_remote_limit(c.id, limit);
        }
        // Consumerds that left are forgotten.
        self.hits = seen;
    }
}

#[cfg(test)]
mod tests {
    use ccroute_wire::CpuSample;

    use super::*;
    use crate::scheduler::Config;
    use ccroute_core::test_support::{peer, tc, TestJob};

    /// One second of an agent limited to one CPU with `running` compiles that
    /// each want a whole CPU: all of its periods throttled.
    fn overloaded(second: u64, running: u32) -> CpuSample {
        let excess = u64::from(running.saturating_sub(1));
        CpuSample {
            wall_ns: second * 1_000_000_000,
            usage_ns: second * 1_000_000_000,
            quota_us: Some(100_000),
            period_us: 100_000,
            nr_periods: second * 10,
            nr_throttled: second * 10,
            throttled_ns: second * excess * 1_000_000_000,
            pressure_some_us: None,
            online_cpus: 16,
            tasks_running: running,
            tasks_started: 0,
        }
    }

    #[test]
    fn an_overloaded_agent_is_brought_down_and_consumerds_share_the_cluster() {
        let s: Scheduler<TestJob> = Scheduler::new(Config::default());
        let agent = s.connect_agent(peer(1), &[tc("gcc")], 8);
        let mut a = s.connect_consumerd(peer(2), &[tc("gcc")]);
        let b = s.connect_consumerd(peer(3), &[tc("gcc")]);
        a.set_demand(100);
        b.set_demand(100);
        // Busy: more tasks than tokens, none answered, so every token stays taken.
        for i in 0..16 {
            a.submit(i, tc("gcc").key(), i).unwrap();
        }
        let mut tuner = Tuner::new(Params::default());
        let mut second = 0;
        for _ in 0..6 {
            for _ in 0..2 {
                second += 1;
                agent.push_sample(overloaded(second, agent.token_limit()));
            }
            tuner.tick(&s);
        }
        let limit = agent.token_limit();
        assert!(limit <= 2, "one CPU, compiles of one CPU each: the limit should come down near 1, got {limit}");
        let views = tuner.tick(&s);
        assert!(views[&agent.id()].reason.len() > 3);
        assert_eq!(a.remote_limit(), b.remote_limit(), "equal backlogs, equal shares");
        assert!(a.remote_limit() >= 1);
    }

    /// Answers odd-numbered tasks itself, as the cache answers hits.
    struct OddHits;

    impl ccroute_core::Hook<TestJob> for OddHits {
        fn pre_receive(&self, task: &ccroute_core::TaskRef<'_, TestJob>) -> ccroute_core::HookAction {
            if task.task().body() % 2 == 1 {
                if let Some(held) = task.intercept() {
                    held.answer(true);
                }
                return ccroute_core::HookAction::RequestIntercepted;
            }
            ccroute_core::HookAction::ProcessRequestNormally
        }
    }

    #[test]
    fn a_consumerd_the_cache_answers_gets_a_wider_window() {
        let s: Scheduler<TestJob> = Scheduler::with_hooks(Config::default(), vec![Arc::new(OddHits)]);
        let _agent = s.connect_agent(peer(1), &[tc("gcc")], 4);
        let mut warm = s.connect_consumerd(peer(2), &[tc("gcc")]);
        let cold = s.connect_consumerd(peer(3), &[tc("gcc")]);
        warm.set_demand(100);
        cold.set_demand(100);
        let mut tuner = Tuner::new(Params::default());
        tuner.shares(&s);
        assert!(warm.remote_limit().abs_diff(cold.remote_limit()) <= 1, "no history yet: even shares");
        for round in 0..4u64 {
            for i in 0..20u64 {
                warm.submit(round * 100 + i, tc("gcc").key(), 2 * i + 1).unwrap();
            }
            while warm.poll_answer().is_some() {}
            tuner.shares(&s);
        }
        let (w, c) = (warm.remote_limit(), cold.remote_limit());
        assert!(w >= 3 * c, "every task of the warm consumerd was a hit: {w} against {c}");
        assert!(
            f64::from(w) <= f64::from(c + 1) * Params::default().max_cache_boost,
            "the boost is capped: {w} against {c}"
        );
    }

    /// A lookahead multiplies each consumerd's window, shares kept in
    /// proportion; below 1 it counts as 1.
    #[test]
    fn a_lookahead_widens_every_window_by_its_factor() {
        let s: Scheduler<TestJob> = Scheduler::new(Config::default());
        let _agent = s.connect_agent(peer(1), &[tc("gcc")], 16);
        let a = s.connect_consumerd(peer(2), &[tc("gcc")]);
        let b = s.connect_consumerd(peer(3), &[tc("gcc")]);
        a.set_demand(100);
        b.set_demand(100);
        let mut tuner = Tuner::new(Params::default());
        tuner.shares(&s);
        let (a1, b1) = (a.remote_limit(), b.remote_limit());
        assert!(a1 >= 8 && a1.abs_diff(b1) <= 1, "{a1} {b1}");
        tuner.lookahead = 4.0;
        tuner.shares(&s);
        assert_eq!((a.remote_limit(), b.remote_limit()), (4 * a1, 4 * b1));
        tuner.lookahead = 0.5;
        tuner.shares(&s);
        assert_eq!((a.remote_limit(), b.remote_limit()), (a1, b1));
    }

    #[test]
    fn the_thread_ticks_and_stops_on_drop() {
        let s: Scheduler<TestJob> = Scheduler::new(Config::default());
        let agent = s.connect_agent(peer(1), &[tc("gcc")], 4);
        let thread = OptimizerThread::spawn(
            s.clone(),
            DriverConfig {
                interval: Duration::from_millis(5),
                share_interval: Duration::from_millis(1),
                ..DriverConfig::default()
            },
        )
        .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while thread.decisions().is_empty() {
            assert!(std::time::Instant::now() < deadline, "no tick in 10 s");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(thread.decisions().contains_key(&agent.id()));
        drop(thread);
    }
}
