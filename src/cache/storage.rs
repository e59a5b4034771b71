//! The tiers together: memory → disk → Redis.
//!
//! [`Storage::get`] asks each configured tier in turn and returns the first
//! hit, back-filling the faster tiers with it. [`Storage::put`] keeps the
//! result in memory at once and writes the disk and Redis tiers in the
//! background. Background writes are bounded per tier
//! ([`StorageConfig::max_pending_writes`]): a write that finds the bound
//! reached is dropped and counted, so a slow disk or a dead Redis never
//! builds a queue. Every failure is a miss.
//!
//! Disk calls run on tokio's blocking pool; Redis calls are bounded by their
//! own timeout. Background writes hold a permit of their tier's semaphore;
//! [`Storage::flush`] waits for all of them (tests, shutdown).
//!
//! Left out: deduplicating identical work in flight and refusing poisoned
//! results; the scheduler's cache hook does both and fills the matching
//! [`CacheStatus`] fields.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ccroute_wire::{CacheKey, CacheStatus};
use thiserror::Error;
use tokio::runtime::Handle;
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use super::{CachedResult, DiskError, DiskTier, MemoryTier, RedisConfig, RedisTier, RedisTierError};

/// How the tiers are sized and where they live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageConfig {
    /// The memory tier's bound, in bytes.
    pub memory_bytes: u64,
    /// The disk tier's directory; `None` for no disk tier.
    pub disk_dir: Option<PathBuf>,
    /// The disk tier's size cap, in bytes.
    pub disk_bytes: u64,
    /// The Redis tier; `None` for none.
    pub redis: Option<RedisConfig>,
    /// Background writes in flight per tier before new ones are dropped.
    pub max_pending_writes: u32,
}

impl Default for StorageConfig {
    /// 256 MiB of memory; a 10 GiB disk cap once a directory is given (see
    /// [`super::default_dir`]); no Redis; 64 pending writes per tier.
    fn default() -> Self {
        StorageConfig {
            memory_bytes: 256 << 20,
            disk_dir: None,
            disk_bytes: 10 << 30,
            redis: None,
            max_pending_writes: 64,
        }
    }
}

impl StorageConfig {
    /// Sets the memory tier's bound.
    pub fn with_memory_bytes(mut self, bytes: u64) -> Self {
        self.memory_bytes = bytes;
        self
    }

    /// Adds a disk tier under `dir`.
    pub fn with_disk(mut self, dir: impl Into<PathBuf>) -> Self {
        self.disk_dir = Some(dir.into());
        self
    }

    /// Sets the disk tier's cap.
    pub fn with_disk_bytes(mut self, bytes: u64) -> Self {
        self.disk_bytes = bytes;
        self
    }

    /// Adds a Redis tier.
    pub fn with_redis(mut self, redis: RedisConfig) -> Self {
        self.redis = Some(redis);
        self
    }

    /// Sets the bound on background writes per tier (at least 1).
    pub fn with_max_pending_writes(mut self, n: u32) -> Self {
        self.max_pending_writes = n.max(1);
        self
    }
}

/// Why the storage could not be opened.
#[derive(Debug, Error)]
pub enum StorageError {
    /// The disk tier could not be opened.
    #[error(transparent)]
    Disk(#[from] DiskError),
    /// The Redis tier is misconfigured.
    #[error(transparent)]
    Redis(#[from] RedisTierError),
    /// The task opening the disk tier died.
    #[error("opening the disk cache failed: {0}")]
    OpenTask(String),
    /// [`Storage::open`] was polled outside a tokio runtime.
    #[error("the cache storage needs a tokio runtime")]
    NoRuntime,
}

/// A background writer of one tier: the tier and its bound.
#[derive(Debug)]
struct Writer<T> {
    tier: Arc<T>,
    slots: Arc<Semaphore>,
    /// Writes dropped because `slots` was empty; a statistic (Relaxed).
    dropped: AtomicU64,
}

impl<T> Writer<T> {
    fn new(tier: T, slots: u32) -> Self {
        Writer { tier: Arc::new(tier), slots: Arc::new(Semaphore::new(slots as usize)), dropped: AtomicU64::new(0) }
    }

    /// A slot for one background write, or `None` (counted) when all are taken.
    fn slot(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let slot = Arc::clone(&self.slots).try_acquire_owned().ok();
        if slot.is_none() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        slot
    }

    /// Waits until no background write of this tier is running.
    async fn idle(&self, slots: u32) {
        // Holding every slot at once means none is in use; closed never happens.
        let _all = self.slots.acquire_many(slots).await;
    }

    fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The result cache's tiers behind one get/put.
#[derive(Debug)]
pub struct Storage {
    memory: MemoryTier,
    disk: Option<Writer<DiskTier>>,
    redis: Option<Writer<RedisTier>>,
    max_pending_writes: u32,
    runtime: Handle,
    /// The background writes to the disk and Redis tiers ([`Storage::close`]
    /// waits for all of them; [`Storage::flush`] for those started so far).
    writes: TaskTracker,
    /// Lookups and lookups answered by any tier; statistics (Relaxed).
    lookups: AtomicU64,
    hits: AtomicU64,
}

impl Storage {
    /// Opens the configured tiers: scans the disk directory (on the blocking
    /// pool) and prepares Redis without connecting. Must run inside a tokio
    /// runtime, which then runs the background writes.
    ///
    /// # Errors
    /// [`StorageError`] when the disk directory cannot be opened, the Redis
    /// URL does not parse, or there is no tokio runtime.
    pub async fn open(config: StorageConfig) -> Result<Storage, StorageError> {
        let runtime = Handle::try_current().map_err(|_| StorageError::NoRuntime)?;
        let slots = config.max_pending_writes.max(1);
        let disk = match config.disk_dir {
            Some(dir) => {
                let cap = config.disk_bytes;
                let tier = tokio::task::spawn_blocking(move || DiskTier::open(dir, cap))
                    .await
                    .map_err(|e| StorageError::OpenTask(e.to_string()))??;
                Some(Writer::new(tier, slots))
            }
            None => None,
        };
        let redis = match config.redis {
            Some(redis) => Some(Writer::new(RedisTier::new(redis)?, slots)),
            None => None,
        };
        Ok(Storage {
            memory: MemoryTier::new(config.memory_bytes),
            disk,
            redis,
            max_pending_writes: slots,
            runtime,
            writes: TaskTracker::new(),
            lookups: AtomicU64::new(0),
            hits: AtomicU64::new(0),
        })
    }

    /// The result under `key` from the fastest tier that has it, back-filling
    /// the faster ones; `None` when no tier has it or every tier that might
    /// failed (counted in that tier's errors).
    pub async fn get(&self, key: &CacheKey) -> Option<CachedResult> {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let found = self.lookup(key).await;
        if found.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    async fn lookup(&self, key: &CacheKey) -> Option<CachedResult> {
        if let Some(hit) = self.memory.get(key) {
            return Some(hit);
        }
        if let Some(disk) = &self.disk {
            let tier = Arc::clone(&disk.tier);
            let k = *key;
            match tokio::task::spawn_blocking(move || tier.get(&k)).await {
                Ok(Some(hit)) => {
                    self.memory.insert(*key, hit.clone());
                    return Some(hit);
                }
                Ok(None) => {}
                Err(e) => {
                    disk.tier.count_error();
                    warn!(error = %e, "disk cache lookup task failed");
                }
            }
        }
        if let Some(redis) = &self.redis {
            if let Some(hit) = redis.tier.get(key).await {
                self.memory.insert(*key, hit.clone());
                self.write_disk(*key, hit.clone());
                return Some(hit);
            }
        }
        None
    }

    /// Stores `result` under `key`: in memory now, on disk and in Redis in the
    /// background (dropped and counted when that tier's bound is reached).
    pub fn put(&self, key: CacheKey, result: CachedResult) {
        self.memory.insert(key, result.clone());
        self.write_disk(key, result.clone());
        if let Some(redis) = &self.redis {
            let Some(slot) = redis.slot() else {
                debug!("redis cache write dropped: too many pending");
                return;
            };
            let tier = Arc::clone(&redis.tier);
            self.writes.spawn_on(
                async move {
                    // Failures are counted by the tier.
                    let _ = tier.put(&key, &result).await;
                    drop(slot);
                },
                &self.runtime,
            );
        }
    }

    fn write_disk(&self, key: CacheKey, result: CachedResult) {
        let Some(disk) = &self.disk else { return };
        let Some(slot) = disk.slot() else {
            debug!("disk cache write dropped: too many pending");
            return;
        };
        let tier = Arc::clone(&disk.tier);
        self.writes.spawn_blocking_on(
            move || {
                if let Err(e) = tier.put(&key, &result) {
                    warn!(error = %e, "disk cache write failed");
                }
                drop(slot);
            },
            &self.runtime,
        );
    }

    /// Stops taking part in the daemon's life: waits for every background
    /// write, started so far or until then, to finish (the scheduler calls
    /// it as it shuts down, so that no result it accepted is lost).
    pub async fn close(&self) {
        self.writes.close();
        self.writes.wait().await;
    }

    /// Waits until every background write started so far has finished.
    pub async fn flush(&self) {
        if let Some(disk) = &self.disk {
            disk.idle(self.max_pending_writes).await;
        }
        if let Some(redis) = &self.redis {
            redis.idle(self.max_pending_writes).await;
        }
    }

    /// Every tier's counters and the overall hit ratio. A tier's `errors`
    /// include its background writes dropped for being over the bound.
    /// `poison_rejected` and `deduplicated` are left 0 for the scheduler.
    pub fn stats(&self) -> CacheStatus {
        let mut tiers = vec![self.memory.status()];
        if let Some(disk) = &self.disk {
            let mut row = disk.tier.status();
            row.errors += disk.dropped();
            tiers.push(row);
        }
        if let Some(redis) = &self.redis {
            let mut row = redis.tier.status();
            row.errors += redis.dropped();
            tiers.push(row);
        }
        let lookups = self.lookups.load(Ordering::Relaxed);
        let hits = self.hits.load(Ordering::Relaxed);
        let hit_ratio = if lookups == 0 { 0.0 } else { (hits as f64 / lookups as f64) as f32 };
        CacheStatus { tiers, hit_ratio, poison_rejected: 0, deduplicated: 0 }
    }

    /// Background writes dropped because their tier's bound was reached.
    pub fn dropped_writes(&self) -> u64 {
        self.disk.as_ref().map_or(0, Writer::dropped) + self.redis.as_ref().map_or(0, Writer::dropped)
    }

    /// The memory tier.
    pub fn memory(&self) -> &MemoryTier {
        &self.memory
    }

    /// The disk tier, if configured.
    pub fn disk(&self) -> Option<&DiskTier> {
        self.disk.as_ref().map(|w| &*w.tier)
    }

    /// The Redis tier, if configured.
    pub fn redis(&self) -> Option<&RedisTier> {
        self.redis.as_ref().map(|w| &*w.tier)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::cache::entry::tests::{key, sample};
    use crate::cache::test_redis::RedisServer;

    fn row<'a>(stats: &'a CacheStatus, name: &str) -> &'a ccroute_wire::CacheTierStatus {
        stats.tiers.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("no {name} tier in {stats:?}"))
    }

    #[tokio::test]
    async fn a_disk_hit_back_fills_memory() {
        let dir = tempfile::tempdir().unwrap();
        {
            let storage = Storage::open(StorageConfig::default().with_disk(dir.path())).await.unwrap();
            storage.put(key(1), sample(1, 5000));
            storage.flush().await;
        }
        // A restart: memory is empty, the disk is not.
        let storage = Storage::open(StorageConfig::default().with_disk(dir.path())).await.unwrap();
        assert_eq!(storage.get(&key(1)).await, Some(sample(1, 5000)));
        assert_eq!(storage.memory().entries(), 1, "the disk hit must be back-filled into memory");
        assert_eq!(storage.get(&key(1)).await, Some(sample(1, 5000)));
        assert_eq!(storage.get(&key(2)).await, None);

        let stats = storage.stats();
        let (memory, disk) = (row(&stats, "memory"), row(&stats, "disk"));
        assert_eq!((memory.hits, memory.misses), (1, 2));
        assert_eq!((disk.hits, disk.misses, disk.entries), (1, 1, 1));
        assert!((stats.hit_ratio - 2.0 / 3.0).abs() < 1e-6, "hit ratio {}", stats.hit_ratio);
    }

    #[tokio::test]
    async fn two_storages_sharing_one_redis_see_each_others_puts() {
        let server = RedisServer::start();
        let config = StorageConfig::default().with_redis(RedisConfig::new(server.url()));
        let a = Storage::open(config.clone()).await.unwrap();
        let b = Storage::open(config).await.unwrap();

        a.put(key(1), sample(1, 3000));
        a.flush().await;
        assert_eq!(b.get(&key(1)).await, Some(sample(1, 3000)));
        assert_eq!(b.memory().entries(), 1, "a redis hit is back-filled into memory");
        b.put(key(2), sample(2, 10));
        b.flush().await;
        assert_eq!(a.get(&key(2)).await, Some(sample(2, 10)));

        let stats = b.stats();
        assert_eq!(row(&stats, "redis").hits, 1);
        assert_eq!(row(&stats, "redis").errors, 0);
    }

    #[tokio::test]
    async fn a_redis_hit_back_fills_the_disk_too() {
        let server = RedisServer::start();
        let dir = tempfile::tempdir().unwrap();
        let writer = Storage::open(StorageConfig::default().with_redis(RedisConfig::new(server.url()))).await.unwrap();
        writer.put(key(1), sample(1, 100));
        writer.flush().await;

        let reader = StorageConfig::default().with_disk(dir.path()).with_redis(RedisConfig::new(server.url()));
        let storage = Storage::open(reader).await.unwrap();
        assert!(storage.get(&key(1)).await.is_some());
        storage.flush().await;
        assert_eq!(storage.disk().map(DiskTier::entries), Some(1));
    }

    #[tokio::test]
    async fn a_corrupt_disk_entry_is_a_miss_and_redis_answers_instead() {
        let server = RedisServer::start();
        let dir = tempfile::tempdir().unwrap();
        let config = StorageConfig::default().with_disk(dir.path()).with_redis(RedisConfig::new(server.url()));
        {
            let storage = Storage::open(config.clone()).await.unwrap();
            storage.put(key(1), sample(1, 2000));
            storage.flush().await;
            let path = storage.disk().unwrap().path(&key(1));
            let mut bytes = std::fs::read(&path).unwrap();
            bytes[100] ^= 0xff;
            std::fs::write(&path, bytes).unwrap();
        }
        let storage = Storage::open(config).await.unwrap();
        assert_eq!(storage.get(&key(1)).await, Some(sample(1, 2000)));
        let stats = storage.stats();
        assert_eq!((row(&stats, "disk").errors, row(&stats, "disk").hits), (1, 0));
        assert_eq!(row(&stats, "redis").hits, 1);
        // The disk is repaired by the back-fill.
        storage.flush().await;
        assert_eq!(storage.disk().unwrap().get(&key(1)), Some(sample(1, 2000)));
    }

    #[tokio::test]
    async fn a_dead_redis_is_a_miss_and_the_other_tiers_still_work() {
        let mut server = RedisServer::start();
        let dir = tempfile::tempdir().unwrap();
        let redis = RedisConfig::new(server.url()).with_backoff(Duration::from_millis(50));
        let storage = Storage::open(StorageConfig::default().with_disk(dir.path()).with_redis(redis)).await.unwrap();
        storage.put(key(1), sample(1, 100));
        storage.flush().await;
        server.kill();

        storage.put(key(2), sample(2, 100));
        storage.flush().await;
        assert_eq!(storage.get(&key(2)).await, Some(sample(2, 100)), "memory still answers");
        let lookup = tokio::time::timeout(Duration::from_secs(5), storage.get(&key(3))).await;
        assert_eq!(lookup.expect("a dead redis must not stall a lookup"), None);
        let stats = storage.stats();
        assert!(row(&stats, "redis").errors >= 2, "the failed put and get are counted: {stats:?}");
        assert_eq!(row(&stats, "disk").errors, 0);

        // Redis comes back (empty): writes and reads go through it again.
        let _server = RedisServer::start_on(server.port());
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            storage.put(key(4), sample(4, 10));
            storage.flush().await;
            if storage.redis().unwrap().puts() >= 2 {
                break;
            }
            assert!(Instant::now() < deadline, "storage did not get redis back");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let other = Storage::open(StorageConfig::default().with_redis(RedisConfig::new(_server.url()))).await.unwrap();
        assert_eq!(other.get(&key(4)).await, Some(sample(4, 10)));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn background_writes_past_the_bound_are_dropped_and_counted() {
        // A Redis that accepts and never answers keeps each write pending for its timeout.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let black_hole = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((sock, _)) = listener.accept().await {
                held.push(sock);
            }
        });
        let redis = RedisConfig::new(format!("redis://127.0.0.1:{port}/")).with_timeout(Duration::from_millis(100));
        let storage =
            Storage::open(StorageConfig::default().with_redis(redis).with_max_pending_writes(2)).await.unwrap();
        // Nothing else runs on this runtime until the test yields: two writes
        // take the slots and the other three find none.
        for n in 0..5 {
            storage.put(key(n), sample(n as u8, 10));
        }
        assert_eq!(storage.dropped_writes(), 3);
        storage.flush().await;
        assert_eq!(storage.memory().entries(), 5, "memory keeps every put");
        let stats = storage.stats();
        assert_eq!(row(&stats, "redis").errors, 3 + 2, "dropped writes and the timed-out one are errors: {stats:?}");
        black_hole.abort();
    }

    #[tokio::test]
    async fn an_unusable_disk_directory_is_an_open_error() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let err = Storage::open(StorageConfig::default().with_disk(file.path())).await.unwrap_err();
        assert!(matches!(err, StorageError::Disk(DiskError::Open { .. })), "{err}");
    }

    #[tokio::test]
    async fn an_idle_storage_reports_every_tier_and_a_zero_ratio() {
        let dir = tempfile::tempdir().unwrap();
        let redis = RedisConfig::new("redis://127.0.0.1:1/");
        let storage = Storage::open(StorageConfig::default().with_disk(dir.path()).with_redis(redis)).await.unwrap();
        let stats = storage.stats();
        let names: Vec<&str> = stats.tiers.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["memory", "disk", "redis"]);
        assert_eq!(stats.hit_ratio, 0.0);
    }
}
