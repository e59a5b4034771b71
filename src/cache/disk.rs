//! The disk tier: content-addressed files under one directory.
//!
//! An entry lives at `<dir>/<2 hex>/<64 hex>` (the key in hex, its first two
//! digits as a subdirectory) in the checksummed form of [`super::entry`].
//!
//! - **Atomic writes.** A put writes a temp file (`.tmp-<pid>-<random>`) in
//!   the entry's own subdirectory and renames it into place, so a reader sees
//!   a whole entry or none, and a crash leaves at most a temp file. Nothing is
//!   fsynced: an entry a power cut leaves short fails its checksum and is
//!   dropped, which costs a recompile, never a wrong object.
//! - **Never serves a bad entry.** A read verifies the whole entry; a corrupt
//!   or truncated one is deleted, counted as an error and reported as a miss.
//! - **LRU size cap.** An in-memory index (a `DashMap`) holds each entry's
//!   size and a logical last-use tick; a hit also sets the file's mtime, so
//!   the order survives a restart. Past the cap, one thread at a time deletes
//!   the least recently used entries down to 90 % of it.
//! - **Restarts.** [`DiskTier::open`] scans the directory: it indexes every
//!   entry by its mtime, deletes empty or short files, and deletes temp files
//!   left by a process that no longer runs (or older than an hour).
//! - **Sharing.** Threads share one `DiskTier`. Two processes may share a
//!   directory: renames are atomic and every read is verified, so neither can
//!   corrupt the other; each adopts the other's entries into its index as it
//!   reads them. Each enforces the cap on the entries it knows of, so a shared
//!   directory can exceed one process's cap until that process reopens it.
//!
//! Synchronous `std::fs` throughout; async callers run it on
//! `spawn_blocking`. Left out: expiry by age, and fsync.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use ccroute_wire::{CacheKey, CacheTierStatus};
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use thiserror::Error;
use tracing::{debug, warn};

use super::entry::{EntryError, PREFIX_LEN};
use super::{key_hex, parse_key_hex, CachedResult, TierCounters};

/// Temp files start with this, then the writer's pid and a dash.
const TEMP_PREFIX: &str = ".tmp-";

/// A temp file this old is stale whoever wrote it: no write takes an hour.
const TEMP_MAX_AGE: Duration = Duration::from_secs(3600);

/// Eviction frees down to this share of the cap, in tenths, so that it runs
/// once per many puts rather than on every one.
const EVICT_TO_TENTHS: u64 = 9;

/// Why the disk tier could not be opened or written.
#[derive(Debug, Error)]
pub enum DiskError {
    /// The directory could not be created or listed.
    #[error("cannot open cache directory {dir}: {source}")]
    Open {
        /// The tier's directory.
        dir: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// An entry could not be written.
    #[error("cannot write cache entry {path}: {source}")]
    Write {
        /// Where the entry was going.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The entry alone exceeds the tier's size cap.
    #[error("entry of {size} bytes exceeds the disk cache cap of {max} bytes")]
    TooLarge {
        /// The entry's encoded size.
        size: u64,
        /// The cap.
        max: u64,
    },
}

/// An indexed entry.
#[derive(Debug)]
struct Slot {
    /// Bytes of the file.
    size: u64,
    /// The tick of its last put or hit; a hit stores it under the map's read
    /// lock. Relaxed: an approximate order is all eviction needs.
    last_used: AtomicU64,
}

/// Results stored as files under one directory, with an LRU size cap.
#[derive(Debug)]
pub struct DiskTier {
    dir: PathBuf,
    max_bytes: u64,
    index: DashMap<CacheKey, Slot>,
    /// Sum of the indexed sizes. Added under the index's shard lock before a
    /// slot is inserted and subtracted after one is removed, so it never
    /// dips below the true sum. Relaxed: a single counter, read as a hint.
    bytes: AtomicU64,
    /// Source of last-use ticks. Relaxed: ticks only need to be distinct.
    clock: AtomicU64,
    /// Held by the one thread evicting. Acquire on taking it pairs with the
    /// Release that gives it back.
    evicting: AtomicBool,
    counters: TierCounters,
}

/// What went wrong reading one entry.
enum ReadFailure {
    Io(io::Error),
    Corrupt { error: EntryError, inode: u64 },
}

impl From<io::Error> for ReadFailure {
    fn from(e: io::Error) -> Self {
        ReadFailure::Io(e)
    }
}

impl DiskTier {
    /// Opens (creating it if needed) the tier under `dir`, holding at most
    /// `max_bytes`. Scans the directory so that sizes are right after a
    /// restart, and deletes leftovers: stale temp files, empty or short entries.
    ///
    /// # Errors
    /// [`DiskError::Open`] when `dir` cannot be created or listed. Problems
    /// with single files are counted as errors, not returned.
    pub fn open(dir: impl Into<PathBuf>, max_bytes: u64) -> Result<DiskTier, DiskError> {
        let dir = dir.into();
        let open_error = |source| DiskError::Open { dir: dir.clone(), source };
        fs::create_dir_all(&dir).map_err(open_error)?;
        let tier = DiskTier {
            dir: dir.clone(),
            max_bytes,
            index: DashMap::new(),
            bytes: AtomicU64::new(0),
            clock: AtomicU64::new(0),
            evicting: AtomicBool::new(false),
            counters: TierCounters::default(),
        };
        let mut found = Vec::new();
        for sub in fs::read_dir(&dir).map_err(open_error)? {
            let sub = match sub {
                Ok(sub) => sub,
                Err(e) => {
                    tier.counters.error();
                    warn!(dir = %dir.display(), error = %e, "cannot list the disk cache");
                    continue;
                }
            };
            let name = sub.file_name();
            let is_shard = name.to_str().is_some_and(|n| n.len() == 2 && n.bytes().all(|b| b.is_ascii_hexdigit()));
            if is_shard && sub.file_type().is_ok_and(|t| t.is_dir()) {
                tier.scan_shard(&sub.path(), &mut found);
            }
        }
        // Oldest first, so that ticks follow the files' last use.
        found.sort_by_key(|&(modified, _, _)| modified);
        let mut total = 0;
        for (tick, (_, key, size)) in found.into_iter().enumerate() {
            total += size;
            tier.index.insert(key, Slot { size, last_used: AtomicU64::new(tick as u64) });
        }
        tier.clock.store(tier.index.len() as u64, Ordering::Relaxed);
        tier.bytes.store(total, Ordering::Relaxed);
        debug!(dir = %dir.display(), entries = tier.index.len(), bytes = total, "disk cache opened");
        tier.evict_if_over();
        Ok(tier)
    }

    /// Indexes the entries of one `<2 hex>` subdirectory and deletes what
    /// must not stay.
    fn scan_shard(&self, shard: &Path, found: &mut Vec<(SystemTime, CacheKey, u64)>) {
        let files = match fs::read_dir(shard) {
            Ok(files) => files,
            Err(e) => {
                self.counters.error();
                warn!(dir = %shard.display(), error = %e, "cannot list the disk cache");
                return;
            }
        };
        let shard_name = shard.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        for file in files.flatten() {
            let name = file.file_name();
            let Some(name) = name.to_str() else { continue };
            let Ok(meta) = file.metadata() else { continue };
            let path = file.path();
            if name.starts_with(TEMP_PREFIX) {
                if is_stale_temp(name, meta.modified().ok()) {
                    debug!(path = %path.display(), "removing a stale temp file");
                    remove_quietly(&path);
                }
                continue;
            }
            let Some(key) = parse_key_hex(name) else { continue };
            if !meta.is_file() || !name.starts_with(shard_name) {
                continue;
            }
            if meta.len() < PREFIX_LEN as u64 {
                self.counters.error();
                warn!(path = %path.display(), bytes = meta.len(), "removing a truncated cache entry");
                remove_quietly(&path);
                continue;
            }
            found.push((meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), key, meta.len()));
        }
    }

    /// The result under `key`, or `None`. A corrupt entry is deleted and
    /// counted as an error; any I/O error is counted; both are misses.
    ///
    /// Locks: one index shard, briefly (read lock on a hit, write lock when
    /// an entry is adopted or forgotten).
    pub fn get(&self, key: &CacheKey) -> Option<CachedResult> {
        let path = self.path(key);
        match self.read(key, &path) {
            Ok(Some(result)) => {
                self.counters.hit();
                Some(result)
            }
            Ok(None) => {
                self.counters.miss();
                None
            }
            Err(ReadFailure::Io(e)) => {
                self.counters.error();
                self.counters.miss();
                warn!(path = %path.display(), error = %e, "cannot read a cache entry");
                None
            }
            Err(ReadFailure::Corrupt { error, inode }) => {
                self.counters.error();
                self.counters.miss();
                warn!(path = %path.display(), %error, "removing a corrupt cache entry");
                // Only the file that was read: another writer may have renamed
                // a good entry into place since.
                if fs::symlink_metadata(&path).is_ok_and(|m| m.ino() == inode) {
                    remove_quietly(&path);
                }
                self.forget(key);
                None
            }
        }
    }

    fn read(&self, key: &CacheKey, path: &Path) -> Result<Option<CachedResult>, ReadFailure> {
        let mut file = match File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Evicted by another process, or never there.
                self.forget(key);
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        let meta = file.metadata()?;
        let len = meta.len();
        if len > self.max_bytes {
            // Larger than anything this tier writes (another process's, with a
            // larger cap): a miss rather than a read of that size.
            return Ok(None);
        }
        let mut buf = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        file.read_to_end(&mut buf)?;
        let size = buf.len() as u64;
        let result = CachedResult::decode(key, Bytes::from(buf))
            .map_err(|error| ReadFailure::Corrupt { error, inode: meta.ino() })?;
        // The mtime carries the LRU order across restarts; failing to set it
        // (a file of another user) only makes that order less exact.
        let _ = file.set_modified(SystemTime::now());
        // A file already unlinked (evicted meanwhile) is served but not indexed.
        self.touch(key, size, meta.nlink() > 0);
        Ok(Some(result))
    }

    /// Stores `result` under `key`, then evicts if the tier is over its cap.
    /// A key already indexed is only marked used: entries are content-addressed.
    ///
    /// # Errors
    /// [`DiskError::TooLarge`] for an entry over the cap; [`DiskError::Write`]
    /// when the file cannot be written (nothing is left under its name).
    pub fn put(&self, key: &CacheKey, result: &CachedResult) -> Result<(), DiskError> {
        if let Some(slot) = self.index.get(key) {
            slot.last_used.store(self.tick(), Ordering::Relaxed);
            return Ok(());
        }
        let head = result.encode_head(key);
        let size = head.len() as u64 + result.object.len() as u64;
        if size > self.max_bytes {
            self.counters.error();
            return Err(DiskError::TooLarge { size, max: self.max_bytes });
        }
        let path = self.path(key);
        if let Err(source) = write_atomically(&path, &[&head, &result.object]) {
            self.counters.error();
            return Err(DiskError::Write { path, source });
        }
        let tick = self.tick();
        match self.index.entry(*key) {
            Entry::Occupied(mut slot) => {
                // Another writer won the race; same key, possibly other bytes.
                self.bytes.fetch_add(size, Ordering::Relaxed);
                let old = slot.insert(Slot { size, last_used: AtomicU64::new(tick) });
                self.bytes.fetch_sub(old.size, Ordering::Relaxed);
            }
            Entry::Vacant(slot) => {
                self.bytes.fetch_add(size, Ordering::Relaxed);
                slot.insert(Slot { size, last_used: AtomicU64::new(tick) });
            }
        }
        self.evict_if_over();
        Ok(())
    }

    /// Marks `key` used now, indexing it if another process wrote it.
    fn touch(&self, key: &CacheKey, size: u64, adopt: bool) {
        let tick = self.tick();
        if let Some(slot) = self.index.get(key) {
            slot.last_used.store(tick, Ordering::Relaxed);
            return;
        }
        if !adopt {
            return;
        }
        if let Entry::Vacant(slot) = self.index.entry(*key) {
            self.bytes.fetch_add(size, Ordering::Relaxed);
            slot.insert(Slot { size, last_used: AtomicU64::new(tick) });
        }
        self.evict_if_over();
    }

    /// Drops `key` from the index (not the file).
    fn forget(&self, key: &CacheKey) {
        if let Some((_, slot)) = self.index.remove(key) {
            self.bytes.fetch_sub(slot.size, Ordering::Relaxed);
        }
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// Past the cap, deletes least recently used entries down to 90 % of it.
    /// One thread evicts at a time; others carry on, over the cap until it is done.
    fn evict_if_over(&self) {
        if self.bytes.load(Ordering::Relaxed) <= self.max_bytes {
            return;
        }
        if self.evicting.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return;
        }
        let _release = ReleaseOnDrop(&self.evicting);
        let target = self.max_bytes / 10 * EVICT_TO_TENTHS;
        // A snapshot: the map is not locked while files are deleted.
        let mut by_age: Vec<(u64, CacheKey)> =
            self.index.iter().map(|slot| (slot.last_used.load(Ordering::Relaxed), *slot.key())).collect();
        by_age.sort_unstable();
        let mut evicted = 0;
        for (_, key) in by_age {
            if self.bytes.load(Ordering::Relaxed) <= target {
                break;
            }
            if let Some((_, slot)) = self.index.remove(&key) {
                self.bytes.fetch_sub(slot.size, Ordering::Relaxed);
                remove_quietly(&self.path(&key));
                evicted += 1;
            }
        }
        self.counters.evicted(evicted);
        debug!(evicted, bytes = self.bytes(), "disk cache evicted");
    }

    /// Deletes every entry this tier knows of; returns how many.
    pub fn clear(&self) -> u64 {
        let keys: Vec<CacheKey> = self.index.iter().map(|slot| *slot.key()).collect();
        let mut removed = 0;
        for key in keys {
            if let Some((_, slot)) = self.index.remove(&key) {
                self.bytes.fetch_sub(slot.size, Ordering::Relaxed);
                remove_quietly(&self.path(&key));
                removed += 1;
            }
        }
        removed
    }

    /// Where `key`'s entry lives.
    pub fn path(&self, key: &CacheKey) -> PathBuf {
        let hex = key_hex(key);
        self.dir.join(&hex[..2]).join(hex)
    }

    /// The tier's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The size cap.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Bytes of the entries this tier knows of.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Entries this tier knows of.
    pub fn entries(&self) -> u64 {
        self.index.len() as u64
    }

    /// This tier's row in a status report, named `disk`.
    pub fn status(&self) -> CacheTierStatus {
        self.counters.status("disk", self.bytes(), self.entries())
    }

    /// Counts an error found outside the tier (a lookup task that died).
    #[cfg(feature = "daemon")]
    pub(crate) fn count_error(&self) {
        self.counters.error();
    }
}

/// Gives back a flag taken with a compare-exchange when dropped, also on
/// panic. The Release store pairs with the Acquire of the next taker.
struct ReleaseOnDrop<'a>(&'a AtomicBool);

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Writes `parts` to a temp file beside `path` and renames it into place.
fn write_atomically(path: &Path, parts: &[&[u8]]) -> io::Result<()> {
    let dir = path.parent().ok_or_else(|| io::Error::other("entry path has no parent"))?;
    let prefix = format!("{TEMP_PREFIX}{}-", std::process::id());
    let temp = || tempfile::Builder::new().prefix(&prefix).tempfile_in(dir);
    // The shard directory exists but for the first entry in it: make it only then.
    let mut tmp = match temp() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(dir)?;
            temp()?
        }
        other => other?,
    };
    for part in parts {
        tmp.write_all(part)?;
    }
    // On error the temp file is deleted when `tmp` drops.
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Whether a temp file can be deleted: its writer is gone, or it is too old
/// to belong to a write in progress.
fn is_stale_temp(name: &str, modified: Option<SystemTime>) -> bool {
    if modified.and_then(|m| m.elapsed().ok()).is_some_and(|age| age >= TEMP_MAX_AGE) {
        return true;
    }
    let pid =
        name.strip_prefix(TEMP_PREFIX).and_then(|rest| rest.split('-').next()).and_then(|p| p.parse::<u32>().ok());
    match pid {
        // This process may have another tier on the same directory, writing now.
        Some(pid) if pid == std::process::id() => false,
        Some(pid) => !crate::host::process_runs(pid),
        None => true,
    }
}

fn remove_quietly(path: &Path) {
    if let Err(e) = fs::remove_file(path) {
        if e.kind() != io::ErrorKind::NotFound {
            warn!(path = %path.display(), error = %e, "cannot remove a cache file");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;
    use crate::cache::entry::tests::{key, sample};

    /// Entry files under `dir` (temp files excluded) and their total size.
    fn files_on_disk(dir: &Path) -> (u64, u64) {
        let (mut count, mut bytes) = (0, 0);
        for shard in fs::read_dir(dir).unwrap() {
            let shard = shard.unwrap();
            if !shard.file_type().unwrap().is_dir() {
                continue;
            }
            for f in fs::read_dir(shard.path()).unwrap() {
                let f = f.unwrap();
                if parse_key_hex(f.file_name().to_str().unwrap()).is_some() {
                    count += 1;
                    bytes += f.metadata().unwrap().len();
                }
            }
        }
        (count, bytes)
    }

    fn entry_size(n: u32, object_len: usize) -> u64 {
        let r = sample(n as u8, object_len);
        (r.encode_head(&key(n)).len() + r.object.len()) as u64
    }

    fn set_mtime(path: &Path, ago: Duration) {
        let f = File::options().write(true).open(path).unwrap();
        f.set_modified(SystemTime::now() - ago).unwrap();
    }

    #[test]
    fn put_then_get_returns_the_same_result_from_a_content_addressed_file() {
        let dir = tempfile::tempdir().unwrap();
        let tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
        let r = sample(1, 3000);
        tier.put(&key(1), &r).unwrap();

        let hex = key_hex(&key(1));
        let path = dir.path().join(&hex[..2]).join(&hex);
        assert_eq!(tier.path(&key(1)), path);
        assert_eq!(fs::read(&path).unwrap(), r.encode(&key(1)));

        assert_eq!(tier.get(&key(1)), Some(r));
        assert_eq!(tier.get(&key(2)), None);
        let s = tier.status();
        assert_eq!((s.name.as_str(), s.hits, s.misses, s.entries, s.errors), ("disk", 1, 1, 1, 0));
        assert_eq!(s.bytes, fs::metadata(&path).unwrap().len());
    }

    #[test]
    fn a_reopened_tier_still_hits_and_knows_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let before = {
            let tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
            for n in 0..20 {
                tier.put(&key(n), &sample(n as u8, 500 + n as usize * 10)).unwrap();
            }
            (tier.entries(), tier.bytes())
        };
        assert_eq!(files_on_disk(dir.path()), before);
        let tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
        assert_eq!((tier.entries(), tier.bytes()), before);
        for n in 0..20 {
            assert_eq!(tier.get(&key(n)), Some(sample(n as u8, 500 + n as usize * 10)), "entry {n}");
        }
        assert_eq!(tier.status().hits, 20);
    }

    #[test]
    fn a_flipped_byte_is_a_miss_the_file_is_removed_and_the_error_counted() {
        let dir = tempfile::tempdir().unwrap();
        let tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
        tier.put(&key(1), &sample(1, 2000)).unwrap();
        let path = tier.path(&key(1));
        let mut bytes = fs::read(&path).unwrap();
        bytes[1500] ^= 0x40;
        fs::write(&path, &bytes).unwrap();

        assert_eq!(tier.get(&key(1)), None);
        assert!(!path.exists(), "a corrupt entry must be deleted");
        let s = tier.status();
        assert_eq!((s.hits, s.misses, s.errors, s.entries, s.bytes), (0, 1, 1, 0, 0));
        // It can be stored again afterwards.
        tier.put(&key(1), &sample(1, 2000)).unwrap();
        assert_eq!(tier.get(&key(1)), Some(sample(1, 2000)));
    }

    #[test]
    fn a_truncated_entry_is_a_miss_and_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
        tier.put(&key(1), &sample(1, 2000)).unwrap();
        let path = tier.path(&key(1));
        let len = fs::metadata(&path).unwrap().len();
        File::options().write(true).open(&path).unwrap().set_len(len - 1).unwrap();

        assert_eq!(tier.get(&key(1)), None);
        assert!(!path.exists());
        assert_eq!(tier.status().errors, 1);
    }

    #[test]
    fn open_removes_entries_too_short_to_be_one() {
        let dir = tempfile::tempdir().unwrap();
        {
            let tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
            tier.put(&key(1), &sample(1, 100)).unwrap();
            tier.put(&key(2), &sample(2, 100)).unwrap();
        }
        let short = dir.path().join(&key_hex(&key(2))[..2]).join(key_hex(&key(2)));
        File::options().write(true).open(&short).unwrap().set_len(10).unwrap();
        let tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
        assert!(!short.exists());
        assert_eq!((tier.entries(), tier.status().errors), (1, 1));
        assert_eq!(tier.bytes(), files_on_disk(dir.path()).1);
    }

    #[test]
    fn open_cleans_stray_temp_files_of_gone_writers_only() {
        let dir = tempfile::tempdir().unwrap();
        let shard = dir.path().join("ab");
        fs::create_dir_all(&shard).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        let of_gone = shard.join(format!("{TEMP_PREFIX}{gone}-x1"));
        let mine_fresh = shard.join(format!("{TEMP_PREFIX}{me}-x2"));
        let mine_old = shard.join(format!("{TEMP_PREFIX}{me}-x3"));
        let unnamed = shard.join(format!("{TEMP_PREFIX}junk"));
        for p in [&of_gone, &mine_fresh, &mine_old, &unnamed] {
            fs::write(p, b"half an entry").unwrap();
        }
        set_mtime(&mine_old, Duration::from_secs(2 * 3600));

        let tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
        assert!(!of_gone.exists(), "a temp file of a process that is gone must be removed");
        assert!(!mine_old.exists(), "an hour-old temp file must be removed");
        assert!(!unnamed.exists());
        assert!(mine_fresh.exists(), "a live writer's temp file must stay");
        assert_eq!((tier.entries(), tier.bytes()), (0, 0));
    }

    #[test]
    fn the_cap_evicts_least_recently_used_down_to_ninety_percent() {
        let dir = tempfile::tempdir().unwrap();
        let one = entry_size(0, 1000);
        // Room for ten; entry 10's stderr is one digit longer.
        let cap = one * 10 + 50;
        let tier = DiskTier::open(dir.path(), cap).unwrap();
        for n in 0..10 {
            tier.put(&key(n), &sample(n as u8, 1000)).unwrap();
        }
        assert_eq!(tier.status().evictions, 0);
        // Entry 0 is the oldest put, but used again now.
        assert!(tier.get(&key(0)).is_some());
        tier.put(&key(10), &sample(10, 1000)).unwrap();

        let s = tier.status();
        assert!(s.bytes <= cap / 10 * 9, "{} bytes over 90 % of {cap}", s.bytes);
        assert_eq!(s.evictions, 2, "{s:?}");
        assert_eq!(files_on_disk(dir.path()), (s.entries, s.bytes));
        assert!(!tier.path(&key(1)).exists() && !tier.path(&key(2)).exists(), "the two least recently used go");
        for n in [0, 3, 10] {
            assert!(tier.get(&key(n)).is_some(), "entry {n} should remain");
        }
    }

    #[test]
    fn hits_set_the_mtime_so_lru_order_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let one = entry_size(0, 1000);
        {
            let tier = DiskTier::open(dir.path(), one * 10).unwrap();
            for n in 0..3 {
                tier.put(&key(n), &sample(n as u8, 1000)).unwrap();
                set_mtime(&tier.path(&key(n)), Duration::from_secs(100 - u64::from(n)));
            }
            // Entry 0 has the oldest mtime; a hit makes it the newest.
            assert!(tier.get(&key(0)).is_some());
            let touched = fs::metadata(tier.path(&key(0))).unwrap().modified().unwrap();
            assert!(touched > SystemTime::now() - Duration::from_secs(50), "a hit must set the mtime");
        }
        // Reopen with room for two: the least recently used (entry 1) goes first.
        let tier = DiskTier::open(dir.path(), one * 2 + one / 2).unwrap();
        assert_eq!(tier.status().evictions, 1);
        assert!(tier.get(&key(0)).is_some() && tier.get(&key(2)).is_some());
        assert!(tier.get(&key(1)).is_none());
    }

    #[test]
    fn an_entry_larger_than_the_cap_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let tier = DiskTier::open(dir.path(), 1000).unwrap();
        let err = tier.put(&key(1), &sample(1, 2000)).unwrap_err();
        assert!(matches!(err, DiskError::TooLarge { max: 1000, .. }), "{err}");
        assert_eq!(files_on_disk(dir.path()), (0, 0));
    }

    #[test]
    fn a_file_removed_underneath_is_a_plain_miss() {
        let dir = tempfile::tempdir().unwrap();
        let tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
        tier.put(&key(1), &sample(1, 100)).unwrap();
        fs::remove_file(tier.path(&key(1))).unwrap();
        assert_eq!(tier.get(&key(1)), None);
        let s = tier.status();
        assert_eq!((s.misses, s.errors, s.entries, s.bytes), (1, 0, 0, 0));
    }

    #[test]
    fn a_write_that_cannot_happen_is_an_error_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
        // A regular file where the entry's subdirectory should be.
        let hex = key_hex(&key(1));
        fs::write(dir.path().join(&hex[..2]), b"in the way").unwrap();
        assert!(matches!(tier.put(&key(1), &sample(1, 100)), Err(DiskError::Write { .. })));
        assert_eq!((tier.entries(), tier.bytes(), tier.status().errors), (0, 0, 1));
    }

    #[test]
    fn threads_sharing_one_tier_never_see_a_partial_or_wrong_entry() {
        let dir = tempfile::tempdir().unwrap();
        let tier = DiskTier::open(dir.path(), 64 << 20).unwrap();
        std::thread::scope(|s| {
            for t in 0..6u32 {
                let tier = &tier;
                s.spawn(move || {
                    for i in 0..120u32 {
                        // Keys 0..20 are shared by every thread, the rest are the thread's own.
                        let n = if i % 2 == 0 { (i / 2) % 20 } else { 1000 + t * 1000 + i };
                        let want = sample(n as u8, 800 + (n as usize % 5) * 100);
                        tier.put(&key(n), &want).unwrap();
                        assert_eq!(tier.get(&key(n)), Some(want), "thread {t} key {n}");
                    }
                });
            }
        });
        let s = tier.status();
        assert_eq!((s.errors, s.hits, s.entries), (0, 720, 20 + 6 * 60));
        assert_eq!(files_on_disk(dir.path()), (s.entries, s.bytes));
    }

    #[test]
    fn two_tiers_on_one_directory_share_entries_without_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let a = DiskTier::open(dir.path(), 64 << 20).unwrap();
        let b = DiskTier::open(dir.path(), 64 << 20).unwrap();
        std::thread::scope(|s| {
            for (t, tier) in [(0u32, &a), (1, &b), (2, &a), (3, &b)] {
                s.spawn(move || {
                    for i in 0..100u32 {
                        let n = (i * 3 + t) % 40;
                        let want = sample(n as u8, 1500);
                        if i % 3 == 0 {
                            tier.put(&key(n), &want).unwrap();
                        } else if let Some(got) = tier.get(&key(n)) {
                            assert_eq!(got, want, "tier {t} key {n}");
                        }
                    }
                });
            }
        });
        assert_eq!(a.status().errors + b.status().errors, 0);
        // Whatever one wrote, the other reads, and adopts into its index.
        for n in 0..40 {
            if a.get(&key(n)).is_some() {
                assert_eq!(b.get(&key(n)), Some(sample(n as u8, 1500)));
            }
        }
        assert_eq!(a.entries(), b.entries());
        assert_eq!(files_on_disk(dir.path()), (b.entries(), b.bytes()));
    }
}
