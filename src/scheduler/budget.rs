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
//! A consumerd's connection reserves through a [`Share`], which bounds two
//! things while `n` shares are open:
//!
//! - **bytes still arriving** (reserved at the header, not yet read): at most
//!   `1/(n+1)` of the budget, so there is always room for one more, and a
//!   peer that declares payloads and stalls — however authenticated — cannot
//!   take what the others need. Never less than [`MIN_SHARE_PARTS`]`⁻¹` of the
//!   budget (16 MiB of the default 256 MiB), so a big source still fits with
//!   hundreds of consumerds connected; past that many stalling peers, their
//!   stall deadlines are what gives the bytes back (`net::queued_payload_deadline`:
//!   10 s and the payload's size at 1 MiB/s, longer while the peer's other
//!   streams deliver, never past 74 s for a payload of the wire's size).
//! - **all its bytes**, arrived ones included (sources waiting or being
//!   compiled, kept for a requeue): the budget less a [`MIN_SHARE_PARTS`]`⁻¹`
//!   part for each other share and one for a newcomer. A sole consumerd
//!   feeding a big farm may hold 15/16 of the budget (it was held to half,
//!   and a 2,048-token farm sent units back with the budget half empty);
//!   what it holds is in use and comes back as its compiles end.
//!
//! A payload reserved at its header moves from the first count to the second
//! once it is read ([`Reservation::arrived`]). (Results from agents reserve
//! from the budget directly: their tasks are waiting for them.)

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
    /// The share's count of bytes still arriving, while this payload is.
    arriving: Option<Arc<AtomicU64>>,
}

/// A share is at least this part of the budget, however many are open.
pub const MIN_SHARE_PARTS: u64 = 16;

/// One connection's part of a [`Budget`] (the module doc says how much).
#[derive(Debug)]
pub struct Share {
    inner: Arc<Inner>,
    /// Every byte reserved through it.
    held: Arc<AtomicU64>,
    /// Of those, the bytes of payloads still arriving.
    arriving: Arc<AtomicU64>,
}

impl Budget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Self {
        Budget { inner: Arc::new(Inner { limit, used: AtomicU64::new(0), shares: AtomicU64::new(0) }) }
    }

    /// Reserves `bytes`, or `None` when that would pass the limit.
    pub fn try_reserve(&self, bytes: u64) -> Option<Reservation> {
        self.inner.reserve(bytes).then(|| Reservation { inner: self.inner.clone(), bytes, share: None, arriving: None })
    }

    /// A share for one connection, counted until it is dropped.
    pub fn share(&self) -> Share {
        self.inner.shares.fetch_add(1, Ordering::AcqRel);
        Share { inner: self.inner.clone(), held: Arc::new(AtomicU64::new(0)), arriving: Arc::new(AtomicU64::new(0)) }
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
    /// Reserves `bytes` for a payload still to arrive, or `None` when that
    /// would pass this share's part of arriving bytes or of all bytes, or
    /// the budget. Call [`Reservation::arrived`] once it is read.
    pub fn try_reserve(&self, bytes: u64) -> Option<Reservation> {
        let parts = self.parts();
        if !take_within(&self.arriving, bytes, self.inner.limit / parts) {
            return None;
        }
        match self.reserve(bytes, parts) {
            Some(mut r) => {
                r.arriving = Some(self.arriving.clone());
                Some(r)
            }
            None => {
                self.arriving.fetch_sub(bytes, Ordering::AcqRel);
                None
            }
        }
    }

    /// Reserves `bytes` of a payload already read (an inline one), or
    /// `None` when that would pass this share's part of all bytes or the
    /// budget.
    pub fn try_reserve_arrived(&self, bytes: u64) -> Option<Reservation> {
        self.reserve(bytes, self.parts())
    }

    fn reserve(&self, bytes: u64, parts: u64) -> Option<Reservation> {
        if !take_within(&self.held, bytes, self.held_cap(parts)) {
            return None;
        }
        if !self.inner.reserve(bytes) {
            self.held.fetch_sub(bytes, Ordering::AcqRel);
            return None;
        }
        Some(Reservation { inner: self.inner.clone(), bytes, share: Some(self.held.clone()), arriving: None })
    }

    /// `n + 1` while `n` shares are open, at most [`MIN_SHARE_PARTS`].
    fn parts(&self) -> u64 {
        (self.inner.shares.load(Ordering::Acquire) + 1).min(MIN_SHARE_PARTS)
    }

    /// The most this share may hold in all: the budget less a
    /// [`MIN_SHARE_PARTS`]`⁻¹` part for each other share and a newcomer
    /// (`parts - 1` of them), and never less than its part of arriving bytes.
    fn held_cap(&self, parts: u64) -> u64 {
        let part = self.inner.limit / MIN_SHARE_PARTS;
        (self.inner.limit - part * (parts - 1)).max(self.inner.limit / parts)
    }

    /// The most this share may hold now in payloads still arriving.
    pub fn cap(&self) -> u64 {
        self.inner.limit / self.parts()
    }

    /// The most this share may hold now in all.
    pub fn held_limit(&self) -> u64 {
        self.held_cap(self.parts())
    }

    /// Bytes this share holds now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Of those, bytes of payloads still arriving.
    pub fn arriving(&self) -> u64 {
        self.arriving.load(Ordering::Relaxed)
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        // Reservations taken through it may outlive it (an answer still
        // being sent); they give their bytes back to the budget on their own.
        self.inner.shares.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Reservation {
    /// The payload it was taken for has been read: it no longer counts
    /// among its share's bytes still arriving (it still holds its bytes).
    pub fn arrived(&mut self) {
        if let Some(arriving) = self.arriving.take() {
            arriving.fetch_sub(self.bytes, Ordering::AcqRel);
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // Pairs with the AcqRel compare-exchange in `take_within`.
        self.inner.used.fetch_sub(self.bytes, Ordering::AcqRel);
        if let Some(held) = &self.share {
            held.fetch_sub(self.bytes, Ordering::AcqRel);
        }
        self.arrived();
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
    fn each_share_leaves_room_for_one_more_in_bytes_still_arriving() {
        let b = Budget::new(1600);
        let first = b.share();
        assert_eq!(first.cap(), 800, "alone: half");
        let held = first.try_reserve(800).unwrap();
        assert!(first.try_reserve(1).is_none(), "past its half");
        let second = b.share();
        assert_eq!((first.cap(), second.cap()), (533, 533));
        // The first holds past its new part: it takes nothing more until it
        // is back under it, and the second still finds its part free.
        let r2 = second.try_reserve(533).unwrap();
        assert!(second.try_reserve(1).is_none());
        assert_eq!(b.used(), 1333);
        // A newcomer finds what is left.
        let third = b.share();
        assert!(third.try_reserve(200).is_some());
        drop((held, r2));
        assert_eq!((first.held(), first.arriving(), second.held(), b.used()), (0, 0, 0, 0));
        // Direct reservations (agents' results) are not capped by shares.
        let direct = b.try_reserve(1600).unwrap();
        assert!(first.try_reserve(1).is_none(), "the budget itself is full");
        assert_eq!((first.held(), first.arriving()), (0, 0), "a refused reservation holds nothing");
        drop(direct);
        drop(third);
        assert_eq!(first.cap(), 533);
        let many: Vec<Share> = (0..100).map(|_| b.share()).collect();
        assert_eq!(many[0].cap(), 1600 / MIN_SHARE_PARTS, "a share has a floor");
        assert_eq!(many[0].held_limit(), 1600 / MIN_SHARE_PARTS, "and so has its part of all bytes");
    }

    #[test]
    fn arrived_bytes_may_fill_all_but_a_part_for_each_other_share() {
        let b = Budget::new(1600);
        let sole = b.share();
        assert_eq!(sole.held_limit(), 1500, "alone: all but a sixteenth, for a newcomer");
        // Read payloads: they count in all bytes, not in those arriving.
        let mut first = sole.try_reserve(800).unwrap();
        first.arrived();
        assert_eq!((sole.held(), sole.arriving()), (800, 0));
        let second = sole.try_reserve(700).unwrap();
        assert_eq!(sole.arriving(), 700, "a payload not yet read");
        assert!(sole.try_reserve_arrived(1).is_none(), "past all but a sixteenth");
        // A newcomer finds its sixteenth.
        let newcomer = b.share();
        assert_eq!(newcomer.try_reserve_arrived(100).map(|r| r.bytes), Some(100));
        assert_eq!(sole.held_limit(), 1400, "two open: a sixteenth each for the other and a newcomer");
        drop(second);
        assert_eq!((sole.held(), sole.arriving(), b.used()), (800, 0, 800));
        drop(first);
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
