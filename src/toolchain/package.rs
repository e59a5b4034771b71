//! A compiler as files: the [`Manifest`] an agent without it rebuilds it from.
//!
//! [`package`] collects, for one driver:
//!
//! - the driver (GNU: its real file, whatever name it was called by — gcc's
//!   behaviour does not follow its name; clang: `clang` or `clang++` beside
//!   its real file, since clang's does);
//! - GNU: the programs it runs, as `-print-prog-name=` names them (`cc1`,
//!   `cc1plus`, `as`, `collect2`, `lto-wrapper`, `objcopy`), a bare answer
//!   (`as`) looked up in `PATH` the way the driver will, and its directory
//!   then part of the manifest's search path; the files `-print-file-name=`
//!   finds (`specs`, the LTO plugin);
//! - clang: its resource directory, without the run-time libraries of `lib/`
//!   (used when linking, not when compiling);
//! - the closure of every ELF file among them, read with the `object`
//!   crate: the interpreter (`PT_INTERP`) and each `DT_NEEDED` library,
//!   searched as the dynamic loader does — `DT_RPATH` (when there is no
//!   `DT_RUNPATH`), `DT_RUNPATH`, with `$ORIGIN` expanded, then the
//!   directories of `/etc/ld.so.conf` and the system defaults; a script's
//!   `#!` interpreter the same way.
//!
//! Every path is recorded as the loader or the driver will open it, with
//! each symbolic link met on the way (`/lib64` → `usr/lib64`,
//! `libisl.so.23` → `libisl.so.23.2.0`), so that the tree an agent rebuilds
//! resolves every name as this host does. What the compiler reads of the
//! host's headers does not travel: sources arrive preprocessed.
//!
//! Left out: `dlopen`ed files nobody names (gcc plugins given with
//! `-fplugin` are refused by the agent's allow-list anyway), `$LIB` and
//! `$PLATFORM` in run paths (taken literally), and `LD_LIBRARY_PATH` (the
//! compiler runs with a cleared environment).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use ccroute_wire::{Entry, EntryKind, Manifest, ToolchainKind};
use object::read::elf::{Dyn, FileHeader, ProgramHeader, SectionHeader};

use super::probe::Probe;
use super::{DigestMemo, FileStamp, ToolchainError};

/// The programs a GNU driver runs, as `-print-prog-name=` names them.
const GNU_PROGRAMS: [&str; 6] = ["cc1", "cc1plus", "as", "collect2", "lto-wrapper", "objcopy"];

/// The files a GNU driver reads, as `-print-file-name=` names them.
const GNU_FILES: [&str; 2] = ["specs", "liblto_plugin.so"];

/// Most symbolic links followed for one path (the kernel's own bound).
const MAX_LINKS: usize = 40;

/// Most files in one package.
const MAX_FILES: usize = 20_000;

/// A toolchain's manifest and where this host keeps each of its blobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    /// The files, and the toolchain id (`manifest.id()`).
    pub manifest: Manifest,
    /// The host path of each distinct content, by blake3.
    pub sources: HashMap<[u8; 32], PathBuf>,
}

/// A package and the stamps of the programs it holds, for the memo to watch.
#[derive(Debug)]
pub(super) struct Packaged {
    pub(super) package: Package,
    /// Executable and ELF files (not data such as headers), by host path.
    pub(super) programs: Vec<(PathBuf, FileStamp)>,
}

/// Packages the driver whose real file is `resolved`, of `kind`,
/// normalised to `compiler` (`gcc`, `g++`, `clang`, `clang++`).
pub(super) fn package(
    resolved: &Path,
    kind: ToolchainKind,
    compiler: &str,
    probe: &Probe<'_>,
    memo: &DigestMemo,
) -> Result<Packaged, ToolchainError> {
    let mut packer = Packer::new(memo);
    let driver = match kind {
        ToolchainKind::Clang => {
            // clang's mode follows its name: run `clang++` beside the real file.
            let dir = resolved.parent().unwrap_or(Path::new("/"));
            let named = dir.join(compiler);
            if fs::symlink_metadata(&named).is_ok() {
                packer.add_program(&named)?;
            } else {
                let target = resolved.file_name().map(PathBuf::from).unwrap_or_default();
                packer.add_program(resolved)?;
                packer.entries.insert(relative(&named), EntryKind::Symlink { target: lossy(&target) });
            }
            named
        }
        _ => {
            packer.add_program(resolved)?;
            resolved.to_owned()
        }
    };
    match kind {
        ToolchainKind::Gnu => {
            for prog in GNU_PROGRAMS {
                let out = probe.run(&[&format!("-print-prog-name={prog}")])?;
                let Some(answer) = out.single_word() else { continue };
                if answer.contains('/') {
                    if Path::new(&answer).is_absolute() && Path::new(&answer).is_file() {
                        packer.add_program(Path::new(&answer))?;
                    }
                } else if let Some(dir) = in_path(&answer) {
                    packer.add_program(&dir.join(&answer))?;
                    let rel = relative(&dir);
                    if !packer.search_path.contains(&rel) {
                        packer.search_path.push(rel);
                    }
                }
            }
            for file in GNU_FILES {
                // The driver answers the bare name when it has no such file;
                // one that cannot answer at all has none to ship.
                let Ok(out) = probe.run(&[&format!("-print-file-name={file}")]) else { continue };
                if let Some(found) = out.single_word().filter(|a| Path::new(a).is_absolute()) {
                    if Path::new(&found).is_file() {
                        packer.add_program(Path::new(&found))?;
                    }
                }
            }
        }
        ToolchainKind::Clang => {
            let out = probe.run(&["-print-resource-dir"])?;
            if let Some(dir) = out.single_word().filter(|a| Path::new(a).is_absolute()) {
                packer.add_tree(Path::new(&dir), &[Path::new("lib")])?;
            }
            // clang takes the C++ library of the GCC installation it finds
            // by its `crtbegin.o`, which it looks for and never reads: without
            // it, `clang++` elsewhere finds no `<iostream>`.
            let verbose = probe.run(&["-v"])?;
            let selected = verbose.stderr.lines().find_map(|l| l.strip_prefix("Selected GCC installation: "));
            if let Some(dir) = selected.map(|d| lexical(Path::new(d.trim()))).filter(|d| d.is_absolute()) {
                let crt = dir.join("crtbegin.o");
                if crt.is_file() {
                    packer.add_program(&crt)?;
                }
            }
        }
        ToolchainKind::Test => {}
    }
    packer.close_over_libraries()?;
    packer.finish(&driver)
}

/// `path` without `.` and with each `..` taking the component before it, as
/// clang prints its GCC installation (`/usr/bin/../lib/gcc/...`).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The directory of `PATH` where `name` is an executable, as listed there.
fn in_path(name: &str) -> Option<PathBuf> {
    let dirs = std::env::var_os("PATH")?;
    std::env::split_paths(&dirs)
        .filter(|d| d.is_absolute())
        .find(|d| fs::metadata(d.join(name)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

struct Packer<'a> {
    memo: &'a DigestMemo,
    entries: BTreeMap<String, EntryKind>,
    sources: HashMap<[u8; 32], PathBuf>,
    programs: Vec<(PathBuf, FileStamp)>,
    search_path: Vec<String>,
    /// Physical paths of ELF files and scripts still to scan.
    to_scan: VecDeque<PathBuf>,
    scanned: HashSet<PathBuf>,
    system_dirs: Option<Vec<PathBuf>>,
    arch: Option<String>,
}

impl<'a> Packer<'a> {
    fn new(memo: &'a DigestMemo) -> Self {
        Packer {
            memo,
            entries: BTreeMap::new(),
            sources: HashMap::new(),
            programs: Vec::new(),
            search_path: Vec::new(),
            to_scan: VecDeque::new(),
            scanned: HashSet::new(),
            system_dirs: None,
            arch: None,
        }
    }

    /// Records `path` (every link on the way and the file), to be scanned
    /// for the libraries it loads.
    fn add_program(&mut self, path: &Path) -> Result<(), ToolchainError> {
        let physical = self.add_path(path, true)?;
        if self.scanned.insert(physical.clone()) {
            self.to_scan.push_back(physical);
        }
        Ok(())
    }

    /// Records every regular file below `dir`, except the subdirectories
    /// `skip` (relative to it).
    fn add_tree(&mut self, dir: &Path, skip: &[&Path]) -> Result<(), ToolchainError> {
        let physical = self.add_path(dir, false)?;
        let mut stack = vec![physical.clone()];
        while let Some(d) = stack.pop() {
            let read = fs::read_dir(&d).map_err(|source| ToolchainError::Hash { path: d.clone(), source })?;
            for entry in read.flatten() {
                let p = entry.path();
                if skip.iter().any(|s| physical.join(s) == p) {
                    continue;
                }
                match entry.file_type() {
                    Ok(t) if t.is_dir() => stack.push(p),
                    Ok(t) if t.is_file() || t.is_symlink() => {
                        self.add_path(&p, false)?;
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Resolves `path` as the kernel does, recording each symbolic link met
    /// and the file it ends at; returns that file's physical path. A
    /// directory at the end is not recorded (its files are).
    fn add_path(&mut self, path: &Path, program: bool) -> Result<PathBuf, ToolchainError> {
        let err = |source| ToolchainError::Hash { path: path.to_owned(), source };
        let mut todo: VecDeque<PathBuf> = components(path);
        let mut current = PathBuf::from("/");
        let mut links = 0;
        while let Some(part) = todo.pop_front() {
            if part.as_os_str() == ".." {
                current.pop();
                continue;
            }
            let next = current.join(&part);
            let meta = fs::symlink_metadata(&next).map_err(err)?;
            if meta.file_type().is_symlink() {
                links += 1;
                if links > MAX_LINKS {
                    return Err(err(std::io::Error::other("too many levels of symbolic links")));
                }
                let target = fs::read_link(&next).map_err(err)?;
                self.entries.insert(relative(&next), EntryKind::Symlink { target: lossy(&target) });
                if target.is_absolute() {
                    current = PathBuf::from("/");
                }
                for c in components(&target).into_iter().rev() {
                    todo.push_front(c);
                }
            } else {
                current = next;
            }
        }
        let meta = fs::metadata(&current).map_err(err)?;
        if meta.is_file() {
            self.add_file(&current, program)?;
        }
        Ok(current)
    }

    fn add_file(&mut self, physical: &Path, program: bool) -> Result<(), ToolchainError> {
        let rel = relative(physical);
        if self.entries.contains_key(&rel) {
            return Ok(());
        }
        if self.sources.len() >= MAX_FILES {
            let msg = format!("more than {MAX_FILES} files");
            return Err(ToolchainError::Hash { path: physical.to_owned(), source: std::io::Error::other(msg) });
        }
        let (stamp, digest) = self.memo.digest(physical)?;
        let meta =
            fs::metadata(physical).map_err(|source| ToolchainError::Hash { path: physical.to_owned(), source })?;
        let executable = meta.permissions().mode() & 0o111 != 0;
        self.entries.insert(rel, EntryKind::File { digest, size: stamp.size, executable });
        self.sources.entry(digest).or_insert_with(|| physical.to_owned());
        if program || executable {
            self.programs.push((physical.to_owned(), stamp));
        }
        Ok(())
    }

    /// Scans every program for its interpreter and libraries, adding them,
    /// until nothing new turns up.
    fn close_over_libraries(&mut self) -> Result<(), ToolchainError> {
        while let Some(file) = self.to_scan.pop_front() {
            let Some(deps) = read_deps(&file) else { continue };
            if self.arch.is_none() {
                self.arch = deps.arch.clone();
            }
            if let Some(interp) = deps.interpreter {
                self.add_program(&interp)?;
            }
            let origin = file.parent().unwrap_or(Path::new("/")).to_owned();
            let expand =
                |dir: &str| PathBuf::from(dir.replace("${ORIGIN}", "$ORIGIN").replace("$ORIGIN", &lossy(&origin)));
            let mut dirs: Vec<PathBuf> = Vec::new();
            if deps.runpath.is_empty() {
                dirs.extend(deps.rpath.iter().map(|d| expand(d)));
            }
            dirs.extend(deps.runpath.iter().map(|d| expand(d)));
            dirs.extend(self.system_dirs().iter().cloned());
            for needed in &deps.needed {
                let found = if needed.contains('/') {
                    Some(PathBuf::from(needed))
                } else {
                    dirs.iter().map(|d| d.join(needed)).find(|p| p.is_file())
                };
                match found {
                    Some(lib) => self.add_program(&lib)?,
                    // The loader would fail the same way on this host: the
                    // compiler does not run here either, so nothing to ship.
                    None => tracing::debug!(file = %file.display(), library = needed, "library not found"),
                }
            }
        }
        Ok(())
    }

    fn system_dirs(&mut self) -> &[PathBuf] {
        self.system_dirs.get_or_insert_with(|| {
            let mut dirs = Vec::new();
            read_ld_conf(Path::new("/etc/ld.so.conf"), &mut dirs, 0);
            for d in ["/lib64", "/usr/lib64", "/lib", "/usr/lib"] {
                dirs.push(PathBuf::from(d));
            }
            let mut seen = HashSet::new();
            dirs.retain(|d| seen.insert(d.clone()));
            dirs
        })
    }

    fn finish(self, driver: &Path) -> Result<Packaged, ToolchainError> {
        let entries = self.entries.into_iter().map(|(path, kind)| Entry { path, kind }).collect();
        let manifest = Manifest {
            driver: relative(driver),
            arch: self.arch.unwrap_or_else(|| std::env::consts::ARCH.to_owned()),
            search_path: self.search_path,
            entries,
        };
        if let Err(e) = manifest.validate() {
            // What this host's file system holds, read back: a bug if refused.
            let msg = format!("the package of this compiler is not sound: {e}");
            return Err(ToolchainError::Hash { path: driver.to_owned(), source: std::io::Error::other(msg) });
        }
        Ok(Packaged { package: Package { manifest, sources: self.sources }, programs: self.programs })
    }
}

/// The normal components of an absolute path, `..` kept.
fn components(path: &Path) -> VecDeque<PathBuf> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(PathBuf::from(n)),
            Component::ParentDir => Some(PathBuf::from("..")),
            _ => None,
        })
        .collect()
}

/// `/usr/bin/gcc` → `usr/bin/gcc`.
fn relative(path: &Path) -> String {
    let s = lossy(path);
    s.trim_start_matches('/').to_owned()
}

fn lossy(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// What an ELF file or a script loads.
#[derive(Debug, Default, PartialEq, Eq)]
struct Deps {
    interpreter: Option<PathBuf>,
    needed: Vec<String>,
    rpath: Vec<String>,
    runpath: Vec<String>,
    arch: Option<String>,
}

/// The interpreter and libraries of the ELF file or script at `path`;
/// `None` for anything else (data, or a file that cannot be read).
fn read_deps(path: &Path) -> Option<Deps> {
    let mut head = [0u8; 4];
    let mut file = fs::File::open(path).ok()?;
    file.read_exact(&mut head).ok()?;
    if head.starts_with(b"#!") {
        let mut first = Vec::new();
        fs::File::open(path).ok()?.take(256).read_to_end(&mut first).ok()?;
        let line = first.split(|&b| b == b'\n').next()?;
        let interp = String::from_utf8_lossy(&line[2..]).split_whitespace().next()?.to_owned();
        return Some(Deps { interpreter: Some(PathBuf::from(interp)), ..Deps::default() });
    }
    if head != *b"\x7fELF" {
        return None;
    }
    // Read as the parser asks: the headers and the dynamic section, a few
    // kilobytes, not the whole of a 100 MB libLLVM.
    let cache = object::ReadCache::new(file);
    let data = &cache;
    match object::FileKind::parse(data).ok()? {
        object::FileKind::Elf64 => elf_deps::<object::elf::FileHeader64<object::Endianness>, _>(data),
        object::FileKind::Elf32 => elf_deps::<object::elf::FileHeader32<object::Endianness>, _>(data),
        _ => None,
    }
}

fn elf_deps<'d, E: FileHeader<Endian = object::Endianness>, R: object::ReadRef<'d>>(data: R) -> Option<Deps> {
    let header = E::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let mut deps = Deps { arch: machine_name(header.e_machine(endian)), ..Deps::default() };
    for ph in header.program_headers(endian, data).ok()? {
        if let Ok(Some(interp)) = ph.interpreter(endian, data) {
            deps.interpreter = Some(PathBuf::from(String::from_utf8_lossy(interp).into_owned()));
        }
    }
    let sections = header.sections(endian, data).ok()?;
    if let Ok(Some((dynamic, link))) = sections.dynamic(endian, data) {
        // The dynamic strings are read whole: a lazy table caps each string
        // it finds at 4 KiB, and a RUNPATH of a Spack or Nix host is longer.
        let table = sections.section(link).ok()?.data(endian, data).ok()?;
        let strings = object::StringTable::new(table, 0, table.len() as u64);
        for d in dynamic {
            let Some(tag) = d.tag32(endian) else { continue };
            let text = || d.string(endian, strings).ok().map(|s| String::from_utf8_lossy(s).into_owned());
            match tag {
                object::elf::DT_NEEDED => deps.needed.extend(text()),
                object::elf::DT_RPATH => deps.rpath.extend(text().iter().flat_map(|s| split_dirs(s))),
                object::elf::DT_RUNPATH => deps.runpath.extend(text().iter().flat_map(|s| split_dirs(s))),
                _ => {}
            }
        }
    }
    Some(deps)
}

fn split_dirs(s: &str) -> Vec<String> {
    s.split(':').filter(|d| !d.is_empty()).map(str::to_owned).collect()
}

/// `std::env::consts::ARCH` for an ELF machine, for the architectures
/// ccroute names; others by number.
fn machine_name(machine: u16) -> Option<String> {
    Some(
        match machine {
            object::elf::EM_X86_64 => "x86_64",
            object::elf::EM_386 => "x86",
            object::elf::EM_AARCH64 => "aarch64",
            object::elf::EM_ARM => "arm",
            object::elf::EM_RISCV => "riscv64",
            object::elf::EM_PPC64 => "powerpc64",
            object::elf::EM_S390 => "s390x",
            other => return Some(format!("elf-machine-{other}")),
        }
        .to_owned(),
    )
}

/// Adds the directories of an `ld.so.conf` file and the files it includes.
fn read_ld_conf(path: &Path, dirs: &mut Vec<PathBuf>, depth: usize) {
    if depth > 8 {
        return;
    }
    let Ok(text) = fs::read_to_string(path) else { return };
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(pattern) = line.strip_prefix("include").map(str::trim) {
            for file in glob_conf(pattern, path.parent().unwrap_or(Path::new("/"))) {
                read_ld_conf(&file, dirs, depth + 1);
            }
        } else if line.starts_with('/') {
            dirs.push(PathBuf::from(line));
        }
    }
}

/// The files an `include` line names: a path, or `dir/*suffix`.
fn glob_conf(pattern: &str, base: &Path) -> Vec<PathBuf> {
    let pattern = if pattern.starts_with('/') { PathBuf::from(pattern) } else { base.join(pattern) };
    let (Some(dir), Some(name)) = (pattern.parent(), pattern.file_name().and_then(|n| n.to_str())) else {
        return Vec::new();
    };
    let Some((prefix, suffix)) = name.split_once('*') else { return vec![pattern.clone()] };
    let Ok(read) = fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = read
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(prefix) && n.ends_with(suffix)))
        .map(|e| e.path())
        .collect();
    files.sort();
    files
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A RUNPATH of 5,000 bytes (a Spack host's are), read whole.
    #[test]
    fn a_long_runpath_is_read_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs: Vec<String> =
            (0..100).map(|i| format!("/opt/spack/opt/linux-x86_64/pkg-{i:03}-{}/lib", "h".repeat(20))).collect();
        let source = tmp.path().join("m.c");
        fs::write(&source, "int main(void) { return 0; }\n").unwrap();
        let program = tmp.path().join("m");
        let out = std::process::Command::new("gcc")
            .arg(&source)
            .arg("-o")
            .arg(&program)
            .arg(format!("-Wl,--enable-new-dtags,-rpath,{}", dirs.join(":")))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let deps = read_deps(&program).unwrap();
        assert!(dirs.join(":").len() > 5000);
        assert_eq!(deps.runpath, dirs);
        assert!(deps.needed.iter().any(|n| n.starts_with("libc.so")), "{:?}", deps.needed);
    }

    #[test]
    fn elf_closure_of_this_hosts_gcc() {
        let program = Path::new("/usr/bin/gcc");
        let resolved = fs::canonicalize(program).unwrap();
        let memo = DigestMemo::default();
        let probe = Probe::new(program, super::super::PROBE_TIME_LIMIT);
        let packaged = package(&resolved, ToolchainKind::Gnu, "gcc", &probe, &memo).unwrap();
        let m = &packaged.package.manifest;
        assert_eq!(m.validate(), Ok(()));
        assert_eq!(m.driver, relative(&resolved));
        assert_eq!(m.arch, std::env::consts::ARCH);
        let has = |suffix: &str| m.entries.iter().any(|e| e.path.ends_with(suffix));
        // The compiler proper, the assembler by its PATH name, the loader and libc.
        assert!(has("/cc1"), "{m:#?}");
        assert!(m.entries.iter().any(|e| e.path.ends_with("bin/as")), "as by the name gcc runs it");
        assert!(has("libc.so.6") && has("ld-linux-x86-64.so.2") || std::env::consts::ARCH != "x86_64");
        // cc1's own libraries, by soname link and file.
        assert!(m.entries.iter().any(|e| e.path.contains("libgmp.so") && matches!(e.kind, EntryKind::Symlink { .. })));
        assert!(!m.search_path.is_empty());
        // Every blob has a host path, and each host file still has its digest.
        for (digest, size) in m.blobs() {
            let path = &packaged.package.sources[&digest];
            assert_eq!(fs::metadata(path).unwrap().len(), size);
            assert_eq!(*blake3::hash(&fs::read(path).unwrap()).as_bytes(), digest);
        }
        // No host header travels.
        assert!(!m.entries.iter().any(|e| e.path.ends_with(".h")));
        // Deterministic.
        let again = package(&resolved, ToolchainKind::Gnu, "gcc", &probe, &memo).unwrap();
        assert_eq!(again.package.manifest.id(), m.id());
    }

    /// clang++: run by that name beside its real file, with its resource
    /// directory's headers but not its run-time libraries, and libLLVM.
    #[test]
    fn clang_brings_its_resource_dir_and_its_libraries() {
        let program = Path::new("/usr/bin/clang++");
        let Ok(resolved) = fs::canonicalize(program) else {
            return crate::test_env::lacking("clang++", "not installed");
        };
        let memo = DigestMemo::default();
        let probe = Probe::new(program, super::super::PROBE_TIME_LIMIT);
        let packaged = package(&resolved, ToolchainKind::Clang, "clang++", &probe, &memo).unwrap();
        let m = &packaged.package.manifest;
        assert_eq!(m.validate(), Ok(()));
        assert!(m.driver.ends_with("/clang++"), "{}", m.driver);
        assert!(m.entries.iter().any(|e| e.path.ends_with("/include/stddef.h")), "resource headers travel");
        assert!(m.entries.iter().any(|e| e.path.contains("libLLVM") || e.path.contains("libclang-cpp")));
        assert!(!m.entries.iter().any(|e| e.path.contains("/lib/linux/libclang_rt")), "run-time libraries stay");
    }

    #[test]
    fn links_are_recorded_on_the_way_to_a_file() {
        let tmp = tempfile::tempdir().unwrap();
        let d = fs::canonicalize(tmp.path()).unwrap();
        fs::create_dir_all(d.join("real/bin")).unwrap();
        fs::write(d.join("real/bin/tool-1.2"), "x").unwrap();
        std::os::unix::fs::symlink("real", d.join("alias")).unwrap();
        std::os::unix::fs::symlink("tool-1.2", d.join("real/bin/tool")).unwrap();
        let memo = DigestMemo::default();
        let mut p = Packer::new(&memo);
        let physical = p.add_path(&d.join("alias/bin/tool"), false).unwrap();
        assert_eq!(physical, d.join("real/bin/tool-1.2"));
        let rel = |s: &str| relative(&d.join(s));
        assert_eq!(p.entries[&rel("alias")], EntryKind::Symlink { target: "real".into() });
        assert_eq!(p.entries[&rel("real/bin/tool")], EntryKind::Symlink { target: "tool-1.2".into() });
        assert!(matches!(p.entries[&rel("real/bin/tool-1.2")], EntryKind::File { size: 1, executable: false, .. }));
        assert_eq!(p.entries.len(), 3);
    }

    #[test]
    fn scripts_bring_their_interpreter() {
        let deps = read_deps(Path::new("/usr/bin/ldd")).or_else(|| {
            let tmp = std::env::temp_dir().join(format!("ccroute-script-{}", std::process::id()));
            fs::write(&tmp, "#!/bin/sh -e\necho\n").unwrap();
            let d = read_deps(&tmp);
            let _ = fs::remove_file(&tmp);
            d
        });
        let interp = deps.unwrap().interpreter.unwrap();
        assert!(interp.is_absolute(), "{interp:?}");
        assert_eq!(read_deps(Path::new("/etc/hostname")), None);
    }
}
