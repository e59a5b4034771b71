//! [`ToolchainMemo`]: compiler identities by path, for every compile.
//!
//! A consumerd asks for the identity of `/usr/bin/gcc` once per compile;
//! a query runs the compiler several times and hashes tens of megabytes of
//! binaries, while a cached answer costs a few `stat` calls. The cache keeps each answer with the stamps of the files it
//! rests on and re-queries when one of them changed. Left out: negative
//! caching (a broken compiler is re-queried on every call) and eviction
//! beyond a crude size bound.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ccroute_wire::{Toolchain, ToolchainKey};

use super::{locate, query_located, DigestMemo, FileStamp, Package, ToolchainError, PROBE_TIME_LIMIT};

/// Toolchain identities by compiler path, re-queried only when a file they
/// rest on (the driver as reached through the path, and the other programs
/// and libraries of its package) changed device, inode, size or mtime.
///
/// Locking: one mutex around the map, held only to look up or insert an
/// entry, never while a compiler runs or a file is read or stat'ed.
#[derive(Debug)]
pub struct ToolchainMemo {
    entries: Mutex<HashMap<PathBuf, Arc<CacheEntry>>>,
    memo: DigestMemo,
    limit: Duration,
}

#[derive(Debug)]
struct CacheEntry {
    toolchain: Arc<Toolchain>,
    package: Arc<Package>,
    driver: FileStamp,
    others: Vec<(PathBuf, FileStamp)>,
}

impl CacheEntry {
    fn is_current(&self, program: &Path) -> bool {
        FileStamp::current(program) == Some(self.driver)
            && self.others.iter().all(|(p, s)| FileStamp::current(p) == Some(*s))
    }
}

impl Default for ToolchainMemo {
    fn default() -> Self {
        Self::new()
    }
}

impl ToolchainMemo {
    /// Entries beyond this many are dropped wholesale: a host has a handful
    /// of compilers, so this only guards against a caller naming many paths.
    const MAX_ENTRIES: usize = 1024;

    /// An empty cache with [`PROBE_TIME_LIMIT`] per probe.
    pub fn new() -> Self {
        Self::with_limit(PROBE_TIME_LIMIT)
    }

    /// An empty cache with another time limit per probe.
    pub fn with_limit(limit: Duration) -> Self {
        ToolchainMemo { entries: Mutex::default(), memo: DigestMemo::default(), limit }
    }

    /// The identity of the compiler at `path` (a bare name is looked up in
    /// `PATH`), from the cache when its files are unchanged.
    ///
    /// # Errors
    ///
    /// As [`query`](super::query); failures are not cached.
    pub fn get(&self, path: &Path) -> Result<Arc<Toolchain>, ToolchainError> {
        let program = locate(path)?;
        let cached = self.lock().get(&program).cloned();
        if let Some(entry) = cached.filter(|e| e.is_current(&program)) {
            return Ok(entry.toolchain.clone());
        }
        let q = query_located(&program, self.limit, &self.memo)?;
        let entry = Arc::new(CacheEntry {
            toolchain: Arc::new(q.toolchain),
            package: q.package,
            driver: q.driver,
            others: q.others,
        });
        let toolchain = entry.toolchain.clone();
        let mut entries = self.lock();
        if entries.len() >= Self::MAX_ENTRIES {
            entries.clear();
        }
        // Concurrent queries of one path race benignly: each entry carries
        // the stamps it was made from, so a stale winner is re-queried.
        entries.insert(program, entry);
        Ok(toolchain)
    }

    /// The package of a toolchain this cache answered with, by route key
    /// (checked when it was last asked for by path; whoever reads its files
    /// checks their digests again).
    pub fn package(&self, key: ToolchainKey) -> Option<Arc<Package>> {
        self.lock().values().find(|e| e.toolchain.key() == key).map(|e| e.package.clone())
    }

    /// Number of cached compilers.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<PathBuf, Arc<CacheEntry>>> {
        // Entries are replaced whole; a panic cannot leave one half-built.
        self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use std::fs;
    use std::os::unix::fs::symlink;
    use std::process::Command;
    use std::sync::mpsc;
    use std::thread;

    use super::*;
    use crate::toolchain::tests::{fake_gcc, script};

    fn runs(log: &Path) -> usize {
        fs::read_to_string(log).map(|s| s.lines().count()).unwrap_or(0)
    }

    #[test]
    fn answers_from_cache_until_a_file_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let log = d.join("log");
        let cc1 = d.join("cc1");
        fs::write(&cc1, "cc1 v1").unwrap();
        let real = fake_gcc(d, "x86_64-fake-linux-gnu-gcc-9", &cc1, &log);
        let gcc = d.join("gcc");
        symlink(&real, &gcc).unwrap();

        let cache = ToolchainMemo::new();
        let first = cache.get(&gcc).unwrap();
        let probes = runs(&log);
        assert!(probes >= 3, "{probes}");
        for _ in 0..5 {
            assert!(Arc::ptr_eq(&cache.get(&gcc).unwrap(), &first));
        }
        assert_eq!(runs(&log), probes, "a cached answer ran the compiler");
        assert_eq!(cache.len(), 1);

        // The compiler proper changes size: re-queried, new identity.
        fs::write(&cc1, "cc1 v2, longer").unwrap();
        let second = cache.get(&gcc).unwrap();
        assert_eq!(runs(&log), 2 * probes);
        assert_ne!(second.binary_hash, first.binary_hash);
        assert!(Arc::ptr_eq(&cache.get(&gcc).unwrap(), &second));

        // The symlink now points at another driver: re-queried.
        let cc1b = d.join("cc1b");
        fs::write(&cc1b, "cc1 v2, longer").unwrap();
        let other = fake_gcc(d, "gcc-9", &cc1b, &log);
        fs::remove_file(&gcc).unwrap();
        symlink(&other, &gcc).unwrap();
        let third = cache.get(&gcc).unwrap();
        assert_eq!(runs(&log), 3 * probes);
        assert!(!Arc::ptr_eq(&third, &second));
        assert_eq!(cache.len(), 1);

        // A compiler that went away is an error, not the stale answer.
        fs::remove_file(&other).unwrap();
        assert!(cache.get(&gcc).is_err());
    }

    #[test]
    fn lock_is_not_held_while_a_compiler_runs() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let fifo = d.join("gate");
        let started = d.join("started");
        assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        // This driver blocks in its macro probe until the gate opens.
        let slow = script(
            d,
            "clang",
            &format!(
                "[ \"$1\" = -E ] && {{ : > '{}'; read x < '{}'; }}\n\
                 case \"$1\" in -E) echo '#define __clang__ 1';; *) echo 1.0;; esac",
                started.display(),
                fifo.display()
            ),
        );
        let cc1 = d.join("cc1");
        fs::write(&cc1, "cc1").unwrap();
        let fast = fake_gcc(d, "gcc", &cc1, &d.join("log"));

        // Longer than the wait below: a cache that held its lock across the
        // slow query would answer only when the probe gave up.
        let cache = Arc::new(ToolchainMemo::with_limit(Duration::from_secs(600)));
        cache.get(&fast).unwrap();
        let (tx, rx) = mpsc::channel();
        let slow_query = {
            let cache = cache.clone();
            thread::spawn(move || cache.get(&slow).map(|t| t.compiler.clone()))
        };
        for _ in 0..6000 {
            if started.exists() {
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        assert!(started.exists(), "the slow driver never started");
        let fast_query = {
            let cache = cache.clone();
            thread::spawn(move || tx.send(cache.get(&fast).map(|t| t.compiler.clone())))
        };
        // The cached answer arrives while the slow driver is still blocked.
        let answered = rx.recv_timeout(Duration::from_secs(60));
        // Opening the fifo for writing blocks until the driver reads it.
        let opener = thread::spawn(move || fs::write(&fifo, "go\n"));
        assert_eq!(answered.unwrap().unwrap(), "gcc");
        fast_query.join().unwrap().unwrap();
        assert_eq!(slow_query.join().unwrap().unwrap(), "clang");
        opener.join().unwrap().unwrap();
    }
}
