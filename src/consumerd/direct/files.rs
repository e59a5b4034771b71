//! What the direct-mode cache knows about files: interned paths and a digest
//! per file version.
//!
//! A digest is remembered under the file's identity and stamp — (device,
//! inode) → (size, mtime, ctime) — and only for a file whose mtime and ctime
//! are older than [`TRUST_AGE`] when it was read: the kernel stamps files
//! with a coarse clock, so a file written twice within a tick keeps its
//! stamp, and only one that has been left alone for a while can be known by
//! it. Any other file is read and hashed on every use.
//!
//! Whether a path is absent is answered the same way, from directory
//! listings remembered under the directory's identity and stamp (a new entry
//! changes its directory's mtime), trusted under the same rule: a lookup
//! that must check hundreds of paths on the include path costs a `stat` per
//! directory instead of one per path.
//!
//! Main items: [`Files`], [`Digested`], [`Marks`], [`Absence`], [`normalize`].
//! Left out: what the digests are for (`super`).

use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustc_hash::{FxHashMap, FxHashSet};

/// How old a file's stamp must be for its digest to be remembered.
pub const TRUST_AGE: Duration = Duration::from_secs(2);

/// At most this many digests are remembered; past it the memory starts over.
pub const MAX_DIGESTS: usize = 200_000;

/// At most this many paths are interned; past it the cache starts over.
pub const MAX_PATHS: usize = 1_000_000;

/// At most this many directory listings are remembered; past it the memory starts over.
pub const MAX_LISTINGS: usize = 20_000;

/// What a file's text uses that decides whether, and how, its result may be reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Marks(pub u8);

impl Marks {
    /// `__DATE__`: the result holds the day it was compiled.
    pub const DATE: u8 = 1;
    /// `__TIME__` or `__TIMESTAMP__`: the result holds the moment it was compiled.
    pub const TIME: u8 = 2;
    /// `#embed` or `.incbin`: the compile reads a file its dependency list
    /// may not name.
    pub const EMBED: u8 = 4;
    /// `__has_include` or `__has_include_next`: the compile asks whether a
    /// file exists without reading it, so its dependency list does not name
    /// the file (see [`probed_names`]).
    pub const PROBE: u8 = 8;

    /// Scans a file's bytes.
    pub fn of(bytes: &[u8]) -> Marks {
        let has = |needle: &[u8]| memchr::memmem::find(bytes, needle).is_some();
        let mut m = 0;
        if has(b"__DATE__") {
            m |= Marks::DATE;
        }
        // `__TIMESTAMP__` does not contain `__TIME__`: both are looked for.
        if has(b"__TIME__") || has(b"__TIMESTAMP__") {
            m |= Marks::TIME;
        }
        if has(b".incbin") || has_embed(bytes) {
            m |= Marks::EMBED;
        }
        if has(b"__has_include") {
            m |= Marks::PROBE;
        }
        Marks(m)
    }

    /// Whether `flag` is set.
    pub fn has(self, flag: u8) -> bool {
        self.0 & flag != 0
    }
}

/// `#` then blanks then `embed`: the directive, however it is spaced.
fn has_embed(bytes: &[u8]) -> bool {
    memchr::memmem::find_iter(bytes, b"embed").any(|at| {
        let before = bytes[..at].iter().rev().find(|b| !matches!(b, b' ' | b'\t'));
        before == Some(&b'#')
    })
}

/// What `__has_include(...)` asks for, by literal name: `(true, name)` for
/// `"name"`, `(false, name)` for `<name>`; `None` when one of them names its
/// file through a macro, which only the preprocessor can resolve.
pub fn probed_names(bytes: &[u8]) -> Option<Vec<(bool, Vec<u8>)>> {
    let mut out = Vec::new();
    for at in memchr::memmem::find_iter(bytes, b"__has_include") {
        let mut rest = &bytes[at + b"__has_include".len()..];
        if let Some(r) = rest.strip_prefix(b"_next") {
            rest = r;
        }
        let skip = |r: &[u8]| -> usize { r.iter().take_while(|b| matches!(b, b' ' | b'\t')).count() };
        rest = &rest[skip(rest)..];
        // `#ifdef __has_include` and `defined(__has_include)`: no argument.
        let Some(r) = rest.strip_prefix(b"(") else { continue };
        rest = &r[skip(r)..];
        let (quoted, close) = match rest.first() {
            Some(b'"') => (true, b'"'),
            Some(b'<') => (false, b'>'),
            _ => return None,
        };
        let name = &rest[1..];
        let end = name.iter().position(|b| *b == close || *b == b'\n')?;
        if name[end] != close || end == 0 {
            return None;
        }
        out.push((quoted, name[..end].to_vec()));
    }
    Some(out)
}

/// A file's digest and marks, and the stamp it had when it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digested {
    /// blake3 of the bytes.
    pub digest: [u8; 32],
    /// Its size.
    pub size: u64,
    /// What the bytes use.
    pub marks: Marks,
    /// The later of mtime and ctime, in nanoseconds since the epoch.
    pub changed_ns: i64,
}

/// A remembered digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remembered {
    /// Size in bytes.
    pub size: u64,
    /// mtime, nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// ctime, nanoseconds since the epoch.
    pub ctime_ns: i64,
    /// The digest and marks of those bytes.
    pub digest: [u8; 32],
    /// What the bytes use.
    pub marks: Marks,
}

/// Interned paths and remembered digests, shared by the threads that look up
/// and record (each lock is held only for a map access, never while a file
/// is read).
#[derive(Debug, Default)]
pub struct Files {
    paths: Mutex<Interner>,
    digests: Mutex<FxHashMap<(u64, u64), Remembered>>,
    listings: Mutex<FxHashMap<Box<[u8]>, Listing>>,
}

/// A directory's entry names.
type Names = Arc<FxHashSet<Box<[u8]>>>;

/// A remembered directory listing.
#[derive(Debug, Clone)]
struct Listing {
    stamp: DirStamp,
    names: Names,
}

/// What identifies a directory's version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DirStamp {
    dev: u64,
    ino: u64,
    mtime_ns: i64,
    ctime_ns: i64,
}

/// One lookup's view of directories: each is asked about once.
#[derive(Debug, Default)]
pub struct Absence {
    seen: FxHashMap<Box<[u8]>, DirView>,
}

/// What a lookup knows of one directory.
#[derive(Debug, Clone)]
enum DirView {
    /// Not a directory now.
    Missing,
    /// Its entries, from a listing that can be trusted.
    Listed(Names),
    /// Changed too recently to trust a listing: ask for each path.
    Young,
}

/// Paths as small numbers, so that manifests stay small.
#[derive(Debug, Default)]
pub struct Interner {
    by_id: Vec<Arc<[u8]>>,
    ids: FxHashMap<Arc<[u8]>, u32>,
}

impl Interner {
    /// The id of `path`, adding it if new.
    pub fn id(&mut self, path: &[u8]) -> u32 {
        if let Some(id) = self.ids.get(path) {
            return *id;
        }
        let id = u32::try_from(self.by_id.len()).unwrap_or(u32::MAX);
        let path: Arc<[u8]> = Arc::from(path);
        self.by_id.push(path.clone());
        self.ids.insert(path, id);
        id
    }

    /// The path of `id`.
    pub fn path(&self, id: u32) -> Option<&Arc<[u8]>> {
        self.by_id.get(id as usize)
    }

    /// Every path, by id.
    pub fn all(&self) -> &[Arc<[u8]>] {
        &self.by_id
    }

    /// Paths interned.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// No path is interned.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

/// Nanoseconds since the epoch of a stamp given as seconds and nanoseconds.
pub fn stamp_ns(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
}

impl Files {
    /// The interner (held briefly).
    pub fn paths(&self) -> MutexGuard<'_, Interner> {
        self.paths.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The remembered digests (held briefly).
    pub fn digests(&self) -> MutexGuard<'_, FxHashMap<(u64, u64), Remembered>> {
        self.digests.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Interns `path`.
    pub fn intern(&self, path: &Path) -> u32 {
        self.paths().id(path.as_os_str().as_bytes())
    }

    /// The path of `id`.
    pub fn path_of(&self, id: u32) -> Option<PathBuf> {
        self.paths().path(id).map(|p| PathBuf::from(OsStr::from_bytes(p)))
    }

    /// The digest of the file at `path` (following symlinks, as the
    /// preprocessor does). `now_ns` is the time of the question: a stamp
    /// within [`TRUST_AGE`] of it is not remembered.
    ///
    /// # Errors
    /// When the file cannot be read (a missing header is a miss, not a failure).
    pub fn digest(&self, path: &Path, now_ns: i64) -> io::Result<Digested> {
        let meta = std::fs::metadata(path)?;
        if !meta.is_file() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
        }
        let (mtime, ctime) = (stamp_ns(meta.mtime(), meta.mtime_nsec()), stamp_ns(meta.ctime(), meta.ctime_nsec()));
        let id = (meta.dev(), meta.ino());
        let known = self.digests().get(&id).copied();
        if let Some(r) = known.filter(|r| r.size == meta.size() && r.mtime_ns == mtime && r.ctime_ns == ctime) {
            return Ok(Digested { digest: r.digest, size: r.size, marks: r.marks, changed_ns: mtime.max(ctime) });
        }
        let mut file = std::fs::File::open(path)?;
        let mut bytes = Vec::with_capacity(usize::try_from(meta.size()).unwrap_or(0));
        file.read_to_end(&mut bytes)?;
        // The stamp after reading: a write during the read shows in it.
        let after = file.metadata()?;
        let (mtime, ctime) = (stamp_ns(after.mtime(), after.mtime_nsec()), stamp_ns(after.ctime(), after.ctime_nsec()));
        let digest = *blake3::hash(&bytes).as_bytes();
        let marks = Marks::of(&bytes);
        let trust_before = now_ns.saturating_sub(i64::try_from(TRUST_AGE.as_nanos()).unwrap_or(i64::MAX));
        if mtime < trust_before && ctime < trust_before && after.size() == bytes.len() as u64 {
            let mut digests = self.digests();
            if digests.len() >= MAX_DIGESTS {
                digests.clear();
            }
            digests.insert(id, Remembered { size: after.size(), mtime_ns: mtime, ctime_ns: ctime, digest, marks });
        }
        Ok(Digested { digest, size: bytes.len() as u64, marks, changed_ns: mtime.max(ctime) })
    }

    /// Forgets everything.
    pub fn clear(&self) {
        *self.paths() = Interner::default();
        self.digests().clear();
        self.listings.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
    }

    /// What is known of directory `dir` now: from memory when its stamp is
    /// unchanged and old enough, else from a listing (kept when the stamp is
    /// old enough), else nothing.
    fn view(&self, dir: &[u8], now_ns: i64) -> DirView {
        let path = Path::new(OsStr::from_bytes(dir));
        let Some(meta) = std::fs::metadata(path).ok().filter(std::fs::Metadata::is_dir) else {
            return DirView::Missing;
        };
        let stamp = DirStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            mtime_ns: stamp_ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: stamp_ns(meta.ctime(), meta.ctime_nsec()),
        };
        let trust_before = now_ns.saturating_sub(i64::try_from(TRUST_AGE.as_nanos()).unwrap_or(i64::MAX));
        if stamp.mtime_ns >= trust_before || stamp.ctime_ns >= trust_before {
            return DirView::Young;
        }
        let lock = || self.listings.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(l) = lock().get(dir).filter(|l| l.stamp == stamp) {
            return DirView::Listed(l.names.clone());
        }
        let Ok(list) = std::fs::read_dir(path) else { return DirView::Young };
        let names: FxHashSet<Box<[u8]>> =
            list.filter_map(|e| e.ok().map(|e| e.file_name().as_bytes().into())).collect();
        // The stamp after listing: an entry made meanwhile shows in it.
        let unchanged = std::fs::metadata(path).is_ok_and(|m| {
            stamp_ns(m.mtime(), m.mtime_nsec()) == stamp.mtime_ns
                && stamp_ns(m.ctime(), m.ctime_nsec()) == stamp.ctime_ns
        });
        if !unchanged {
            return DirView::Young;
        }
        let names = Arc::new(names);
        let mut listings = lock();
        if listings.len() >= MAX_LISTINGS {
            listings.clear();
        }
        listings.insert(dir.into(), Listing { stamp, names: names.clone() });
        DirView::Listed(names)
    }

    /// Whether nothing is at `path` now (the preprocessor would not find a
    /// file there), walking down from its first directory `base` — `path`
    /// must be under it — through remembered listings. Paths are bytes,
    /// absolute and normalized ([`normalize`]).
    pub fn absent_under(&self, base: &[u8], path: &[u8], now_ns: i64, view: &mut Absence) -> bool {
        let whole = || absent(Path::new(OsStr::from_bytes(path)));
        let Some(rest) = path.strip_prefix(base).and_then(|r| r.strip_prefix(b"/")) else { return whole() };
        // `dir_end`: where the directory being asked about ends in `path`.
        let mut dir_end = base.len();
        for name in rest.split(|b| *b == b'/') {
            if name.is_empty() || name == b"." || name == b".." {
                return whole();
            }
            let dir = &path[..dir_end];
            let known = match view.seen.get(dir) {
                Some(v) => v.clone(),
                None => {
                    let v = self.view(dir, now_ns);
                    view.seen.insert(dir.into(), v.clone());
                    v
                }
            };
            match known {
                DirView::Missing => return true,
                DirView::Young => return whole(),
                DirView::Listed(names) if !names.contains(name) => return true,
                DirView::Listed(_) => dir_end += 1 + name.len(),
            }
        }
        false
    }
}

/// `path` made absolute against `cwd`, with `.` and `..` taken out by
/// spelling alone (as the preprocessor's own paths are compared; a symlinked
/// directory followed by `..` is not resolved, which at worst costs a miss).
pub fn normalize(cwd: &Path, path: &Path) -> PathBuf {
    let joined = cwd.join(path);
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
        }
    }
    out
}

/// Whether `name`, as the compile spelled it, passes through `..` after a
/// symbolic link: lexically `a/../x` is `x` (`path`, its normalized form), but
/// through a link `a` it is another file, and a digest of `path` would be of
/// a file the compile did not read.
pub fn dotdot_through_link(cwd: &Path, name: &[u8], path: &Path) -> bool {
    if !name.split(|b| *b == b'/').any(|s| s == b"..") {
        return false;
    }
    let real = std::fs::canonicalize(cwd.join(OsStr::from_bytes(name))).ok();
    real.is_some() && real != std::fs::canonicalize(path).ok()
}

/// Where the preprocessor looks for the file `__has_include` names in the
/// file whose directory is `dir`, in its order, as `(directory, path)`:
/// beside the asking file when the name is quoted, then the include
/// directories and the system ones; an absolute name where it says.
pub fn probe_places(
    cwd: &Path,
    dir: &Path,
    (quoted, name): (bool, &Path),
    include_dirs: &[PathBuf],
    system_dirs: &[PathBuf],
) -> Vec<(PathBuf, PathBuf)> {
    if name.is_absolute() {
        let path = normalize(cwd, name);
        return vec![(path.parent().map(Path::to_owned).unwrap_or_default(), path)];
    }
    let beside = quoted.then_some(dir);
    beside
        .into_iter()
        .chain(include_dirs.iter().map(PathBuf::as_path))
        .chain(system_dirs.iter().map(PathBuf::as_path))
        .map(|d| (d.to_owned(), normalize(cwd, &d.join(name))))
        .collect()
}

/// Whether nothing is at `path` now (the preprocessor would not find a file there).
pub fn absent(path: &Path) -> bool {
    match std::fs::metadata(path) {
        Ok(_) => false,
        Err(e) => matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn probed_names_are_read_from_has_include_and_a_macro_refuses() {
        let text = b"#ifdef __has_include\n#if __has_include(<sys/single_threaded.h>)\n#endif\n\
                     #if defined(__has_include) && __has_include_next ( \"cfg.h\" )\n#endif\n";
        assert_eq!(
            probed_names(text),
            Some(vec![(false, b"sys/single_threaded.h".to_vec()), (true, b"cfg.h".to_vec())])
        );
        assert!(Marks::of(text).has(Marks::PROBE));
        assert_eq!(probed_names(b"#if __has_include(HEADER)\n"), None);
        assert_eq!(probed_names(b"#if __has_include(<unterminated\n"), None);
        assert!(!Marks::of(b"int x;").has(Marks::PROBE));
    }

    #[test]
    fn marks_find_time_date_and_embeds() {
        assert_eq!(Marks::of(b"int x;"), Marks(0));
        assert!(Marks::of(b"char d[] = __DATE__;").has(Marks::DATE));
        assert!(Marks::of(b"__TIMESTAMP__").has(Marks::TIME));
        assert!(Marks::of(b"x __TIME__").has(Marks::TIME));
        assert!(Marks::of(b"  #  embed \"a.bin\"").has(Marks::EMBED));
        assert!(Marks::of(b"asm(\".incbin \\\"x\\\"\");").has(Marks::EMBED));
        assert!(!Marks::of(b"int embed = 1;").has(Marks::EMBED));
    }

    #[test]
    fn normalize_spells_paths_out() {
        let cwd = Path::new("/w/b");
        assert_eq!(normalize(cwd, Path::new("../src/./a.h")), PathBuf::from("/w/src/a.h"));
        assert_eq!(normalize(cwd, Path::new("/usr//include/x.h")), PathBuf::from("/usr/include/x.h"));
        assert_eq!(normalize(cwd, Path::new("a.h")), PathBuf::from("/w/b/a.h"));
    }

    #[test]
    fn a_young_file_is_hashed_every_time_an_old_one_is_remembered() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("h.h");
        std::fs::write(&p, "one").unwrap();
        let files = Files::default();
        let now = || stamp_ns(std::time::UNIX_EPOCH.elapsed().unwrap().as_secs() as i64, 0) + 1_000_000_000;
        let first = files.digest(&p, now()).unwrap();
        assert!(files.digests().is_empty(), "a file changed just now is not remembered");
        std::fs::write(&p, "two").unwrap();
        assert_ne!(files.digest(&p, now()).unwrap().digest, first.digest);
        // Seen from far enough in the future, the same file is old.
        let later = now() + 10_000_000_000;
        let d = files.digest(&p, later).unwrap();
        assert_eq!(files.digests().len(), 1);
        assert_eq!(files.digest(&p, later).unwrap(), d);
        assert!(absent(&t.path().join("none.h")) && absent(&p.join("sub.h")) && !absent(&p));
    }

    #[test]
    fn absence_comes_from_listings_that_a_new_entry_invalidates() {
        fn b(p: &Path) -> &[u8] {
            p.as_os_str().as_bytes()
        }
        let t = tempfile::tempdir().unwrap();
        let inc = t.path().join("inc");
        std::fs::create_dir_all(inc.join("sys")).unwrap();
        std::fs::write(inc.join("sys/a.h"), "").unwrap();
        let files = Files::default();
        let later = stamp_ns(std::time::UNIX_EPOCH.elapsed().unwrap().as_secs() as i64, 0) + 10_000_000_000;
        let now = stamp_ns(std::time::UNIX_EPOCH.elapsed().unwrap().as_secs() as i64, 0);
        for when in [now, later] {
            let mut view = Absence::default();
            assert!(files.absent_under(b(&inc), b(&inc.join("sys/b.h")), when, &mut view));
            assert!(files.absent_under(b(&inc), b(&inc.join("none/b.h")), when, &mut view));
            assert!(!files.absent_under(b(&inc), b(&inc.join("sys/a.h")), when, &mut view));
        }
        assert_eq!(files.listings.lock().unwrap().len(), 2, "old enough listings are kept");
        std::fs::write(inc.join("sys/b.h"), "").unwrap();
        assert!(!files.absent_under(b(&inc), b(&inc.join("sys/b.h")), later, &mut Absence::default()));
        std::fs::create_dir(inc.join("none")).unwrap();
        std::fs::write(inc.join("none/b.h"), "").unwrap();
        assert!(!files.absent_under(b(&inc), b(&inc.join("none/b.h")), later, &mut Absence::default()));
    }
}
