//! The consumerd's direct-mode cache and local tier: a compile answered from
//! what this user compiled before, without running the preprocessor and
//! before any slot is taken.
//!
//! ```text
//! manifest key = blake3(toolchain, compiler, arguments, cwd, environment,
//!                       colors, which include directories exist,
//!                       input path, input digest)
//! manifest     = up to 4 entries, newest first, each:
//!                files read (path, digest), paths that must stay absent,
//!                the day (when a file uses __DATE__), result key
//! result key   = blake3(manifest key, files and digests, absent paths, day)
//! local tier   = result key → stdout, stderr, object and dependency file
//! ```
//!
//! - **Lookup** ([`DirectCache::lookup`]): digest the input (from memory when
//!   its stamp is old enough, [`files`]), build the manifest key, and take
//!   the first entry whose every file still has its digest and whose every
//!   absent path is still absent; its result key finds the result on disk.
//! - **Record** ([`DirectCache::record`]): after a successful compile,
//!   local or remote, with the list of files it read (its dependency output,
//!   or the preprocessed text's line markers), digest each file; refuse when
//!   one changed after the compile started or uses `__TIME__`,
//!   `__TIMESTAMP__`, `#embed` or `.incbin`, when a name reached through
//!   `..` is another file than the one a symbolic link on the way leads to,
//!   or when a flag moves the system include directories (`--sysroot`,
//!   `-nostdinc`, `-m32`, ...); list where each header was absent among the
//!   places a new one could be read instead: every other include directory
//!   (whatever its place in gcc's order), the input's directory, the working
//!   directory and those of the unit's own headers (searched first for
//!   `#include "..."`), so a new header that would shadow it is a miss,
//!   which ccache does not catch; for each name a file asks about with
//!   `__has_include`, digest what is found where the preprocessor looks and
//!   list where nothing is; store the result.
//! - **Record later** ([`DirectCache::record_later`], [`index`]): a `-MMD`
//!   compile that ran here listed no system headers; its result is stored
//!   at once (under a key over the manifest key and the outputs) and its
//!   entry made once a dependency-only run, at idle priority, has given the
//!   whole list — if that list agrees with the compile's own. A lookup of a
//!   unit still waiting runs its dependency-only run itself, at once.
//! - **Persistence** ([`store`]): manifests and digests go to one file under
//!   the cache directory, written atomically every few seconds while they
//!   change and at shutdown; a corrupt one is ignored with a warning.
//!
//! Local results never leave this consumerd: the scheduler's shared cache
//! keeps only what agents compiled, under the key of the bytes they compiled.
//!
//! Main items: [`DirectCache`], [`Lookup`], [`Probe`]. Left out: when to
//! look up and record (the dispatcher).

pub mod files;
pub mod index;
pub mod inputs;
pub mod store;

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use ccroute_wire::local::{CacheReport, DirectJob};
use ccroute_wire::{CacheKey, Compression, PayloadInfo};
use tracing::{debug, warn};

use crate::cache::{CachedResult, DiskTier};
use files::{normalize, Absence, Files, Marks};

/// The files a compile read, each once, with its digest.
type FilesRead = Vec<(PathBuf, [u8; 32])>;

/// Entries kept per manifest (builds that alternate between header versions).
pub const ENTRIES_PER_MANIFEST: usize = 4;

/// Manifests kept; past it the least recently used go.
pub const MAX_MANIFESTS: usize = 50_000;

/// Absent paths one entry may list; a unit that would need more is not recorded.
const MAX_ABSENT: usize = 20_000;

/// How much a filesystem that keeps whole seconds (ext4 with 128-byte
/// inodes, some NFS servers; FAT keeps two) may take off a stamp.
const WHOLE_SECONDS_NS: i64 = 2_000_000_000;

/// Whether a file stamped `stamp_ns` may have been written at or after
/// `started_ns`, a compile's start. The wrapper reads its start from the
/// coarse clock the kernel stamps files from, and a file written later is
/// stamped no earlier; two ticks (`tick_ns`) are allowed on top, for a
/// wrapper that read the finer wall clock, which the coarse one lags by up
/// to a tick (a little more when a tick comes late). A filesystem that keeps
/// whole seconds truncates the rest: a stamp with no fraction of a second
/// is taken to be from one. Such a file may not be what the compile read:
/// its digest cannot stand for it. A header generated just before the build
/// (cmake's `config.h`, ~20 ms before the first compile here) is usually
/// older than that.
fn may_have_changed_after(stamp_ns: i64, started_ns: i64, tick_ns: i64) -> bool {
    let truncated = if stamp_ns.rem_euclid(1_000_000_000) == 0 { WHOLE_SECONDS_NS } else { 0 };
    stamp_ns >= started_ns.saturating_sub(2 * tick_ns + truncated)
}

/// [`may_have_changed_after`] a compile that started at `started_ns` (as
/// the wrapper read it), on this host's tick.
fn changed_after(started_ns: u64) -> impl Fn(i64) -> bool {
    let started = i64::try_from(started_ns).unwrap_or(i64::MAX);
    let tick = crate::host::file_stamp_tick_ns();
    move |stamp| may_have_changed_after(stamp, started, tick)
}

/// Options that make the compile read a file its dependency output does not
/// list (profiles, sanitizer lists, plugins, spec files): a unit with one is
/// never answered from the cache, as its result could depend on that file.
const READS_UNLISTED_FILES: &[&str] = &[
    "-fprofile-use",
    "-fprofile-sample-use",
    "-fauto-profile",
    "-fprofile-instr-use",
    "-fsanitize-blacklist",
    "-fsanitize-ignorelist",
    "-fplugin",
    "-specs",
    "--specs",
    "-fcoverage-data",
];

/// The default size of the local tier.
pub const DEFAULT_MAX_BYTES: u64 = 5 << 30;

/// One remembered way a unit was compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Files read (interned path, digest), the input excluded.
    pub files: Vec<(u32, [u8; 32])>,
    /// Paths that were absent and must stay so: (directory searched, path
    /// under it), interned.
    pub absent: Vec<(u32, u32)>,
    /// The day, when a file uses `__DATE__`.
    pub day: Option<String>,
    /// Where the result is.
    pub result: [u8; 32],
}

/// The entries of one manifest key.
#[derive(Debug, Clone, Default)]
pub struct Manifest {
    /// Newest first.
    pub entries: Vec<Entry>,
    /// Last use, for eviction.
    pub used: u64,
}

/// What a lookup found.
#[derive(Debug)]
pub enum Lookup {
    /// stdout, stderr, object, dependency file.
    Hit([Bytes; 4]),
    /// Not known; record it under this probe once it is compiled.
    Miss(Probe),
    /// Direct mode does not apply to this unit (why).
    Refused(&'static str),
}

/// What a lookup computed, for recording the compile that follows.
#[derive(Debug, Clone)]
pub struct Probe {
    key: [u8; 32],
    input_digest: [u8; 32],
}

/// The direct-mode cache of one consumerd.
#[derive(Debug)]
pub struct DirectCache {
    dir: PathBuf,
    files: Files,
    manifests: Mutex<HashMap<[u8; 32], Manifest>>,
    tier: DiskTier,
    clock: AtomicU64,
    dirty: AtomicBool,
    counters: Counters,
    system_dirs: Mutex<HashMap<(PathBuf, bool), SystemDirs>>,
    /// Units waiting for their whole list of files ([`index`]), by
    /// manifest key: a lookup of one indexes it at once.
    awaiting_index: Mutex<HashMap<[u8; 32], Arc<index::Task>>>,
    /// Dependency-only runs lookups have going now, at most one per CPU:
    /// lookups come before any slot is taken, and a rebuild's may all find
    /// their units waiting.
    asked_runs: (Mutex<u32>, std::sync::Condvar),
    /// The manifest keys of those units, in the order the index thread
    /// takes them (started with the first).
    index_queue: Mutex<Option<flume::Sender<[u8; 32]>>>,
}

/// A compiler's system include directories, for C or C++.
type SystemDirs = Arc<Vec<PathBuf>>;

#[derive(Debug, Default)]
struct Counters {
    hit: AtomicU64,
    miss: AtomicU64,
    recorded: AtomicU64,
    /// Units a lookup indexed because the index thread had not yet.
    indexed_on_lookup: AtomicU64,
    refusals: Mutex<BTreeMap<&'static str, u64>>,
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

fn put(h: &mut blake3::Hasher, field: &[u8]) {
    h.update(&(field.len() as u64).to_le_bytes());
    h.update(field);
}

fn os(bytes: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(bytes))
}

impl DirectCache {
    /// Opens the cache under `dir` (results in `dir/results`, at most
    /// `max_bytes`; manifests and digests in [`store::FILE_NAME`]).
    ///
    /// # Errors
    /// When the results directory cannot be created or listed.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<DirectCache, crate::cache::DiskError> {
        let tier = DiskTier::open(dir.join("results"), max_bytes)?;
        let cache = DirectCache {
            dir: dir.to_owned(),
            files: Files::default(),
            manifests: Mutex::new(HashMap::new()),
            tier,
            clock: AtomicU64::new(1),
            dirty: AtomicBool::new(false),
            counters: Counters::default(),
            system_dirs: Mutex::new(HashMap::new()),
            awaiting_index: Mutex::new(HashMap::new()),
            asked_runs: (Mutex::new(0), std::sync::Condvar::new()),
            index_queue: Mutex::new(None),
        };
        match store::load(&cache.dir.join(store::FILE_NAME), &cache.files) {
            Ok(Some(manifests)) => {
                debug!(manifests = manifests.len(), "direct-mode manifests loaded");
                let newest = manifests.values().map(|m| m.used).max().unwrap_or(0);
                cache.clock.store(newest + 1, Ordering::Relaxed);
                *cache.manifests() = manifests;
            }
            Ok(None) => {}
            Err(e) => {
                warn!(error = %e, dir = %cache.dir.display(), "ignoring the direct-mode manifests: they do not read back (they are rebuilt as units compile)");
                cache.files.clear();
            }
        }
        Ok(cache)
    }

    fn manifests(&self) -> MutexGuard<'_, HashMap<[u8; 32], Manifest>> {
        self.manifests.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn tick(&self) -> u64 {
        // Relaxed: ticks only need to be distinct and rising.
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// Counts a unit that direct mode did not take, by reason.
    pub fn refused(&self, why: &'static str) {
        let mut r = self.counters.refusals.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *r.entry(why).or_default() += 1;
    }

    /// The manifest key of `job` compiled by a toolchain of `identity`, and
    /// the input's digest; `Err` when direct mode does not apply.
    fn probe(&self, identity: &[u8], compiler: &Path, job: &DirectJob) -> Result<Probe, &'static str> {
        if job.args.iter().any(|a| READS_UNLISTED_FILES.iter().any(|p| a.starts_with(p.as_bytes()))) {
            return Err("an option reads a file its dependency list does not name");
        }
        if job.dep_file.as_ref().is_some_and(|d| d == b"-" || d.starts_with(b"/dev/")) {
            return Err("the dependency file is not a regular file");
        }
        let now = now_ns();
        let input = os(&job.input);
        let source = self.files.digest(input, now).map_err(|_| "the input cannot be read")?;
        if source.marks.has(Marks::TIME) || source.marks.has(Marks::EMBED) {
            return Err("__TIME__, __TIMESTAMP__, #embed or .incbin");
        }
        let mut h = blake3::Hasher::new();
        put(&mut h, b"ccroute direct manifest v1");
        put(&mut h, identity);
        put(&mut h, compiler.as_os_str().as_bytes());
        put(&mut h, &job.cwd);
        h.update(&(job.args.len() as u64).to_le_bytes());
        for a in &job.args {
            put(&mut h, a);
        }
        h.update(&(job.env.len() as u64).to_le_bytes());
        for (k, v) in &job.env {
            put(&mut h, k.as_bytes());
            put(&mut h, v);
        }
        put(&mut h, &[u8::from(job.colors), u8::from(job.dep_file.is_some())]);
        for d in &job.include_dirs {
            put(&mut h, d);
            put(&mut h, &[u8::from(os(d).is_dir())]);
        }
        put(&mut h, &job.input);
        put(&mut h, &source.digest);
        Ok(Probe { key: *h.finalize().as_bytes(), input_digest: source.digest })
    }

    /// Looks `job` up. `identity` names the toolchain (its route key and binaries).
    pub fn lookup(&self, identity: &[u8], compiler: &Path, job: &DirectJob) -> Lookup {
        let probe = match self.probe(identity, compiler, job) {
            Ok(p) => p,
            Err(why) => {
                self.refused(why);
                return Lookup::Refused(why);
            }
        };
        // A unit compiled here with -MMD and not indexed yet (a rebuild
        // that follows its build closely): a dependency-only run now costs
        // far less than the compile a miss would. Asked before the first
        // look: the index thread may make the entry in between.
        let was_waiting = self.awaiting().contains_key(&probe.key);
        let found = self.answer(&probe, job).or_else(|| {
            if !was_waiting {
                return None;
            }
            self.index_awaiting(&probe.key, index::Priority::Asked);
            self.answer(&probe, job)
        });
        match found {
            Some(parts) => {
                self.counters.hit.fetch_add(1, Ordering::Relaxed);
                Lookup::Hit(parts)
            }
            None => {
                self.counters.miss.fetch_add(1, Ordering::Relaxed);
                Lookup::Miss(probe)
            }
        }
    }

    /// The result of the first entry under `probe` that still holds.
    fn answer(&self, probe: &Probe, job: &DirectJob) -> Option<[Bytes; 4]> {
        let entries = {
            let mut manifests = self.manifests();
            let m = manifests.get_mut(&probe.key)?;
            m.used = self.tick();
            m.entries.clone()
        };
        let now = now_ns();
        let today = today();
        for entry in &entries {
            if entry.day.as_ref().is_some_and(|d| *d != today) {
                debug!("direct-mode entry of another day");
                continue;
            }
            if let Err(why) = self.still_holds(entry, now) {
                debug!(why = %why.display(), "direct-mode entry does not hold");
                continue;
            }
            match self.result(&entry.result, job.dep_file.is_some()) {
                Some(parts) => return Some(parts),
                None => debug!("direct-mode entry without its result (evicted)"),
            }
        }
        None
    }

    /// Every file has its digest and every absent path is absent; else the
    /// first path that differs.
    fn still_holds(&self, entry: &Entry, now: i64) -> Result<(), PathBuf> {
        let (files, gone) = {
            let paths = self.files.paths();
            let path = |id: u32| paths.path(id).cloned();
            let files = entry.files.iter().map(|(id, d)| path(*id).map(|p| (p, *d))).collect::<Option<Vec<_>>>();
            let gone = entry.absent.iter().map(|(d, p)| path(*d).zip(path(*p))).collect::<Option<Vec<_>>>();
            match (files, gone) {
                (Some(f), Some(g)) => (f, g),
                _ => return Err(PathBuf::from("<a path the cache forgot>")),
            }
        };
        if let Some((p, _)) =
            files.iter().find(|(p, d)| !self.files.digest(os(p), now).is_ok_and(|got| got.digest == *d))
        {
            return Err(os(p).to_owned());
        }
        let mut view = Absence::default();
        match gone.iter().find(|(d, p)| !self.files.absent_under(d, p, now, &mut view)) {
            Some((_, p)) => Err(os(p).to_owned()),
            None => Ok(()),
        }
    }

    fn result(&self, key: &[u8; 32], want_deps: bool) -> Option<[Bytes; 4]> {
        let found = self.tier.get(&CacheKey(*key))?;
        let (object, deps) = unpack(found.object)?;
        if want_deps && deps.is_empty() {
            return None;
        }
        Some([found.stdout, found.stderr, object, deps])
    }

    /// Records a successful compile of `job`: `listed` are the files it
    /// read as its dependency output or line markers name them (relative to
    /// the working directory, or absolute; the input and names in `<>` are
    /// skipped), `parts` its stdout, stderr, object and dependency file.
    ///
    /// # Errors
    /// Why it was not recorded (also counted).
    pub fn record(
        &self,
        probe: &Probe,
        job: &DirectJob,
        listed: &[Vec<u8>],
        parts: [Bytes; 4],
        system_dirs: &[PathBuf],
    ) -> Result<(), &'static str> {
        self.counted(self.try_record(probe, job, listed, Made::Parts(parts), system_dirs))
    }

    fn counted(&self, r: Result<(), &'static str>) -> Result<(), &'static str> {
        match r {
            Ok(()) => {
                self.counters.recorded.fetch_add(1, Ordering::Relaxed);
            }
            Err(why) => self.refused(why),
        }
        r
    }

    /// Records a compile whose dependency output left system headers out
    /// (`-MMD`): the result is stored now, and the whole list is asked of the
    /// compiler later, at idle priority, one unit at a time ([`index`]), so
    /// that the build does not wait for it; the entry is made then, if
    /// nothing the unit read changed meanwhile.
    pub fn record_later(
        self: &Arc<Self>,
        compiler: &Path,
        probe: Probe,
        job: Arc<DirectJob>,
        listed: Vec<Vec<u8>>,
        parts: [Bytes; 4],
    ) {
        let mut h = blake3::Hasher::new();
        put(&mut h, b"ccroute direct result, indexed later v1");
        h.update(&probe.key);
        for p in &parts {
            put(&mut h, p);
        }
        let key = *h.finalize().as_bytes();
        if let Err(why) = self.store(&key, &job, parts) {
            self.refused(why);
            return;
        }
        let manifest_key = probe.key;
        let task = Arc::new(index::Task { compiler: compiler.to_owned(), probe, job, listed, stored: key });
        {
            let mut awaiting = self.awaiting();
            if awaiting.len() >= index::QUEUE && !awaiting.contains_key(&manifest_key) {
                drop(awaiting);
                self.refused("too many units wait to be indexed");
                return;
            }
            // A newer compile of the same unit replaces the one waiting.
            awaiting.insert(manifest_key, task);
        }
        let sender = {
            let mut queue = self.index_queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            queue.get_or_insert_with(|| index::start(Arc::downgrade(self))).clone()
        };
        if sender.try_send(manifest_key).is_err() {
            // Its queue full (units sent again while they waited) or the
            // thread gone: the unit is still indexed when looked up.
            debug!("the index thread does not take this unit now");
        }
    }

    fn awaiting(&self) -> MutexGuard<'_, HashMap<[u8; 32], Arc<index::Task>>> {
        self.awaiting_index.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Indexes the unit recorded with [`Self::record_later`] under manifest
    /// key `key`, if one waits: its dependency-only run, then its entry.
    /// False when none waits. Lookups run at most one per CPU at once (a
    /// lookup waits its turn). The index thread and a lookup may run the
    /// same unit at once (the second entry replaces the first, equal to it);
    /// the one that ends first counts it.
    fn index_awaiting(&self, key: &[u8; 32], priority: index::Priority) -> bool {
        if !self.awaiting().contains_key(key) {
            return false;
        }
        let _run = (priority == index::Priority::Asked).then(|| AskedRun::begin(&self.asked_runs));
        // Indexed by another while this waited its turn: its entry is made.
        let Some(task) = self.awaiting().get(key).cloned() else { return true };
        let result = index::whole_list(&task, priority).and_then(|full| {
            let system = self.system_dirs(&task.compiler, task.job.cxx);
            self.finish_later(&task, &full, &system)
        });
        let first = {
            let mut awaiting = self.awaiting();
            let ours = awaiting.get(key).is_some_and(|t| Arc::ptr_eq(t, &task));
            if ours {
                awaiting.remove(key);
            }
            ours
        };
        if first {
            if priority == index::Priority::Asked {
                self.counters.indexed_on_lookup.fetch_add(1, Ordering::Relaxed);
            }
            if let Err(why) = self.counted(result) {
                debug!(why, input = %os(&task.job.input).display(), ?priority, "not indexed");
            }
        }
        true
    }

    /// Makes the entry of a unit recorded with [`Self::record_later`], from
    /// the whole list of files the compiler says it reads.
    fn finish_later(&self, task: &index::Task, full: &[Vec<u8>], system_dirs: &[PathBuf]) -> Result<(), &'static str> {
        let cwd = os(&task.job.cwd);
        let whole: std::collections::HashSet<PathBuf> = full.iter().map(|f| normalize(cwd, os(f))).collect();
        // What the compile itself listed must be in the later list: a header
        // that moved on the include path meanwhile would not be.
        let own: std::collections::HashSet<PathBuf> =
            task.listed.iter().filter(|f| !f.starts_with(b"<")).map(|f| normalize(cwd, os(f))).collect();
        if !own.iter().all(|f| whole.contains(f)) {
            return Err("a file it read moved before it was indexed");
        }
        // The system headers the compile's list left out: one deleted since
        // the compile (another found in its place) shows only in its
        // directory's stamp. (Directories of the project's own headers are
        // not asked: a build writes its objects there.)
        let changed_after = changed_after(task.job.started_ns);
        let dirs: std::collections::HashSet<&Path> = whole.difference(&own).filter_map(|p| p.parent()).collect();
        if dirs.into_iter().any(|d| dir_changed(d, &changed_after)) {
            return Err("a system header moved before it was indexed");
        }
        self.try_record(&task.probe, &task.job, full, Made::Stored(task.stored), system_dirs)
    }

    fn store(&self, key: &[u8; 32], job: &DirectJob, parts: [Bytes; 4]) -> Result<(), &'static str> {
        let [stdout, stderr, object, deps] = parts;
        if job.dep_file.is_some() && deps.is_empty() {
            return Err("the dependency file is missing");
        }
        let packed = pack(&object, if job.dep_file.is_some() { &deps } else { &[] });
        let stored = CachedResult {
            exit_status: 0,
            stdout,
            stderr,
            cpu_time_us: 0,
            payload: PayloadInfo {
                len: packed.len() as u64,
                raw_len: packed.len() as u64,
                compression: Compression::None,
            },
            object: packed,
        };
        self.tier.put(&CacheKey(*key), &stored).map_err(|_| "the local tier cannot store it")
    }

    /// `__has_include`: each name the files in `probing` ask about, looked
    /// for where the preprocessor looks (beside the asking file when the
    /// name is quoted, then the include directories and the system ones; an
    /// absolute name where it says). A file found is added to `read` (its
    /// digest stands for the answer and for what it holds, were it included
    /// after); a place where there is none is returned, an absence that must
    /// hold for a hit. Files found that ask in turn are scanned too.
    fn probed(
        &self,
        now: i64,
        (cwd, mut probing): (&Path, Vec<PathBuf>),
        (include_dirs, system_dirs): (&[PathBuf], &[PathBuf]),
        (seen, read, marks): (&mut std::collections::HashSet<PathBuf>, &mut FilesRead, &mut u8),
        changed_after: &dyn Fn(i64) -> bool,
    ) -> Result<Vec<(PathBuf, PathBuf)>, &'static str> {
        let mut absent = Vec::new();
        let mut asked = std::collections::HashSet::new();
        let mut view = Absence::default();
        while let Some(file) = probing.pop() {
            let bytes = std::fs::read(&file).map_err(|_| "a file it read cannot be read now")?;
            let names = files::probed_names(&bytes).ok_or("__has_include names its file through a macro")?;
            let dir = file.parent().map(Path::to_owned).unwrap_or_default();
            for (quoted, name) in names {
                for (base, path) in files::probe_places(cwd, &dir, (quoted, os(&name)), include_dirs, system_dirs) {
                    if !asked.insert(path.clone()) {
                        continue;
                    }
                    match self.files.digest(&path, now) {
                        Ok(d) => {
                            if changed_after(d.changed_ns) {
                                return Err("a file changed while it compiled");
                            }
                            *marks |= d.marks.0;
                            if seen.insert(path.clone()) {
                                if d.marks.has(Marks::PROBE) {
                                    probing.push(path.clone());
                                }
                                read.push((path, d.digest));
                            }
                        }
                        Err(e)
                            if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) =>
                        {
                            let (b, p) = (base.as_os_str().as_bytes(), path.as_os_str().as_bytes());
                            if !self.files.absent_under(b, p, now, &mut view) {
                                return Err("a file it asks about appeared while it compiled");
                            }
                            absent.push((base, path));
                        }
                        Err(_) => return Err("a file it asks about cannot be read"),
                    }
                }
            }
        }
        Ok(absent)
    }

    fn try_record(
        &self,
        probe: &Probe,
        job: &DirectJob,
        listed: &[Vec<u8>],
        made: Made,
        system_dirs: &[PathBuf],
    ) -> Result<(), &'static str> {
        let cwd = os(&job.cwd);
        let input = normalize(cwd, os(&job.input));
        let changed_after = changed_after(job.started_ns);
        let now = now_ns();
        let source = self.files.digest(&input, now).map_err(|_| "the input cannot be read")?;
        if source.digest != probe.input_digest || changed_after(source.changed_ns) {
            return Err("a file changed while it compiled");
        }
        if let Some(flag) = job.args.iter().find(|a| moves_system_dirs(a)) {
            debug!(flag = %String::from_utf8_lossy(flag), "not recorded");
            return Err("a flag moves the system include directories (--sysroot, -nostdinc, -m32, --target, ...)");
        }
        let mut seen = std::collections::HashSet::new();
        let mut read: FilesRead = Vec::new();
        let mut marks = source.marks.0;
        // Files that ask `__has_include`: what they ask about is not in the list.
        let mut probing: Vec<PathBuf> = Vec::new();
        if source.marks.has(Marks::PROBE) {
            probing.push(input.clone());
        }
        for name in listed {
            if name.is_empty() || name.starts_with(b"<") {
                continue;
            }
            let path = normalize(cwd, os(name));
            if path == input || !seen.insert(path.clone()) {
                continue;
            }
            if files::dotdot_through_link(cwd, name, &path) {
                return Err("a path reached through `..` and a symbolic link");
            }
            let d = self.files.digest(&path, now).map_err(|_| "a file it read cannot be read now")?;
            if changed_after(d.changed_ns) {
                debug!(file = %path.display(), "changed while it compiled");
                return Err("a file changed while it compiled");
            }
            marks |= d.marks.0;
            if d.marks.has(Marks::PROBE) {
                probing.push(path.clone());
            }
            read.push((path, d.digest));
        }
        let include_dirs: Vec<PathBuf> = job.include_dirs.iter().map(|d| normalize(cwd, os(d))).collect();
        let probed_absent = self.probed(
            now,
            (cwd, probing),
            (&include_dirs, system_dirs),
            (&mut seen, &mut read, &mut marks),
            &changed_after,
        )?;
        let marks = Marks(marks);
        if marks.has(Marks::TIME) || marks.has(Marks::EMBED) {
            return Err("__TIME__, __TIMESTAMP__, #embed or .incbin");
        }
        let day = marks.has(Marks::DATE).then(today);
        let input_dir = input.parent().map(Path::to_owned).unwrap_or_default();
        let mut gone =
            shadow_candidates(&self.files, now, &read, (&input_dir, cwd), &include_dirs, system_dirs, &changed_after)?;
        gone.extend(probed_absent);
        if gone.len() > MAX_ABSENT {
            return Err("too many include directories to watch");
        }

        let mut h = blake3::Hasher::new();
        put(&mut h, b"ccroute direct result v1");
        h.update(&probe.key);
        h.update(&(read.len() as u64).to_le_bytes());
        for (p, d) in &read {
            put(&mut h, p.as_os_str().as_bytes());
            h.update(d);
        }
        h.update(&(gone.len() as u64).to_le_bytes());
        for (_, p) in &gone {
            put(&mut h, p.as_os_str().as_bytes());
        }
        put(&mut h, day.as_deref().unwrap_or("").as_bytes());
        let result = match made {
            Made::Parts(parts) => {
                let result = *h.finalize().as_bytes();
                self.store(&result, job, parts)?;
                result
            }
            Made::Stored(key) => key,
        };

        let entry = Entry {
            files: read.iter().map(|(p, d)| (self.files.intern(p), *d)).collect(),
            absent: gone.iter().map(|(d, p)| (self.files.intern(d), self.files.intern(p))).collect(),
            day,
            result,
        };
        let tick = self.tick();
        let mut manifests = self.manifests();
        if manifests.len() >= MAX_MANIFESTS && !manifests.contains_key(&probe.key) {
            evict_oldest(&mut manifests);
        }
        let m = manifests.entry(probe.key).or_default();
        m.entries.retain(|e| e.result != entry.result);
        m.entries.insert(0, entry);
        m.entries.truncate(ENTRIES_PER_MANIFEST);
        m.used = tick;
        drop(manifests);
        if self.files.paths().len() > files::MAX_PATHS {
            // Ids would outgrow what manifests can name: start over.
            self.manifests().clear();
            self.files.clear();
        }
        self.dirty.store(true, Ordering::Release);
        Ok(())
    }

    /// The system include directories of `compiler` for C (or C++), asked
    /// of it once (`-E -v`); empty when it does not say.
    pub fn system_dirs(&self, compiler: &Path, cxx: bool) -> SystemDirs {
        let key = (compiler.to_owned(), cxx);
        if let Some(d) = self.system_dirs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key) {
            return d.clone();
        }
        let dirs = Arc::new(ask_system_dirs(compiler, cxx));
        self.system_dirs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key, dirs.clone());
        dirs
    }

    /// Writes manifests and digests out if they changed since the last time.
    pub fn persist(&self) {
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return;
        }
        let manifests = self.manifests().clone();
        if let Err(e) = store::save(&self.dir.join(store::FILE_NAME), &self.files, &manifests) {
            warn!(error = %e, dir = %self.dir.display(), "cannot save the direct-mode manifests");
            self.dirty.store(true, Ordering::Release);
        }
    }

    /// Empties this user's tiers: results, manifests, digests.
    pub fn clear(&self) {
        // Their results are going: their entries would find none.
        self.awaiting().clear();
        self.manifests().clear();
        self.files.clear();
        self.tier.clear();
        let _ = std::fs::remove_file(self.dir.join(store::FILE_NAME));
        self.dirty.store(false, Ordering::Release);
    }

    /// Counters and sizes for `ccroute stats`.
    pub fn report(&self) -> CacheReport {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (manifests, entries) = {
            let m = self.manifests();
            (m.len() as u64, m.values().map(|m| m.entries.len() as u64).sum())
        };
        let refusals = self.counters.refusals.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        CacheReport {
            counters: vec![
                ("direct_hit".into(), get(&self.counters.hit)),
                ("direct_miss".into(), get(&self.counters.miss)),
                ("recorded".into(), get(&self.counters.recorded)),
                ("indexed_on_lookup".into(), get(&self.counters.indexed_on_lookup)),
            ],
            refusals: refusals.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
            sizes: vec![
                ("manifests".into(), manifests),
                ("manifest_entries".into(), entries),
                ("digests".into(), self.files.digests().len() as u64),
                ("awaiting_index".into(), self.awaiting().len() as u64),
                ("results".into(), self.tier.entries()),
                ("result_bytes".into(), self.tier.bytes()),
                ("result_max_bytes".into(), self.tier.max_bytes()),
            ],
            dir: self.dir.display().to_string(),
        }
    }
}

/// One of the dependency-only runs lookups may have going at once (one per
/// CPU): waits for its turn, and gives it up when dropped.
struct AskedRun<'a>(&'a (Mutex<u32>, std::sync::Condvar));

impl<'a> AskedRun<'a> {
    fn begin(runs: &'a (Mutex<u32>, std::sync::Condvar)) -> AskedRun<'a> {
        let most = crate::host::online_cpus().max(1);
        let (count, turn) = runs;
        let mut n = count.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while *n >= most {
            n = turn.wait(n).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        *n += 1;
        AskedRun(runs)
    }
}

impl Drop for AskedRun<'_> {
    fn drop(&mut self) {
        let (count, turn) = self.0;
        *count.lock().unwrap_or_else(std::sync::PoisonError::into_inner) -= 1;
        turn.notify_one();
    }
}

/// What a record files its entry under.
enum Made {
    /// The compile's stdout, stderr, object and dependency file, to store.
    Parts([Bytes; 4]),
    /// Stored already, under this key.
    Stored([u8; 32]),
}

/// Whether directory `dir` changed (an entry added, removed or renamed) in
/// a way `changed_after` sees; a directory that is gone has changed.
fn dir_changed(dir: &Path, changed_after: &dyn Fn(i64) -> bool) -> bool {
    std::fs::metadata(dir).map_or(true, |m| {
        use std::os::unix::fs::MetadataExt;
        changed_after(files::stamp_ns(m.mtime(), m.mtime_nsec()))
            || changed_after(files::stamp_ns(m.ctime(), m.ctime_nsec()))
    })
}

/// A local-tier object: the object's length (u64 LE), the object, then the
/// dependency file.
fn pack(object: &[u8], deps: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(8 + object.len() + deps.len());
    v.extend_from_slice(&(object.len() as u64).to_le_bytes());
    v.extend_from_slice(object);
    v.extend_from_slice(deps);
    Bytes::from(v)
}

/// Object and dependency file of a local-tier object; `None` when it is not one.
fn unpack(mut packed: Bytes) -> Option<(Bytes, Bytes)> {
    if packed.len() < 8 {
        return None;
    }
    let mut len = [0; 8];
    len.copy_from_slice(&packed[..8]);
    let len = usize::try_from(u64::from_le_bytes(len)).ok()?;
    let _ = packed.split_to(8);
    if len > packed.len() {
        return None;
    }
    let object = packed.split_to(len);
    Some((object, packed))
}

fn evict_oldest(manifests: &mut HashMap<[u8; 32], Manifest>) {
    let mut by_age: Vec<(u64, [u8; 32])> = manifests.iter().map(|(k, m)| (m.used, *k)).collect();
    by_age.sort_unstable();
    for (_, k) in by_age.iter().take(manifests.len() / 10 + 1) {
        manifests.remove(k);
    }
}

/// Where a header that would shadow one the compile read could appear: for
/// a file found under a directory of the search chain (include directories,
/// then system ones) as `name` — every way the file's path splits so, as a
/// file under `-I.` is also under `-Iinclude` — `<dir>/<name>` for the
/// input's own directory (searched first for `#include "..."`) and every
/// chain directory before that one, where nothing is now; each as (the
/// directory, the path). A file under no chain directory was found beside
/// the file that included it, which is searched first.
pub fn shadow_candidates(
    files: &Files,
    now: i64,
    read: &[(PathBuf, [u8; 32])],
    (input_dir, cwd): (&Path, &Path),
    include_dirs: &[PathBuf],
    system_dirs: &[PathBuf],
    changed_after: &dyn Fn(i64) -> bool,
) -> Result<Vec<(PathBuf, PathBuf)>, &'static str> {
    fn bytes(p: &Path) -> &[u8] {
        p.as_os_str().as_bytes()
    }
    let chain: Vec<&[u8]> = include_dirs.iter().chain(system_dirs).map(|d| bytes(d)).collect();
    let system: Vec<&[u8]> = system_dirs.iter().map(|d| bytes(d)).collect();
    let under =
        |file: &[u8], dirs: &[&[u8]]| dirs.iter().any(|d| file.strip_prefix(*d).is_some_and(|n| n.starts_with(b"/")));
    // Searched first for `#include "..."`: the directory of the file that
    // includes it, any of the unit's own (not the system's); for `-include`,
    // the working directory.
    let mut first: Vec<&[u8]> = vec![bytes(input_dir), bytes(cwd)];
    for (file, _) in read {
        let file = bytes(file);
        if !under(file, &system) {
            if let Some(at) = memchr::memrchr(b'/', file) {
                if !first.contains(&&file[..at]) {
                    first.push(&file[..at]);
                }
            }
        }
    }
    let mut out = Vec::new();
    let mut seen: rustc_hash::FxHashSet<Vec<u8>> = rustc_hash::FxHashSet::default();
    let mut view = Absence::default();
    let mut p = Vec::with_capacity(256);
    for (file, _) in read {
        let file = bytes(file);
        for d in &chain {
            let Some(name) = file.strip_prefix(*d).and_then(|n| n.strip_prefix(b"/")) else { continue };
            if name.is_empty() {
                continue;
            }
            // Every other directory of the search, not only those listed
            // before it: the order gcc searches them in (`CPATH` between
            // `-I` and `-isystem`, `-idirafter` after the system's) is not
            // the order they are listed in here, and a new file in one that
            // comes later costs a miss, never a wrong hit.
            for dir in first.iter().chain(&chain).copied() {
                p.clear();
                p.extend_from_slice(dir);
                p.push(b'/');
                p.extend_from_slice(name);
                if p == file || seen.contains(&p) {
                    continue;
                }
                seen.insert(p.clone());
                if files.absent_under(dir, &p, now, &mut view) {
                    out.push((os(dir).to_owned(), os(&p).to_owned()));
                } else if std::fs::metadata(os(&p)).map_or(true, |m| {
                    use std::os::unix::fs::MetadataExt;
                    changed_after(files::stamp_ns(m.ctime(), m.ctime_nsec()))
                }) {
                    // Made while the compile ran: it may be what the compile
                    // should have read, and no absence can be recorded for it.
                    return Err("a header appeared while it compiled");
                }
            }
        }
    }
    Ok(out)
}

/// `compiler -E -v -x c /dev/null`: the directories between "#include <...>
/// search starts here:" and "End of search list." on stderr.
/// Whether `arg` changes which system include directories the compile
/// searches: the directories asked of the compiler without it
/// ([`ask_system_dirs`]) would not be its own, and a new header in its own
/// would not be seen.
fn moves_system_dirs(arg: &[u8]) -> bool {
    const EXACT: &[&[u8]] =
        &[b"-nostdinc", b"-nostdinc++", b"-nostdlibinc", b"-nobuiltininc", b"-m32", b"-mx32", b"-m16", b"-target"];
    const PREFIX: &[&[u8]] = &[
        b"--sysroot",
        b"-isysroot",
        b"-iprefix",
        b"-iwithprefix",
        b"-stdlib=",
        b"--target",
        b"-imultilib",
        b"-imultiarch",
        b"-B",
        b"--gcc-toolchain",
        b"--gcc-install-dir",
    ];
    EXACT.contains(&arg) || PREFIX.iter().any(|p| arg.starts_with(p))
}

fn ask_system_dirs(compiler: &Path, cxx: bool) -> Vec<PathBuf> {
    let out = Command::new(compiler)
        .args(["-E", "-v", "-x", if cxx { "c++" } else { "c" }, "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output();
    let Ok(out) = out else { return Vec::new() };
    let text = String::from_utf8_lossy(&out.stderr);
    let mut dirs = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if line.starts_with("#include <...> search starts here:") {
            inside = true;
        } else if line.starts_with("End of search list.") {
            break;
        } else if inside {
            let d = line.trim().trim_end_matches(" (framework directory)");
            dirs.push(normalize(Path::new("/"), Path::new(d)));
        }
    }
    dirs
}

/// Today in the local time zone, as `__DATE__` changes with it.
pub fn today() -> String {
    let t: libc::time_t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| libc::time_t::try_from(d.as_secs()).unwrap_or(0));
    #[allow(unsafe_code)]
    // SAFETY: localtime_r writes only into the zeroed struct it is given.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        tm
    };
    format!("{:04}-{:02}-{:02}", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
