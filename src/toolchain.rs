//! Toolchain discovery: which compilers a host has, and their identity.
//!
//! [`query`] runs one compiler driver a few times, each time with a clean
//! environment and a time limit, and fills a [`Toolchain`]:
//!
//! - kind from the driver's predefined macros (`__clang__`, `__GNUC__`),
//!   which, unlike the file name, cannot lie (`cc` is gcc on one host and
//!   clang on the next);
//! - language and compiler family from the driver name (`x86_64-linux-gnu-g++-12`
//!   is a `g++`), normalized per kind so that `cc` and `gcc` of one binary
//!   are one toolchain;
//! - target from `-dumpmachine`, version from `-dumpversion` (clang: the
//!   full `__clang_version__`), PIC/PIE defaults from `__PIC__` / `__PIE__`;
//! - `binary_hash`: the id of its [`Package`]'s manifest — blake3 over every
//!   file the compiler runs or loads (driver, `cc1`, `cc1plus`, `as`, their
//!   libraries and the dynamic loader), so that two hosts share a toolchain
//!   only when they would write the same bytes, and an agent that lacks it
//!   can be sent exactly those files (module `package`).
//!
//! [`discover`] looks for drivers in `PATH` and in extra paths; [`ToolchainMemo`]
//! answers "what is /usr/bin/gcc" for every compile and re-queries only when
//! a file behind the answer changed. [`test_toolchain`] is the built-in no-op
//! toolchain.
//!
//! Left out: response files, `-B` prefixes and `COMPILER_PATH` are not
//! honoured (the environment is cleared on purpose); failures are not cached.

mod memo;
mod package;
mod probe;

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ccroute_wire::{Lang, Toolchain, ToolchainKind};

pub use self::memo::ToolchainMemo;
pub use self::package::Package;
use self::probe::Probe;

/// How long one probe of a compiler may take before it is killed.
pub const PROBE_TIME_LIMIT: Duration = Duration::from_secs(10);

/// Why a compiler could not be queried.
#[derive(Debug, thiserror::Error)]
pub enum ToolchainError {
    /// The path does not name a file we can inspect.
    #[error("cannot inspect compiler {path}: {source}")]
    Inspect {
        /// The compiler path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A bare name was not found in `PATH`.
    #[error("compiler {0:?} not found in PATH")]
    NotInPath(OsString),
    /// The file exists but is not an executable regular file.
    #[error("compiler {0} is not an executable file")]
    NotExecutable(PathBuf),
    /// The file name is not one of the compiler drivers ccroute knows.
    #[error("{0} is not named like a compiler driver (gcc, g++, cc, c++, clang, clang++)")]
    UnknownDriver(PathBuf),
    /// The compiler could not be started.
    #[error("cannot run `{path} {probe}`: {source}")]
    Spawn {
        /// The compiler path.
        path: PathBuf,
        /// The arguments of the probe.
        probe: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The compiler exited unsuccessfully.
    #[error("`{path} {probe}` exited with {status}: {stderr}")]
    Failed {
        /// The compiler path.
        path: PathBuf,
        /// The arguments of the probe.
        probe: String,
        /// Exit status as the OS reports it.
        status: std::process::ExitStatus,
        /// The start of its standard error.
        stderr: String,
    },
    /// The compiler ran past the time limit and was killed.
    #[error("`{path} {probe}` did not finish within {limit_ms} ms and was killed")]
    TimedOut {
        /// The compiler path.
        path: PathBuf,
        /// The arguments of the probe.
        probe: String,
        /// The limit, milliseconds.
        limit_ms: u128,
    },
    /// The compiler's answer is not what a gcc- or clang-like driver prints.
    #[error("cannot parse the output of `{path} {probe}`: {reason}")]
    Unparsable {
        /// The compiler path.
        path: PathBuf,
        /// The arguments of the probe.
        probe: String,
        /// What was wrong.
        reason: String,
    },
    /// A binary of the compiler could not be read for its hash.
    #[error("cannot hash {path}: {source}")]
    Hash {
        /// The file being hashed.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// The compiler drivers ccroute knows, by file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// `gcc`
    Gcc,
    /// `g++`
    Gxx,
    /// `cc`
    Cc,
    /// `c++`
    CPlusPlus,
    /// `clang`
    Clang,
    /// `clang++`
    ClangPlusPlus,
}

impl Driver {
    /// Parses a file name: an optional target prefix of at least three parts
    /// (`x86_64-linux-gnu-`), the driver, an optional version (`-12`, `-16.0`).
    pub fn from_file_name(name: &str) -> Option<Driver> {
        let name = without_version(name);
        let (prefix, family) = match name.rsplit_once('-') {
            Some((prefix, family)) => (Some(prefix), family),
            None => (None, name),
        };
        let driver = match family {
            "gcc" => Driver::Gcc,
            "g++" => Driver::Gxx,
            "cc" => Driver::Cc,
            "c++" => Driver::CPlusPlus,
            "clang" => Driver::Clang,
            "clang++" => Driver::ClangPlusPlus,
            _ => return None,
        };
        let triple_like = |p: &str| {
            let parts: Vec<&str> = p.split('-').collect();
            parts.len() >= 3
                && parts
                    .iter()
                    .all(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        };
        match prefix {
            Some(p) if !triple_like(p) => None,
            _ => Some(driver),
        }
    }

    /// Whether the driver compiles C++ by default.
    pub fn is_cxx(self) -> bool {
        matches!(self, Driver::Gxx | Driver::CPlusPlus | Driver::ClangPlusPlus)
    }

    /// Normalized compiler name and default language for a driver of `kind`:
    /// gcc's `cc` is `gcc`, clang's `cc` is `clang`.
    pub fn identity(self, kind: ToolchainKind) -> (&'static str, Lang) {
        match (kind, self.is_cxx()) {
            (ToolchainKind::Clang, false) => ("clang", Lang::Multi),
            (ToolchainKind::Clang, true) => ("clang++", Lang::Cxx),
            (_, false) => ("gcc", Lang::C),
            (_, true) => ("g++", Lang::Cxx),
        }
    }
}

/// A driver's name without its version suffix: `gcc-12` is `gcc`,
/// `x86_64-linux-gnu-clang++-14` is `x86_64-linux-gnu-clang++`.
fn without_version(name: &str) -> &str {
    match name.rsplit_once('-') {
        Some((rest, v)) if v.starts_with(|c: char| c.is_ascii_digit()) && v.chars().all(is_version_char) => rest,
        _ => name,
    }
}

fn is_version_char(c: char) -> bool {
    c.is_ascii_digit() || c == '.'
}

/// A file's identity for change detection: replaced, rewritten or retouched
/// files all change it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_s: i64,
    mtime_ns: i64,
}

impl FileStamp {
    fn of(meta: &fs::Metadata) -> Self {
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_s: meta.mtime(),
            mtime_ns: meta.mtime_nsec(),
        }
    }

    /// The stamp of the file `path` resolves to; `None` if it is gone.
    fn current(path: &Path) -> Option<Self> {
        fs::metadata(path).ok().map(|m| Self::of(&m))
    }
}

/// Digests of binaries already hashed, by stamp: `cc1plus` is tens of
/// megabytes and shared by every g++ name on the host. Threads that need one
/// file at once hash it once: the others wait for its slot.
#[derive(Debug, Default)]
struct DigestMemo {
    slots: Mutex<HashMap<FileStamp, DigestSlot>>,
    /// Files read and hashed, for tests.
    hashed: AtomicUsize,
}

/// One file's digest, once hashed; locked while it is being hashed.
type DigestSlot = Arc<Mutex<Option<[u8; 32]>>>;

impl DigestMemo {
    const MAX_ENTRIES: usize = 4096;

    /// The slot of `stamp`, made if new. The map's lock is held only here.
    fn slot(&self, stamp: FileStamp) -> DigestSlot {
        // A panic elsewhere cannot leave the map half-written: each change is one call.
        let mut memo = self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if memo.len() >= Self::MAX_ENTRIES && !memo.contains_key(&stamp) {
            memo.clear();
        }
        memo.entry(stamp).or_default().clone()
    }

    /// The stamp and blake3 of `path`'s contents. The slot's lock is held
    /// while hashing, so a second thread asking for the same file waits and
    /// takes the first one's digest; a failure leaves the slot empty.
    fn digest(&self, path: &Path) -> Result<(FileStamp, [u8; 32]), ToolchainError> {
        let err = |source| ToolchainError::Hash { path: path.to_owned(), source };
        let mut file = fs::File::open(path).map_err(err)?;
        let stamp = FileStamp::of(&file.metadata().map_err(err)?);
        let slot = self.slot(stamp);
        let mut known = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(d) = *known {
            return Ok((stamp, d));
        }
        self.hashed.fetch_add(1, Ordering::Relaxed);
        let mut hasher = blake3::Hasher::new();
        let read = io::copy(&mut file, &mut hasher).map_err(err)?;
        if read != stamp.size {
            let msg = format!("file changed while hashing ({read} of {} bytes)", stamp.size);
            return Err(err(io::Error::other(msg)));
        }
        let digest = *hasher.finalize().as_bytes();
        *known = Some(digest);
        Ok((stamp, digest))
    }
}

/// What a query found besides the toolchain: the files its identity rests
/// on, for the cache to watch.
#[derive(Debug)]
struct Queried {
    toolchain: Toolchain,
    /// The driver's stamp, looked up through the path as given.
    driver: FileStamp,
    /// The other programs of its package, by physical path.
    others: Vec<(PathBuf, FileStamp)>,
    /// Its files, for agents that do not have it.
    package: Arc<Package>,
}

/// Runs the compiler at `path` and returns its identity.
///
/// A bare name (`gcc`) is looked up in `PATH`. Each probe is killed after
/// [`PROBE_TIME_LIMIT`].
///
/// # Errors
///
/// When the file is missing or not executable, is not named like a driver,
/// a probe fails or times out, or its output cannot be parsed.
pub fn query(path: &Path) -> Result<Toolchain, ToolchainError> {
    query_with_limit(path, PROBE_TIME_LIMIT)
}

/// [`query`] with another time limit per probe.
///
/// # Errors
///
/// As [`query`].
pub fn query_with_limit(path: &Path, limit: Duration) -> Result<Toolchain, ToolchainError> {
    let program = locate(path)?;
    Ok(query_located(&program, limit, &DigestMemo::default())?.toolchain)
}

/// The absolute path to run: `path` made absolute (symlinks kept: the
/// driver's mode follows its name), or a bare name found in `PATH`.
fn locate(path: &Path) -> Result<PathBuf, ToolchainError> {
    if path.components().count() == 1 && !path.has_root() {
        let name = path.as_os_str();
        let dirs = std::env::var_os("PATH").unwrap_or_default();
        return std::env::split_paths(&dirs)
            .filter(|d| d.is_absolute())
            .map(|d| d.join(name))
            .find(|p| is_executable(p))
            .ok_or_else(|| ToolchainError::NotInPath(name.to_owned()));
    }
    std::path::absolute(path).map_err(|source| ToolchainError::Inspect { path: path.to_owned(), source })
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn query_located(program: &Path, limit: Duration, memo: &DigestMemo) -> Result<Queried, ToolchainError> {
    let inspect = |source| ToolchainError::Inspect { path: program.to_owned(), source };
    let meta = fs::metadata(program).map_err(inspect)?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return Err(ToolchainError::NotExecutable(program.to_owned()));
    }
    let driver = program
        .file_name()
        .and_then(OsStr::to_str)
        .and_then(Driver::from_file_name)
        .ok_or_else(|| ToolchainError::UnknownDriver(program.to_owned()))?;
    let resolved = fs::canonicalize(program).map_err(inspect)?;
    let probe = Probe::new(program, limit);

    let macros_out = probe.run(&["-E", "-dM", "-x", "c", "/dev/null"])?;
    let macros = &macros_out.stdout;
    let kind = if predefined(macros, "__clang__").is_some() {
        ToolchainKind::Clang
    } else if predefined(macros, "__GNUC__").is_some() {
        ToolchainKind::Gnu
    } else {
        return Err(macros_out.unparsable("defines neither __GNUC__ nor __clang__"));
    };
    let (compiler, lang) = driver.identity(kind);

    let machine = probe.run(&["-dumpmachine"])?;
    let target = machine.single_word().ok_or_else(|| machine.unparsable("expected one target triple"))?;

    let clang_version = predefined(macros, "__clang_version__")
        .and_then(|v| v.trim_matches('"').split_whitespace().next())
        .filter(|v| v.starts_with(|c: char| c.is_ascii_digit()));
    let version = match (kind, clang_version) {
        (ToolchainKind::Clang, Some(v)) => v.to_owned(),
        _ => {
            let out = probe.run(&["-dumpversion"])?;
            out.single_word().ok_or_else(|| out.unparsable("expected one version"))?
        }
    };

    let packaged = package::package(&resolved, kind, compiler, &probe, memo)?;
    let toolchain = Toolchain {
        kind,
        lang,
        compiler: compiler.to_owned(),
        target,
        version,
        pic_default: predefined(macros, "__PIC__").is_some(),
        pie_default: predefined(macros, "__PIE__").is_some(),
        binary_hash: packaged.package.manifest.id(),
    };
    // The cache checks the driver through the path as given, so that a
    // retargeted symlink is noticed, and the other programs by physical path.
    let driver = FileStamp::of(&meta);
    Ok(Queried { toolchain, driver, others: packaged.programs, package: Arc::new(packaged.package) })
}

/// The value of `#define name value` in `-dM` output (empty for a bare define).
fn predefined<'a>(macros: &'a str, name: &str) -> Option<&'a str> {
    macros.lines().find_map(|line| {
        let rest = line.strip_prefix("#define ")?;
        let (n, value) = rest.split_once(' ').unwrap_or((rest, ""));
        (n == name).then_some(value)
    })
}

/// A compiler found by [`discover`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    /// The path to run it by (its name selects the driver's mode).
    pub path: PathBuf,
    /// Its identity.
    pub toolchain: Toolchain,
    /// Its files (for the sandbox units sent as their inputs compile in).
    pub package: Arc<Package>,
}

/// Finds the compilers in `path_env` (a `PATH`-style list; `None` for none)
/// and in `extra`, queries each and keeps one entry per distinct toolchain
/// and binary.
///
/// In `PATH` it considers `gcc`, `g++`, `cc`, `c++`, `clang`, `clang++` and
/// their versioned and target-prefixed names, but skips names that resolve to
/// a wrapper (ccache, distcc, ccroute itself). `extra` paths are queried as
/// given. Failures are logged and skipped. Of the names of one binary the
/// plainest wins (`gcc` over `cc` over `x86_64-linux-gnu-gcc-12`). The
/// result is sorted by compiler, version, target and path.
pub fn discover(path_env: Option<&OsStr>, extra: &[PathBuf]) -> Vec<Discovered> {
    let memo = DigestMemo::default();
    let own_exe = std::env::current_exe().and_then(fs::canonicalize).ok();
    let mut seen_dirs = Vec::new();
    let mut candidates = Vec::new();
    for dir in path_env.map(|p| std::env::split_paths(p).collect::<Vec<_>>()).unwrap_or_default() {
        // Relative entries would depend on the agent's working directory.
        if !dir.is_absolute() {
            continue;
        }
        let Ok(canonical) = fs::canonicalize(&dir) else { continue };
        if seen_dirs.contains(&canonical) {
            continue;
        }
        seen_dirs.push(canonical);
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| Driver::from_file_name(n).is_some())
            .collect();
        names.sort();
        for name in names {
            let path = dir.join(&name);
            let Ok(resolved) = fs::canonicalize(&path) else { continue };
            let wrapper = resolved.file_name().and_then(OsStr::to_str).and_then(Driver::from_file_name).is_none();
            if wrapper || own_exe.as_ref() == Some(&resolved) {
                tracing::debug!(path = %path.display(), resolved = %resolved.display(), "not a compiler driver, skipped");
                continue;
            }
            candidates.push((path, resolved));
        }
    }
    for path in extra {
        match fs::canonicalize(path) {
            Ok(resolved) => candidates.push((path.clone(), resolved)),
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "compiler skipped"),
        }
    }

    // (key, resolved binary) → (rank, entry)
    let mut best: BTreeMap<(u128, PathBuf), (Rank, Discovered)> = BTreeMap::new();
    let queried = query_all(&candidates, &memo);
    for (order, ((path, resolved), queried)) in candidates.into_iter().zip(queried).enumerate() {
        let (toolchain, package) = match queried {
            Ok(q) => (q.toolchain.clone(), q.package.clone()),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "compiler skipped");
                continue;
            }
        };
        let rank = Rank::of(&path, &toolchain, order);
        let slot = (toolchain.key().0, resolved);
        let entry = Discovered { path, toolchain, package };
        match best.get(&slot) {
            Some((r, _)) if *r <= rank => {}
            _ => {
                best.insert(slot, (rank, entry));
            }
        }
    }
    let mut found: Vec<Discovered> = best.into_values().map(|(_, d)| d).collect();
    found.sort_by(|a, b| sort_key(a).cmp(&sort_key(b)));
    found
}

/// Most threads [`discover`] queries compilers on.
const MAX_QUERY_THREADS: usize = 8;

/// Each of `candidates` queried, in their order. Names of one binary that
/// differ only in a version suffix (`gcc`, `gcc-12`; `clang`, `clang-14`)
/// run it in the same mode for the same target, so they are queried once,
/// at the first; the others (`g++` beside `gcc`, a target prefix) each, in
/// parallel up to the host's CPUs, the memo hashing a file they share once.
/// An agent's start is mostly these queries: a few probe runs each (a clang
/// run loads libLLVM) and the hashing of each package.
fn query_all(candidates: &[(PathBuf, PathBuf)], memo: &DigestMemo) -> Vec<Result<Arc<Queried>, Arc<ToolchainError>>> {
    // (binary, name without version) → the first candidate of it; and each candidate's query.
    let mut firsts: Vec<((&Path, &str), usize)> = Vec::new();
    let mut query_of = Vec::with_capacity(candidates.len());
    for (i, (path, binary)) in candidates.iter().enumerate() {
        let name = without_version(path.file_name().and_then(OsStr::to_str).unwrap_or(""));
        let key = (binary.as_path(), name);
        match firsts.iter().position(|(k, _)| *k == key) {
            Some(n) => query_of.push(n),
            None => {
                query_of.push(firsts.len());
                firsts.push((key, i));
            }
        }
    }
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = firsts.len().min(cpus).min(MAX_QUERY_THREADS);
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        while let Some(&(_, i)) = firsts.get(next.fetch_add(1, Ordering::Relaxed)) {
            let q = locate(&candidates[i].0).and_then(|p| query_located(&p, PROBE_TIME_LIMIT, memo));
            done.push((query_of[i], q));
        }
        done
    };
    let mut queried: Vec<Option<Result<Arc<Queried>, Arc<ToolchainError>>>> = vec![None; firsts.len()];
    std::thread::scope(|s| {
        let helpers: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
        let mine = work();
        for (n, q) in helpers.into_iter().flat_map(|h| h.join().unwrap_or_default()).chain(mine) {
            queried[n] = Some(q.map(Arc::new).map_err(Arc::new));
        }
    });
    // A helper that panicked leaves its queries unanswered: those compilers are skipped with a reason.
    let lost =
        |path: &PathBuf| ToolchainError::Inspect { path: path.clone(), source: io::Error::other("its query panicked") };
    query_of
        .into_iter()
        .zip(candidates)
        .map(|(n, (path, _))| queried[n].clone().unwrap_or_else(|| Err(Arc::new(lost(path)))))
        .collect()
}

fn sort_key(d: &Discovered) -> (&str, &str, &str, &Path) {
    (&d.toolchain.compiler, &d.toolchain.version, &d.toolchain.target, &d.path)
}

/// Preference among names of one binary: the canonical name (`gcc` for gcc),
/// then any plain name (`cc`), then the shortest, then the first found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    not_canonical: bool,
    decorated: bool,
    len: usize,
    order: usize,
}

impl Rank {
    fn of(path: &Path, toolchain: &Toolchain, order: usize) -> Self {
        let name = path.file_name().and_then(OsStr::to_str).unwrap_or("");
        Rank { not_canonical: name != toolchain.compiler, decorated: name.contains('-'), len: name.len(), order }
    }
}

/// The built-in no-op toolchain: agents can offer it and benches use it to
/// measure ccroute's own cost.
pub fn test_toolchain() -> Toolchain {
    Toolchain {
        kind: ToolchainKind::Test,
        lang: Lang::Multi,
        compiler: "ccroute-test".to_owned(),
        target: "testarch".to_owned(),
        version: "0".to_owned(),
        pic_default: false,
        pie_default: false,
        binary_hash: [0; 32],
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
pub(crate) mod tests {
    use std::os::unix::fs::symlink;
    use std::process::Command;

    use super::*;

    /// Writes an executable shell script.
    pub(crate) fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// A gcc look-alike that answers the probes, logs each run to `log`,
    /// and names `cc1` as its compiler proper.
    pub(crate) fn fake_gcc(dir: &Path, name: &str, cc1: &Path, log: &Path) -> PathBuf {
        let body = format!(
            r#"echo "$*" >> '{log}'
case "$1" in
  -dumpmachine) echo x86_64-fake-linux-gnu ;;
  -dumpversion) echo 9 ;;
  -print-prog-name=cc1) echo '{cc1}' ;;
  -print-prog-name=*) echo "${{1#-print-prog-name=}}-missing" ;;
  -E) printf '#define __GNUC__ 9\n#define __PIC__ 2\n' ;;
  *) echo "unexpected $*" >&2; exit 1 ;;
esac"#,
            log = log.display(),
            cc1 = cc1.display()
        );
        script(dir, name, &body)
    }

    fn shell(cmd: &str) -> String {
        let out = Command::new("sh").args(["-c", cmd]).output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    #[test]
    fn driver_names() {
        let cases = [
            ("gcc", Some(Driver::Gcc)),
            ("gcc-12", Some(Driver::Gcc)),
            ("x86_64-linux-gnu-gcc-12", Some(Driver::Gcc)),
            ("x86_64-linux-gnu-g++", Some(Driver::Gxx)),
            ("aarch64-unknown-linux-gnu-g++-13.2", Some(Driver::Gxx)),
            ("cc", Some(Driver::Cc)),
            ("c++", Some(Driver::CPlusPlus)),
            ("clang", Some(Driver::Clang)),
            ("clang-16", Some(Driver::Clang)),
            ("clang++-14", Some(Driver::ClangPlusPlus)),
            ("gcc-ar-12", None),
            ("x86_64-linux-gnu-gcc-nm", None),
            ("clang-cpp-14", None),
            ("c++filt", None),
            ("c89-gcc", None),
            ("my-gcc", None),
            ("gcc-", None),
            ("-gcc", None),
            ("x86_64--gnu-gcc", None),
            ("gcc-12a", None),
            ("", None),
        ];
        for (name, want) in cases {
            assert_eq!(Driver::from_file_name(name), want, "{name}");
        }
        assert_eq!(Driver::Cc.identity(ToolchainKind::Gnu), ("gcc", Lang::C));
        assert_eq!(Driver::Cc.identity(ToolchainKind::Clang), ("clang", Lang::Multi));
        assert_eq!(Driver::CPlusPlus.identity(ToolchainKind::Gnu), ("g++", Lang::Cxx));
        assert_eq!(Driver::ClangPlusPlus.identity(ToolchainKind::Clang), ("clang++", Lang::Cxx));
    }

    #[test]
    fn predefined_macros() {
        let text = "#define __GNUC__ 12\n#define __PIC__ 2\n#define __clang_version__ \"14.0.6 \"\n#define __x86_64 1\n#define EMPTY\n";
        assert_eq!(predefined(text, "__GNUC__"), Some("12"));
        assert_eq!(predefined(text, "__PIE__"), None);
        assert_eq!(predefined(text, "__x86_64__"), None);
        assert_eq!(predefined(text, "EMPTY"), Some(""));
        assert_eq!(predefined(text, "__clang_version__"), Some("\"14.0.6 \""));
    }

    /// gcc, cc, g++ and c++ of this host; `cc` is gcc here, whatever its name says.
    #[test]
    fn gnu_drivers_of_this_host() {
        let gcc = query(Path::new("/usr/bin/gcc")).unwrap();
        assert_eq!((gcc.kind, gcc.lang, gcc.compiler.as_str()), (ToolchainKind::Gnu, Lang::C, "gcc"));
        assert_eq!(gcc.target, shell("gcc -dumpmachine"));
        assert_eq!(gcc.version, shell("gcc -dumpversion"));
        assert_eq!(gcc.pie_default, !shell("gcc -dM -E -x c /dev/null | grep -w __PIE__").is_empty());
        assert_eq!(gcc.pic_default, !shell("gcc -dM -E -x c /dev/null | grep -w __PIC__").is_empty());
        assert_ne!(gcc.binary_hash, [0; 32]);
        // A bare name is found in PATH.
        assert_eq!(query(Path::new("gcc")).unwrap(), gcc);

        let gxx = query(Path::new("/usr/bin/g++")).unwrap();
        assert_eq!((gxx.kind, gxx.lang, gxx.compiler.as_str()), (ToolchainKind::Gnu, Lang::Cxx, "g++"));
        assert_ne!(gxx.key(), gcc.key());

        if shell("readlink -f /usr/bin/cc") == shell("readlink -f /usr/bin/gcc") {
            assert_eq!(query(Path::new("/usr/bin/cc")).unwrap(), gcc);
        }
        if shell("readlink -f /usr/bin/c++") == shell("readlink -f /usr/bin/g++") {
            assert_eq!(query(Path::new("/usr/bin/c++")).unwrap(), gxx);
        }
    }

    #[test]
    fn clang_drivers_of_this_host() {
        let clang = match query(Path::new("clang")) {
            Ok(c) => c,
            Err(e) => return crate::test_env::lacking("clang", &e.to_string()),
        };
        assert_eq!((clang.kind, clang.lang, clang.compiler.as_str()), (ToolchainKind::Clang, Lang::Multi, "clang"));
        // The full version, e.g. 14.0.6, as --version prints it.
        assert_eq!(clang.version.split('.').count(), 3, "{}", clang.version);
        assert!(shell("clang --version").contains(&format!("clang version {}", clang.version)));
        assert_eq!(clang.target, shell("clang -dumpmachine"));
        let clangxx = query(Path::new("clang++")).unwrap();
        assert_eq!((clangxx.lang, clangxx.compiler.as_str()), (Lang::Cxx, "clang++"));
        assert_eq!(clangxx.version, clang.version);
    }

    #[test]
    fn errors_name_the_path_and_what_failed() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();

        let missing = d.join("gcc");
        let e = query(&missing).unwrap_err();
        assert!(matches!(e, ToolchainError::Inspect { .. }) && e.to_string().contains(&*missing.to_string_lossy()));

        assert!(matches!(query(Path::new("no-such-gcc-here")), Err(ToolchainError::NotInPath(_))));

        let plain = d.join("g++");
        fs::write(&plain, "not a program").unwrap();
        assert!(matches!(query(&plain), Err(ToolchainError::NotExecutable(p)) if p == plain));
        assert!(matches!(query(d), Err(ToolchainError::NotExecutable(_))));

        let other = script(d, "ld", "exit 0");
        assert!(matches!(query(&other), Err(ToolchainError::UnknownDriver(p)) if p == other));

        let broken = script(d, "clang", "echo 'clang: error: broken install' >&2; exit 1");
        let e = query(&broken).unwrap_err();
        assert!(matches!(e, ToolchainError::Failed { .. }) && e.to_string().contains("broken install"), "{e}");

        let silent = script(d, "cc", "exit 0");
        let e = query(&silent).unwrap_err();
        assert!(matches!(e, ToolchainError::Unparsable { .. }) && e.to_string().contains("__GNUC__"), "{e}");

        let no_target = script(d, "c++", "case \"$1\" in -E) echo '#define __GNUC__ 1';; *) echo;; esac");
        let e = query(&no_target).unwrap_err();
        assert!(matches!(e, ToolchainError::Unparsable { ref probe, .. } if probe == "-dumpmachine"), "{e}");

        let hangs = script(d, "x86_64-linux-gnu-gcc", "sleep 60");
        let e = query_with_limit(&hangs, Duration::from_millis(300)).unwrap_err();
        assert!(matches!(e, ToolchainError::TimedOut { .. }), "{e}");
    }

    #[test]
    fn binary_hash_follows_the_compiler_proper() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let cc1 = d.join("cc1");
        fs::write(&cc1, "cc1 build 1").unwrap();
        let gcc = fake_gcc(d, "gcc", &cc1, &d.join("log"));
        let first = query(&gcc).unwrap();
        assert_eq!(
            (first.kind, first.target.as_str(), first.version.as_str()),
            (ToolchainKind::Gnu, "x86_64-fake-linux-gnu", "9")
        );
        assert!(first.pic_default && !first.pie_default);

        fs::write(&cc1, "cc1 build 2").unwrap();
        let second = query(&gcc).unwrap();
        assert_ne!(first.binary_hash, second.binary_hash);
        assert_ne!(first.key(), second.key());
        // Only the hash moved.
        assert_eq!(Toolchain { binary_hash: first.binary_hash, ..second.clone() }, first);

        // Same binary under the name cc: the same toolchain.
        let cc = d.join("cc");
        symlink(&gcc, &cc).unwrap();
        assert_eq!(query(&cc).unwrap(), second);
    }

    #[test]
    fn discover_keeps_one_entry_per_toolchain_and_binary() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let bin = d.join("bin");
        let real = d.join("real");
        fs::create_dir_all(&bin).unwrap();
        fs::create_dir_all(&real).unwrap();
        let cc1 = real.join("cc1");
        fs::write(&cc1, "cc1").unwrap();
        let log = d.join("log");
        let gcc = fake_gcc(&real, "x86_64-fake-linux-gnu-gcc-9", &cc1, &log);
        let gxx = fake_gcc(&real, "x86_64-fake-linux-gnu-g++-9", &cc1, &log);
        for name in ["gcc", "gcc-9", "cc", "x86_64-fake-linux-gnu-gcc-9"] {
            symlink(&gcc, bin.join(name)).unwrap();
        }
        symlink(&gxx, bin.join("g++")).unwrap();
        symlink(&gxx, bin.join("c++")).unwrap();
        script(&bin, "clang", "exit 1");
        script(&bin, "gcc-ar-9", "exit 1");
        fs::write(bin.join("notes.txt"), "").unwrap();
        // A ccache-style wrapper: its name is gcc, its binary is not.
        let wrapper = script(&real, "ccache", "exit 1");
        let other = d.join("other");
        fs::create_dir_all(&other).unwrap();
        symlink(&wrapper, other.join("gcc")).unwrap();
        // An extra compiler given by path.
        let extra_dir = d.join("opt");
        fs::create_dir_all(&extra_dir).unwrap();
        let extra_cc1 = extra_dir.join("cc1");
        fs::write(&extra_cc1, "another cc1").unwrap();
        let extra = fake_gcc(&extra_dir, "gcc-9", &extra_cc1, &log);

        let path_env = std::env::join_paths([&bin, &other, &bin, &PathBuf::from("relative/bin")]).unwrap();
        let found = discover(Some(&path_env), std::slice::from_ref(&extra));
        let summary: Vec<(PathBuf, &str)> =
            found.iter().map(|f| (f.path.clone(), f.toolchain.compiler.as_str())).collect();
        assert_eq!(summary, [(bin.join("g++"), "g++"), (bin.join("gcc"), "gcc"), (extra.clone(), "gcc")]);
        assert_ne!(found[1].toolchain.binary_hash, found[2].toolchain.binary_hash);
        // One query per binary and name less its version: `gcc` and `gcc-9`
        // share one; `cc`, `c++`, `g++`, the target-prefixed name and the
        // extra compiler have their own.
        let queries = |log: &Path| fs::read_to_string(log).unwrap().lines().filter(|l| *l == "-dumpmachine").count();
        assert_eq!(queries(&log), 6);

        // Deterministic: the same answer again.
        assert_eq!(discover(Some(&path_env), &[extra]), found);
        assert_eq!(queries(&log), 12);
        assert!(discover(None, &[]).is_empty());
    }

    /// Of one binary's names, the plainest is kept, wherever it stands in
    /// `PATH`: `gcc` over a `gcc-9` found first.
    #[test]
    fn the_plainest_name_of_a_binary_is_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let (first, second, real) = (d.join("first"), d.join("second"), d.join("real"));
        for dir in [&first, &second, &real] {
            fs::create_dir_all(dir).unwrap();
        }
        let cc1 = real.join("cc1");
        fs::write(&cc1, "cc1").unwrap();
        let gcc = fake_gcc(&real, "x86_64-fake-linux-gnu-gcc-9", &cc1, &d.join("log"));
        symlink(&gcc, first.join("gcc-9")).unwrap();
        symlink(&gcc, second.join("gcc")).unwrap();
        let path_env = std::env::join_paths([&first, &second]).unwrap();
        let found = discover(Some(&path_env), &[]);
        let paths: Vec<&Path> = found.iter().map(|f| f.path.as_path()).collect();
        assert_eq!(paths, [second.join("gcc").as_path()]);
    }

    /// Threads that want one file's digest at once (two compilers of a host
    /// queried in parallel share libraries) read it once; all get its digest.
    #[test]
    fn a_file_wanted_by_many_threads_at_once_is_hashed_once() {
        let tmp = tempfile::tempdir().unwrap();
        let big = tmp.path().join("cc1plus");
        let bytes: Vec<u8> = (0..16 << 20).map(|i: u32| (i % 251) as u8).collect();
        fs::write(&big, &bytes).unwrap();
        let memo = DigestMemo::default();
        let start = std::sync::Barrier::new(8);
        let digests: Vec<[u8; 32]> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        memo.digest(&big).unwrap().1
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert!(digests.iter().all(|d| d == blake3::hash(&bytes).as_bytes()));
        assert_eq!(memo.hashed.load(Ordering::Relaxed), 1);
        // A changed file is a new stamp: read again.
        fs::write(&big, b"rebuilt").unwrap();
        assert_eq!(memo.digest(&big).unwrap().1, *blake3::hash(b"rebuilt").as_bytes());
        assert_eq!(memo.hashed.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn test_toolchain_is_fixed() {
        let t = test_toolchain();
        assert_eq!(
            (t.kind, t.lang, t.compiler.as_str(), t.binary_hash),
            (ToolchainKind::Test, Lang::Multi, "ccroute-test", [0; 32])
        );
        assert_eq!(t.key(), test_toolchain().key());
    }
}
