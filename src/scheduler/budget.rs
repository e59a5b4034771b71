//! The scheduler's payload budget: how many bytes of sources and objects it
//! holds in memory at once (invariant 5).
//!
//! A connection reserves a payload's wire size as soon as its header says
//! how big it is — before reading a byte of it — and the reservation lives
//! in a [`Reservation`] that travels with the payload and gives the bytes
//! back when dropped. Past the budget a new task is answered "retry locally"
//! at once and its payload is never read; nothing waits for room, so one
//! peer's burst never blocks another's traffic.
//!
//! A consumerd's connection reserves through a [`Share`]: while `n` shares
//! are open, each may hold at most `1/(n+1)` of the budget, so there is always
//! a share free for one more, and one peer — however authenticated, stalling
//! or flooding — cannot take what the others need. A share is never less
//! than [`MIN_SHARE_PARTS`]`⁻¹` of the budget (16 MiB of the default
//! 256 MiB), so a big source still fits with hundreds of consumerds
//! connected; past that many stalling peers, their stall deadlines are what
//! gives the bytes back. (Results from agents
//! reserve from the budget directly: their tasks are waiting for them.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A shared byte budget.
#[derive(Debug, Clone)]
pub struct Budget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    limit: u64,
    used: AtomicU64,
    /// [`Share`]s open now.
    shares: AtomicU64,
}

/// Bytes held against a [`Budget`]; given back on drop.
#[derive(Debug)]
pub struct Reservation {
    inner: Arc<Inner>,
    bytes: u64,
    /// What the [`Share`] it was taken through holds, if any.
    share: Option<Arc<AtomicU64>>,
}

/// A share is at least this part of the budget, however many are open.
pub const MIN_SHARE_PARTS: u64 = 16;

/// One connection's part of a [`Budget`]: at most `1/(n+1)` of it while `n`
/// shares are open (and never less than `1/MIN_SHARE_PARTS`).
#[derive(Debug)]
pub struct Share {
    inner: Arc<Inner>,
    held: Arc<AtomicU64>,
}

impl Budget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Self {
        Budget { inner: Arc::new(Inner { limit, used: AtomicU64::new(0), shares: AtomicU64::new(0) }) }
    }

    /// Reserves `bytes`, or `None` when that would pass the limit.
    pub fn try_reserve(&self, bytes: u64) -> Option<Reservation> {
        self.inner.reserve(bytes).then(|| Reservation { inner: self.inner.clone(), bytes, share: None })
    }

    /// A share for one connection, counted until it is dropped.
    pub fn share(&self) -> Share {
        self.inner.shares.fetch_add(1, Ordering::AcqRel);
        Share { inner: self.inner.clone(), held: Arc::new(AtomicU64::new(0)) }
    }

    /// Bytes reserved now.
    pub fn used(&self) -> u64 {
        self.inner.used.load(Ordering::Relaxed)
    }

    /// The limit.
    pub fn limit(&self) -> u64 {
        self.inner.limit
    }
}

impl Inner {
    /// Adds `bytes` to `used` unless that passes the limit.
    fn reserve(&self, bytes: u64) -> bool {
        take_within(&self.used, bytes, self.limit)
    }
}

/// Adds `bytes` to `counter` unless that passes `cap`.
fn take_within(counter: &AtomicU64, bytes: u64, cap: u64) -> bool {
    let mut now = counter.load(Ordering::Relaxed);
    loop {
        let Some(next) = now.checked_add(bytes).filter(|&n| n <= cap) else { return false };
        match counter.compare_exchange_weak(now, next, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(seen) => now = seen,
        }
    }
}

impl Share {
    /// Reserves `bytes`, or `None` when that would pass this share's part
    /// (`1/(n+1)` of the budget while `n` shares are open) or the budget.
    pub fn try_reserve(&self, bytes: u64) -> Option<Reservation> {
        if !take_within(&self.held, bytes, self.cap()) {
            return None;
        }
        if !self.inner.reserve(bytes) {
            self.held.fetch_sub(bytes, Ordering::AcqRel);
            return None;
        }
        Some(Reservation { inner: self.inner.clone(), bytes, share: Some(self.held.clone()) })
    }

    /// The most this share may hold now.
    pub fn cap(&self) -> u64 {
        let parts = (self.inner.shares.load(Ordering::Acquire) + 1).min(MIN_SHARE_PARTS);
        self.inner.limit / parts
    }

    /// Bytes this share holds now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        // Reservations taken through it may outlive it (an answer still
        // being sent); they give their bytes back to the budget on their own.
        self.inner.shares.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // Pairs with the AcqRel compare-exchange in `take_within`.
        self.inner.used.fetch_sub(self.bytes, Ordering::AcqRel);
        if let Some(held) = &self.share {
            held.fetch_sub(self.bytes, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stay_within_the_limit_and_come_back() {
        let b = Budget::new(100);
        let r1 = b.try_reserve(60).unwrap();
        assert!(b.try_reserve(41).is_none());
        let r2 = b.try_reserve(40).unwrap();
        assert_eq!(b.used(), 100);
        drop(r1);
        assert_eq!(b.used(), 40);
        assert!(b.try_reserve(u64::MAX).is_none(), "no overflow");
        drop(r2);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn each_share_leaves_room_for_one_more() {
        let b = Budget::new(1200);
        let first = b.share();
        assert_eq!(first.cap(), 600, "alone: half");
        let held = first.try_reserve(600).unwrap();
        assert!(first.try_reserve(1).is_none(), "past its half");
        let second = b.share();
        assert_eq!((first.cap(), second.cap()), (400, 400));
        // The first holds past its new part: it takes nothing more until it
        // is back under it, and the second still finds its part free.
        let r2 = second.try_reserve(400).unwrap();
        assert!(second.try_reserve(1).is_none());
        assert_eq!(b.used(), 1000);
        // A newcomer finds what is left.
        let third = b.share();
        assert!(third.try_reserve(200).is_some());
        drop((held, r2));
        assert_eq!((first.held(), second.held(), b.used()), (0, 0, 0));
        // Direct reservations (agents' results) are not capped by shares.
        let direct = b.try_reserve(1200).unwrap();
        assert!(first.try_reserve(1).is_none(), "the budget itself is full");
        assert_eq!(first.held(), 0, "a refused reservation holds nothing");
        drop(direct);
        drop(third);
        assert_eq!(first.cap(), 400);
        let many: Vec<Share> = (0..100).map(|_| b.share()).collect();
        assert_eq!(many[0].cap(), 1200 / MIN_SHARE_PARTS, "a share has a floor");
    }

    #[test]
    fn threads_never_pass_the_limit() {
        let b = Budget::new(1000);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for i in 0..10_000u64 {
                        if let Some(r) = b.try_reserve(i % 300) {
                            assert!(b.used() <= 1000);
                            drop(r);
                        }
                    }
                });
            }
        });
        assert_eq!(b.used(), 0);
    }
}
