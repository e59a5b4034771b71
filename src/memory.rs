//! Giving memory back once a load has ended.
//!
//! glibc's malloc keeps what a load freed: each thread that allocated has
//! its arena (up to 8 per CPU), and an arena gives pages back to the system
//! only from its top, so payload buffers, frames and task records freed in
//! any order stay in the process. After a 10,000-unit run the scheduler's
//! RSS stayed near its peak, several times its idle figure, although every
//! table had emptied (`cargo bench --bench memory` measures it).
//! `malloc_trim(0)` walks every arena and returns its free pages.
//!
//! [`IdleTrim`] decides when: once the scheduler has had no task in flight
//! and no new task for [`QUIET_BEFORE_TRIM`] after some work, once per such
//! quiet period, so an idle scheduler never trims again and a busy one never
//! pays for it. [`release_free_memory`] does it (off the async workers: a
//! trim of a large heap takes milliseconds).
//!
//! An agent instead fixes malloc's thresholds at its start
//! (`agent::bound_retained_memory`): it is seldom quiet during a build.
//!
//! Left out: other allocators (`release_free_memory` does nothing without
//! glibc); what the scheduler keeps on purpose (the result cache's memory
//! tier, bounded by `--cache-memory`).

use std::time::{Duration, Instant};

/// How long the scheduler must stay quiet before freed memory is returned.
pub const QUIET_BEFORE_TRIM: Duration = Duration::from_secs(3);

/// Decides, from the task counters sampled now and then, when a quiet
/// period after work has lasted [`QUIET_BEFORE_TRIM`]. Time is an argument.
#[derive(Debug, Default)]
pub struct IdleTrim {
    /// Tasks submitted as of the last observation.
    requests: u64,
    /// When the current quiet period began; `None` while busy.
    quiet_since: Option<Instant>,
    /// Work happened since the last trim.
    worked: bool,
}

impl IdleTrim {
    /// A decider that has seen no work yet (a scheduler that just started
    /// has nothing to give back).
    pub fn new() -> Self {
        IdleTrim::default()
    }

    /// Takes the counters at `now`: tasks submitted so far, tasks in flight.
    /// True when freed memory should be returned now.
    pub fn observe(&mut self, now: Instant, requests: u64, in_flight: u64) -> bool {
        if requests != self.requests || in_flight > 0 {
            self.requests = requests;
            self.quiet_since = None;
            self.worked = true;
            return false;
        }
        let since = *self.quiet_since.get_or_insert(now);
        if self.worked && now.saturating_duration_since(since) >= QUIET_BEFORE_TRIM {
            self.worked = false;
            return true;
        }
        false
    }
}

/// Returns the allocator's free pages to the system (glibc's
/// `malloc_trim(0)`); nothing with another allocator. Blocking: call it
/// from a blocking thread.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        #[allow(unsafe_code)]
        // SAFETY: malloc_trim takes no pointer; it locks each arena itself
        // and only hands its free pages back, so it is sound from any thread
        // at any time, while others allocate.
        let released = unsafe { libc::malloc_trim(0) };
        tracing::debug!(released = released != 0, "freed memory returned to the system");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn trims_once_after_a_quiet_period_that_follows_work() {
        let t0 = Instant::now();
        let mut d = IdleTrim::new();
        // Work: tasks submitted, some in flight.
        assert!(!d.observe(t0, 10, 4));
        assert!(!d.observe(t0 + SECOND, 20, 0));
        // Quiet from here; not yet long enough.
        assert!(!d.observe(t0 + 2 * SECOND, 20, 0));
        assert!(!d.observe(t0 + 4 * SECOND, 20, 0));
        assert!(d.observe(t0 + 5 * SECOND, 20, 0));
        // Once per quiet period.
        assert!(!d.observe(t0 + 60 * SECOND, 20, 0));
        // New work, then quiet again: trims again.
        assert!(!d.observe(t0 + 61 * SECOND, 21, 0));
        assert!(!d.observe(t0 + 62 * SECOND, 21, 0));
        assert!(d.observe(t0 + 65 * SECOND, 21, 0));
    }

    #[test]
    fn never_trims_a_scheduler_that_did_nothing_or_stays_busy() {
        let t0 = Instant::now();
        let mut idle = IdleTrim::new();
        let mut busy = IdleTrim::new();
        for s in 0..100 {
            let now = t0 + s * SECOND;
            assert!(!idle.observe(now, 0, 0));
            // A long task in flight, no new submissions: still busy.
            assert!(!busy.observe(now, 1, 1));
        }
    }
}
