//! Where a process's CPU cgroup lives, and a CPU-limited child cgroup.
//!
//! [`ProcessCgroups`] reads `/proc/self/cgroup` and `/proc/self/mountinfo`
//! and maps the process's membership onto directories: the v1 `cpu` and
//! `cpuacct` hierarchies (mounted together or apart) and the v2 unified one.
//! [`CpuCgroup`] names the directory (or pair of directories) that holds one
//! cgroup's CPU files; the sampler reads it. [`CpuLimitedCgroup`] creates a
//! child cgroup with a CFS quota, for tests and demos that need an agent that
//! really is throttled, and removes it again on drop.
//!
//! Left out: memory, io and cpuset controllers; creating cgroups without
//! write access (delegation through systemd); cgroup v2 threaded mode. On v2
//! an enabled `cpu` controller stays enabled in the parent's
//! `cgroup.subtree_control` after the child is gone, since other children
//! may rely on it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

/// CFS period written for every limited cgroup, microseconds.
pub const CFS_PERIOD_US: u64 = 100_000;

/// The smallest quota the kernel accepts, microseconds.
const MIN_QUOTA_US: u64 = 1_000;

/// Why a cgroup could not be created or changed.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// cgroups cannot be created here: not root, read-only, no cpu controller.
    #[error("cpu cgroups unavailable: {0}")]
    Unavailable(String),
    /// The name is not a single, plain path component.
    #[error("invalid cgroup name {0:?}: must be one path component")]
    InvalidName(String),
    /// The CPU limit is not a finite number of at least 0.01 CPUs.
    #[error("invalid cpu limit {0}: must be finite and at least 0.01 cpus")]
    InvalidLimit(f64),
    /// A cgroup file or directory operation failed.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// What was attempted, e.g. "write".
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// One hierarchy's directory for the process's cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupDir {
    /// The directory under the hierarchy's mount point.
    pub dir: PathBuf,
    /// Whether the cgroup is the root of its hierarchy as this process sees
    /// it (`/`): the host's root, or a container's namespace root.
    pub is_root: bool,
}

/// The directories that hold one cgroup's CPU files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuCgroup {
    /// cgroup v1: the `cpu` controller's directory (`cpu.stat`,
    /// `cpu.cfs_quota_us`, `cpu.cfs_period_us`) and the `cpuacct`
    /// controller's (`cpuacct.usage`), which is the same directory when the
    /// two are mounted together and `None` when usage is not accounted there.
    V1 {
        /// Directory of the `cpu` controller.
        cpu: PathBuf,
        /// Directory of the `cpuacct` controller.
        cpuacct: Option<PathBuf>,
    },
    /// cgroup v2: one directory with `cpu.stat`, `cpu.max`, `cpu.pressure`.
    V2 {
        /// The cgroup's directory.
        dir: PathBuf,
    },
}

/// The process's cgroup directories, as far as they are mounted here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessCgroups {
    /// The v1 hierarchy that holds the `cpu` controller.
    pub v1_cpu: Option<CgroupDir>,
    /// The v1 hierarchy that holds `cpuacct` (equal to `v1_cpu` when co-mounted).
    pub v1_cpuacct: Option<CgroupDir>,
    /// The v2 unified hierarchy.
    pub unified: Option<CgroupDir>,
}

impl ProcessCgroups {
    /// Reads `/proc/self/cgroup` and `/proc/self/mountinfo`.
    ///
    /// # Errors
    ///
    /// When either file cannot be read (no procfs).
    pub fn current() -> Result<Self, CgroupError> {
        let read = |p: &str| {
            fs::read_to_string(p).map_err(|source| CgroupError::Io { action: "read", path: p.into(), source })
        };
        Ok(Self::from_proc(&read("/proc/self/cgroup")?, &read("/proc/self/mountinfo")?))
    }

    /// Maps the contents of `/proc/<pid>/cgroup` onto the cgroup mounts listed
    /// in `/proc/<pid>/mountinfo`. Lines that do not parse are skipped.
    pub fn from_proc(proc_cgroup: &str, mountinfo: &str) -> Self {
        let lines = parse_proc_cgroup(proc_cgroup);
        let mounts = parse_mountinfo(mountinfo);
        let v1 = |controller: &str| {
            let line = lines.iter().find(|l| l.hierarchy != 0 && l.controllers.iter().any(|c| c == controller))?;
            mounts
                .iter()
                .filter(|m| !m.is_v2 && m.super_options.iter().any(|o| o == controller))
                .find_map(|m| m.dir_for(&line.path))
        };
        let unified = lines
            .iter()
            .find(|l| l.hierarchy == 0 && l.controllers.is_empty())
            .and_then(|line| mounts.iter().filter(|m| m.is_v2).find_map(|m| m.dir_for(&line.path)));
        ProcessCgroups { v1_cpu: v1("cpu"), v1_cpuacct: v1("cpuacct"), unified }
    }

    /// The cgroup that governs the process's CPU: the v1 `cpu` hierarchy when
    /// the controller is bound there, else the unified one.
    pub fn cpu(&self) -> Option<CpuCgroup> {
        if let Some(cpu) = &self.v1_cpu {
            return Some(CpuCgroup::V1 {
                cpu: cpu.dir.clone(),
                cpuacct: self.v1_cpuacct.as_ref().map(|d| d.dir.clone()),
            });
        }
        self.unified.as_ref().map(|u| CpuCgroup::V2 { dir: u.dir.clone() })
    }
}

/// One line of `/proc/<pid>/cgroup`: `hierarchy-id:controllers:path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipLine {
    /// Hierarchy id; 0 is the v2 unified hierarchy.
    pub hierarchy: u32,
    /// Controllers bound to the hierarchy (empty for v2), e.g. `cpu`, `name=systemd`.
    pub controllers: Vec<String>,
    /// The cgroup's path inside the hierarchy, e.g. `/` or `/docker/abc`.
    pub path: String,
}

/// Parses `/proc/<pid>/cgroup`; malformed lines are skipped.
pub fn parse_proc_cgroup(text: &str) -> Vec<MembershipLine> {
    text.lines()
        .filter_map(|line| {
            // The path may itself contain ':'.
            let mut parts = line.splitn(3, ':');
            let hierarchy = parts.next()?.trim().parse().ok()?;
            let controllers = parts.next()?.split(',').filter(|c| !c.is_empty()).map(str::to_owned).collect();
            let path = parts.next()?;
            path.starts_with('/').then(|| MembershipLine { hierarchy, controllers, path: path.to_owned() })
        })
        .collect()
}

/// One cgroup filesystem mount from `/proc/<pid>/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    /// The cgroup path of the hierarchy that is mounted (`/` unless a
    /// container sees only part of it).
    pub root: String,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// `cgroup2` rather than `cgroup`.
    pub is_v2: bool,
    /// Super options; for v1 they name the controllers (`rw,cpu,cpuacct`).
    pub super_options: Vec<String>,
}

impl CgroupMount {
    /// The directory of the cgroup at `path` under this mount, if the mount
    /// shows that part of the hierarchy.
    fn dir_for(&self, path: &str) -> Option<CgroupDir> {
        let root = self.root.trim_end_matches('/');
        let rest = path.strip_prefix(root)?;
        if !rest.is_empty() && !rest.starts_with('/') {
            return None;
        }
        let rel = rest.trim_start_matches('/');
        // A path outside our cgroup namespace shows up with `..`; it names no
        // directory we can reach.
        if rel.split('/').any(|c| c == "..") {
            return None;
        }
        let dir = if rel.is_empty() { self.mount_point.clone() } else { self.mount_point.join(rel) };
        Some(CgroupDir { dir, is_root: path.trim_end_matches('/').is_empty() })
    }
}

/// Parses the cgroup and cgroup2 mounts out of `/proc/<pid>/mountinfo`;
/// other mounts and malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    crate::host::mounts(text)
        .filter_map(|m| {
            let is_v2 = match m.fstype {
                "cgroup" => false,
                "cgroup2" => true,
                _ => return None,
            };
            let super_options = m.super_options.split(',').map(str::to_owned).collect();
            Some(CgroupMount { root: m.root, mount_point: m.mount_point, is_v2, super_options })
        })
        .collect()
}

/// A child cgroup with a CFS quota; removed again on drop.
///
/// Drop moves any process still inside back to the parent cgroup and removes
/// the directories; failures there are logged, not raised.
#[derive(Debug)]
pub struct CpuLimitedCgroup {
    cgroup: CpuCgroup,
    /// `(parent, child)` for every directory created, in creation order.
    created: Vec<(PathBuf, PathBuf)>,
}

impl CpuLimitedCgroup {
    /// Creates the child cgroup `name` with a quota of `cpus` CPUs: on v1
    /// under the process's `cpu` (and separately mounted `cpuacct`) cgroup,
    /// on v2 under the process's cgroup, enabling the `cpu` controller there
    /// if needed.
    ///
    /// # Errors
    ///
    /// [`CgroupError::Unavailable`] when this host or user cannot create CPU
    /// cgroups; [`CgroupError::InvalidName`] / [`CgroupError::InvalidLimit`]
    /// for bad arguments; [`CgroupError::Io`] when a cgroup file write fails
    /// (for example when `name` already exists).
    pub fn create(name: &str, cpus: f64) -> Result<Self, CgroupError> {
        if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
            return Err(CgroupError::InvalidName(name.to_owned()));
        }
        let quota_us = quota_for(cpus)?;
        let here = ProcessCgroups::current().map_err(|e| CgroupError::Unavailable(e.to_string()))?;
        let mut made = CpuLimitedCgroup { cgroup: CpuCgroup::V2 { dir: PathBuf::new() }, created: Vec::new() };
        match here.cpu() {
            None => {
                return Err(CgroupError::Unavailable("no cgroup hierarchy with a cpu controller is mounted".into()))
            }
            Some(CpuCgroup::V1 { cpu, cpuacct }) => {
                let cpu_dir = made.make_dir(&cpu, name)?;
                write_file(&cpu_dir.join("cpu.cfs_period_us"), &CFS_PERIOD_US.to_string())?;
                write_file(&cpu_dir.join("cpu.cfs_quota_us"), &quota_us.to_string())?;
                let acct_dir = match cpuacct {
                    Some(acct) if acct == cpu => Some(cpu_dir.clone()),
                    // Mounted apart: usage is only counted if the process is
                    // in a cpuacct child as well.
                    Some(acct) => match made.make_dir(&acct, name) {
                        Ok(d) => Some(d),
                        Err(e) => {
                            tracing::warn!(error = %e, "cpu usage of the limited cgroup will not be accounted");
                            None
                        }
                    },
                    None => None,
                };
                made.cgroup = CpuCgroup::V1 { cpu: cpu_dir, cpuacct: acct_dir };
            }
            Some(CpuCgroup::V2 { dir }) => {
                enable_v2_cpu_controller(&dir)?;
                let child = made.make_dir(&dir, name)?;
                write_file(&child.join("cpu.max"), &format!("{quota_us} {CFS_PERIOD_US}"))?;
                made.cgroup = CpuCgroup::V2 { dir: child };
            }
        }
        Ok(made)
    }

    /// Moves process `pid` (all its threads) into the cgroup.
    ///
    /// # Errors
    ///
    /// When the kernel refuses the move (no such process, no permission).
    pub fn add_pid(&self, pid: u32) -> Result<(), CgroupError> {
        for (_, child) in &self.created {
            write_file(&child.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// The cgroup's directory (v1: the `cpu` controller's).
    pub fn path(&self) -> &Path {
        match &self.cgroup {
            CpuCgroup::V1 { cpu, .. } => cpu,
            CpuCgroup::V2 { dir } => dir,
        }
    }

    /// The cgroup's CPU directories, to sample it.
    pub fn cpu_cgroup(&self) -> &CpuCgroup {
        &self.cgroup
    }

    /// Creates `parent/name` and remembers it for drop.
    fn make_dir(&mut self, parent: &Path, name: &str) -> Result<PathBuf, CgroupError> {
        let child = parent.join(name);
        if let Err(e) = fs::create_dir(&child) {
            return Err(match e.kind() {
                io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem | io::ErrorKind::NotFound => {
                    CgroupError::Unavailable(format!("cannot create {}: {e}", child.display()))
                }
                _ => CgroupError::Io { action: "create", path: child, source: e },
            });
        }
        self.created.push((parent.to_owned(), child.clone()));
        Ok(child)
    }
}

impl Drop for CpuLimitedCgroup {
    fn drop(&mut self) {
        for (parent, child) in self.created.iter().rev() {
            evacuate(parent, child);
            remove_dir(child);
        }
    }
}

/// The quota in microseconds per [`CFS_PERIOD_US`] for `cpus` CPUs.
fn quota_for(cpus: f64) -> Result<u64, CgroupError> {
    if !cpus.is_finite() || cpus * (CFS_PERIOD_US as f64) < MIN_QUOTA_US as f64 || cpus > 1e9 {
        return Err(CgroupError::InvalidLimit(cpus));
    }
    // Range-checked above, so the cast neither saturates nor wraps.
    Ok((cpus * CFS_PERIOD_US as f64).round() as u64)
}

/// Makes sure children of the v2 cgroup `dir` get the `cpu` controller.
fn enable_v2_cpu_controller(dir: &Path) -> Result<(), CgroupError> {
    let has_cpu = |file: &str| {
        fs::read_to_string(dir.join(file)).map(|s| s.split_whitespace().any(|c| c == "cpu")).unwrap_or(false)
    };
    if has_cpu("cgroup.subtree_control") {
        return Ok(());
    }
    if !has_cpu("cgroup.controllers") {
        return Err(CgroupError::Unavailable(format!("the cpu controller is not available in {}", dir.display())));
    }
    let control = dir.join("cgroup.subtree_control");
    fs::write(&control, "+cpu").map_err(|e| match e.raw_os_error() {
        // EBUSY: a non-root cgroup that holds processes (this one) may not
        // hand controllers to children.
        Some(libc::EBUSY) | Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => {
            CgroupError::Unavailable(format!("cannot enable the cpu controller in {}: {e}", control.display()))
        }
        _ => CgroupError::Io { action: "write", path: control.clone(), source: e },
    })
}

fn write_file(path: &Path, value: &str) -> Result<(), CgroupError> {
    fs::write(path, value).map_err(|source| CgroupError::Io { action: "write", path: path.to_owned(), source })
}

/// Moves every process left in `child` back to `parent`.
fn evacuate(parent: &Path, child: &Path) {
    let procs = match fs::read_to_string(child.join("cgroup.procs")) {
        Ok(p) => p,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return,
        Err(e) => {
            tracing::warn!(cgroup = %child.display(), error = %e, "cannot list processes to move out");
            return;
        }
    };
    for pid in procs.split_whitespace() {
        match fs::write(parent.join("cgroup.procs"), pid) {
            // The process exited in the meantime.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => tracing::warn!(cgroup = %child.display(), pid, error = %e, "cannot move process out"),
            Ok(()) => {}
        }
    }
}

/// Removes a cgroup directory, retrying briefly: an exiting process can keep
/// it busy for a moment.
fn remove_dir(dir: &Path) {
    let mut last = None;
    for _ in 0..50 {
        match fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => last = Some(e),
            Err(e) => {
                last = Some(e);
                break;
            }
        }
        thread::sleep(Duration::from_millis(20));
    }
    if let Some(e) = last {
        tracing::warn!(cgroup = %dir.display(), error = %e, "cannot remove cgroup");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use std::process::{Child, Command, Stdio};

    use super::*;
    use crate::agent::sampler::CpuSampler;

    /// A hybrid host: cgroup v1 with `cpu` and `cpuacct` mounted apart,
    /// plus a cgroup2 mount for the unified hierarchy.
    const HYBRID_CGROUP: &str =
        "9:name=systemd:/\n8:pids:/\n4:memory:/job/185d\n3:cpuset:/\n2:cpuacct:/\n1:cpu:/\n0::/\n";
    const HYBRID_MOUNTINFO: &str = "\
23 1 0:21 / / rw,relatime - overlay overlay rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn hybrid_v1_with_cpu_and_cpuacct_apart() {
        let pc = ProcessCgroups::from_proc(HYBRID_CGROUP, HYBRID_MOUNTINFO);
        let cpu = pc.v1_cpu.clone().unwrap();
        assert_eq!(cpu.dir, Path::new("/sys/fs/cgroup/cpu"));
        assert!(cpu.is_root);
        assert_eq!(pc.v1_cpuacct.as_ref().unwrap().dir, Path::new("/sys/fs/cgroup/cpuacct"));
        assert_eq!(pc.unified.as_ref().unwrap().dir, Path::new("/sys/fs/cgroup/unified"));
        assert_eq!(
            pc.cpu(),
            Some(CpuCgroup::V1 { cpu: "/sys/fs/cgroup/cpu".into(), cpuacct: Some("/sys/fs/cgroup/cpuacct".into()) })
        );
    }

    #[test]
    fn v1_comounted_in_a_container_without_cgroup_namespace() {
        // Docker without cgroupns: the hierarchy's root is the container's
        // cgroup, mounted at /sys/fs/cgroup/cpu,cpuacct.
        let cgroup = "12:cpu,cpuacct:/docker/abc\n11:cpuset:/docker/abc\n";
        let mounts = "\
1 0 0:1 / / rw - overlay overlay rw
50 1 0:44 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid master:17 - cgroup cgroup rw,cpu,cpuacct
51 1 0:45 /docker/abc /sys/fs/cgroup/cpuset ro - cgroup cgroup rw,cpuset
";
        let pc = ProcessCgroups::from_proc(cgroup, mounts);
        let cpu = pc.v1_cpu.clone().unwrap();
        assert_eq!(cpu.dir, Path::new("/sys/fs/cgroup/cpu,cpuacct"));
        assert!(!cpu.is_root);
        assert_eq!(pc.v1_cpuacct, Some(cpu));
        assert_eq!(pc.unified, None);
    }

    #[test]
    fn v2_nested_path_and_escaped_mount_point() {
        let cgroup = "0::/user.slice/user-1000.slice/session-2.scope\n";
        let mounts = "30 23 0:26 / /sys/fs/my\\040cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        let pc = ProcessCgroups::from_proc(cgroup, mounts);
        let dir = PathBuf::from("/sys/fs/my cgroup/user.slice/user-1000.slice/session-2.scope");
        assert_eq!(pc.unified, Some(CgroupDir { dir: dir.clone(), is_root: false }));
        assert_eq!(pc.v1_cpu, None);
        assert_eq!(pc.cpu(), Some(CpuCgroup::V2 { dir }));
    }

    #[test]
    fn v2_mount_that_shows_only_part_of_the_hierarchy() {
        let mounts = "30 23 0:26 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let inside = ProcessCgroups::from_proc("0::/kubepods/pod1/c1\n", mounts);
        assert_eq!(inside.unified.unwrap().dir, Path::new("/sys/fs/cgroup/c1"));
        // A sibling whose name merely starts with the mount's root is not under it.
        assert_eq!(ProcessCgroups::from_proc("0::/kubepods/pod10\n", mounts).unified, None);
        assert_eq!(ProcessCgroups::from_proc("0::/../other\n", mounts).unified, None);
    }

    #[test]
    fn garbage_yields_nothing_rather_than_a_panic() {
        for text in ["", "garbage", ":::", "x:cpu:/a", "1:cpu:relative", "\u{0}\n\n:", "1:cpu"] {
            let pc = ProcessCgroups::from_proc(text, text);
            assert_eq!(pc, ProcessCgroups::default(), "{text:?}");
        }
        assert!(parse_mountinfo("1 2 3 / /x rw - cgroup").is_empty());
        assert!(parse_mountinfo("1 2 3 / /x rw -").is_empty());
        // A controller name is matched whole: cpuset is not cpu.
        let pc = ProcessCgroups::from_proc("3:cpuset:/\n", "1 0 0:1 / /c rw - cgroup cgroup rw,cpuset\n");
        assert_eq!(pc.cpu(), None);
    }

    #[test]
    fn membership_path_may_contain_colons() {
        let lines = parse_proc_cgroup("0::/a:b\n2:cpu,cpuacct:/x\n");
        assert_eq!(lines[0].path, "/a:b");
        assert_eq!(lines[1].controllers, ["cpu", "cpuacct"]);
    }

    #[test]
    fn rejects_bad_names_and_limits() {
        for name in ["", ".", "..", "a/b"] {
            assert!(matches!(CpuLimitedCgroup::create(name, 1.0), Err(CgroupError::InvalidName(_))), "{name:?}");
        }
        for cpus in [0.0, -1.0, 0.001, f64::NAN, f64::INFINITY] {
            assert!(matches!(quota_for(cpus), Err(CgroupError::InvalidLimit(_))), "{cpus}");
        }
        assert_eq!(quota_for(0.5).unwrap(), 50_000);
        assert_eq!(quota_for(2.0).unwrap(), 200_000);
    }

    /// Kills and reaps the child even when the test panics.
    struct Busy(Child);

    impl Drop for Busy {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn busy_loop() -> Busy {
        Busy(
            Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    #[test]
    fn quota_throttles_busy_processes() {
        let name = format!("ccroute-test-{}", std::process::id());
        let cg = match CpuLimitedCgroup::create(&name, 0.5) {
            Ok(cg) => cg,
            Err(CgroupError::Unavailable(why)) => {
                crate::test_env::lacking("cgroups", &why);
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let dir = cg.path().to_owned();
        assert!(dir.is_dir());
        // Two busy loops would use two CPUs if nothing held them back.
        // Declared after `cg`, so they die before it is removed.
        let busy = [busy_loop(), busy_loop()];
        for b in &busy {
            cg.add_pid(b.0.id()).unwrap();
        }
        let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap();
        assert_eq!(procs.split_whitespace().count(), 2, "{procs}");

        let mut sampler = CpuSampler::for_cgroup(cg.cpu_cgroup().clone());
        let before = sampler.sample(2, 0);
        thread::sleep(Duration::from_secs(2));
        let after = sampler.sample(2, 0);

        assert_eq!(after.quota_us, Some(50_000));
        assert_eq!(after.period_us, CFS_PERIOD_US);
        assert!(after.nr_periods > before.nr_periods, "{before:?} {after:?}");
        assert!(after.nr_throttled > before.nr_throttled, "{before:?} {after:?}");
        assert!(after.throttled_ns > before.throttled_ns, "{before:?} {after:?}");
        let wall = after.wall_ns - before.wall_ns;
        let used = after.usage_ns - before.usage_ns;
        assert!(used > 0, "{before:?} {after:?}");
        // 0.5 CPUs plus a period's worth of slack at either end.
        assert!((used as f64) < 0.75 * wall as f64, "used {used} ns in {wall} ns");

        drop(busy);
        drop(cg);
        assert!(!dir.exists(), "{} was not removed", dir.display());
    }

    #[test]
    fn drop_moves_remaining_processes_out() {
        let name = format!("ccroute-evacuate-{}", std::process::id());
        let cg = match CpuLimitedCgroup::create(&name, 1.0) {
            Ok(cg) => cg,
            Err(CgroupError::Unavailable(why)) => {
                crate::test_env::lacking("cgroups", &why);
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let mut sleeper = Busy(Command::new("sleep").arg("30").spawn().unwrap());
        cg.add_pid(sleeper.0.id()).unwrap();
        let dir = cg.path().to_owned();
        drop(cg);
        assert!(!dir.exists(), "{} was not removed", dir.display());
        // Still alive, just elsewhere.
        assert!(sleeper.0.try_wait().unwrap().is_none());
        let own = fs::read_to_string(format!("/proc/{}/cgroup", sleeper.0.id())).unwrap();
        assert!(!own.contains(&name), "{own}");
    }
}
