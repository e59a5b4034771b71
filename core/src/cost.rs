//! What a unit is expected to cost, learnt from history.
//!
//! A unit is named across builds by a key its daemon computes (toolchain,
//! working directory, source path, arguments without output paths): its
//! observed compile times are kept as a moving average. A unit never seen
//! is predicted from its size — per toolchain, a line `a + b·bytes` fitted
//! to every observation by least squares that slowly forgets — and, before
//! any observation at all, is given [`CostModel::COLD`].
//!
//! A unit whose cost moves a little (the machine warmer, a header edited)
//! follows by the moving average; one whose cost changes by more than
//! [`CostModel::JUMP`] times (a template instantiated somewhere new) takes
//! the new figure at once. The model is bounded: past its capacity the
//! least recently seen of a sample of units is forgotten.
//!
//! Plain data behind `&mut self`: its owner serialises access (the
//! scheduler holds it behind a mutex, off the placement path) and keeps it
//! across restarts with [`CostModel::encode`] and [`CostModel::decode`].

use std::collections::{HashMap, VecDeque};

use ccroute_wire::ToolchainKey;

/// Where a prediction came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// The unit's own history.
    History,
    /// Its size, on its toolchain's fitted line.
    Size,
    /// Nothing known yet: [`CostModel::COLD`].
    Cold,
}

/// A unit's expected cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prediction {
    /// Microseconds of compile.
    pub micros: u64,
    /// What it rests on.
    pub basis: Basis,
}

/// One unit's history.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Unit {
    /// Moving average of its compile time, microseconds.
    micros: f64,
    /// Observations.
    seen: u32,
    /// The model's clock at its last observation.
    last: u64,
}

/// Least squares of `micros` on `bytes`, with old points decaying.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Fit {
    n: f64,
    x: f64,
    y: f64,
    xx: f64,
    xy: f64,
}

impl Fit {
    /// Each new point makes the old ones weigh this much less: about the
    /// last thousand units count.
    const DECAY: f64 = 0.999;

    fn add(&mut self, bytes: f64, micros: f64) {
        let d = Self::DECAY;
        self.n = self.n * d + 1.0;
        self.x = self.x * d + bytes;
        self.y = self.y * d + micros;
        self.xx = self.xx * d + bytes * bytes;
        self.xy = self.xy * d + bytes * micros;
    }

    fn predict(&self, bytes: f64) -> Option<f64> {
        if self.n < 1.0 {
            return None;
        }
        let mean_y = self.y / self.n;
        let var_x = self.xx / self.n - (self.x / self.n).powi(2);
        // Sizes all alike (or one point): the mean is all there is.
        if var_x <= f64::EPSILON * self.xx.max(1.0) {
            return Some(mean_y);
        }
        let slope = (self.xy / self.n - (self.x / self.n) * mean_y) / var_x;
        let v = mean_y + slope * (bytes - self.x / self.n);
        // A line fitted to noise can go below zero for a small unit: never
        // predict less than a tenth of the mean.
        Some(v.max(mean_y * 0.1))
    }
}

/// How good the predictions have been.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Accuracy {
    /// Units known now.
    pub units: usize,
    /// Observations checked against a prediction.
    pub predictions: u64,
    /// Of those, predicted from the unit's own history.
    pub from_history: u64,
    /// Median of |predicted − observed| ÷ observed over the last
    /// [`CostModel::ERRORS`] checked from history; `None` before any.
    pub median_error: Option<f64>,
}

/// The model. See the module docs.
#[derive(Debug, Clone)]
pub struct CostModel {
    units: HashMap<u64, Unit>,
    capacity: usize,
    clock: u64,
    fits: HashMap<ToolchainKey, Fit>,
    predictions: u64,
    from_history: u64,
    /// Relative errors of recent predictions from history.
    errors: VecDeque<f32>,
}

impl CostModel {
    /// The prediction for a unit before anything at all is known: a second.
    pub const COLD: u64 = 1_000_000;
    /// A change of cost by more than this factor replaces the history.
    pub const JUMP: f64 = 3.0;
    /// Weight of a new observation in a unit's moving average.
    pub const WEIGHT: f64 = 0.3;
    /// Recent errors kept for the median.
    pub const ERRORS: usize = 1024;
    /// Units kept by default (~40 bytes each with the map's overhead).
    pub const DEFAULT_CAPACITY: usize = 1 << 18;

    /// Empty, keeping at most `capacity` units (at least 1).
    pub fn new(capacity: usize) -> Self {
        CostModel {
            units: HashMap::new(),
            capacity: capacity.max(1),
            clock: 0,
            fits: HashMap::new(),
            predictions: 0,
            from_history: 0,
            errors: VecDeque::with_capacity(Self::ERRORS),
        }
    }

    /// The expected cost of `unit`, `bytes` long, on `toolchain`.
    pub fn predict(&self, unit: u64, toolchain: ToolchainKey, bytes: u64) -> Prediction {
        if let Some(u) = self.units.get(&unit) {
            return Prediction { micros: u.micros.round() as u64, basis: Basis::History };
        }
        match self.fits.get(&toolchain).and_then(|f| f.predict(bytes as f64)) {
            Some(v) => Prediction { micros: v.round() as u64, basis: Basis::Size },
            None => Prediction { micros: Self::COLD, basis: Basis::Cold },
        }
    }

    /// `unit` took `micros`; `predicted` is what was expected of it when it
    /// was placed (checked against the outcome, for [`Self::accuracy`]).
    pub fn observe(
        &mut self,
        unit: u64,
        toolchain: ToolchainKey,
        bytes: u64,
        micros: u64,
        predicted: Option<Prediction>,
    ) {
        let observed = micros.max(1) as f64;
        if let Some(p) = predicted {
            self.predictions += 1;
            if p.basis == Basis::History {
                self.from_history += 1;
                if self.errors.len() == Self::ERRORS {
                    self.errors.pop_front();
                }
                self.errors.push_back(((p.micros as f64 - observed).abs() / observed) as f32);
            }
        }
        self.fits.entry(toolchain).or_default().add(bytes as f64, observed);
        self.clock += 1;
        let clock = self.clock;
        if let Some(u) = self.units.get_mut(&unit) {
            let ratio = observed / u.micros.max(1.0);
            u.micros = if !(1.0 / Self::JUMP..=Self::JUMP).contains(&ratio) {
                observed
            } else {
                u.micros + Self::WEIGHT * (observed - u.micros)
            };
            u.seen = u.seen.saturating_add(1);
            u.last = clock;
            return;
        }
        if self.units.len() >= self.capacity {
            self.forget_one();
        }
        self.units.insert(unit, Unit { micros: observed, seen: 1, last: clock });
    }

    /// Forgets the least recently seen of a few units (the map's iteration
    /// order stands in for a random sample).
    fn forget_one(&mut self) {
        let oldest = self.units.iter().take(16).min_by_key(|(_, u)| u.last).map(|(k, _)| *k);
        if let Some(k) = oldest {
            self.units.remove(&k);
        }
    }

    /// How good the predictions have been.
    pub fn accuracy(&self) -> Accuracy {
        let mut v: Vec<f32> = self.errors.iter().copied().collect();
        v.sort_by(f32::total_cmp);
        Accuracy {
            units: self.units.len(),
            predictions: self.predictions,
            from_history: self.from_history,
            median_error: v.get(v.len() / 2).map(|e| f64::from(*e)),
        }
    }

    /// Units known now.
    pub fn len(&self) -> usize {
        self.units.len()
    }

    /// Whether no unit is known.
    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }

    const MAGIC: &'static [u8; 8] = b"ccrcost1";

    /// The units and fits, to be kept across restarts (accuracy figures
    /// start again).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.units.len() * 28 + self.fits.len() * 56);
        out.extend_from_slice(Self::MAGIC);
        out.extend_from_slice(&self.clock.to_le_bytes());
        out.extend_from_slice(&(self.units.len() as u64).to_le_bytes());
        for (k, u) in &self.units {
            out.extend_from_slice(&k.to_le_bytes());
            out.extend_from_slice(&u.micros.to_le_bytes());
            out.extend_from_slice(&u.seen.to_le_bytes());
            out.extend_from_slice(&u.last.to_le_bytes());
        }
        out.extend_from_slice(&(self.fits.len() as u64).to_le_bytes());
        for (k, f) in &self.fits {
            out.extend_from_slice(&k.0.to_le_bytes());
            for v in [f.n, f.x, f.y, f.xx, f.xy] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    /// A model from [`Self::encode`]'s bytes, keeping at most `capacity`
    /// units; `None` when they are not such bytes (another version, cut
    /// short, a figure that is not a finite cost).
    pub fn decode(bytes: &[u8], capacity: usize) -> Option<Self> {
        let mut r = Reader(bytes);
        if r.take(8)? != Self::MAGIC {
            return None;
        }
        let mut m = CostModel::new(capacity);
        m.clock = r.u64()?;
        let n = r.u64()?;
        // Each unit is 28 bytes: a count the input cannot hold is a lie.
        if n > (r.0.len() / 28) as u64 {
            return None;
        }
        for _ in 0..n {
            let k = r.u64()?;
            let micros = r.f64()?;
            let seen = u32::from_le_bytes(r.take(4)?.try_into().ok()?);
            let last = r.u64()?;
            if !micros.is_finite() || micros < 0.0 {
                return None;
            }
            if m.units.len() < m.capacity {
                m.units.insert(k, Unit { micros, seen, last });
            }
        }
        let fits = r.u64()?;
        if fits > (r.0.len() / 56) as u64 {
            return None;
        }
        for _ in 0..fits {
            let k = ToolchainKey(u128::from_le_bytes(r.take(16)?.try_into().ok()?));
            let f = Fit { n: r.f64()?, x: r.f64()?, y: r.f64()?, xx: r.f64()?, xy: r.f64()? };
            if ![f.n, f.x, f.y, f.xx, f.xy].iter().all(|v| v.is_finite()) {
                return None;
            }
            m.fits.insert(k, f);
        }
        r.0.is_empty().then_some(m)
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn f64(&mut self) -> Option<f64> {
        Some(f64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TC: ToolchainKey = ToolchainKey(7);

    #[test]
    fn a_cold_model_says_so_then_learns_sizes_then_units() {
        let mut m = CostModel::new(100);
        let p = m.predict(1, TC, 10_000);
        assert_eq!(p, Prediction { micros: CostModel::COLD, basis: Basis::Cold });
        // Units cost 100 µs per KB plus 50 ms.
        for (unit, kb) in [(1u64, 10u64), (2, 20), (3, 40), (4, 80)] {
            let p = m.predict(unit, TC, kb * 1000);
            m.observe(unit, TC, kb * 1000, 50_000 + kb * 100, Some(p));
        }
        let by_size = m.predict(99, TC, 60_000);
        assert_eq!(by_size.basis, Basis::Size);
        assert!((by_size.micros as f64 - 56_000.0).abs() < 500.0, "{by_size:?}");
        // Another toolchain knows nothing yet.
        assert_eq!(m.predict(99, ToolchainKey(8), 60_000).basis, Basis::Cold);
        // A unit seen is predicted from its own history.
        assert_eq!(m.predict(3, TC, 1), Prediction { micros: 54_000, basis: Basis::History });
        let a = m.accuracy();
        assert_eq!((a.units, a.predictions, a.from_history), (4, 4, 0));
    }

    #[test]
    fn a_unit_drifting_is_followed_and_one_that_jumps_is_taken_at_once() {
        let mut m = CostModel::new(100);
        m.observe(1, TC, 1000, 100_000, None);
        // Slowly dearer: the average follows, behind.
        for _ in 0..3 {
            m.observe(1, TC, 1000, 130_000, None);
        }
        let p = m.predict(1, TC, 1000).micros;
        assert!((118_000..130_000).contains(&p), "{p}");
        // Ten times dearer (a header now instantiates a heavy template):
        // the history is replaced, not averaged in.
        m.observe(1, TC, 1000, 1_300_000, None);
        assert_eq!(m.predict(1, TC, 1000).micros, 1_300_000);
        // And back down.
        m.observe(1, TC, 1000, 100_000, None);
        assert_eq!(m.predict(1, TC, 1000).micros, 100_000);
    }

    #[test]
    fn accuracy_is_the_median_relative_error_of_history_predictions() {
        let mut m = CostModel::new(100);
        for unit in 0..10 {
            m.observe(unit, TC, 1000, 100_000, None);
        }
        // Second build: units 0..8 as before, 9 twice as dear.
        for unit in 0..10 {
            let p = m.predict(unit, TC, 1000);
            let took = if unit == 9 { 200_000 } else { 100_000 };
            m.observe(unit, TC, 1000, took, Some(p));
        }
        let a = m.accuracy();
        assert_eq!((a.predictions, a.from_history), (10, 10));
        assert_eq!(a.median_error, Some(0.0));
    }

    #[test]
    fn the_model_is_bounded_and_forgets_the_least_recently_seen() {
        let mut m = CostModel::new(64);
        for unit in 0..10_000u64 {
            m.observe(unit, TC, 1000, 1000 + unit, None);
            // Unit 0 is seen all the time: it stays.
            m.observe(0, TC, 1000, 1000, None);
        }
        assert_eq!(m.len(), 64);
        assert_eq!(m.predict(0, TC, 1000).basis, Basis::History);
        assert_eq!(m.predict(9_999, TC, 1000).basis, Basis::History, "the newest stays");
    }

    #[test]
    fn it_survives_a_round_trip_and_refuses_what_is_not_its_bytes() {
        let mut m = CostModel::new(100);
        for unit in 0..50 {
            m.observe(unit, TC, 1000 * unit, 10_000 + 10 * unit, None);
        }
        let bytes = m.encode();
        let back = CostModel::decode(&bytes, 100).expect("decodes");
        for unit in [0, 17, 49, 1000] {
            assert_eq!(back.predict(unit, TC, 5000), m.predict(unit, TC, 5000));
        }
        // Fewer kept when the capacity is smaller.
        assert_eq!(CostModel::decode(&bytes, 10).map(|m| m.len()), Some(10));
        // Cut short, lengthened, another magic, a count larger than the input.
        assert!(CostModel::decode(&bytes[..bytes.len() - 1], 100).is_none());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(CostModel::decode(&longer, 100).is_none());
        let mut other = bytes.clone();
        other[7] = b'9';
        assert!(CostModel::decode(&other, 100).is_none());
        let mut huge = bytes;
        huge[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(CostModel::decode(&huge, 100).is_none());
        assert!(CostModel::decode(&[], 100).is_none());
    }
}
