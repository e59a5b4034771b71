//! A unit's inputs: every file its preprocessing read, by digest, for an
//! agent that compiles the unmodified command at the real paths
//! ([`ccroute_wire::inputs`]).
//!
//! The list is the preprocessor's own record of a real run (the line
//! markers of the text the wrapper made), so computed includes and
//! `#include_next` are in it. What it cannot show is asked for here:
//!
//! - `__has_include` asks whether a file exists without reading it. Each
//!   file read that uses it ([`Marks::PROBE`]) is scanned for the names it
//!   asks about, and every file of that name on the search path (the
//!   includer's directory, the include directories, the system ones) is
//!   added, so that the sandbox answers as this machine does. A name given
//!   through a macro refuses the unit.
//! - `#embed` and `.incbin` read files no list names: refused.
//! - A file that changed after the compile started may not be what the
//!   preprocessor read: refused.
//! - A name reached through `..` is checked against where the kernel
//!   resolves it (a symbolic link on the way makes the two differ): refused
//!   when they differ.
//! - The locale the compiler prints in (its quotes, its translations) is
//!   files it reads at start-up: those of the command's `LANG`/`LC_*` are
//!   added ([`locale_files`]), so that diagnostics read as here.
//!
//! A refusal sends the unit as text, the way it went before inputs
//! travelled. Main item: [`DirectCache::inputs_of`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use ccroute_wire::local::DirectJob;
use ccroute_wire::InputFile;

use super::files::{dotdot_through_link, normalize, probe_places, probed_names, Marks};
use super::{changed_after, now_ns, os, DirectCache};

/// The files of one unit and where each digest can be read again.
#[derive(Debug, Clone, Default)]
pub struct UnitInputs {
    /// Sorted by path, each once.
    pub files: Vec<InputFile>,
    /// Directories that must exist: the working directory and the include
    /// directories that exist here. Sorted, each once.
    pub dirs: Vec<String>,
    /// digest → a path that has it, for serving the blobs.
    pub sources: HashMap<[u8; 32], PathBuf>,
}

impl DirectCache {
    /// The inputs of `job`, whose preprocessing read `listed` (as its line
    /// markers name them), compiled by `compiler`; why not, when they cannot
    /// be vouched for.
    ///
    /// # Errors
    /// Why the unit must go as text.
    pub fn inputs_of(
        &self,
        compiler: &Path,
        job: &DirectJob,
        listed: &[Vec<u8>],
        locale: &[(String, String)],
    ) -> Result<UnitInputs, &'static str> {
        let cwd = os(&job.cwd);
        if !cwd.is_absolute() || cwd.to_str().is_none() {
            return Err("the working directory is not an absolute UTF-8 path");
        }
        let changed_after = changed_after(job.started_ns);
        let now = now_ns();
        let include_dirs: Vec<PathBuf> = job.include_dirs.iter().map(|d| normalize(cwd, os(d))).collect();
        let system = self.system_dirs(compiler, job.cxx);

        // By the path's bytes, the order the agent checks.
        let mut read: BTreeMap<String, InputFile> = BTreeMap::new();
        let mut sources = HashMap::new();
        // Adds a file; `Some(path)` when it uses `__has_include`.
        let mut add = |path: PathBuf, missing_ok: bool| -> Result<Option<PathBuf>, &'static str> {
            let text = path.to_str().ok_or("a path is not UTF-8")?.to_owned();
            if read.contains_key(&text) {
                return Ok(None);
            }
            let d = match self.files.digest(&path, now) {
                Ok(d) => d,
                // A name only a `#line` gives (a grammar file), or a probe's miss.
                Err(e) if missing_ok && e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(_) => return Err("a file it read cannot be read now"),
            };
            if changed_after(d.changed_ns) {
                return Err("a file changed while it was preprocessed");
            }
            if d.marks.has(Marks::EMBED) {
                return Err("#embed or .incbin reads a file no list names");
            }
            sources.entry(d.digest).or_insert_with(|| path.clone());
            read.insert(text.clone(), InputFile { path: text, digest: d.digest, size: d.size });
            Ok(d.marks.has(Marks::PROBE).then_some(path))
        };
        let mut probing: Vec<PathBuf> = Vec::new();
        probing.extend(add(normalize(cwd, os(&job.input)), false)?);
        for name in listed {
            if name.is_empty() || name.starts_with(b"<") {
                continue;
            }
            let path = normalize(cwd, os(name));
            if dotdot_through_link(cwd, name, &path) {
                return Err("a path reached through `..` and a symbolic link");
            }
            probing.extend(add(path, true)?);
        }
        for f in locale_files(locale) {
            add(f, true)?;
        }
        // `__has_include`: every file of each probed name on the search path.
        let mut probed = BTreeSet::new();
        while let Some(file) = probing.pop() {
            let bytes = std::fs::read(&file).map_err(|_| "a file it read cannot be read now")?;
            let names = probed_names(&bytes).ok_or("__has_include names its file through a macro")?;
            let dir = file.parent().map(Path::to_owned).unwrap_or_default();
            for (quoted, name) in names {
                for (_, candidate) in probe_places(cwd, &dir, (quoted, os(&name)), &include_dirs, &system) {
                    if probed.insert(candidate.clone()) {
                        probing.extend(add(candidate, true)?);
                    }
                }
            }
        }
        let mut dirs: BTreeSet<String> = BTreeSet::new();
        for d in std::iter::once(cwd.to_owned()).chain(include_dirs).chain(system.iter().cloned()) {
            let d = normalize(Path::new("/"), &d);
            if d.as_os_str().as_bytes() != b"/" && d.is_dir() {
                dirs.insert(d.to_str().ok_or("a path is not UTF-8")?.to_owned());
            }
        }
        if read.values().any(|f| f.path.starts_with("/proc/") || f.path.starts_with("/dev/")) {
            return Err("it reads a file under /proc or /dev");
        }
        let files: Vec<InputFile> = read.into_values().collect();
        Ok(UnitInputs { files, dirs: dirs.into_iter().collect(), sources })
    }
}

/// Where glibc keeps compiled locales.
const LOCALE_DIR: &str = "/usr/lib/locale";

/// A locale archive larger than this is not sent (glibc then reads the
/// locale's own directory, when there is one).
const MAX_ARCHIVE: u64 = 64 << 20;

/// The files the compiler's locale comes from, for `env` (the command's
/// `LANG`, `LC_ALL`, `LC_CTYPE`, `LC_MESSAGES`): the locale archive, each
/// named locale's directory (`C.UTF-8` is kept as `C.utf8`), and gcc's and
/// cpplib's message catalogs for its language.
pub fn locale_files(env: &[(String, String)]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let names: BTreeSet<&str> = env
        .iter()
        .filter(|(k, _)| k == "LANG" || k.starts_with("LC_"))
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty() && !matches!(*v, "C" | "POSIX") && !v.contains('/') && !v.starts_with('.'))
        .collect();
    if names.is_empty() {
        return out;
    }
    let archive = Path::new(LOCALE_DIR).join("locale-archive");
    if std::fs::metadata(&archive).is_ok_and(|m| m.is_file() && m.len() <= MAX_ARCHIVE) {
        out.push(archive);
    }
    for name in names {
        // `en_US.UTF-8@euro` is also looked up as `en_US.utf8@euro`.
        let (base, modifier) = name.split_once('@').map_or((name, None), |(b, m)| (b, Some(m)));
        let mut variants = vec![name.to_owned()];
        if let Some((lang, codeset)) = base.split_once('.') {
            let norm: String =
                codeset.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_lowercase()).collect();
            variants.push(match modifier {
                Some(m) => format!("{lang}.{norm}@{m}"),
                None => format!("{lang}.{norm}"),
            });
        }
        for v in &variants {
            let dir = Path::new(LOCALE_DIR).join(v);
            let mut stack = vec![dir];
            while let Some(d) = stack.pop() {
                for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                    match e.file_type() {
                        Ok(t) if t.is_dir() => stack.push(e.path()),
                        Ok(t) if t.is_file() => out.push(e.path()),
                        _ => {}
                    }
                }
            }
        }
        let lang = base.split('.').next().unwrap_or(base);
        let short = lang.split('_').next().unwrap_or(lang);
        for l in BTreeSet::from([lang, short]) {
            let dir = Path::new("/usr/share/locale").join(l).join("LC_MESSAGES");
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let n = e.file_name();
                let n = n.to_string_lossy();
                if (n.starts_with("gcc") || n.starts_with("cpplib")) && n.ends_with(".mo") {
                    out.push(e.path());
                }
            }
        }
    }
    out
}
