//! Per-agent tokens: an atomic semaphore whose limit can move.
//!
//! [`TokenPool`] packs `in_use`, `limit` and a `closed` flag into one
//! `AtomicU64`, so that taking a token reads a consistent (in_use, limit)
//! pair and a single compare-exchange decides it. Giving one back is a
//! compare-exchange too, which refuses to go below zero (a double release is
//! a bug, and must not borrow from the limit's bits). Moving the limit never touches `in_use`: a shrinking limit
//! lets running tasks finish and simply refuses new ones until `in_use` is
//! below it (kubecc B4, B6: tokens came from the sender's CPU count, and a
//! token was locked before any request existed).
//!
//! Every operation is `SeqCst`: the placement protocol (see
//! [`super::router`]) relies on "release a token, then look at the queue" and
//! "push to the queue, then look for a token" being totally ordered.

use crate::sync::{AtomicU64, CachePadded, Ordering};

/// The most tokens any agent may have.
pub const MAX_TOKENS: u32 = 1000;

const IN_USE_MASK: u64 = 0xffff_ffff;
const LIMIT_SHIFT: u32 = 32;
const LIMIT_MASK: u64 = 0x7fff_ffff << LIMIT_SHIFT;
const CLOSED: u64 = 1 << 63;

/// An agent's semaphore. `1 ≤ limit ≤ MAX_TOKENS`; `in_use` may exceed the
/// limit only after the limit shrank below it, and then only until tasks end.
#[derive(Debug)]
pub struct TokenPool {
    /// `closed:1 | limit:31 | in_use:32`. Padded: every placement and every
    /// completion on this agent touches it.
    state: CachePadded<AtomicU64>,
}

/// Clamps a requested limit into `[1, MAX_TOKENS]`.
#[inline]
pub fn clamp_limit(limit: u32) -> u32 {
    limit.clamp(1, MAX_TOKENS)
}

impl TokenPool {
    /// A pool with `limit` (clamped to `[1, MAX_TOKENS]`) tokens, none taken.
    pub fn new(limit: u32) -> Self {
        let limit = u64::from(clamp_limit(limit));
        TokenPool { state: CachePadded::new(AtomicU64::new(limit << LIMIT_SHIFT)) }
    }

    #[inline]
    fn split(s: u64) -> (u32, u32, bool) {
        ((s & IN_USE_MASK) as u32, ((s & LIMIT_MASK) >> LIMIT_SHIFT) as u32, s & CLOSED != 0)
    }

    /// Takes a token if one is free and the pool is open.
    #[inline]
    pub fn try_acquire(&self) -> bool {
        let mut s = self.state.load(Ordering::SeqCst);
        loop {
            let (in_use, limit, closed) = Self::split(s);
            if closed || in_use >= limit {
                return false;
            }
            match self.state.compare_exchange_weak(s, s + 1, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    /// Gives a token back. Releasing with no token held is a bug in the
    /// caller, in debug and release builds alike: the pool is left as it was
    /// (a blind decrement would borrow from the limit's bits), the error is
    /// logged, and `false` comes back.
    #[inline]
    pub fn release(&self) -> bool {
        let mut s = self.state.load(Ordering::SeqCst);
        loop {
            if s & IN_USE_MASK == 0 {
                tracing::error!("a token was released that was not held; the pool is unchanged (a bug)");
                return false;
            }
            match self.state.compare_exchange_weak(s, s - 1, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    /// Sets the limit (clamped to `[1, MAX_TOKENS]`); returns the old one.
    /// Running tasks are never preempted.
    #[inline]
    pub fn set_limit(&self, limit: u32) -> u32 {
        let limit = u64::from(clamp_limit(limit));
        let mut s = self.state.load(Ordering::SeqCst);
        loop {
            let next = (s & !LIMIT_MASK) | (limit << LIMIT_SHIFT);
            match self.state.compare_exchange_weak(s, next, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return Self::split(s).1,
                Err(now) => s = now,
            }
        }
    }

    /// Refuses every further `try_acquire`. Tokens held stay held until released.
    #[inline]
    pub fn close(&self) {
        self.state.fetch_or(CLOSED, Ordering::SeqCst);
    }

    /// Tokens held now.
    #[inline]
    pub fn in_use(&self) -> u32 {
        Self::split(self.state.load(Ordering::SeqCst)).0
    }

    /// The current limit.
    #[inline]
    pub fn limit(&self) -> u32 {
        Self::split(self.state.load(Ordering::SeqCst)).1
    }

    /// `(in_use, limit, has_free)` from one load, for placement decisions.
    #[inline]
    pub fn load(&self) -> (u32, u32, bool) {
        let (in_use, limit, closed) = Self::split(self.state.load(Ordering::SeqCst));
        (in_use, limit, !closed && in_use < limit)
    }

    /// Whether the pool was closed.
    #[inline]
    pub fn is_closed(&self) -> bool {
        Self::split(self.state.load(Ordering::SeqCst)).2
    }
}

#[cfg(all(test, not(ccroute_loom)))]
mod tests {
    use super::*;

    #[test]
    fn limits_are_clamped_b4() {
        // kubecc B4: 0 CPU threads gave an agent that never took work, and
        // more than 1000 deadlocked while filling the token channel.
        assert_eq!(TokenPool::new(0).limit(), 1);
        assert_eq!(TokenPool::new(1_000_000).limit(), MAX_TOKENS);
        let p = TokenPool::new(0);
        assert!(p.try_acquire());
        assert!(!p.try_acquire());
    }

    #[test]
    fn acquire_up_to_the_limit_then_refuse() {
        let p = TokenPool::new(3);
        assert!((0..3).all(|_| p.try_acquire()));
        assert!(!p.try_acquire());
        p.release();
        assert!(p.try_acquire());
        assert_eq!(p.in_use(), 3);
    }

    #[test]
    fn a_release_without_a_token_is_refused_and_changes_nothing() {
        let p = TokenPool::new(3);
        assert!(p.try_acquire());
        assert!(p.release());
        let before = p.load();
        assert!(!p.release(), "no token was held");
        assert_eq!(p.load(), before, "the limit is untouched");
        assert_eq!(p.limit(), 3);
        assert!((0..3).all(|_| p.try_acquire()) && !p.try_acquire());
    }

    #[test]
    fn shrinking_never_preempts_and_growing_frees_at_once() {
        let p = TokenPool::new(4);
        assert!((0..4).all(|_| p.try_acquire()));
        assert_eq!(p.set_limit(2), 4);
        assert_eq!(p.in_use(), 4, "running tasks keep their tokens");
        p.release();
        p.release();
        assert!(!p.try_acquire(), "2 in use at limit 2");
        p.release();
        assert!(p.try_acquire());
        p.set_limit(10);
        assert!(p.try_acquire());
        assert_eq!(p.load(), (3, 10, true));
    }

    #[test]
    fn closed_pools_refuse_but_keep_counting_releases() {
        let p = TokenPool::new(2);
        assert!(p.try_acquire());
        p.close();
        assert!(!p.try_acquire());
        assert!(p.is_closed());
        p.release();
        assert_eq!(p.in_use(), 0);
        assert_eq!(p.limit(), 2);
    }

    #[test]
    fn threads_never_exceed_the_limit() {
        let p = std::sync::Arc::new(TokenPool::new(5));
        let peak = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let p = p.clone();
                let peak = peak.clone();
                std::thread::spawn(move || {
                    for n in 0..20_000u32 {
                        if n % 1000 == 0 {
                            p.set_limit(3 + (i + n / 1000) % 4);
                        }
                        if p.try_acquire() {
                            peak.fetch_max(p.in_use(), std::sync::atomic::Ordering::Relaxed);
                            p.release();
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(p.in_use(), 0, "no token leaked");
        assert!(peak.load(std::sync::atomic::Ordering::Relaxed) <= 6, "never above the largest limit");
    }
}
