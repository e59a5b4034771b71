//! CPU sampler: one [`CpuSample`] of the agent's cgroup per second.
//!
//! [`CpuSampler::new`] finds the cgroup that governs this process's CPU
//! (see [`ProcessCgroups`]) and reads, on every [`CpuSampler::sample`]:
//!
//! - cgroup v2: `cpu.stat` (`usage_usec`, `nr_periods`, `nr_throttled`,
//!   `throttled_usec`), `cpu.max` and `cpu.pressure`;
//! - cgroup v1: the `cpu` controller's `cpu.stat` (`nr_periods`,
//!   `nr_throttled`, `throttled_time`), `cpu.cfs_quota_us` and
//!   `cpu.cfs_period_us`, and usage from `cpuacct.usage`;
//! - in the root cgroup, where the files describe the whole host rather than
//!   the agent, or when they cannot be read: usage from `getrusage` of the
//!   process and its reaped children, no quota, no throttling.
//!
//! PSI comes from the cgroup's `cpu.pressure` on v2, else from
//! `/proc/pressure/cpu`. [`CpuSampler::for_cgroup`] samples another cgroup,
//! e.g. a [`CpuLimitedCgroup`](super::cgroup::CpuLimitedCgroup).
//!
//! The file parsers are pure functions over `&str`. A file that cannot be
//! read or parsed yields zeros (or `None`) for its fields and one warning
//! until it is readable again. Left out: per-CPU usage, `cpu.weight` /
//! `cpu.shares`, the PSI `full` line and averages.

use std::fs;
use std::path::{Path, PathBuf};

use ccroute_wire::CpuSample;

use super::cgroup::{CpuCgroup, ProcessCgroups};

/// Host-wide CPU pressure, when the kernel has PSI.
const HOST_PRESSURE: &str = "/proc/pressure/cpu";

/// Produces [`CpuSample`]s for one cgroup (or, failing that, this process).
#[derive(Debug)]
pub struct CpuSampler {
    source: Source,
    pressure: Option<PathBuf>,
    failing: FailingFiles,
}

/// Where usage and throttling come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    V1 {
        cpu: PathBuf,
        cpuacct: Option<PathBuf>,
        /// No usable `cpuacct`: count this process's own usage instead.
        usage_from_rusage: bool,
    },
    V2 {
        dir: PathBuf,
        /// `cpu.max` exists only where the parent enabled the cpu controller.
        has_max: bool,
    },
    Process,
}

impl CpuSampler {
    /// A sampler for this process's own CPU cgroup, detected from
    /// `/proc/self/cgroup` and `/proc/self/mountinfo`.
    pub fn new() -> Self {
        let found = ProcessCgroups::current().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot find this process's cgroup; sampling process usage only");
            ProcessCgroups::default()
        });
        let source = own_source(&found);
        let pressure = match found.unified.as_ref() {
            Some(u) if !u.is_root => readable_or_host(u.dir.join("cpu.pressure")),
            _ => readable_or_host(PathBuf::new()),
        };
        tracing::debug!(?source, ?pressure, "cpu sampler");
        CpuSampler { source, pressure, failing: FailingFiles::default() }
    }

    /// A sampler for the given cgroup; its usage is the cgroup's, never this
    /// process's, so v1 without `cpuacct` reports zero usage.
    pub fn for_cgroup(cgroup: CpuCgroup) -> Self {
        let (source, pressure) = match cgroup {
            CpuCgroup::V1 { cpu, cpuacct } => {
                (Source::V1 { cpu, cpuacct, usage_from_rusage: false }, readable_or_host(PathBuf::new()))
            }
            CpuCgroup::V2 { dir } => {
                let pressure = readable_or_host(dir.join("cpu.pressure"));
                (Source::V2 { has_max: dir.join("cpu.max").exists(), dir }, pressure)
            }
        };
        CpuSampler { source, pressure, failing: FailingFiles::default() }
    }

    /// The cgroup being sampled; `None` when usage is this process's own
    /// (`getrusage`).
    pub fn cgroup(&self) -> Option<CpuCgroup> {
        match &self.source {
            Source::V1 { cpu, cpuacct, .. } => Some(CpuCgroup::V1 { cpu: cpu.clone(), cpuacct: cpuacct.clone() }),
            Source::V2 { dir, .. } => Some(CpuCgroup::V2 { dir: dir.clone() }),
            Source::Process => None,
        }
    }

    /// Takes one sample; `tasks_running` is passed through. Never fails: what
    /// cannot be read is reported as zero or `None`.
    pub fn sample(&mut self, tasks_running: u32, tasks_started: u64) -> CpuSample {
        let Self { source, pressure, failing } = self;
        let mut s = CpuSample {
            wall_ns: crate::host::monotonic_ns(),
            online_cpus: sys::online_cpus(),
            tasks_running,
            tasks_started,
            ..CpuSample::default()
        };
        match source {
            Source::V1 { cpu, cpuacct, usage_from_rusage } => {
                if let Some(st) = failing.read(File::Stat, &cpu.join("cpu.stat"), parse_v1_cpu_stat) {
                    s.nr_periods = st.nr_periods;
                    s.nr_throttled = st.nr_throttled;
                    s.throttled_ns = st.throttled_ns;
                }
                s.quota_us = failing.read(File::Quota, &cpu.join("cpu.cfs_quota_us"), parse_cfs_quota).flatten();
                s.period_us = failing.read(File::Period, &cpu.join("cpu.cfs_period_us"), parse_u64).unwrap_or(0);
                s.usage_ns = match cpuacct {
                    Some(acct) => failing.read(File::Usage, &acct.join("cpuacct.usage"), parse_u64).unwrap_or(0),
                    None if *usage_from_rusage => sys::process_usage_ns(),
                    None => 0,
                };
            }
            Source::V2 { dir, has_max } => {
                if let Some(st) = failing.read(File::Stat, &dir.join("cpu.stat"), parse_v2_cpu_stat) {
                    s.usage_ns = st.usage_usec.saturating_mul(1000);
                    s.nr_periods = st.nr_periods;
                    s.nr_throttled = st.nr_throttled;
                    s.throttled_ns = st.throttled_usec.saturating_mul(1000);
                }
                if *has_max {
                    if let Some(max) = failing.read(File::Max, &dir.join("cpu.max"), parse_cpu_max) {
                        s.quota_us = max.quota_us;
                        s.period_us = max.period_us;
                    }
                }
            }
            Source::Process => s.usage_ns = sys::process_usage_ns(),
        }
        if let Some(p) = pressure {
            s.pressure_some_us = failing.read(File::Pressure, p, parse_pressure_some_total);
        }
        s
    }
}

impl Default for CpuSampler {
    fn default() -> Self {
        Self::new()
    }
}

/// Picks this process's source: a cgroup only where its files describe the
/// agent rather than the whole host.
fn own_source(found: &ProcessCgroups) -> Source {
    if let Some(cpu) = &found.v1_cpu {
        // A root that carries a quota is a container's namespace root.
        let limited = || read_parsed(&cpu.dir.join("cpu.cfs_quota_us"), parse_cfs_quota).flatten().is_some();
        if (!cpu.is_root || limited()) && read_parsed(&cpu.dir.join("cpu.stat"), parse_v1_cpu_stat).is_some() {
            let cpuacct = found
                .v1_cpuacct
                .as_ref()
                .filter(|a| a.dir == cpu.dir || !a.is_root)
                .filter(|a| read_parsed(&a.dir.join("cpuacct.usage"), parse_u64).is_some())
                .map(|a| a.dir.clone());
            return Source::V1 { usage_from_rusage: cpuacct.is_none(), cpu: cpu.dir.clone(), cpuacct };
        }
    }
    if let Some(u) = &found.unified {
        let max = u.dir.join("cpu.max");
        let limited = || read_parsed(&max, parse_cpu_max).is_some_and(|m| m.quota_us.is_some());
        if (!u.is_root || limited()) && read_parsed(&u.dir.join("cpu.stat"), parse_v2_cpu_stat).is_some() {
            return Source::V2 { has_max: max.exists(), dir: u.dir.clone() };
        }
    }
    Source::Process
}

/// `path` if it holds PSI data, else the host's pressure file if that does.
fn readable_or_host(path: PathBuf) -> Option<PathBuf> {
    [path, PathBuf::from(HOST_PRESSURE)]
        .into_iter()
        .find(|p| !p.as_os_str().is_empty() && read_parsed(p, parse_pressure_some_total).is_some())
}

fn read_parsed<T>(path: &Path, parse: fn(&str) -> Option<T>) -> Option<T> {
    fs::read_to_string(path).ok().as_deref().and_then(parse)
}

/// The files a sampler reads, one bit each in [`FailingFiles`].
#[derive(Debug, Clone, Copy)]
enum File {
    Stat,
    Usage,
    Quota,
    Period,
    Max,
    Pressure,
}

/// Which files are failing now, so that each outage is logged once rather
/// than once per sample.
#[derive(Debug, Default)]
struct FailingFiles(u8);

impl FailingFiles {
    /// Reads and parses `path`, logging the first failure of an outage.
    fn read<T>(&mut self, file: File, path: &Path, parse: fn(&str) -> Option<T>) -> Option<T> {
        let outcome = match fs::read_to_string(path) {
            Ok(text) => parse(&text).ok_or_else(|| format!("unexpected contents {:?}", truncate(&text, 80))),
            Err(e) => Err(e.to_string()),
        };
        match outcome {
            Ok(v) => {
                if self.recovered(file) {
                    tracing::info!(file = %path.display(), "cpu sample: file readable again");
                }
                Some(v)
            }
            Err(error) => {
                if self.failed(file) {
                    tracing::warn!(file = %path.display(), %error, "cpu sample: cannot read, reporting zeros");
                }
                None
            }
        }
    }

    /// Marks `file` as failing; true when it was not failing before.
    fn failed(&mut self, file: File) -> bool {
        let bit = 1u8 << file as u8;
        let first = self.0 & bit == 0;
        self.0 |= bit;
        first
    }

    /// Marks `file` as fine; true when it was failing before.
    fn recovered(&mut self, file: File) -> bool {
        let bit = 1u8 << file as u8;
        let was = self.0 & bit != 0;
        self.0 &= !bit;
        was
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// The counters of a v1 `cpu.stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V1CpuStat {
    /// Enforcement periods elapsed.
    pub nr_periods: u64,
    /// Periods in which the group was throttled.
    pub nr_throttled: u64,
    /// Total time throttled, nanoseconds.
    pub throttled_ns: u64,
}

/// The counters of a v2 `cpu.stat`; the throttling ones are zero where the
/// cpu controller is not enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V2CpuStat {
    /// CPU time used, microseconds.
    pub usage_usec: u64,
    /// Enforcement periods elapsed.
    pub nr_periods: u64,
    /// Periods in which the group was throttled.
    pub nr_throttled: u64,
    /// Total time throttled, microseconds.
    pub throttled_usec: u64,
}

/// A CFS bandwidth limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CfsLimit {
    /// Microseconds per period; `None` when unlimited.
    pub quota_us: Option<u64>,
    /// Period, microseconds.
    pub period_us: u64,
}

/// The value of `key` in a flat-keyed file of `key value` lines; lines that
/// are not such a pair are ignored.
fn flat_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut it = line.split_whitespace();
        match (it.next(), it.next(), it.next()) {
            (Some(k), Some(v), None) if k == key => v.parse().ok(),
            _ => None,
        }
    })
}

/// Parses a v1 `cpu.stat`; `None` unless all three counters are there.
pub fn parse_v1_cpu_stat(text: &str) -> Option<V1CpuStat> {
    Some(V1CpuStat {
        nr_periods: flat_value(text, "nr_periods")?,
        nr_throttled: flat_value(text, "nr_throttled")?,
        throttled_ns: flat_value(text, "throttled_time")?,
    })
}

/// Parses a v2 `cpu.stat`; `None` without `usage_usec`.
pub fn parse_v2_cpu_stat(text: &str) -> Option<V2CpuStat> {
    Some(V2CpuStat {
        usage_usec: flat_value(text, "usage_usec")?,
        nr_periods: flat_value(text, "nr_periods").unwrap_or(0),
        nr_throttled: flat_value(text, "nr_throttled").unwrap_or(0),
        throttled_usec: flat_value(text, "throttled_usec").unwrap_or(0),
    })
}

/// Parses a v1 `cpu.cfs_quota_us`: `Some(None)` for unlimited (negative),
/// `Some(Some(us))` for a quota, `None` for anything else.
pub fn parse_cfs_quota(text: &str) -> Option<Option<u64>> {
    let v: i64 = text.trim().parse().ok()?;
    match v {
        ..0 => Some(None),
        0 => None,
        us => Some(u64::try_from(us).ok()),
    }
}

/// Parses a v2 `cpu.max`: `max 100000` or `50000 100000` (a lone `max`
/// means the default period).
pub fn parse_cpu_max(text: &str) -> Option<CfsLimit> {
    let mut it = text.split_whitespace();
    let quota = it.next()?;
    let period_us = match it.next() {
        Some(p) => p.parse().ok().filter(|&p| p > 0)?,
        None => 100_000,
    };
    if it.next().is_some() {
        return None;
    }
    let quota_us = match quota {
        "max" => None,
        q => Some(q.parse().ok().filter(|&q| q > 0)?),
    };
    Some(CfsLimit { quota_us, period_us })
}

/// Parses a file that holds one unsigned number (`cpuacct.usage`,
/// `cpu.cfs_period_us`).
pub fn parse_u64(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// The `total=` of the `some` line of a PSI file, microseconds.
pub fn parse_pressure_some_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.split_whitespace().next() == Some("some"))?;
    line.split_whitespace().find_map(|kv| kv.strip_prefix("total=")).and_then(|v| v.parse().ok())
}

/// The few libc calls the sampler needs.
#[allow(unsafe_code)]
mod sys {
    /// CPUs online on the host.
    pub(super) fn online_cpus() -> u32 {
        // SAFETY: sysconf only reads a system value; it touches no memory of ours.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        match u32::try_from(n) {
            Ok(n) if n > 0 => n,
            _ => crate::host::online_cpus(),
        }
    }

    /// User + system time of this process and of its reaped children (whose
    /// time lands when they are waited for), nanoseconds.
    pub(super) fn process_usage_ns() -> u64 {
        rusage_ns(libc::RUSAGE_SELF).saturating_add(rusage_ns(libc::RUSAGE_CHILDREN))
    }

    fn rusage_ns(who: libc::c_int) -> u64 {
        let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: the pointer is valid for writes of one `rusage`.
        let rc = unsafe { libc::getrusage(who, ru.as_mut_ptr()) };
        if rc != 0 {
            return 0;
        }
        // SAFETY: zero-initialised, then filled by the kernel; every field is
        // a plain integer, so any bit pattern is a valid `rusage`.
        let ru = unsafe { ru.assume_init() };
        timeval_ns(ru.ru_utime).saturating_add(timeval_ns(ru.ru_stime))
    }

    fn timeval_ns(tv: libc::timeval) -> u64 {
        let secs = u64::try_from(tv.tv_sec).unwrap_or(0);
        let micros = u64::try_from(tv.tv_usec).unwrap_or(0);
        secs.saturating_mul(1_000_000_000).saturating_add(micros.saturating_mul(1000))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use std::hint::black_box;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::agent::cgroup::CgroupDir;

    #[test]
    fn v1_cpu_stat() {
        let text = "nr_periods 120\nnr_throttled 7\nthrottled_time 350000000\nnr_bursts 0\nburst_time 0\n";
        assert_eq!(
            parse_v1_cpu_stat(text),
            Some(V1CpuStat { nr_periods: 120, nr_throttled: 7, throttled_ns: 350_000_000 })
        );
        assert_eq!(parse_v1_cpu_stat("nr_periods 1\nnr_throttled 1\n"), None);
        assert_eq!(parse_v1_cpu_stat("nr_periods x\nnr_throttled 1\nthrottled_time 1\n"), None);
    }

    #[test]
    fn v2_cpu_stat_with_and_without_the_cpu_controller() {
        let full = "usage_usec 8000\nuser_usec 5000\nsystem_usec 3000\nnr_periods 10\nnr_throttled 4\n\
                    throttled_usec 2500\nnr_bursts 0\nburst_usec 0\n";
        assert_eq!(
            parse_v2_cpu_stat(full),
            Some(V2CpuStat { usage_usec: 8000, nr_periods: 10, nr_throttled: 4, throttled_usec: 2500 })
        );
        let basic = "usage_usec 108086993\nuser_usec 73526641\nsystem_usec 34560352\nnice_usec 0\n";
        assert_eq!(
            parse_v2_cpu_stat(basic),
            Some(V2CpuStat { usage_usec: 108_086_993, nr_periods: 0, nr_throttled: 0, throttled_usec: 0 })
        );
        assert_eq!(parse_v2_cpu_stat("user_usec 5\n"), None);
    }

    #[test]
    fn quota_period_and_cpu_max() {
        assert_eq!(parse_cfs_quota("-1\n"), Some(None));
        assert_eq!(parse_cfs_quota("50000\n"), Some(Some(50_000)));
        assert_eq!(parse_u64("100000\n"), Some(100_000));
        assert_eq!(parse_cpu_max("max 100000\n"), Some(CfsLimit { quota_us: None, period_us: 100_000 }));
        assert_eq!(parse_cpu_max("50000 100000\n"), Some(CfsLimit { quota_us: Some(50_000), period_us: 100_000 }));
        assert_eq!(parse_cpu_max("max\n"), Some(CfsLimit { quota_us: None, period_us: 100_000 }));
    }

    #[test]
    fn pressure_some_total() {
        let text =
            "some avg10=3.26 avg60=1.23 avg300=0.85 total=9021074\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_pressure_some_total(text), Some(9_021_074));
        assert_eq!(parse_pressure_some_total("full avg10=0.00 total=5\n"), None);
    }

    #[test]
    fn garbage_parses_to_none() {
        let garbage = ["", "\n", "abc", "-", "1 2 3", "\u{fffd}\u{0}", "max max", "99999999999999999999999", "0"];
        for g in garbage {
            assert_eq!(parse_v1_cpu_stat(g), None, "{g:?}");
            assert_eq!(parse_v2_cpu_stat(g), None, "{g:?}");
            assert_eq!(parse_pressure_some_total(g), None, "{g:?}");
            assert_eq!(parse_cfs_quota(g), None, "{g:?}");
        }
        for g in ["", "abc", "max -5", "0 100000", "50000 0", "50000 100000 7", "-3 100000"] {
            assert_eq!(parse_cpu_max(g), None, "{g:?}");
        }
        assert_eq!(parse_u64("-1"), None);
        assert_eq!(parse_pressure_some_total("some avg10=1 total=abc"), None);
    }

    #[test]
    fn each_outage_is_reported_once() {
        let mut f = FailingFiles::default();
        assert!(f.failed(File::Stat));
        assert!(!f.failed(File::Stat));
        assert!(!f.failed(File::Stat));
        // Another file is its own outage.
        assert!(f.failed(File::Pressure));
        assert!(f.recovered(File::Stat));
        assert!(!f.recovered(File::Stat));
        assert!(f.failed(File::Stat));
    }

    fn write(dir: &Path, name: &str, text: &str) {
        fs::write(dir.join(name), text).unwrap();
    }

    #[test]
    fn samples_a_v1_cgroup_and_survives_files_disappearing() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        write(d, "cpu.stat", "nr_periods 40\nnr_throttled 9\nthrottled_time 1200\n");
        write(d, "cpu.cfs_quota_us", "150000\n");
        write(d, "cpu.cfs_period_us", "100000\n");
        write(d, "cpuacct.usage", "987654321\n");
        let mut s = CpuSampler::for_cgroup(CpuCgroup::V1 { cpu: d.into(), cpuacct: Some(d.into()) });
        let a = s.sample(3, 0);
        assert_eq!(
            (a.usage_ns, a.quota_us, a.period_us, a.nr_periods, a.nr_throttled, a.throttled_ns, a.tasks_running),
            (987_654_321, Some(150_000), 100_000, 40, 9, 1200, 3)
        );
        assert!(a.online_cpus >= 1);

        fs::remove_file(d.join("cpu.stat")).unwrap();
        write(d, "cpuacct.usage", "garbage");
        let b = s.sample(0, 0);
        assert_eq!((b.usage_ns, b.nr_periods, b.nr_throttled, b.throttled_ns), (0, 0, 0, 0));
        assert_eq!(b.quota_us, Some(150_000));
        assert!(b.wall_ns >= a.wall_ns);
        assert!(!s.failing.failed(File::Stat) && !s.failing.failed(File::Usage), "both outages recorded");

        write(d, "cpu.stat", "nr_periods 41\nnr_throttled 9\nthrottled_time 1300\n");
        assert_eq!(s.sample(0, 0).nr_periods, 41);
    }

    #[test]
    fn samples_a_v2_cgroup() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        write(d, "cpu.stat", "usage_usec 2000\nnr_periods 5\nnr_throttled 2\nthrottled_usec 30\n");
        write(d, "cpu.max", "50000 100000\n");
        write(d, "cpu.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=77\n");
        let mut s = CpuSampler::for_cgroup(CpuCgroup::V2 { dir: d.into() });
        let a = s.sample(1, 0);
        assert_eq!(
            (a.usage_ns, a.quota_us, a.period_us, a.nr_periods, a.nr_throttled, a.throttled_ns, a.pressure_some_us),
            (2_000_000, Some(50_000), 100_000, 5, 2, 30_000, Some(77))
        );
        fs::remove_file(d.join("cpu.max")).unwrap();
        fs::remove_file(d.join("cpu.pressure")).unwrap();
        let b = s.sample(1, 0);
        assert_eq!((b.quota_us, b.period_us, b.pressure_some_us), (None, 0, None));
        assert_eq!(b.usage_ns, 2_000_000);
    }

    #[test]
    fn root_cgroup_falls_back_to_process_usage() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        write(d, "cpu.stat", "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n");
        write(d, "cpu.cfs_quota_us", "-1\n");
        write(d, "cpuacct.usage", "1\n");
        let root = CgroupDir { dir: d.into(), is_root: true };
        let found = ProcessCgroups { v1_cpu: Some(root.clone()), v1_cpuacct: Some(root.clone()), unified: None };
        assert_eq!(own_source(&found), Source::Process);
        // A namespace root with a quota is a container's cgroup: use it.
        write(d, "cpu.cfs_quota_us", "200000\n");
        assert!(matches!(own_source(&found), Source::V1 { usage_from_rusage: false, .. }));
        // A nested cpu cgroup whose cpuacct is the host root: usage from rusage.
        let nested = CgroupDir { dir: d.into(), is_root: false };
        let other = tempfile::tempdir().unwrap();
        let host_acct = CgroupDir { dir: other.path().into(), is_root: true };
        let found = ProcessCgroups { v1_cpu: Some(nested), v1_cpuacct: Some(host_acct), unified: None };
        assert!(matches!(own_source(&found), Source::V1 { usage_from_rusage: true, cpuacct: None, .. }));
    }

    /// Two samples a moment apart on the host running the test, whatever its cgroup
    /// layout: wall and usage go forward while this test burns CPU.
    #[test]
    fn live_samples_move_forward() {
        let mut sampler = CpuSampler::new();
        let first = sampler.sample(0, 0);
        assert!(first.online_cpus >= 1);
        assert!(first.wall_ns > 0);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut x = 0u64;
        let last = loop {
            for i in 0..200_000u64 {
                x = black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            let s = sampler.sample(1, 0);
            assert!(s.wall_ns >= first.wall_ns);
            assert!(s.usage_ns >= first.usage_ns, "usage went back: {first:?} {s:?}");
            if s.usage_ns >= first.usage_ns + 20_000_000 {
                break s;
            }
            assert!(Instant::now() < deadline, "usage did not rise by 20 ms: {first:?} {s:?} ({:?})", sampler.cgroup());
        };
        assert!(last.wall_ns > first.wall_ns);
        assert_eq!(last.tasks_running, 1);
        assert!(last.nr_throttled >= first.nr_throttled);
    }
}
