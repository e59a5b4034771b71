//! The memory tier: recent results, bounded by total bytes.
//!
//! [`MemoryTier`] wraps `quick_cache`'s sharded cache with a byte weigher:
//! each shard has its own lock, so lookups from many connections contend only
//! when they hash to the same shard, never on a global lock. Eviction is
//! quick_cache's scan-resistant policy (a Clock-PRO variant close to
//! S3-FIFO), which keeps entries that are hit again over a run of one-offs.
//!
//! A shard holds at most its share of the capacity, so an entry larger than
//! [`MemoryTier::max_entry_bytes`] is not kept here (the disk and Redis tiers
//! still take it); such refusals are not counted as evictions.
//!
//! Left out: persistence and expiry.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ccroute_wire::{CacheKey, CacheTierStatus};
use quick_cache::sync::Cache;
use quick_cache::{DefaultHashBuilder, Lifecycle, OptionsBuilder, Weighter};

use super::{CachedResult, TierCounters};

/// Bytes charged per entry beyond its buffers: the key, the struct, the
/// cache's own bookkeeping. An estimate, so that many tiny entries still
/// respect the bound.
pub const ENTRY_OVERHEAD: u64 = 192;

/// Shards are never made smaller than this, so that large objects fit in one.
const MIN_SHARD_BYTES: u64 = 16 << 20;

/// Guess at an average entry, only to size quick_cache's tables.
const TYPICAL_ENTRY_BYTES: u64 = 32 << 10;

#[derive(Debug, Clone, Copy)]
struct ByteWeigher;

impl Weighter<CacheKey, CachedResult> for ByteWeigher {
    fn weight(&self, _key: &CacheKey, val: &CachedResult) -> u64 {
        val.held_bytes() + ENTRY_OVERHEAD
    }
}

/// Counts evictions and defers dropping the evicted buffers until the shard
/// lock is released.
#[derive(Debug, Clone)]
struct CountEvictions(Arc<TierCounters>);

impl Lifecycle<CacheKey, CachedResult> for CountEvictions {
    type RequestState = Vec<CachedResult>;

    fn on_evict(&self, state: &mut Self::RequestState, _key: CacheKey, val: CachedResult) {
        self.0.evicted(1);
        state.push(val);
    }
}

/// Concurrent in-memory results, bounded by bytes.
pub struct MemoryTier {
    cache: Cache<CacheKey, CachedResult, ByteWeigher, DefaultHashBuilder, CountEvictions>,
    counters: Arc<TierCounters>,
    max_entry: u64,
    /// Entries refused because they exceed `max_entry`; a statistic (Relaxed).
    too_large: AtomicU64,
}

impl std::fmt::Debug for MemoryTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryTier")
            .field("capacity", &self.cache.capacity())
            .field("bytes", &self.cache.weight())
            .field("entries", &self.cache.len())
            .finish_non_exhaustive()
    }
}

impl MemoryTier {
    /// A tier holding at most `max_bytes` (entries' buffers plus
    /// [`ENTRY_OVERHEAD`] each). Zero holds nothing.
    pub fn new(max_bytes: u64) -> Self {
        let cpus = std::thread::available_parallelism().map_or(4, usize::from);
        let by_size = usize::try_from((max_bytes / MIN_SHARD_BYTES).max(1)).unwrap_or(usize::MAX);
        let shards = (cpus * 4).min(by_size).max(1);
        let items = usize::try_from((max_bytes / TYPICAL_ENTRY_BYTES).max(1)).unwrap_or(usize::MAX);
        let counters = Arc::new(TierCounters::default());
        let options =
            OptionsBuilder::new().shards(shards).estimated_items_capacity(items).weight_capacity(max_bytes).build();
        let lifecycle = CountEvictions(Arc::clone(&counters));
        let cache = match options {
            Ok(options) => Cache::with_options(options, ByteWeigher, DefaultHashBuilder::default(), lifecycle),
            // Every option above is set; the builder refuses only missing ones.
            Err(_) => Cache::with(items, max_bytes, ByteWeigher, DefaultHashBuilder::default(), lifecycle),
        };
        // quick_cache refuses an entry heavier than ~97 % of a shard; stay
        // below that so a refusal is always ours and never looks like an eviction.
        let max_entry = cache.shard_capacity() / 10 * 9;
        MemoryTier { cache, counters, max_entry, too_large: AtomicU64::new(0) }
    }

    /// The result under `key`, counting a hit or a miss.
    ///
    /// Locks: one shard's read lock, for the lookup and the clone of a few `Bytes`.
    pub fn get(&self, key: &CacheKey) -> Option<CachedResult> {
        let found = self.cache.get(key);
        match found {
            Some(_) => self.counters.hit(),
            None => self.counters.miss(),
        }
        found
    }

    /// Keeps `result` under `key`, evicting others as needed. Returns false,
    /// keeping nothing, when the entry is larger than [`Self::max_entry_bytes`].
    ///
    /// Locks: one shard's write lock; evicted buffers are freed after it is released.
    pub fn insert(&self, key: CacheKey, result: CachedResult) -> bool {
        if ByteWeigher.weight(&key, &result) > self.max_entry {
            self.too_large.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.cache.insert(key, result);
        true
    }

    /// The largest entry this tier keeps, overhead included.
    pub fn max_entry_bytes(&self) -> u64 {
        self.max_entry
    }

    /// Bytes held now, overhead included.
    pub fn bytes(&self) -> u64 {
        self.cache.weight()
    }

    /// Entries held now.
    pub fn entries(&self) -> u64 {
        self.cache.len() as u64
    }

    /// The bound this tier keeps.
    pub fn capacity(&self) -> u64 {
        self.cache.capacity()
    }

    /// Entries refused for being larger than [`Self::max_entry_bytes`].
    pub fn too_large(&self) -> u64 {
        self.too_large.load(Ordering::Relaxed)
    }

    /// This tier's row in a status report, named `memory`.
    pub fn status(&self) -> CacheTierStatus {
        self.counters.status("memory", self.bytes(), self.entries())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;
    use crate::cache::entry::tests::{key, sample};

    #[test]
    fn the_byte_bound_holds_under_many_inserts_and_evictions_are_counted() {
        let tier = MemoryTier::new(1 << 20);
        let mut inserted_bytes = 0;
        for n in 0..2000 {
            let r = sample(n as u8, 1000 + (n as usize % 7) * 300);
            inserted_bytes += r.held_bytes() + ENTRY_OVERHEAD;
            assert!(tier.insert(key(n), r));
            assert!(tier.bytes() <= 1 << 20, "{} bytes held after insert {n}", tier.bytes());
        }
        assert!(inserted_bytes > 3 << 20, "the test must overfill the tier");
        let status = tier.status();
        assert_eq!(status.entries, tier.entries());
        assert!(status.bytes > (1 << 20) / 2, "the tier should be well used, holds {}", status.bytes);
        // Every insert is either still held or was evicted.
        assert_eq!(status.evictions + status.entries, 2000, "{status:?}");
        assert_eq!(tier.too_large(), 0);
    }

    #[test]
    fn hits_return_the_same_bytes_and_are_counted() {
        let tier = MemoryTier::new(64 << 20);
        let r = sample(9, 5000);
        tier.insert(key(1), r.clone());
        assert_eq!(tier.get(&key(1)), Some(r));
        assert_eq!(tier.get(&key(2)), None);
        let s = tier.status();
        assert_eq!((s.name.as_str(), s.hits, s.misses, s.entries), ("memory", 1, 1, 1));
    }

    #[test]
    fn an_entry_larger_than_a_shard_is_refused_not_evicted() {
        let tier = MemoryTier::new(1 << 20);
        let big = sample(1, tier.max_entry_bytes() as usize);
        assert!(!tier.insert(key(1), big));
        assert_eq!(tier.get(&key(1)), None);
        assert_eq!((tier.too_large(), tier.status().evictions, tier.entries()), (1, 0, 0));
    }

    #[test]
    fn a_zero_capacity_tier_holds_nothing() {
        let tier = MemoryTier::new(0);
        assert!(!tier.insert(key(1), sample(1, 1)));
        assert_eq!(tier.get(&key(1)), None);
    }

    #[test]
    fn concurrent_readers_and_writers_see_whole_entries() {
        let tier = MemoryTier::new(256 << 10);
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let tier = &tier;
                s.spawn(move || {
                    for i in 0..500u32 {
                        let n = (i * 7 + t) % 300;
                        if i % 2 == 0 {
                            tier.insert(key(n), sample(n as u8, 700));
                        } else if let Some(r) = tier.get(&key(n)) {
                            assert_eq!(r, sample(n as u8, 700));
                        }
                    }
                });
            }
        });
        assert!(tier.bytes() <= 256 << 10);
        let s = tier.status();
        assert_eq!(s.hits + s.misses, 1000);
    }
}
