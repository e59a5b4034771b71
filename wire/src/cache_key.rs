//! Result-cache keys.
//!
//! A key is blake3 over an unambiguous encoding of everything that decides
//! the object's bytes: the toolchain key (which covers a hash of the compiler
//! binaries), the encoded [`crate::TaskSpec`] (the normalized remote
//! arguments) and the preprocessed source. Every field is length-prefixed, so
//! no two different inputs share an encoding (kubecc's md5 over concatenated
//! fields did not, its B17).
//!
//! The consumerd computes the key; the scheduler re-derives it from the bytes
//! it actually forwards, chunk by chunk, with [`CacheKeyHasher`], and stores a
//! result only when the two agree.

use crate::message::CacheKey;
use crate::toolchain::{put_field, ToolchainKey};

const DOMAIN: &[u8] = b"ccroute cache key v1";

/// Incremental cache-key derivation: feed the source in any chunking.
#[derive(Debug, Clone)]
pub struct CacheKeyHasher {
    hasher: blake3::Hasher,
    remaining: u64,
}

impl CacheKeyHasher {
    /// Starts a key for `source_len` bytes of preprocessed source.
    pub fn new(toolchain: ToolchainKey, spec: &[u8], source_len: u64) -> Self {
        let mut hasher = blake3::Hasher::new();
        put_field(&mut hasher, DOMAIN);
        put_field(&mut hasher, &toolchain.0.to_le_bytes());
        put_field(&mut hasher, spec);
        hasher.update(&source_len.to_le_bytes());
        CacheKeyHasher { hasher, remaining: source_len }
    }

    /// Feeds the next chunk of source.
    pub fn update(&mut self, chunk: &[u8]) {
        self.remaining = self.remaining.wrapping_sub(chunk.len() as u64);
        self.hasher.update(chunk);
    }

    /// The key, or `None` when the source fed did not have the declared length.
    pub fn finish(&self) -> Option<CacheKey> {
        (self.remaining == 0).then(|| CacheKey(*self.hasher.finalize().as_bytes()))
    }
}

/// The key of one task, in one call.
pub fn cache_key(toolchain: ToolchainKey, spec: &[u8], source: &[u8]) -> CacheKey {
    let mut h = CacheKeyHasher::new(toolchain, spec, source.len() as u64);
    h.update(source);
    // The length was taken from `source` itself.
    h.finish().unwrap_or(CacheKey([0; 32]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunking_does_not_change_the_key() {
        let src = b"int f(void) { return 42; }\n".repeat(50);
        let whole = cache_key(ToolchainKey(1), b"spec", &src);
        let mut h = CacheKeyHasher::new(ToolchainKey(1), b"spec", src.len() as u64);
        for c in src.chunks(7) {
            h.update(c);
        }
        assert_eq!(h.finish(), Some(whole));
    }

    #[test]
    fn boundaries_between_fields_matter() {
        // kubecc: args ["-o","x.o"] and ["-ox.o"] collided; spec/source shifts must not.
        assert_ne!(cache_key(ToolchainKey(1), b"ab", b"c"), cache_key(ToolchainKey(1), b"a", b"bc"));
        assert_ne!(cache_key(ToolchainKey(1), b"a", b"b"), cache_key(ToolchainKey(2), b"a", b"b"));
    }

    #[test]
    fn a_short_source_has_no_key() {
        let mut h = CacheKeyHasher::new(ToolchainKey(1), b"", 10);
        h.update(b"123");
        assert_eq!(h.finish(), None);
    }
}
