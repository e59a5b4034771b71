//! The result cache's storage tiers.
//!
//! A cached compile is a [`CachedResult`]; tiers file it under its
//! [`CacheKey`], which the scheduler derives from the
//! bytes actually compiled (so a client cannot poison the cache for others).
//!
//! - [`entry`]: [`CachedResult`] and the checksummed form stored on disk and
//!   in Redis.
//! - [`memory`]: [`MemoryTier`], concurrent and bounded by bytes.
//! - [`disk`]: [`DiskTier`], content-addressed files with an LRU size cap
//!   (synchronous `std::fs`).
//! - `redis` (feature `daemon`): [`RedisTier`], shared between schedulers,
//!   with a short timeout and back-off so a dead Redis costs only misses.
//! - `storage` (feature `daemon`): [`Storage`], memory → disk → Redis with
//!   back-fill and bounded background writes.
//! - [`default_dir`]: where a user's disk tier goes by default.
//!
//! Every tier degrades to a miss: an error is counted, never returned to a
//! lookup. Left out: deciding *what* to cache and answering tasks (the
//! scheduler's cache hook does that), and expiry beyond Redis's TTL.

pub mod disk;
pub mod entry;
pub mod memory;
#[cfg(feature = "daemon")]
pub mod redis;
#[cfg(feature = "daemon")]
pub mod storage;
#[cfg(all(test, feature = "daemon"))]
mod test_redis;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use ccroute_wire::{CacheKey, CacheTierStatus};
use crossbeam_utils::CachePadded;

pub use disk::{DiskError, DiskTier};
pub use entry::{CachedResult, EntryError, UncacheableError};
pub use memory::MemoryTier;
#[cfg(feature = "daemon")]
pub use redis::{RedisConfig, RedisTier, RedisTierError};
#[cfg(feature = "daemon")]
pub use storage::{Storage, StorageConfig, StorageError};

/// The user's cache directory for ccroute: `$XDG_CACHE_HOME/ccroute`, else
/// `$HOME/.cache/ccroute`; `None` when neither is set (a relative
/// `XDG_CACHE_HOME` is ignored, as the XDG spec asks).
pub fn default_dir() -> Option<PathBuf> {
    cache_home(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME")).map(|dir| dir.join("ccroute"))
}

fn cache_home(xdg_cache_home: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    let absolute = |v: Option<OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    absolute(xdg_cache_home).or_else(|| absolute(home).map(|home| home.join(".cache")))
}

/// A tier's event counters. Each is a statistic: `Relaxed` throughout, as no
/// other memory is published through them.
#[derive(Debug, Default)]
pub(crate) struct TierCounters {
    hits: CachePadded<AtomicU64>,
    misses: CachePadded<AtomicU64>,
    evictions: AtomicU64,
    errors: AtomicU64,
}

impl TierCounters {
    pub(crate) fn hit(&self) {
        self.hits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn miss(&self) {
        self.misses.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn evicted(&self, n: u64) {
        self.evictions.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters as a status row, with the tier's current size.
    pub(crate) fn status(&self, name: &str, bytes: u64, entries: u64) -> CacheTierStatus {
        CacheTierStatus {
            name: name.to_owned(),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bytes,
            entries,
            evictions: self.evictions.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }
}

/// The key as 64 lowercase hex digits: file names on disk, key names in Redis.
pub(crate) fn key_hex(key: &CacheKey) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(64);
    for b in key.0 {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// The key written by [`key_hex`]; `None` for anything else (uppercase too,
/// so that one key has one name).
pub(crate) fn parse_key_hex(s: &str) -> Option<CacheKey> {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    let s = s.as_bytes();
    if s.len() != 64 {
        return None;
    }
    let mut key = [0; 32];
    for (i, pair) in s.chunks_exact(2).enumerate() {
        key[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(CacheKey(key))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;

    #[test]
    fn key_hex_round_trips_and_refuses_other_spellings() {
        let key = CacheKey(std::array::from_fn(|i| (i * 37) as u8));
        let hex = key_hex(&key);
        assert_eq!(&hex[..6], "00254a");
        assert_eq!(parse_key_hex(&hex), Some(key));
        assert_eq!(parse_key_hex(&hex.to_uppercase()), None);
        assert_eq!(parse_key_hex(&hex[..62]), None);
        assert_eq!(parse_key_hex(&format!("{}zz", &hex[..62])), None);
    }

    #[test]
    fn the_default_dir_follows_xdg_then_home() {
        let some = |s: &str| Some(OsString::from(s));
        assert_eq!(cache_home(some("/x/cache"), some("/home/u")), Some(PathBuf::from("/x/cache")));
        assert_eq!(cache_home(some("relative"), some("/home/u")), Some(PathBuf::from("/home/u/.cache")));
        assert_eq!(cache_home(None, some("/home/u")), Some(PathBuf::from("/home/u/.cache")));
        assert_eq!(cache_home(None, None), None);
        assert!(default_dir().is_none_or(|d| d.ends_with("ccroute")));
    }
}
