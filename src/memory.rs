//! Giving memory back: what a daemon's allocator keeps after a load.
//!
//! glibc's malloc keeps what a load freed: each thread that allocated has
//! its arena (up to 8 per CPU), and an arena gives pages back to the system
//! only from its top, so payload buffers, frames and task records freed in
//! any order stay in the process. After a 10,000-unit run the scheduler's
//! RSS stayed near its peak, several times its idle figure, although every
//! table had emptied (`cargo bench --bench memory` measures it); an agent
//! of the soak (`scripts/soak --duration 60`) climbed from 25 to 65-75 MiB
//! over a minute of builds, and `malloc_trim(0)` called into it from a
//! debugger gave 20-32 MiB of that back at once. `malloc_trim(0)` walks
//! every arena and returns its free pages.
//!
//! [`IdleTrim`] decides when: once a daemon has had no task in flight and
//! no new task for [`QUIET_BEFORE_TRIM`] after some work, and again each
//! time that quiet period has doubled, up to [`QUIET_TRIM_UNTIL`]: what is
//! freed after the first trim (a connection's buffers as its last bytes are
//! acknowledged, state its peers let go of later) went back only at the
//! next load's end. With one trim, `cargo bench --bench memory` read the
//! scheduler at 24.2 and 16.7 MiB 15 s after its run in two runs (idle
//! 11.9); with these, 16.2 and 16.4. An idle daemon then trims no more. A daemon that is
//! seldom quiet during a build (an agent) also trims every
//! [`IdleTrim::every`] while it works; the scheduler does not (it pays for
//! nothing on its hot paths). [`release_free_memory`] does it, off the async
//! workers: a trim of a large heap takes milliseconds.
//!
//! [`bound_retained_memory`] fixes malloc's thresholds at a daemon's start
//! ([`Retention`]), so that its large buffers (sources, objects, compressed
//! frames) do not teach malloc to keep MiBs per arena in the first place.
//!
//! What holds the rest after a load, from `MEMORY_HEAPTRACK=idle` and
//! `=after` of `cargo bench --bench memory` at d0112f2, their stacks
//! diffed: the scheduler's live heap 15 s after the run is 1.9 MB above
//! idle, half of the 3.8 MiB of anonymous memory it gained (the other half
//! is freed memory on pages that live blocks share, which no trim gives
//! back). Of the 1.9 MB: quinn's reassembly of the long-lived control
//! streams, 0.87 MB (a stream's heap of received chunks keeps the length a
//! backlog of one stream window reached, 0.64; buffers its defragmenting
//! made, 0.23); tokio channels' blocks, 0.70 MB (quinn's endpoint to its
//! connections 0.25, each peer's inbound channel in the scheduler 0.30,
//! frame writers' queues 0.15); session maps and outboxes, 0.16 MB.
//! About 2 MiB of the gain goes when the peers disconnect (3.3-3.7 MiB
//! anonymous then, against 5.5-5.8 with them), and any load reaches most
//! of it (after ÷ idle after a warm-up of one window: 1.07-1.10): the
//! working size of connections that carried a load, not growth. Boxing
//! the inbound channel's items (0.30 MB less live) read 1.34 and 1.34
//! against 1.35 the same hour: within a run's spread, not kept.
//!
//! What a connection keeps goes with it, so peers replace a connection
//! that carried a load once it has been quiet for a few seconds
//! ([`Recycling`]): consumerds and agents both, with nothing in flight and
//! nothing in doubt, at the cost of a handshake (jobs that come in its few
//! round trips compile on the consumerd's host). `cargo bench --bench
//! memory`, the same hour on the same machine: 1.36 × idle without it,
//! 1.24 with the consumerds' connections replaced, and 1.19, 1.20, 1.20,
//! 1.19 with the agents' too (13b2327; 1.19 again with a consumerd's
//! jobs registered under the connection's lock and an agent whose limit
//! was cut keeping its connection, at 1c8b221; 1.19, 1.21 and 1.23 at
//! 37b1b88: on the target, not under it; anonymous memory 15 s after 4.0-4.3
//! MiB, against 3.2-3.5 once every peer has left and 2.0 idle: what stays
//! is the scheduler's own, most of it freed memory on pages live blocks
//! share). An agent whose token limit the scheduler cut keeps its
//! connection: a new session starts at its first limit, and the optimizer
//! would learn the cut again in the next build.
//!
//! Where the rest lies, by mapping (`/proc/PID/smaps` of the scheduler,
//! read each second during `cargo bench --bench memory` at 8f4a962: 1.23 ×
//! idle that run; anonymous memory 2.1 MiB idle, 4.7 15 s after, 3.9 once
//! every peer had left). The two tokio workers' malloc arenas hold most of
//! it: 1.0 MiB resident idle, 3.0 15 s after, 2.3 with no peer (freed
//! memory on pages that live blocks share; a trim gives back whole free
//! pages only). The rest is quinn's endpoint receive buffer: one zeroed
//! allocation of 2.9 MiB (1,472-byte datagrams × 64 GRO segments × 32 per
//! batch), made at start and kept for the endpoint's life, of which 84 KiB
//! is resident idle and 512 KiB once a load has filled its batches. The
//! main heap and the threads' stacks did not grow. Neither part grows with
//! the load: after ÷ the idle read after a warm-up of one window was 1.01.
//! Shrinking that buffer means turning GRO off for the scheduler's socket
//! (quinn sizes it from the socket's segments), paid in receive CPU at
//! scale: not tried.
//!
//! Left out: other allocators (both functions do nothing without glibc).
//! Tried as the `ccroute` binary's global allocator at dd497b3, `cargo
//! bench --bench memory` read the scheduler 15 s after its run at 3.61 ×
//! idle with mimalloc (the `mimalloc` crate 0.1, its C library 0.1.49;
//! 86.3 MiB of anonymous memory), 3.22 with `MIMALLOC_PURGE_DELAY=0
//! MIMALLOC_ARENA_EAGER_COMMIT=0` (31.4 MiB: each thread's heap keeps its
//! pages, and its collection is per thread), 6.82 with jemalloc
//! (`tikv-jemallocator` 0.6) and 1.46 with `_RJEM_MALLOC_CONF=
//! dirty_decay_ms:1000,muzzy_decay_ms:0,background_thread:true` (9.0 MiB),
//! against 1.36 with glibc and these trims the same hour (6.1 MiB);
//! turning malloc's per-thread caches off (`GLIBC_TUNABLES=
//! glibc.malloc.tcache_count=0`), whose blocks pin pages a trim would give
//! back: `cargo bench --bench memory` read the scheduler at 1.21 × idle 15 s
//! after its run against 1.29 with them, but `cargo bench --bench farm --
//! scale` at 110.2 µs of its CPU a task against 81.2 (with one block a
//! size, 1.23 and 89.3), at 482debd; a stream receive window of 1 MiB
//! for the scheduler instead of 4 (quinn's reassembly queue of each
//! consumerd's control stream keeps the capacity its window let it reach):
//! 1.29 against 1.37-1.38, but the farm's `lan-256` at 1.399 and 1.412 ×
//! its bound against 1.361 with 4 MiB (1.323 in FARM.md), its dispatch
//! p50 196-271 ms against 106; fewer arenas (`MALLOC_ARENA_MAX=1` and `2`
//! in the scheduler's environment): 1.34 and 1.33 against 1.37 the same
//! hour at cf05c63, its anonymous memory 15 s after 5.8 and 5.7 MiB (idle 2.0);
//! what a daemon keeps on purpose (the result cache's memory tier, bounded
//! by `--cache-memory`; an agent's results kept for re-delivery, bounded by
//! `agent::work::HELD_MAX_BYTES`).

use std::time::{Duration, Instant};

/// How long a daemon must stay quiet before freed memory is returned.
pub const QUIET_BEFORE_TRIM: Duration = Duration::from_secs(3);

/// The longest quiet a trim waits for: each trim after the first comes when
/// the quiet has lasted twice as long as at the one before, while that is
/// no more than this (at about 3, 6, 12, ... 96 s of quiet, as sampled).
pub const QUIET_TRIM_UNTIL: Duration = Duration::from_secs(100);

/// A connection that has carried this many tasks is replaced by a new one
/// once it has been quiet for [`RECYCLE_QUIET`] ([`Recycling`]).
pub const RECYCLE_AFTER_TASKS: u64 = 256;

/// How long a connection that carried a load stays quiet before it is
/// replaced: longer than the pauses between a build's compiles (a link, a
/// configure check) mostly are, so that it happens about once a load.
pub const RECYCLE_QUIET: Duration = Duration::from_secs(5);

/// How often an agent gives freed memory back while it works.
pub const AGENT_TRIM_EVERY: Duration = Duration::from_secs(10);

/// Decides, from the task counters sampled now and then, when a quiet
/// period after work has lasted [`QUIET_BEFORE_TRIM`], and each time it has
/// doubled since, up to [`QUIET_TRIM_UNTIL`] (and, with
/// [`IdleTrim::every`], when a busy period has lasted that long since the
/// last trim). Time is an argument.
#[derive(Debug, Default)]
pub struct IdleTrim {
    /// Tasks begun (submitted to a scheduler, started by an agent) as of the
    /// last observation.
    requests: u64,
    /// When the current quiet period began; `None` while busy.
    quiet_since: Option<Instant>,
    /// When work began since the last trim; `None` when none happened.
    worked_since: Option<Instant>,
    /// How long the current quiet period lasts at its next trim; `None`
    /// when it has had its last.
    next_quiet_trim: Option<Duration>,
    /// Trim this often while busy, too.
    every: Option<Duration>,
}

impl IdleTrim {
    /// A decider that has seen no work yet (a daemon that just started has
    /// nothing to give back) and trims only when work has stopped.
    pub fn new() -> Self {
        IdleTrim::default()
    }

    /// As [`IdleTrim::new`], and also trims once work has gone on for
    /// `every` since it began or since the last trim.
    pub fn every(every: Duration) -> Self {
        IdleTrim { every: Some(every), ..IdleTrim::default() }
    }

    /// Takes the counters at `now`: tasks begun so far, tasks in flight.
    /// True when freed memory should be returned now.
    pub fn observe(&mut self, now: Instant, requests: u64, in_flight: u64) -> bool {
        if requests != self.requests || in_flight > 0 {
            self.requests = requests;
            self.quiet_since = None;
            self.next_quiet_trim = Some(QUIET_BEFORE_TRIM);
            let began = *self.worked_since.get_or_insert(now);
            if self.every.is_some_and(|every| now.saturating_duration_since(began) >= every) {
                self.worked_since = Some(now);
                return true;
            }
            return false;
        }
        let since = *self.quiet_since.get_or_insert(now);
        let quiet = now.saturating_duration_since(since);
        match self.next_quiet_trim {
            Some(at) if quiet >= at => {
                self.worked_since = None;
                self.next_quiet_trim = Some(quiet * 2).filter(|next| *next <= QUIET_TRIM_UNTIL);
                true
            }
            _ => false,
        }
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

/// malloc's two thresholds, fixed for the life of a daemon by
/// [`bound_retained_memory`]: allocations of `mmap` bytes and more are
/// mapped on their own and unmapped when freed, and an arena's free top
/// beyond `trim` bytes goes back to the system as it is freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Bytes from which an allocation is mapped on its own.
    pub mmap: usize,
    /// Bytes of free top an arena keeps.
    pub trim: usize,
}

impl Retention {
    /// For a daemon that now and then handles buffers of megabytes (an
    /// agent: preprocessed texts, sources, objects, compressed frames):
    /// 1 MiB and 4 MiB.
    ///
    /// Left alone, glibc raises both thresholds each time it frees a large
    /// mapped block (up to 32 MiB and 64 MiB), after which every arena keeps
    /// that much freed memory: an agent of the soak (`scripts/soak --duration
    /// 60`) grew from 57 to 104–131 MiB with about 10 MiB in use; with these,
    /// 25 to 56–68 MiB (and the agent's periodic [`release_free_memory`] takes
    /// back most of the rest). A consumerd of the same soak: 129 MiB at its end
    /// with under 1 MiB in use (three arenas each keeping a free top of ~32 MiB,
    /// which `malloc_trim` leaves alone outside the main arena); with these,
    /// 21 MiB.
    pub const WORKER: Retention = Retention { mmap: 1 << 20, trim: 4 << 20 };

    /// For a consumerd: [`Retention::WORKER`]'s, but blocks are mapped on
    /// their own only from 8 MiB. A direct-mode hit reads its result (the
    /// object, often 1-5 MiB with `-g` in C++) into a buffer of its size: a
    /// mapped one is faulted in and zeroed page by page at every hit, where
    /// a block from the arena is used again warm. `benches/hits.sh 100 5
    /// large` (a 2.8 MB object): ccroute-cc's hit 12.7 ms against ccache's
    /// 11.9 (1.07) with 1 MiB, 10.3 against 11.3 (0.92) with 8 MiB. The
    /// price, `scripts/soak --duration 60`: the consumerds' RSS at the end
    /// 18.2 and 34.5 MiB with 1 MiB, 25.1 and 40.7 with 8 MiB (peaks 30.7
    /// and 44.3, 35.4 and 54.6), flat through the load either way.
    pub const CONSUMERD: Retention = Retention { mmap: 8 << 20, trim: 4 << 20 };

    /// For the scheduler, whose buffers are frames of at most 64 KiB (a
    /// larger payload comes on a stream of its own, read into a buffer of
    /// its size) and whose RSS should come back after a load: 256 KiB and
    /// 128 KiB. Left alone, `cargo bench --bench memory` read it 15 s after
    /// its run at ~22 MiB in 3 runs of 9 (its anonymous memory ~10 MiB even
    /// once every peer had left: its worker threads' arenas kept their free
    /// tops), ~16.2 MiB in the others (idle 11.9); with these thresholds (as
    /// `MALLOC_*_THRESHOLD_` variables), 16.0–16.4 MiB in 4 runs of 4; with
    /// [`Retention::WORKER`]'s, 16.5–17.0 in 3 of 3.
    pub const SCHEDULER: Retention = Retention { mmap: 256 << 10, trim: 128 << 10 };
}

/// Fixes glibc malloc's thresholds (see [`Retention`]), which glibc would
/// otherwise raise as large blocks are freed. Call before any thread
/// starts; nothing with another allocator.
pub fn bound_retained_memory(r: Retention) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let (mmap, trim) = (clamp_to_c_int(r.mmap), clamp_to_c_int(r.trim));
        #[allow(unsafe_code)]
        // SAFETY: mallopt takes no pointer; it sets two of malloc's tunables
        // and is called before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, mmap);
            libc::mallopt(libc::M_TRIM_THRESHOLD, trim);
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = r;
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn clamp_to_c_int(bytes: usize) -> libc::c_int {
    libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX)
}

/// Whether a peer's connection to the scheduler should be replaced by a new
/// one, so that both ends give back what it kept: quinn's reassembly
/// queues and tokio's channel blocks keep, for a connection's life, the
/// size its largest backlog gave them (the module doc). A connection that
/// has carried [`RECYCLE_AFTER_TASKS`] (one that carried fewer cannot have
/// grown much) and has then been quiet for [`RECYCLE_QUIET`] — no task
/// begun, none in flight, nothing else the peer counts as busy — is
/// replaced. Consumerds and agents both do it (the scheduler's memory is
/// mostly its peers' connections); the scheduler itself never closes a
/// quiet peer. Time is an argument.
#[derive(Debug)]
pub struct Recycling {
    /// Tasks begun when the connection was made.
    first: u64,
    /// Tasks begun as last observed.
    last: u64,
    /// Since when nothing was begun and nothing was busy.
    quiet_since: Instant,
}

impl Recycling {
    /// For a connection made at `now`, when `begun` tasks had been begun.
    pub fn new(now: Instant, begun: u64) -> Self {
        Recycling { first: begun, last: begun, quiet_since: now }
    }

    /// Takes tasks begun so far and whether anything is busy at `now`. True
    /// when the connection should be replaced now.
    pub fn observe(&mut self, now: Instant, begun: u64, busy: bool) -> bool {
        if begun != self.last || busy {
            self.last = begun;
            self.quiet_since = now;
            return false;
        }
        begun.saturating_sub(self.first) >= RECYCLE_AFTER_TASKS
            && now.saturating_duration_since(self.quiet_since) >= RECYCLE_QUIET
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    /// Replaced once quiet after a load; not after a small one, not while
    /// anything is busy, and the quiet counts from the last thing that
    /// happened.
    #[test]
    fn a_connection_is_replaced_once_quiet_after_a_load() {
        let t0 = Instant::now();
        let after = |s: u64| t0 + Duration::from_secs(s);
        let mut r = Recycling::new(t0, 100);
        assert!(!r.observe(after(1), 100 + RECYCLE_AFTER_TASKS - 1, false), "tasks were begun just now");
        assert!(!r.observe(after(30), 100 + RECYCLE_AFTER_TASKS - 1, false), "a small load: kept");
        assert!(!r.observe(after(31), 100 + RECYCLE_AFTER_TASKS, true), "busy");
        assert!(!r.observe(after(35), 100 + RECYCLE_AFTER_TASKS, true), "still busy");
        assert!(!r.observe(after(39), 100 + RECYCLE_AFTER_TASKS, false), "quiet for 4 s only");
        assert!(r.observe(after(40), 100 + RECYCLE_AFTER_TASKS, false), "quiet for 5 s after a load");
        let mut fresh = Recycling::new(after(40), 100 + RECYCLE_AFTER_TASKS);
        assert!(!fresh.observe(after(60), 100 + RECYCLE_AFTER_TASKS, false), "the new connection carried nothing");
    }

    #[test]
    fn trims_after_a_quiet_period_that_follows_work_and_as_it_doubles() {
        let t0 = Instant::now();
        let mut d = IdleTrim::new();
        // Work: tasks submitted, some in flight.
        assert!(!d.observe(t0, 10, 4));
        assert!(!d.observe(t0 + SECOND, 20, 0));
        // Quiet from here; not yet long enough.
        assert!(!d.observe(t0 + 2 * SECOND, 20, 0));
        assert!(!d.observe(t0 + 4 * SECOND, 20, 0));
        assert!(d.observe(t0 + 5 * SECOND, 20, 0));
        // Again each time the quiet period has doubled (3 s at 5), up to 100 s.
        let quiet_trims: Vec<u32> = (6..300).filter(|&s| d.observe(t0 + s * SECOND, 20, 0)).collect();
        assert_eq!(quiet_trims, [8, 14, 26, 50, 98]);
        // New work, then quiet again: trims again.
        assert!(!d.observe(t0 + 301 * SECOND, 21, 0));
        assert!(!d.observe(t0 + 302 * SECOND, 21, 0));
        assert!(d.observe(t0 + 305 * SECOND, 21, 0));
    }

    #[test]
    fn an_agent_trims_every_period_while_it_works_and_when_it_stops() {
        let t0 = Instant::now();
        let mut d = IdleTrim::every(10 * SECOND);
        // Busy from t0: one compile always running, new ones now and then.
        let trims: Vec<u64> = (0..35).filter(|&s| d.observe(t0 + s as u32 * SECOND, s / 4, 1)).collect();
        assert_eq!(trims, vec![10, 20, 30]);
        // Work stops at 35: trimmed once the quiet period has lasted, and
        // as it doubles, then never.
        assert!(!d.observe(t0 + 35 * SECOND, 8, 0));
        assert!(!d.observe(t0 + 37 * SECOND, 8, 0));
        assert!(d.observe(t0 + 38 * SECOND, 8, 0));
        let quiet_trims: Vec<u32> = (39..400).filter(|&s| d.observe(t0 + s * SECOND, 8, 0)).collect();
        assert_eq!(quiet_trims, [41, 47, 59, 83, 131]);
        // Work again: its first periodic trim is a period after it began.
        let trims: Vec<u32> = (400..425).filter(|&s| d.observe(t0 + s * SECOND, u64::from(s), 1)).collect();
        assert_eq!(trims, [410, 420]);
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
