//! Reconnection delays: exponential backoff with jitter, as a daemon that
//! keeps one connection to the scheduler uses between attempts.
//!
//! 0.5 s, then ×√2 per failure up to 5 s, each delay stretched by up to 25 %
//! at random so that a farm's agents do not reconnect in lockstep after the
//! scheduler restarts; back to 0.5 s once a connection lasted 10 s. A
//! connection that worked for a while and was then lost (the scheduler
//! restarted, or a link broke) is dialled again at once: the dial itself
//! knocks every 0.5 s while nothing answers (`super::knock`).

use std::time::Duration;

/// The delay before the next connection attempt.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
}

const FIRST: Duration = Duration::from_millis(500);
const MOST: Duration = Duration::from_secs(5);
const STABLE: Duration = Duration::from_secs(10);
/// A connection lost after working this long is dialled again at once.
const WORKED: Duration = Duration::from_secs(2);

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: FIRST }
    }
}

impl Backoff {
    /// A backoff at its first delay.
    pub fn new() -> Self {
        Self::default()
    }

    /// The delay to wait after a connection that was made and then lost,
    /// having lasted `lasted`: none when it had worked a while, so a
    /// restarted scheduler has its peers back at once.
    pub fn after_lost(&mut self, lasted: Duration) -> Duration {
        if lasted >= WORKED {
            if lasted >= STABLE {
                self.next = FIRST;
            }
            return Duration::ZERO;
        }
        self.after(lasted)
    }

    /// The delay to wait after an attempt whose connection lasted `lasted`
    /// (zero when it never connected), with jitter; grows the next one.
    pub fn after(&mut self, lasted: Duration) -> Duration {
        if lasted >= STABLE {
            self.next = FIRST;
        }
        let jitter = 1.0 + 0.25 * f64::from((crate::net::random_id() % 1000) as u32) / 1000.0;
        let delay = self.next.mul_f64(jitter);
        self.next = self.next.mul_f64(std::f64::consts::SQRT_2).min(MOST);
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_its_cap_and_resets_after_a_stable_connection() {
        let mut b = Backoff::new();
        let first = b.after(Duration::ZERO);
        assert!(first >= FIRST && first <= FIRST.mul_f64(1.25));
        let mut last = first;
        for _ in 0..20 {
            last = b.after(Duration::ZERO);
        }
        assert!(last >= MOST && last <= MOST.mul_f64(1.25), "{last:?}");
        let again = b.after(STABLE);
        assert!(again <= FIRST.mul_f64(1.25), "{again:?}");
    }

    #[test]
    fn a_connection_lost_after_it_worked_is_dialled_at_once() {
        let mut b = Backoff::new();
        for _ in 0..20 {
            b.after(Duration::ZERO);
        }
        assert_eq!(b.after_lost(WORKED), Duration::ZERO);
        assert!(b.after_lost(Duration::ZERO) >= MOST, "a connection lost at once still backs off");
        assert_eq!(b.after_lost(STABLE), Duration::ZERO);
        assert!(b.after(Duration::ZERO) <= FIRST.mul_f64(1.25), "a stable one resets the backoff");
    }
}
