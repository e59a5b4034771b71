//! Counters: every one has exactly one writer — the session that owns its
//! agent or consumerd — so a bump is a plain load and store, with no
//! contended read-modify-write on the hot path, and any thread may read it.
//! When a peer leaves, its counters are added to the scheduler's retired
//! totals, so the totals never go backwards.
//!
//! The counters add up (kubecc B12 counted requests twice, B16 counted
//! different things on the two sides):
//!
//! - per consumerd: `submitted = completed + failed + retried + intercepted
//!   + cancelled + in flight`;
//! - across agents: results that won their task (`completed + failed`) are
//!   exactly the agent answers consumerds received, once every answer has
//!   been taken from its outbox.

use ccroute_wire::Totals;

use crate::sync::{AtomicU64, Ordering};

/// A single-writer counter.
#[derive(Debug, Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    /// Adds one. Only the counter's owner calls this.
    #[inline]
    pub(crate) fn bump(&self) {
        // Single writer: a load and a store cannot lose an increment, and
        // readers only need some recent value.
        self.0.store(self.0.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// What one agent did.
#[derive(Debug, Default)]
pub(crate) struct AgentCounters {
    /// Tasks sent to it.
    pub(crate) assigned: Counter,
    /// Results that answered their task with a successful compile.
    pub(crate) completed: Counter,
    /// Results that answered their task with a compile failure or an
    /// internal error.
    pub(crate) failed: Counter,
    /// Results for tasks that had ended meanwhile (cancelled), and copies'
    /// internal errors while their task's own run went on: dropped.
    pub(crate) stale: Counter,
    /// Tasks it held when it was lost, placed again or sent back.
    pub(crate) lost: Counter,
    /// Its tasks that ran long and were copied to another agent.
    pub(crate) hedged: Counter,
    /// Copies of other agents' tasks whose answer came first (counted in
    /// `completed` or `failed` too).
    pub(crate) copies_won: Counter,
}

impl AgentCounters {
    /// Its results that answered their task.
    pub(crate) fn results(&self) -> u64 {
        self.completed.get() + self.failed.get()
    }
}

/// What one consumerd got.
#[derive(Debug, Default)]
pub(crate) struct ConsumerdCounters {
    pub(crate) submitted: Counter,
    pub(crate) completed: Counter,
    pub(crate) failed: Counter,
    pub(crate) retried: Counter,
    pub(crate) intercepted: Counter,
    pub(crate) cancelled: Counter,
}

/// Counters of peers that left, summed.
#[derive(Debug, Default)]
pub(crate) struct Retired {
    requests: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    intercepted: AtomicU64,
    cancelled: AtomicU64,
    requeued: AtomicU64,
    /// Results of agents' ended sessions that answered their task.
    agent_results: AtomicU64,
    /// Tokens leaving agents' sessions ended without (`Config::token_wait`).
    leaked_tokens: AtomicU64,
}

impl Retired {
    pub(crate) fn add_consumerd(&self, c: &ConsumerdCounters) {
        self.requests.fetch_add(c.submitted.get(), Ordering::Relaxed);
        self.completed.fetch_add(c.completed.get(), Ordering::Relaxed);
        self.failed.fetch_add(c.failed.get(), Ordering::Relaxed);
        self.retried.fetch_add(c.retried.get(), Ordering::Relaxed);
        self.intercepted.fetch_add(c.intercepted.get(), Ordering::Relaxed);
        self.cancelled.fetch_add(c.cancelled.get(), Ordering::Relaxed);
    }

    pub(crate) fn add_agent(&self, c: &AgentCounters) {
        self.requeued.fetch_add(c.lost.get(), Ordering::Relaxed);
        self.agent_results.fetch_add(c.results(), Ordering::Relaxed);
    }

    /// Not under loom, whose models never wait long enough to give up.
    #[cfg_attr(ccroute_loom, allow(dead_code))]
    pub(crate) fn add_leaked_tokens(&self, n: u32) {
        self.leaked_tokens.fetch_add(u64::from(n), Ordering::Relaxed);
    }

    pub(crate) fn leaked_tokens(&self) -> u64 {
        self.leaked_tokens.load(Ordering::Relaxed)
    }

    pub(crate) fn totals(&self) -> Totals {
        Totals {
            requests: self.requests.load(Ordering::Relaxed),
            completed: self.completed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            intercepted: self.intercepted.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
            requeued: self.requeued.load(Ordering::Relaxed),
            adopted: 0,
            agent_results: self.agent_results.load(Ordering::Relaxed),
        }
    }
}

pub(crate) fn add_consumerd(t: &mut Totals, c: &ConsumerdCounters) {
    t.requests += c.submitted.get();
    t.completed += c.completed.get();
    t.failed += c.failed.get();
    t.retried += c.retried.get();
    t.intercepted += c.intercepted.get();
    t.cancelled += c.cancelled.get();
}
