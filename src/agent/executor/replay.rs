//! Replayed compiles: the test toolchain's stand-in for a recorded unit, so
//! that a farm of agents on one machine carries what a real build would
//! without running a compiler (the farm harness, `benches/farm`).
//!
//! A task whose arguments hold `-replay=<micros>,<object bytes>,<object wire
//! bytes>` holds its token for `micros` ÷ the agent's speed factor (asleep:
//! no CPU is burnt) and answers with an object of exactly `object bytes`
//! that compresses to about `object wire bytes`: a [`ReplayStamp`], then
//! pseudo-random bytes up to the wire size, then zeros. The stamp carries
//! the agent's `CLOCK_MONOTONIC` at the start and end of the hold, so the
//! harness, on the same machine, measures dispatch latency from a unit's
//! submission to its start on an agent.

use crate::agent::executor::TaskError;

/// The first bytes of every replayed object.
pub const REPLAY_MAGIC: &[u8; 16] = b"ccroute-replay\n\0";
/// Bytes of the stamp at the head of a replayed object.
pub const STAMP_LEN: usize = 56;

/// What a `-replay=` argument asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayArg {
    /// The unit's recorded compile time at speed 1.0, microseconds.
    pub micros: u64,
    /// The object's size.
    pub object_bytes: u64,
    /// About how many bytes the object compresses to (at most `object_bytes`).
    pub wire_bytes: u64,
}

impl ReplayArg {
    /// Parses the value after `-replay=`.
    pub fn parse(value: &str) -> Option<ReplayArg> {
        let mut it = value.split(',').map(str::parse::<u64>);
        let (Some(Ok(micros)), Some(Ok(object_bytes)), Some(Ok(wire_bytes)), None) =
            (it.next(), it.next(), it.next(), it.next())
        else {
            return None;
        };
        (wire_bytes <= object_bytes).then_some(ReplayArg { micros, object_bytes, wire_bytes })
    }

    /// The argument that asks for this.
    pub fn to_arg(self) -> String {
        format!("-replay={},{},{}", self.micros, self.object_bytes, self.wire_bytes)
    }
}

/// The head of a replayed object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayStamp {
    /// `CLOCK_MONOTONIC` when the agent began holding the token, ns.
    pub started_ns: u64,
    /// When it stopped, ns.
    pub finished_ns: u64,
    /// The time asked for (the recorded time, as the task said), microseconds.
    pub asked_micros: u64,
    /// The hold made of it (÷ the agent's speed), microseconds.
    pub held_micros: u64,
    /// The agent's speed, thousandths.
    pub speed_milli: u64,
}

impl ReplayStamp {
    /// Reads the stamp of a replayed object.
    pub fn read(object: &[u8]) -> Option<ReplayStamp> {
        if object.len() < STAMP_LEN || &object[..16] != REPLAY_MAGIC {
            return None;
        }
        let word = |i: usize| object.get(i..i + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
        Some(ReplayStamp {
            started_ns: word(16)?,
            finished_ns: word(24)?,
            asked_micros: word(32)?,
            held_micros: word(40)?,
            speed_milli: word(48)?,
        })
    }
}

/// The hold for `micros` recorded at speed 1.0 on a host of `speed`.
pub fn hold(micros: u64, speed: f64) -> std::time::Duration {
    let speed = if speed.is_finite() && speed > 0.0 { speed } else { 1.0 };
    std::time::Duration::from_secs_f64(micros as f64 / 1e6 / speed)
}

/// The object of a replayed unit: the stamp, `wire_bytes` less the stamp of
/// pseudo-random bytes (incompressible), zeros to `object_bytes`. An object
/// asked smaller than the stamp is the stamp alone.
pub fn object(arg: ReplayArg, stamp: ReplayStamp) -> Vec<u8> {
    let len = usize::try_from(arg.object_bytes).unwrap_or(usize::MAX).max(STAMP_LEN);
    let mut out = vec![0u8; len];
    out[..16].copy_from_slice(REPLAY_MAGIC);
    out[16..24].copy_from_slice(&stamp.started_ns.to_le_bytes());
    out[24..32].copy_from_slice(&stamp.finished_ns.to_le_bytes());
    out[32..40].copy_from_slice(&stamp.asked_micros.to_le_bytes());
    out[40..48].copy_from_slice(&stamp.held_micros.to_le_bytes());
    out[48..56].copy_from_slice(&stamp.speed_milli.to_le_bytes());
    let noisy = usize::try_from(arg.wire_bytes).unwrap_or(usize::MAX).clamp(STAMP_LEN, len);
    fill_noise(&mut out[STAMP_LEN..noisy], stamp.started_ns | 1);
    out
}

/// Fills `buf` with xorshift64* output seeded by `seed` (not 0).
pub fn fill_noise(buf: &mut [u8], seed: u64) {
    let mut x = seed.max(1);
    for chunk in buf.chunks_mut(8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// Checks a `-replay=` argument against the agent's object limit.
pub(super) fn check(arg: &str, max_object: u64) -> Result<ReplayArg, TaskError> {
    let parsed = ReplayArg::parse(arg).ok_or_else(|| TaskError::BadReplay(arg.to_owned()))?;
    if parsed.object_bytes > max_object {
        return Err(TaskError::ObjectTooLarge { len: parsed.object_bytes, max: max_object });
    }
    Ok(parsed)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn argument_round_trips_and_refuses_nonsense() {
        let a = ReplayArg { micros: 250_000, object_bytes: 40_000, wire_bytes: 9_000 };
        assert_eq!(ReplayArg::parse(a.to_arg().strip_prefix("-replay=").unwrap()), Some(a));
        for bad in ["", "1,2", "1,2,3,4", "x,2,1", "1,2,3", "-1,2,1"] {
            assert_eq!(ReplayArg::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn object_has_the_size_asked_and_about_the_wire_size() {
        let arg = ReplayArg { micros: 1, object_bytes: 100_000, wire_bytes: 20_000 };
        let stamp = ReplayStamp { started_ns: 5, finished_ns: 9, asked_micros: 4, held_micros: 8, speed_milli: 500 };
        let o = object(arg, stamp);
        assert_eq!(o.len(), 100_000);
        assert_eq!(ReplayStamp::read(&o), Some(stamp));
        let (wire, _) = ccroute_wire::payload::compress(&o);
        let ratio = wire.len() as f64 / 20_000.0;
        assert!((0.95..1.1).contains(&ratio), "compressed to {} bytes", wire.len());
        // Smaller than a stamp: the stamp alone.
        let tiny = object(ReplayArg { micros: 1, object_bytes: 3, wire_bytes: 3 }, stamp);
        assert_eq!(tiny.len(), STAMP_LEN);
        assert_eq!(ReplayStamp::read(b"not an object at all, long enough to read"), None);
    }

    #[test]
    fn hold_scales_with_speed() {
        assert_eq!(hold(1_000_000, 1.0), std::time::Duration::from_secs(1));
        assert_eq!(hold(1_000_000, 0.5), std::time::Duration::from_secs(2));
        assert_eq!(hold(1_000_000, 0.0), std::time::Duration::from_secs(1));
    }
}
