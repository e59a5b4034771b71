//! The direct-mode cache on disk: interned paths, remembered digests and
//! manifests in one file, so that a restarted consumerd is warm at once.
//!
//! ```text
//! "CCRDIRECT\x02" ‖ body ‖ blake3(body)
//! body = paths: n ‖ (len ‖ bytes)*
//!        digests: n ‖ (dev ino size mtime ctime digest marks)*
//!        manifests: n ‖ (key used n ‖ entry*)*
//! entry = files: n ‖ (path digest)* ‖ absent: n ‖ (dir path)* ‖ day: len ‖ bytes ‖ result
//! ```
//!
//! Integers are little-endian (`n` and `len` are u32). The file is written
//! to a temporary name beside it and renamed over it, so a reader sees a
//! whole file or the previous one; one whose checksum or structure is wrong
//! is refused as a whole. Left out: merging the files of two consumerds.

use std::collections::HashMap;
use std::io;
use std::path::Path;

use super::files::{Files, Marks, Remembered};
use super::{Entry, Manifest};

/// The file's name in the cache directory.
pub const FILE_NAME: &str = "direct-manifests";

const MAGIC: &[u8] = b"CCRDIRECT\x03";

/// Why the file was refused.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Reading or writing failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The bytes are not a whole file of this format.
    #[error("corrupt manifest file: {0}")]
    Corrupt(&'static str),
}

struct Out(Vec<u8>);

impl Out {
    fn u32(&mut self, v: usize) {
        self.0.extend_from_slice(&u32::try_from(v).unwrap_or(u32::MAX).to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len());
        self.0.extend_from_slice(b);
    }
}

struct In<'a>(&'a [u8]);

impl<'a> In<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StoreError> {
        if self.0.len() < n {
            return Err(StoreError::Corrupt("truncated"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u32(&mut self) -> Result<usize, StoreError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }
    fn u64(&mut self) -> Result<u64, StoreError> {
        let mut a = [0; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn digest(&mut self) -> Result<[u8; 32], StoreError> {
        let mut a = [0; 32];
        a.copy_from_slice(self.take(32)?);
        Ok(a)
    }
    fn bytes(&mut self) -> Result<&'a [u8], StoreError> {
        let n = self.u32()?;
        self.take(n)
    }
    /// A count, checked against what is left (each item takes at least `min` bytes).
    fn count(&mut self, min: usize) -> Result<usize, StoreError> {
        let n = self.u32()?;
        if n.saturating_mul(min) > self.0.len() {
            return Err(StoreError::Corrupt("a count larger than the file"));
        }
        Ok(n)
    }
}

/// Writes `files` and `manifests` to `path`, atomically.
///
/// # Errors
/// When the directory is not writable.
pub fn save(path: &Path, files: &Files, manifests: &HashMap<[u8; 32], Manifest>) -> io::Result<()> {
    let mut o = Out(Vec::with_capacity(1 << 20));
    o.0.extend_from_slice(MAGIC);
    let body_start = o.0.len();
    {
        let paths = files.paths();
        o.u32(paths.len());
        for p in paths.all() {
            o.bytes(p);
        }
    }
    {
        let digests = files.digests();
        o.u32(digests.len());
        for ((dev, ino), r) in digests.iter() {
            for v in [*dev, *ino, r.size, r.mtime_ns as u64, r.ctime_ns as u64] {
                o.u64(v);
            }
            o.0.extend_from_slice(&r.digest);
            o.0.push(r.marks.0);
        }
    }
    o.u32(manifests.len());
    for (key, m) in manifests {
        o.0.extend_from_slice(key);
        o.u64(m.used);
        o.u32(m.entries.len());
        for e in &m.entries {
            o.u32(e.files.len());
            for (id, d) in &e.files {
                o.u32(*id as usize);
                o.0.extend_from_slice(d);
            }
            o.u32(e.absent.len());
            for (dir, path) in &e.absent {
                o.u32(*dir as usize);
                o.u32(*path as usize);
            }
            o.bytes(e.day.as_deref().unwrap_or("").as_bytes());
            o.0.extend_from_slice(&e.result);
        }
    }
    let sum = *blake3::hash(&o.0[body_start..]).as_bytes();
    o.0.extend_from_slice(&sum);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    io::Write::write_all(&mut tmp, &o.0)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Reads `path` into `files` (which must be empty) and returns the
/// manifests; `Ok(None)` when there is no file.
///
/// # Errors
/// [`StoreError::Corrupt`] for a file that is not whole; `files` may then
/// hold part of it and must be cleared.
pub fn load(path: &Path, files: &Files) -> Result<Option<HashMap<[u8; 32], Manifest>>, StoreError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let body = bytes.strip_prefix(MAGIC).ok_or(StoreError::Corrupt("not a manifest file of this version"))?;
    if body.len() < 32 {
        return Err(StoreError::Corrupt("truncated"));
    }
    let (body, sum) = body.split_at(body.len() - 32);
    if blake3::hash(body).as_bytes() != sum {
        return Err(StoreError::Corrupt("checksum mismatch"));
    }
    let mut i = In(body);
    let n_paths = i.count(4)?;
    {
        let mut paths = files.paths();
        for _ in 0..n_paths {
            paths.id(i.bytes()?);
        }
    }
    let known =
        |id: usize| if id < n_paths { Ok(id as u32) } else { Err(StoreError::Corrupt("a path id out of range")) };
    let n_digests = i.count(73)?;
    {
        let mut digests = files.digests();
        for _ in 0..n_digests {
            let (dev, ino, size) = (i.u64()?, i.u64()?, i.u64()?);
            let (mtime_ns, ctime_ns) = (i.u64()? as i64, i.u64()? as i64);
            let digest = i.digest()?;
            let marks = Marks(i.take(1)?[0]);
            digests.insert((dev, ino), Remembered { size, mtime_ns, ctime_ns, digest, marks });
        }
    }
    let n_manifests = i.count(44)?;
    let mut manifests = HashMap::with_capacity(n_manifests);
    for _ in 0..n_manifests {
        let key = i.digest()?;
        let used = i.u64()?;
        let n_entries = i.count(44)?;
        let mut entries = Vec::with_capacity(n_entries);
        for _ in 0..n_entries {
            let n_files = i.count(36)?;
            let mut list = Vec::with_capacity(n_files);
            for _ in 0..n_files {
                let id = known(i.u32()?)?;
                list.push((id, i.digest()?));
            }
            let n_absent = i.count(8)?;
            let absent = (0..n_absent)
                .map(|_| Ok((known(i.u32()?)?, known(i.u32()?)?)))
                .collect::<Result<Vec<_>, StoreError>>()?;
            let day = std::str::from_utf8(i.bytes()?).map_err(|_| StoreError::Corrupt("a day that is not text"))?;
            let day = (!day.is_empty()).then(|| day.to_owned());
            entries.push(Entry { files: list, absent, day, result: i.digest()? });
        }
        manifests.insert(key, Manifest { entries, used });
    }
    if !i.0.is_empty() {
        return Err(StoreError::Corrupt("bytes after the manifests"));
    }
    Ok(Some(manifests))
}
