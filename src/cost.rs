//! The cost model ([`ccroute_core::cost::CostModel`]) kept in a file.
//!
//! The scheduler gives each task its expected cost when it arrives, and
//! each result that comes back from an agent teaches the model what the
//! unit took. It is kept beside the result cache (`cost-model` in the
//! cache's directory, whether the cache is on or not), written every
//! [`SAVE_EVERY`] when it learnt something and when the scheduler stops,
//! and read back when it starts, so a restarted scheduler knows the farm's
//! units at once. Without a directory it lives in memory only.
//!
//! Agents' learnt speeds are kept the same way, by host name (`agent-speeds`
//! beside the model, a line `SPEED HOST` each, thousandths of the nominal):
//! an agent that comes back, or a restarted scheduler, places by its speed
//! from its first task instead of learning it again.
//!
//! A consumerd keeps a model of its own ([`Costs::open_file`], without
//! speeds), learnt from its results, to send the units it has waiting
//! longest expected first (`consumerd/link.rs`): the scheduler can only
//! order the units that reached it.
//!
//! A unit is named across builds by its toolchain, its working directory,
//! its source path as the consumerd reports it, and its arguments without
//! the names of what it writes (`-o`, `-MF`, `-MT`, `-MQ`): the same
//! command in the next build is the same unit, whatever its contents now.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use ccroute_core::cost::{Accuracy, CostModel, Prediction};
use ccroute_wire::ToolchainKey;

/// How often a model that learnt something is written out.
pub(crate) const SAVE_EVERY: Duration = Duration::from_secs(30);

/// The file the model is kept in, in the cache's directory.
const FILE: &str = "cost-model";

/// The file agents' speeds are kept in, beside the model.
const SPEEDS_FILE: &str = "agent-speeds";

/// Hosts whose speeds are kept at most (the farm's agents, many times over).
const SPEEDS_KEPT: usize = 16_384;

/// What was expected of one task, carried until its result.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expected {
    unit: u64,
    toolchain: ToolchainKey,
    bytes: u64,
    /// The prediction.
    pub(crate) prediction: Prediction,
}

/// The model, its file, and whether it changed since it was written.
#[derive(Debug)]
pub(crate) struct Costs {
    model: Mutex<CostModel>,
    file: Option<PathBuf>,
    /// Where speeds are kept; `None` for a model without them.
    speeds_file: Option<PathBuf>,
    dirty: AtomicBool,
    /// Learnt speeds by host name, thousandths.
    speeds: Mutex<HashMap<String, u32>>,
}

impl Costs {
    /// The model kept in `dir` (read from it when there is one), or one in
    /// memory only.
    pub(crate) fn open(dir: Option<&Path>) -> Costs {
        let file = dir.map(|d| d.join(FILE));
        let speeds_file = file.as_ref().map(|f| f.with_file_name(SPEEDS_FILE));
        Costs::open_file(file, speeds_file)
    }

    /// The model kept in `file` (read from it when there is one) and, with
    /// `speeds_file`, agents' speeds there; in memory only without `file`.
    pub(crate) fn open_file(file: Option<PathBuf>, speeds_file: Option<PathBuf>) -> Costs {
        let model = match &file {
            None => CostModel::new(CostModel::DEFAULT_CAPACITY),
            Some(f) => match std::fs::read(f) {
                Ok(bytes) => match CostModel::decode(&bytes, CostModel::DEFAULT_CAPACITY) {
                    Some(m) => {
                        tracing::info!(units = m.len(), file = %f.display(), "cost model read");
                        m
                    }
                    None => {
                        tracing::warn!(file = %f.display(), "the cost model's file is not one this version reads; starting afresh (it is replaced)");
                        CostModel::new(CostModel::DEFAULT_CAPACITY)
                    }
                },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => CostModel::new(CostModel::DEFAULT_CAPACITY),
                Err(e) => {
                    tracing::warn!(file = %f.display(), error = %e, "cannot read the cost model; starting afresh");
                    CostModel::new(CostModel::DEFAULT_CAPACITY)
                }
            },
        };
        let speeds = speeds_file.as_deref().map(read_speeds).unwrap_or_default();
        Costs { model: Mutex::new(model), file, speeds_file, dirty: AtomicBool::new(false), speeds: Mutex::new(speeds) }
    }

    /// The speed last learnt for `host`, thousandths.
    pub(crate) fn speed_of(&self, host: &str) -> Option<u32> {
        self.speeds.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(host).copied()
    }

    /// `host`'s speed was learnt to be `milli`.
    pub(crate) fn learnt_speed(&self, host: &str, milli: u32) {
        let mut speeds = self.speeds.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if speeds.len() >= SPEEDS_KEPT && !speeds.contains_key(host) {
            return;
        }
        speeds.insert(host.to_owned(), milli);
        self.dirty.store(true, Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CostModel> {
        self.model.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What a task of `toolchain` arriving with the encoded `spec` and a
    /// payload of `bytes` is expected to cost; `None` when its spec does
    /// not decode (the agent will say so).
    pub(crate) fn expect(&self, toolchain: ToolchainKey, spec: &[u8], bytes: usize) -> Option<Expected> {
        let spec = ccroute_wire::codec::decode_spec(spec).ok()?;
        Some(self.expect_spec(toolchain, &spec, bytes))
    }

    /// As [`Costs::expect`], for a spec not encoded yet.
    pub(crate) fn expect_spec(&self, toolchain: ToolchainKey, spec: &ccroute_wire::TaskSpec, bytes: usize) -> Expected {
        let unit = unit_key(toolchain, spec.cwd.as_deref().unwrap_or(""), &spec.input_path, &spec.args);
        let bytes = bytes as u64;
        let prediction = self.lock().predict(unit, toolchain, bytes);
        Expected { unit, toolchain, bytes, prediction }
    }

    /// The task `e` was expected of took `took` on its agent.
    pub(crate) fn took(&self, e: &Expected, took: Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.lock().observe(e.unit, e.toolchain, e.bytes, micros, Some(e.prediction));
        self.dirty.store(true, Ordering::Relaxed);
    }

    /// What the unit of `e` is expected to cost now: its history may have
    /// begun or moved since `e` was made.
    pub(crate) fn now(&self, e: &Expected) -> Prediction {
        self.lock().predict(e.unit, e.toolchain, e.bytes)
    }

    /// How good the predictions have been.
    pub(crate) fn accuracy(&self) -> Accuracy {
        self.lock().accuracy()
    }

    /// Writes the model to its file if it learnt something since the last
    /// time (a temporary file renamed over it: a crash leaves the old one).
    pub(crate) fn save(&self) {
        let Some(file) = &self.file else { return };
        if !self.dirty.swap(false, Ordering::Relaxed) {
            return;
        }
        let bytes = self.lock().encode();
        let speeds: String = {
            let speeds = self.speeds.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            speeds.iter().map(|(host, milli)| format!("{milli} {host}\n")).collect()
        };
        let written = write_atomically(file, &bytes).and_then(|()| match &self.speeds_file {
            Some(f) => write_atomically(f, speeds.as_bytes()),
            None => Ok(()),
        });
        if let Err(e) = written {
            self.dirty.store(true, Ordering::Relaxed);
            tracing::warn!(file = %file.display(), error = %e, "cannot write the cost model (a restart will relearn it)");
        }
    }
}

/// Writes `file` through a temporary file renamed over it.
fn write_atomically(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = file.with_extension("tmp");
    file.parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&tmp, bytes))
        .and_then(|()| std::fs::rename(&tmp, file))
}

/// Agents' speeds from `file`; lines that do not parse are skipped (host
/// names hold no newline: they come from a hello, one line each here).
fn read_speeds(file: &Path) -> HashMap<String, u32> {
    let Ok(text) = std::fs::read_to_string(file) else { return HashMap::new() };
    text.lines()
        .filter_map(|l| {
            let (milli, host) = l.split_once(' ')?;
            let milli = milli.parse::<u32>().ok()?.clamp(ccroute_core::MIN_SPEED, ccroute_core::MAX_SPEED);
            Some((host.to_owned(), milli))
        })
        .take(SPEEDS_KEPT)
        .collect()
}

/// Options naming what a compile writes: not part of a unit's name.
const OUTPUT_OPTIONS: [&str; 4] = ["-o", "-MF", "-MT", "-MQ"];

/// A unit's name across builds. See the module docs.
pub(crate) fn unit_key(toolchain: ToolchainKey, cwd: &str, input: &str, args: &[String]) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(b"ccroute unit 1\0");
    h.update(&toolchain.0.to_le_bytes());
    for part in [cwd, input] {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    let mut skip_next = false;
    for a in args {
        if std::mem::take(&mut skip_next) {
            continue;
        }
        if OUTPUT_OPTIONS.contains(&a.as_str()) {
            skip_next = true;
            continue;
        }
        if OUTPUT_OPTIONS.iter().any(|p| a.starts_with(p)) {
            continue;
        }
        h.update(&(a.len() as u64).to_le_bytes());
        h.update(a.as_bytes());
    }
    let d = h.finalize();
    u64::from_le_bytes(d.as_bytes()[..8].try_into().unwrap_or([0; 8]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_unit_is_the_same_whatever_it_writes_and_another_for_other_flags() {
        let tc = ToolchainKey(1);
        let key = |a: &[&str]| unit_key(tc, "/src", "a.c", &args(a));
        let base = key(&["-O2", "-c", "-o", "out/a.o", "-MF", "out/a.d"]);
        assert_eq!(base, key(&["-O2", "-c", "-o", "elsewhere/a.o", "-MF", "x.d"]));
        assert_eq!(base, key(&["-O2", "-c", "-oout/a.o", "-MFout/a.d"]));
        assert_ne!(base, key(&["-O0", "-c", "-o", "out/a.o"]));
        assert_ne!(base, unit_key(tc, "/src", "b.c", &args(&["-O2", "-c"])));
        assert_ne!(base, unit_key(tc, "/other", "a.c", &args(&["-O2", "-c"])));
        assert_ne!(base, unit_key(ToolchainKey(2), "/src", "a.c", &args(&["-O2", "-c"])));
        // Boundaries count: "ab" + "c" is not "a" + "bc".
        assert_ne!(unit_key(tc, "ab", "c", &[]), unit_key(tc, "a", "bc", &[]));
    }

    /// `cc -O2 a.c`.
    fn a_c() -> ccroute_wire::TaskSpec {
        ccroute_wire::TaskSpec { args: args(&["-O2"]), input_path: "a.c".into(), cwd: None, env: vec![], inputs: None }
    }

    #[test]
    fn the_model_is_kept_across_a_restart_in_the_cache_directory() {
        let dir = tempfile::tempdir().unwrap();
        let spec = ccroute_wire::codec::encode_spec(&a_c());
        let tc = ToolchainKey(9);
        let costs = Costs::open(Some(dir.path()));
        let e = costs.expect(tc, &spec, 1000).unwrap();
        assert_eq!(e.prediction.basis, ccroute_core::cost::Basis::Cold);
        costs.took(&e, Duration::from_millis(250));
        costs.save();
        drop(costs);
        let again = Costs::open(Some(dir.path()));
        let e = again.expect(tc, &spec, 1000).unwrap();
        assert_eq!(e.prediction, Prediction { micros: 250_000, basis: ccroute_core::cost::Basis::History });
        // A file of something else is replaced, not trusted.
        std::fs::write(dir.path().join(FILE), b"not a model").unwrap();
        let fresh = Costs::open(Some(dir.path()));
        assert_eq!(fresh.expect(tc, &spec, 1000).unwrap().prediction.basis, ccroute_core::cost::Basis::Cold);
    }

    #[test]
    fn a_consumerds_model_is_kept_in_its_own_file_beside_the_schedulers() {
        let dir = tempfile::tempdir().unwrap();
        let spec = a_c();
        let tc = ToolchainKey(9);
        let scheduler = Costs::open(Some(dir.path()));
        scheduler.learnt_speed("host", 700);
        scheduler.took(&scheduler.expect_spec(tc, &spec, 1000), Duration::from_millis(90));
        scheduler.save();
        let file = dir.path().join("consumerd-cost-model");
        let consumerd = Costs::open_file(Some(file.clone()), None);
        consumerd.took(&consumerd.expect_spec(tc, &spec, 1000), Duration::from_millis(250));
        consumerd.save();
        let again = Costs::open_file(Some(file), None);
        assert_eq!(again.expect_spec(tc, &spec, 1000).prediction.micros, 250_000);
        // The scheduler's model and speeds are as it left them.
        let scheduler = Costs::open(Some(dir.path()));
        assert_eq!(scheduler.expect_spec(tc, &spec, 1000).prediction.micros, 90_000);
        assert_eq!(scheduler.speed_of("host"), Some(700));
    }

    #[test]
    fn agents_speeds_are_kept_by_host_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let costs = Costs::open(Some(dir.path()));
        assert_eq!(costs.speed_of("slow-host"), None);
        costs.learnt_speed("slow-host", 400);
        costs.learnt_speed("fast host", 2500);
        costs.save();
        drop(costs);
        let again = Costs::open(Some(dir.path()));
        assert_eq!((again.speed_of("slow-host"), again.speed_of("fast host")), (Some(400), Some(2500)));
        // Lines that do not parse are skipped, speeds out of range clamped.
        std::fs::write(dir.path().join(SPEEDS_FILE), "x y\n999999 quick\n7\n").unwrap();
        let read = Costs::open(Some(dir.path()));
        assert_eq!(read.speed_of("quick"), Some(ccroute_core::MAX_SPEED));
        assert_eq!(read.speed_of("y"), None);
        // Without a directory they live in memory only.
        let memory = Costs::open(None);
        memory.learnt_speed("h", 700);
        memory.save();
        assert_eq!(memory.speed_of("h"), Some(700));
    }
}
