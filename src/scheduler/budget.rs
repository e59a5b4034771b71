//! The scheduler's payload budget: how many bytes of sources and objects it
//! holds in memory at once (invariant 5).
//!
//! A connection reserves a payload's wire size as soon as its header says
//! how big it is — before reading a byte of it — and the reservation lives
//! in a [`Reservation`] that travels with the payload and gives the bytes
//! back when dropped. Past the budget a new task is answered "retry locally"
//! at once and its payload is never read; nothing waits for room, so one
//! peer's burst never blocks another's traffic.

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
}

/// Bytes held against a [`Budget`]; given back on drop.
#[derive(Debug)]
pub struct Reservation {
    inner: Arc<Inner>,
    bytes: u64,
}

impl Budget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Self {
        Budget { inner: Arc::new(Inner { limit, used: AtomicU64::new(0) }) }
    }

    /// Reserves `bytes`, or `None` when that would pass the limit.
    pub fn try_reserve(&self, bytes: u64) -> Option<Reservation> {
        let mut used = self.inner.used.load(Ordering::Relaxed);
        loop {
            let next = used.checked_add(bytes).filter(|&n| n <= self.inner.limit)?;
            match self.inner.used.compare_exchange_weak(used, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Some(Reservation { inner: self.inner.clone(), bytes }),
                Err(now) => used = now,
            }
        }
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

impl Drop for Reservation {
    fn drop(&mut self) {
        // Pairs with the AcqRel compare-exchange in `try_reserve`.
        self.inner.used.fetch_sub(self.bytes, Ordering::AcqRel);
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
