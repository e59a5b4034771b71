//! Arbitrary bytes as a stored cache entry (disk or Redis), with a valid
//! prefix and checksum put in front so the fuzzer reaches the frame and the
//! result inside: never a panic; an entry that decodes re-encodes to the same
//! bytes; the same bytes filed under another key are refused. Without the
//! prefix, the raw bytes must be refused or decode the same way.
#![no_main]

use bytes::Bytes;
use ccroute::cache::entry::{FORMAT_VERSION, MAGIC};
use ccroute::cache::CachedResult;
use ccroute_wire::CacheKey;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 32 {
        return;
    }
    let mut key = [0u8; 32];
    key.copy_from_slice(&data[..32]);
    let key = CacheKey(key);
    let body = &data[32..];

    let mut hashed = Vec::with_capacity(32 + body.len());
    hashed.extend_from_slice(&key.0);
    hashed.extend_from_slice(body);
    let mut entry = Vec::with_capacity(8 + 32 + hashed.len());
    entry.extend_from_slice(&MAGIC);
    entry.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    entry.extend_from_slice(blake3::hash(&hashed).as_bytes());
    entry.extend_from_slice(&hashed);
    let entry = Bytes::from(entry);

    if let Ok(result) = CachedResult::decode(&key, entry.clone()) {
        assert_eq!(result.encode(&key), entry, "a decoded entry re-encodes to other bytes");
        let mut other = key;
        other.0[0] ^= 1;
        assert!(CachedResult::decode(&other, entry).is_err(), "an entry decoded under another key");
    }
    let _ = CachedResult::decode(&key, Bytes::copy_from_slice(data));
});
