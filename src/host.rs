//! Facts about this machine that several roles read: its CPUs, its name,
//! its mounts, whether a process runs.

use std::path::{Path, PathBuf};

/// Online CPUs of this host.
pub fn online_cpus() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX))
}

/// `CLOCK_MONOTONIC` in nanoseconds (0 if the clock cannot be read): one
/// clock for every process of this machine, namespaces or not.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0)
}

/// `clock` in nanoseconds; `None` if it cannot be read.
#[allow(unsafe_code)]
fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u64::try_from(ts.tv_nsec).ok()?;
    Some(secs.saturating_mul(1_000_000_000).saturating_add(nanos))
}

/// The wall clock as the kernel stamps files from it
/// (`CLOCK_REALTIME_COARSE`), in nanoseconds since the Unix epoch: a file
/// written after this reading is stamped no earlier than it (on a
/// filesystem that keeps nanoseconds). `None` if it cannot be read.
pub fn file_stamp_clock_ns() -> Option<u64> {
    clock_ns(libc::CLOCK_REALTIME_COARSE)
}

/// How far behind the wall clock the stamps the kernel gives files can be,
/// in nanoseconds: the resolution of `CLOCK_REALTIME_COARSE`, the clock it
/// stamps them from, which moves once a tick (4 ms at `HZ` 250, 10 ms at
/// 100). Read once. Between 1 and 20 ms: a clock that cannot be read is
/// taken as the slowest common tick, 10 ms.
pub fn file_stamp_tick_ns() -> i64 {
    static TICK: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *TICK.get_or_init(|| {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        #[allow(unsafe_code)]
        // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
        let rc = unsafe { libc::clock_getres(libc::CLOCK_REALTIME_COARSE, &mut ts) };
        let ns = ts.tv_sec.saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec);
        if rc == 0 {
            ns.clamp(1_000_000, 20_000_000)
        } else {
            10_000_000
        }
    })
}

/// This host's name.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// Whether process `pid` runs on this host. Where that cannot be told, yes,
/// leaving its temp files to the age rule. A writer in another pid namespace
/// looks gone: its temp file is deleted and its put fails, which loses one
/// write and corrupts nothing. (Also the agent's rule for its scratch roots.)
pub fn process_runs(pid: u32) -> bool {
    let proc = Path::new("/proc");
    !proc.join("self").exists() || proc.join(pid.to_string()).exists()
}

/// One line of `/proc/<pid>/mountinfo`, its paths unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount<'a> {
    /// The path within the mounted file system that is mounted.
    pub root: String,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// The file system type (`ext4`, `tmpfs`, `cgroup2`, ...).
    pub fstype: &'a str,
    /// Super options (`rw,cpu,cpuacct`).
    pub super_options: &'a str,
}

/// Every mount in the text of `/proc/<pid>/mountinfo`; malformed lines are
/// skipped.
pub fn mounts(text: &str) -> impl Iterator<Item = Mount<'_>> {
    text.lines().filter_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        // id parent maj:min root mount-point options [optional...] - fstype source super-options
        let sep = fields.iter().skip(6).position(|f| *f == "-")? + 6;
        Some(Mount {
            root: unescape_mountinfo(fields.get(3)?),
            mount_point: PathBuf::from(unescape_mountinfo(fields.get(4)?)),
            fstype: fields.get(sep + 1)?,
            super_options: fields.get(sep + 3)?,
        })
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\134` for `\`).
fn unescape_mountinfo(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal =
            bytes.get(i + 1..i + 4).filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal {
            Some(d) => {
                let v = d.iter().fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
                out.push(u8::try_from(v).unwrap_or(b'?'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
