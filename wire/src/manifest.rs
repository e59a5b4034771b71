//! A toolchain as files: what an agent needs to run a client's compiler
//! without having it installed.
//!
//! A [`Manifest`] lists every file a compiler runs or loads — driver,
//! compiler proper, assembler, their shared libraries and the dynamic
//! loader — by path relative to the root of the host's file system, each with
//! its blake3 digest, size and whether it is executable, and the symbolic
//! links met on the way to them (`usr/bin/as` → `x86_64-linux-gnu-as`), so
//! that the tree an agent rebuilds from it resolves every name as the client's
//! did. [`Manifest::id`] is blake3 over an unambiguous encoding of the sorted
//! entries: it is the toolchain's `binary_hash`, so a shipped toolchain and an
//! installed one with the same files have one route key.
//!
//! [`Manifest::validate`] is what an agent checks before it writes anything:
//! relative, normalised paths only (no `..`, no `.`, no empty component), sorted
//! and unique, no entry below a file or a symbolic link (so materialising
//! can never write through a link), relative link targets that stay inside
//! the root, and bounds on every count and length.

use serde::{Deserialize, Serialize};

use crate::toolchain::put_field;

/// Domain separation for manifest ids; bump it to change the derivation.
pub const MANIFEST_DOMAIN: &str = "ccroute toolchain manifest v1";

/// Most entries a manifest may have.
pub const MAX_ENTRIES: usize = 100_000;

/// Top-level names the sandbox mounts itself.
pub const RESERVED: [&str; 2] = ["proc", "dev"];

/// Longest path or link target, in bytes.
pub const MAX_PATH: usize = 4096;

/// The files of one toolchain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The driver to run, relative to the root (an executable file entry, or
    /// a link to one).
    pub driver: String,
    /// `std::env::consts::ARCH` of the host the binaries run on.
    pub arch: String,
    /// Directories, relative to the root, for `PATH` (where the driver
    /// found the programs it looks up by name, such as `as`).
    pub search_path: Vec<String>,
    /// Every file and link, sorted by path.
    pub entries: Vec<Entry>,
}

/// One path of a [`Manifest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Relative to the root, `/`-separated.
    pub path: String,
    /// What is there.
    pub kind: EntryKind,
}

/// A file or a symbolic link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EntryKind {
    /// A regular file.
    File {
        /// blake3 of its contents.
        digest: [u8; 32],
        /// Its size in bytes.
        size: u64,
        /// Whether it is executable (mode 0555 rather than 0444).
        executable: bool,
    },
    /// A symbolic link with this target, as `readlink` gives it.
    Symlink {
        /// The target.
        target: String,
    },
}

/// Why a manifest is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// More entries than [`MAX_ENTRIES`].
    #[error("manifest has {0} entries, more than the limit of {MAX_ENTRIES}")]
    TooManyEntries(usize),
    /// A path that is absolute, not normalised, or leaves the root.
    #[error("manifest path {0:?} is not a relative path inside the toolchain root")]
    BadPath(String),
    /// Entries out of order or repeated.
    #[error("manifest entries are not sorted and unique at {0:?}")]
    NotSorted(String),
    /// An entry below a file or a link.
    #[error("manifest path {path:?} lies below {parent:?}, which is not a directory")]
    BelowNonDirectory {
        /// The entry.
        path: String,
        /// The file or link above it.
        parent: String,
    },
    /// A link whose target is empty, too long, or climbs out of the root.
    #[error("manifest link {path:?} -> {target:?} points outside the toolchain root")]
    BadLinkTarget {
        /// The link.
        path: String,
        /// Its target.
        target: String,
    },
    /// A top-level entry where the sandbox mounts its own (`proc`, `dev`).
    #[error("manifest path {0:?} is reserved for the sandbox")]
    Reserved(String),
    /// One content listed with two sizes.
    #[error("manifest lists one digest with two sizes (at {0:?})")]
    SizeMismatch(String),
    /// The driver is not an executable file or a link of the manifest.
    #[error("manifest driver {0:?} is not an executable file or a link it lists")]
    BadDriver(String),
}

impl Manifest {
    /// The toolchain's identity: blake3 over every field, length-prefixed.
    pub fn id(&self) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        put_field(&mut h, MANIFEST_DOMAIN.as_bytes());
        put_field(&mut h, self.driver.as_bytes());
        put_field(&mut h, self.arch.as_bytes());
        put_field(&mut h, &(self.search_path.len() as u64).to_le_bytes());
        for dir in &self.search_path {
            put_field(&mut h, dir.as_bytes());
        }
        put_field(&mut h, &(self.entries.len() as u64).to_le_bytes());
        for e in &self.entries {
            put_field(&mut h, e.path.as_bytes());
            match &e.kind {
                EntryKind::File { digest, size, executable } => {
                    put_field(&mut h, b"f");
                    put_field(&mut h, digest);
                    put_field(&mut h, &size.to_le_bytes());
                    put_field(&mut h, &[u8::from(*executable)]);
                }
                EntryKind::Symlink { target } => {
                    put_field(&mut h, b"l");
                    put_field(&mut h, target.as_bytes());
                }
            }
        }
        *h.finalize().as_bytes()
    }

    /// The distinct file contents: (digest, size), in order of first use.
    pub fn blobs(&self) -> Vec<([u8; 32], u64)> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for e in &self.entries {
            if let EntryKind::File { digest, size, .. } = e.kind {
                if seen.insert(digest) {
                    out.push((digest, size));
                }
            }
        }
        out
    }

    /// Bytes of the distinct file contents.
    pub fn total_size(&self) -> u64 {
        self.blobs().iter().map(|(_, s)| s).sum()
    }

    /// Checks everything an agent relies on before it writes a file.
    ///
    /// # Errors
    /// The first [`ManifestError`] found.
    pub fn validate(&self) -> Result<(), ManifestError> {
        if self.entries.len() > MAX_ENTRIES {
            return Err(ManifestError::TooManyEntries(self.entries.len()));
        }
        let mut not_dirs = std::collections::HashSet::new();
        let mut sizes = std::collections::HashMap::new();
        let mut previous: Option<&str> = None;
        for e in &self.entries {
            check_relative(&e.path)?;
            let top = e.path.split('/').next().unwrap_or_default();
            if RESERVED.contains(&top) {
                return Err(ManifestError::Reserved(e.path.clone()));
            }
            if let EntryKind::File { digest, size, .. } = e.kind {
                if *sizes.entry(digest).or_insert(size) != size {
                    return Err(ManifestError::SizeMismatch(e.path.clone()));
                }
            }
            if previous.is_some_and(|p| p >= e.path.as_str()) {
                return Err(ManifestError::NotSorted(e.path.clone()));
            }
            previous = Some(&e.path);
            let mut end = 0;
            while let Some(i) = e.path[end..].find('/') {
                let parent = &e.path[..end + i];
                if not_dirs.contains(parent) {
                    return Err(ManifestError::BelowNonDirectory { path: e.path.clone(), parent: parent.to_owned() });
                }
                end += i + 1;
            }
            not_dirs.insert(e.path.as_str());
            if let EntryKind::Symlink { target } = &e.kind {
                check_target(&e.path, target)?;
            }
        }
        // A parent is a prefix of its children, so it sorts first: the check
        // above has seen every parent.
        for dir in &self.search_path {
            check_relative(dir)?;
        }
        // A link is allowed: clang's mode follows the name it is run by.
        let driver_ok = self.entries.binary_search_by(|e| e.path.as_str().cmp(&self.driver)).ok().is_some_and(|i| {
            matches!(self.entries[i].kind, EntryKind::File { executable: true, .. } | EntryKind::Symlink { .. })
        });
        if !driver_ok {
            return Err(ManifestError::BadDriver(self.driver.clone()));
        }
        Ok(())
    }
}

fn check_relative(path: &str) -> Result<(), ManifestError> {
    let bad = || ManifestError::BadPath(path.to_owned());
    if path.is_empty() || path.len() > MAX_PATH || path.contains('\0') {
        return Err(bad());
    }
    if path.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err(bad());
    }
    Ok(())
}

/// A link target may be absolute (it resolves inside the sandbox's root) or
/// relative, as long as it never climbs above the root from the link's
/// directory.
fn check_target(path: &str, target: &str) -> Result<(), ManifestError> {
    let bad = || ManifestError::BadLinkTarget { path: path.to_owned(), target: target.to_owned() };
    if target.is_empty() || target.len() > MAX_PATH || target.contains('\0') {
        return Err(bad());
    }
    if target.starts_with('/') {
        return Ok(());
    }
    let mut depth = path.matches('/').count() as i64;
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return Err(bad());
                }
            }
            _ => depth += 1,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, byte: u8, executable: bool) -> Entry {
        Entry { path: path.into(), kind: EntryKind::File { digest: [byte; 32], size: 10, executable } }
    }

    fn link(path: &str, target: &str) -> Entry {
        Entry { path: path.into(), kind: EntryKind::Symlink { target: target.into() } }
    }

    fn manifest(entries: Vec<Entry>) -> Manifest {
        Manifest { driver: "usr/bin/gcc".into(), arch: "x86_64".into(), search_path: vec!["usr/bin".into()], entries }
    }

    fn good() -> Manifest {
        manifest(vec![
            link("lib64", "usr/lib64"),
            file("usr/bin/as", 2, true),
            file("usr/bin/gcc", 1, true),
            link("usr/bin/x86_64-linux-gnu-as", "as"),
            file("usr/lib/libc.so.6", 3, false),
            link("usr/lib64/ld.so", "../lib/ld.so.real"),
            file("usr/lib/share.so", 3, false),
        ])
    }

    #[test]
    fn a_sound_manifest_passes_and_its_id_covers_every_field() {
        let m = good();
        let mut sorted = m.entries.clone();
        sorted.sort_by(|a, b| a.path.cmp(&b.path));
        let m = Manifest { entries: sorted, ..m };
        assert_eq!(m.validate(), Ok(()));
        assert_eq!(m.blobs().len(), 3, "shared contents counted once");
        assert_eq!(m.total_size(), 30);
        let id = m.id();
        assert_eq!(id, m.clone().id());
        let mut other = m.clone();
        other.arch = "aarch64".into();
        assert_ne!(other.id(), id);
        let mut other = m.clone();
        other.search_path.clear();
        assert_ne!(other.id(), id);
        let mut other = m.clone();
        if let EntryKind::File { executable, .. } = &mut other.entries[1].kind {
            *executable = false;
        }
        assert_ne!(other.id(), id);
        let mut other = m.clone();
        other.entries[0] = link("lib64", "usr/lib");
        assert_ne!(other.id(), id);
    }

    #[test]
    fn paths_outside_the_root_are_refused() {
        for bad in ["/usr/bin/gcc", "usr/../../etc/passwd", "usr//bin", "./usr", "usr/bin/", "", "a/\0"] {
            let m = manifest(vec![file("usr/bin/gcc", 1, true), file(bad, 2, false)]);
            let mut sorted = m.entries.clone();
            sorted.sort_by(|a, b| a.path.cmp(&b.path));
            let m = Manifest { entries: sorted, ..m };
            assert!(matches!(m.validate(), Err(ManifestError::BadPath(_))), "{bad:?}: {:?}", m.validate());
        }
        for target in ["../../etc", "../../../x", ""] {
            let m = manifest(vec![file("usr/bin/gcc", 1, true), link("usr/x", target)]);
            assert!(matches!(m.validate(), Err(ManifestError::BadLinkTarget { .. })), "{target:?}");
        }
        // Absolute targets resolve inside the sandbox's root.
        let m = manifest(vec![file("usr/bin/gcc", 1, true), link("usr/x", "/etc/passwd")]);
        assert_eq!(m.validate(), Ok(()));
    }

    #[test]
    fn nothing_may_be_written_through_a_link_or_below_a_file() {
        let m = manifest(vec![link("usr", "/etc"), file("usr/bin/gcc", 1, true)]);
        assert!(matches!(m.validate(), Err(ManifestError::BelowNonDirectory { .. })));
        let m = manifest(vec![file("usr/bin/gcc", 1, true), file("usr/bin/gcc/x", 1, false)]);
        assert!(matches!(m.validate(), Err(ManifestError::BelowNonDirectory { .. })));
    }

    #[test]
    fn reserved_names_and_sizes_that_disagree_are_refused() {
        let m = manifest(vec![link("proc", "/oldroot/home"), file("usr/bin/gcc", 1, true)]);
        assert!(matches!(m.validate(), Err(ManifestError::Reserved(_))));
        let m = manifest(vec![file("dev/null", 2, false), file("usr/bin/gcc", 1, true)]);
        assert!(matches!(m.validate(), Err(ManifestError::Reserved(_))));
        let mut m = manifest(vec![file("usr/bin/a", 1, true), file("usr/bin/gcc", 1, true)]);
        if let EntryKind::File { size, .. } = &mut m.entries[1].kind {
            *size = 11;
        }
        assert!(matches!(m.validate(), Err(ManifestError::SizeMismatch(_))));
    }

    #[test]
    fn order_driver_and_bounds() {
        let m = manifest(vec![file("usr/bin/gcc", 1, true), file("usr/bin/as", 2, true)]);
        assert!(matches!(m.validate(), Err(ManifestError::NotSorted(_))));
        let m = manifest(vec![file("usr/bin/gcc", 1, true), file("usr/bin/gcc", 1, true)]);
        assert!(matches!(m.validate(), Err(ManifestError::NotSorted(_))));
        let m = manifest(vec![file("usr/bin/gcc", 1, false)]);
        assert!(matches!(m.validate(), Err(ManifestError::BadDriver(_))));
        let m = manifest(vec![file("usr/bin/cc", 1, true)]);
        assert!(matches!(m.validate(), Err(ManifestError::BadDriver(_))));
        let m = manifest(vec![link("usr/bin/gcc", "gcc-12"), file("usr/bin/gcc-12", 1, true)]);
        assert_eq!(m.validate(), Ok(()));
        let mut m = manifest(vec![file("usr/bin/gcc", 1, true)]);
        m.search_path = vec!["../bin".into()];
        assert!(matches!(m.validate(), Err(ManifestError::BadPath(_))));
        let many = (0..=MAX_ENTRIES).map(|i| file(&format!("f{i:07}"), 1, false)).collect();
        assert!(matches!(manifest(many).validate(), Err(ManifestError::TooManyEntries(_))));
    }
}
