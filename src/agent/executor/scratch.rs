//! Where compiles run: one private scratch root per executor, one fresh
//! directory per task under it.
//!
//! The root is `<parent>/ccroute-agent-<pid>-<random>`, mode 0700, removed
//! when the executor is dropped. An agent that died (killed, crashed) left
//! its root behind; [`create_root`] removes the roots of agents whose pid no
//! longer runs, if they belong to the same user. A task's directory is made
//! by [`task_dir`] and removed by its owner.
//!
//! [`default_parent`] picks where roots go when the operator does not say:
//! a memory file system if the host has one this user may write, because a
//! task writes dozens of small files (the source, a rebuilt copy of every
//! project header it includes, the object) and deletes them a moment later,
//! and a disk file system charges for each new inode: on ext4 with much
//! churn, tens of ms of system time a task, as much as the `gcc -E` the
//! consumerd runs for it.
//!
//! Left out: roots whose pid was reused by another process (kept until that
//! process ends and an agent starts again), and any cleanup without `/proc`
//! (there a live agent cannot be told from a dead one).

use std::fs::{self, Permissions};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use super::ExecutorError;

/// Start of every scratch root's name; the agent's pid follows.
pub const ROOT_PREFIX: &str = "ccroute-agent-";

/// A created scratch root: the directory (removed on drop) and its canonical path.
#[derive(Debug)]
pub(super) struct Root {
    /// Held so that the root is removed when the executor drops.
    _dir: TempDir,
    /// Canonical: the path task directories and prefix maps use.
    pub path: PathBuf,
}

/// Creates this executor's root under `parent` (created if missing) and
/// removes dead agents' roots there.
///
/// # Errors
/// [`ExecutorError::Scratch`] when a directory cannot be made;
/// [`ExecutorError::BadScratch`] when the path cannot appear in a prefix map.
pub(super) fn create_root(parent: &Path) -> Result<Root, ExecutorError> {
    let scratch_err = |source| ExecutorError::Scratch { parent: parent.to_owned(), source };
    fs::create_dir_all(parent).map_err(scratch_err)?;
    let dir = tempfile::Builder::new()
        .prefix(&format!("{ROOT_PREFIX}{}-", std::process::id()))
        .permissions(Permissions::from_mode(0o700))
        .tempdir_in(parent)
        .map_err(scratch_err)?;
    // The umask may have taken bits away; set the mode exactly.
    fs::set_permissions(dir.path(), Permissions::from_mode(0o700)).map_err(scratch_err)?;
    let path = fs::canonicalize(dir.path()).map_err(scratch_err)?;
    if !path.to_str().is_some_and(|s| s.starts_with('/') && !s.contains('=')) {
        return Err(ExecutorError::BadScratch(path));
    }
    let uid = fs::metadata(&path).map_err(scratch_err)?.uid();
    let removed = remove_leftovers(parent, uid);
    if removed > 0 {
        tracing::info!(parent = %parent.display(), removed, "removed scratch roots of agents that are gone");
    }
    Ok(Root { _dir: dir, path })
}

/// Where scratch roots go by default: `$XDG_RUNTIME_DIR` if it is a
/// tmpfs, else `/dev/shm` if it is one, else the system temp dir.
pub fn default_parent() -> PathBuf {
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let candidates =
        std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from).into_iter().chain([PathBuf::from("/dev/shm")]);
    for dir in candidates {
        let Ok(dir) = fs::canonicalize(&dir) else { continue };
        let writable = fs::metadata(&dir).is_ok_and(|m| m.is_dir()) && tempfile::tempdir_in(&dir).is_ok();
        if writable && fs_type(&mounts, &dir) == Some("tmpfs") {
            return dir;
        }
    }
    std::env::temp_dir()
}

/// The file system type of the mount that holds `path` (canonical), from
/// the text of `/proc/self/mountinfo`: the mount with the longest mount
/// point that is a prefix of `path`, the last one mounted on a tie.
fn fs_type<'m>(mountinfo: &'m str, path: &Path) -> Option<&'m str> {
    let mut best: Option<(usize, &str)> = None;
    for m in crate::host::mounts(mountinfo) {
        let depth = m.mount_point.components().count();
        if path.starts_with(&m.mount_point) && best.is_none_or(|(d, _)| depth >= d) {
            best = Some((depth, m.fstype));
        }
    }
    best.map(|(_, kind)| kind)
}

/// A fresh, empty, private directory for one task.
pub(super) fn task_dir(root: &Path) -> io::Result<TempDir> {
    tempfile::Builder::new().prefix("task-").permissions(Permissions::from_mode(0o700)).tempdir_in(root)
}

/// Removes the roots in `parent` of agents (other than this process) that no
/// longer run and that belong to `uid`; returns how many were removed.
fn remove_leftovers(parent: &Path, uid: u32) -> usize {
    if !Path::new("/proc/self").exists() {
        return 0;
    }
    let Ok(entries) = fs::read_dir(parent) else { return 0 };
    let own = std::process::id();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(root_pid) else { continue };
        if pid == own || crate::host::process_runs(pid) {
            continue;
        }
        let path = entry.path();
        // symlink_metadata: a link named like a root is not followed.
        let Ok(meta) = fs::symlink_metadata(&path) else { continue };
        if !meta.is_dir() || meta.uid() != uid {
            continue;
        }
        match fs::remove_dir_all(&path) {
            Ok(()) => removed += 1,
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "cannot remove a dead agent's scratch root"),
        }
    }
    removed
}

/// The pid in a root's name: `ccroute-agent-<pid>` or `ccroute-agent-<pid>-<anything>`.
fn root_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(ROOT_PREFIX)?;
    let digits = rest.split_once('-').map_or(rest, |(d, _)| d);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::process::Command;

    use super::*;

    /// A pid that ran a moment ago and is gone now.
    fn dead_pid() -> u32 {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn the_mount_holding_a_path_is_the_deepest_prefix() {
        let info = "\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
25 22 0:21 / /dev rw,nosuid - devtmpfs udev rw
26 25 0:22 / /dev/shm rw,nosuid,nodev shared:3 - tmpfs tmpfs rw
30 22 0:25 / /run/user/1000 rw,nosuid - tmpfs tmpfs rw,mode=700
31 22 0:26 / /mnt/with\\040space rw - xfs /dev/vdb rw
";
        assert_eq!(fs_type(info, Path::new("/dev/shm")), Some("tmpfs"));
        assert_eq!(fs_type(info, Path::new("/dev/shmx")), Some("devtmpfs"), "a prefix by components, not bytes");
        assert_eq!(fs_type(info, Path::new("/run/user/1000/x")), Some("tmpfs"));
        assert_eq!(fs_type(info, Path::new("/tmp")), Some("ext4"));
        assert_eq!(fs_type(info, Path::new("/mnt/with space/a")), Some("xfs"));
        assert_eq!(fs_type("", Path::new("/tmp")), None);
    }

    #[test]
    fn the_default_parent_is_writable() {
        let parent = default_parent();
        let root = create_root(&parent).unwrap();
        assert!(root.path.starts_with(fs::canonicalize(&parent).unwrap()));
    }

    #[test]
    fn root_names() {
        assert_eq!(root_pid("ccroute-agent-123"), Some(123));
        assert_eq!(root_pid("ccroute-agent-123-Xy9z"), Some(123));
        assert_eq!(root_pid("ccroute-agent--1"), None);
        assert_eq!(root_pid("ccroute-agent-12a"), None);
        assert_eq!(root_pid("ccroute-agent-"), None);
        assert_eq!(root_pid("other-123"), None);
    }

    #[test]
    fn root_is_private_and_removed_on_drop() {
        let parent = tempfile::tempdir().unwrap();
        let root = create_root(&parent.path().join("made/here")).unwrap();
        let meta = fs::metadata(&root.path).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o700);
        let name = root.path.file_name().unwrap().to_str().unwrap().to_owned();
        assert_eq!(root_pid(&name), Some(std::process::id()));
        let task = task_dir(&root.path).unwrap();
        assert!(task.path().starts_with(&root.path));
        assert_eq!(fs::metadata(task.path()).unwrap().mode() & 0o777, 0o700);
        let path = root.path.clone();
        drop(task);
        drop(root);
        assert!(!path.exists());
    }

    #[test]
    fn dead_agents_roots_are_removed_and_live_ones_kept() {
        let parent = tempfile::tempdir().unwrap();
        let p = parent.path();
        let dead = dead_pid();
        let dead_root = p.join(format!("{ROOT_PREFIX}{dead}-abc"));
        fs::create_dir_all(dead_root.join("task-1/i")).unwrap();
        fs::write(dead_root.join("task-1/i/a.c"), "int a;").unwrap();
        let dead_plain = p.join(format!("{ROOT_PREFIX}{dead}"));
        fs::create_dir(&dead_plain).unwrap();
        // pid 1 runs; so does this process (another executor of it).
        let live = p.join(format!("{ROOT_PREFIX}1-abc"));
        let ours = p.join(format!("{ROOT_PREFIX}{}-other", std::process::id()));
        let unrelated = p.join(format!("something-{dead}"));
        let file = p.join(format!("{ROOT_PREFIX}{dead}-file"));
        for d in [&live, &ours, &unrelated] {
            fs::create_dir(d).unwrap();
        }
        fs::write(&file, "").unwrap();
        // A link named like a dead root, to a directory that must survive.
        let target = tempfile::tempdir().unwrap();
        fs::write(target.path().join("keep"), "").unwrap();
        std::os::unix::fs::symlink(target.path(), p.join(format!("{ROOT_PREFIX}{dead}-link"))).unwrap();

        let root = create_root(p).unwrap();
        assert!(!dead_root.exists() && !dead_plain.exists());
        for kept in [&live, &ours, &unrelated, &file, &root.path] {
            assert!(kept.exists(), "{} was removed", kept.display());
        }
        assert!(target.path().join("keep").exists());
    }

    #[test]
    fn another_users_root_is_kept() {
        let parent = tempfile::tempdir().unwrap();
        let dead = make_dead_root(parent.path());
        let uid = fs::metadata(&dead).unwrap().uid();
        assert_eq!(remove_leftovers(parent.path(), uid.wrapping_add(1)), 0);
        assert!(dead.exists());
        assert_eq!(remove_leftovers(parent.path(), uid), 1);
        assert!(!dead.exists());
    }

    fn make_dead_root(parent: &Path) -> PathBuf {
        let dir = parent.join(format!("{ROOT_PREFIX}{}-x", dead_pid()));
        fs::create_dir(&dir).unwrap();
        dir
    }
}
