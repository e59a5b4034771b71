//! Saying a recurring trouble without flooding the log: [`Every`] lets a
//! message through at once, then at most once per period, with how many
//! times it came since it was last said. For failures that repeat at every
//! unit until someone mends a setup (a sandbox an agent cannot make, a store
//! removed under it, agents that fail units sent to them): each one still
//! goes to the debug log where it happens.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a recurring trouble is said by default.
pub const A_MINUTE: Duration = Duration::from_secs(60);

/// At most once per period; usable in a `static`.
#[derive(Debug)]
pub struct Every {
    period: Duration,
    /// When it was last said, and the times it came since (this one included
    /// once it is said).
    state: Mutex<(Option<Instant>, u64)>,
}

impl Every {
    /// Says at most once per `period`.
    pub const fn new(period: Duration) -> Every {
        Every { period, state: Mutex::new((None, 0)) }
    }

    /// Counts one occurrence now: `Some(n)` when it is to be said, `n` the
    /// occurrences since it was last said, this one included.
    pub fn due(&self) -> Option<u64> {
        self.due_at(Instant::now())
    }

    /// [`Every::due`] at `now`.
    pub fn due_at(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (said_at, unsaid) = &mut *state;
        *unsaid += 1;
        if said_at.is_some_and(|t| now.saturating_duration_since(t) < self.period) {
            return None;
        }
        *said_at = Some(now);
        Some(std::mem::take(unsaid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn said_at_once_then_at_most_once_a_period_with_how_many() {
        let t0 = Instant::now();
        let every = Every::new(A_MINUTE);
        assert_eq!(every.due_at(t0), Some(1), "the first is said at once");
        for s in 1..60 {
            assert_eq!(every.due_at(t0 + Duration::from_secs(s)), None);
        }
        // A minute on: the 59 since, and this one.
        assert_eq!(every.due_at(t0 + Duration::from_secs(60)), Some(60));
        assert_eq!(every.due_at(t0 + Duration::from_secs(61)), None);
        assert_eq!(every.due_at(t0 + Duration::from_secs(200)), Some(2));
    }
}
