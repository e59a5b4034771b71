//! A unit as its inputs: the files a compile reads, by digest, at the
//! absolute paths the client has them.
//!
//! A task whose [`crate::TaskSpec::inputs`] is set carries no text. The
//! agent fetches the blobs it lacks (by digest, through the scheduler, from
//! the consumerd that sent the task), checks each against its digest, and
//! compiles the unmodified command in a sandbox where exactly these files
//! exist, at these paths, beside the toolchain's own files, in the working
//! directory the client had. The object then records what a local compile
//! records — paths, line tables, clang's source checksums — with nothing to
//! rewrite.
//!
//! Such a task's route is the toolchain's inputs twin
//! ([`crate::Toolchain::inputs_twin`]): only agents that can make the
//! sandbox serve it. Its cache key is the usual one over the encoded spec and
//! an empty text, so it covers the command, the toolchain and every input
//! path and digest: what the agent verified is what the key names.
//!
//! [`Inputs::validate`] is what the agent checks before it fetches or
//! writes anything.

use serde::{Deserialize, Serialize};

/// Most files one unit may list (a large C++ unit reads about 2,000).
pub const MAX_FILES: usize = 50_000;

/// Most directories one unit may ask for.
pub const MAX_DIRS: usize = 10_000;

/// Longest path.
pub const MAX_PATH: usize = 4096;

/// Largest single input (a generated table of tens of MB is plausible).
pub const MAX_FILE: u64 = 256 << 20;

/// Largest sum of a unit's inputs.
pub const MAX_TOTAL: u64 = 1 << 30;

/// Top-level directories the sandbox makes itself: no input may live there.
pub const RESERVED: &[&str] = &["proc", "dev"];

/// One file a compile reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct InputFile {
    /// Absolute and normalised (no `.`, `..` or empty segment), as the client has it.
    pub path: String,
    /// blake3 of its bytes.
    pub digest: [u8; 32],
    /// Its size.
    pub size: u64,
}

/// Everything a unit reads besides the toolchain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inputs {
    /// The route key of the toolchain itself (not of its inputs twin), which
    /// an agent leases or has installed.
    pub toolchain: crate::ToolchainKey,
    /// The compiler as the client ran it (`/usr/bin/clang++`): the sandbox
    /// runs it by that path, a link to the toolchain's driver when the
    /// toolchain has nothing there, since clang finds its GCC installation
    /// from the directory it was run from, and names it in debug info.
    pub driver: String,
    /// The files, sorted by path, each once.
    pub files: Vec<InputFile>,
    /// Directories that exist on the client and must in the sandbox: the
    /// working directory and the include directories (a `-I` that names a
    /// missing directory and `dir/../x.h` both depend on it). Sorted, each once.
    pub dirs: Vec<String>,
}

/// Why a list of inputs is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputsError {
    /// Too many files or directories, or too many bytes.
    #[error("{what}: {got}, more than {max}")]
    TooMany {
        /// What was counted.
        what: &'static str,
        /// How many.
        got: u64,
        /// The bound.
        max: u64,
    },
    /// A path that is not absolute and normalised, or too long.
    #[error("input path {0:?} is not absolute and normalised")]
    BadPath(String),
    /// A path under a directory the sandbox makes itself.
    #[error("input path {0:?} lies where the sandbox mounts its own")]
    Reserved(String),
    /// Not sorted, or listed twice.
    #[error("input paths are not sorted and unique at {0:?}")]
    Unsorted(String),
    /// A file that is also a directory of another input.
    #[error("input {0:?} is a file and a directory")]
    FileAndDir(String),
}

/// Whether `p` is absolute, normalised and short enough.
pub fn path_ok(p: &str) -> bool {
    p.len() <= MAX_PATH
        && p.len() > 1
        && p.starts_with('/')
        && !p.ends_with('/')
        && !p.contains('\0')
        && p[1..].split('/').all(|s| !matches!(s, "" | "." | ".."))
}

fn first_segment(p: &str) -> &str {
    p[1..].split('/').next().unwrap_or("")
}

impl Inputs {
    /// The sum of the files' sizes.
    pub fn total_size(&self) -> u64 {
        self.files.iter().map(|f| f.size).fold(0u64, u64::saturating_add)
    }

    /// Checks the bounds and the shape of every path (see the module doc).
    ///
    /// # Errors
    /// The first problem found.
    pub fn validate(&self) -> Result<(), InputsError> {
        let too_many = |what, got: usize, max: usize| InputsError::TooMany { what, got: got as u64, max: max as u64 };
        if self.files.len() > MAX_FILES {
            return Err(too_many("input files", self.files.len(), MAX_FILES));
        }
        if self.dirs.len() > MAX_DIRS {
            return Err(too_many("input directories", self.dirs.len(), MAX_DIRS));
        }
        if let Some(f) = self.files.iter().find(|f| f.size > MAX_FILE) {
            return Err(InputsError::TooMany { what: "bytes in one input", got: f.size, max: MAX_FILE });
        }
        if self.total_size() > MAX_TOTAL {
            return Err(InputsError::TooMany { what: "bytes of inputs", got: self.total_size(), max: MAX_TOTAL });
        }
        let paths = self
            .files
            .iter()
            .map(|f| f.path.as_str())
            .chain(self.dirs.iter().map(String::as_str))
            .chain(std::iter::once(self.driver.as_str()));
        for p in paths {
            if !path_ok(p) {
                return Err(InputsError::BadPath(p.to_owned()));
            }
            if RESERVED.contains(&first_segment(p)) {
                return Err(InputsError::Reserved(p.to_owned()));
            }
        }
        for list in [
            self.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(),
            self.dirs.iter().map(String::as_str).collect(),
        ] {
            if let Some(w) = list.windows(2).find(|w| w[0] >= w[1]) {
                return Err(InputsError::Unsorted(w[1].to_owned()));
            }
        }
        // No file may be an ancestor of another path: sorted order puts a
        // path's descendants right after it ("/a/b" < "/a/b/c" < "/a/b0").
        let files: std::collections::HashSet<&str> = self.files.iter().map(|f| f.path.as_str()).collect();
        for p in self.files.iter().map(|f| f.path.as_str()).chain(self.dirs.iter().map(String::as_str)) {
            let mut at = p.len();
            while let Some(i) = p[..at].rfind('/') {
                if i == 0 {
                    break;
                }
                if files.contains(&p[..i]) {
                    return Err(InputsError::FileAndDir(p[..i].to_owned()));
                }
                at = i;
            }
            if self.dirs.binary_search_by(|d| d.as_str().cmp(p)).is_ok() && files.contains(p) {
                return Err(InputsError::FileAndDir(p.to_owned()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(p: &str) -> InputFile {
        InputFile { path: p.to_owned(), digest: [1; 32], size: 3 }
    }

    fn inputs(files: &[&str], dirs: &[&str]) -> Inputs {
        Inputs {
            toolchain: crate::ToolchainKey(7),
            driver: "/usr/bin/cc".into(),
            files: files.iter().map(|p| file(p)).collect(),
            dirs: dirs.iter().map(|d| (*d).to_owned()).collect(),
        }
    }

    #[test]
    fn a_sound_list_passes() {
        let ok = inputs(&["/home/u/p/a.c", "/home/u/p/inc/a.h", "/usr/include/stdio.h"], &["/home/u/p", "/home/u/p/b"]);
        assert_eq!(ok.validate(), Ok(()));
        assert_eq!(ok.total_size(), 9);
    }

    #[test]
    fn bad_lists_are_refused_naming_the_path() {
        for (files, dirs, named) in [
            (&["a.c"][..], &[][..], "a.c"),
            (&["/a/../etc/passwd"], &[], "/a/../etc/passwd"),
            (&["/a/./b"], &[], "/a/./b"),
            (&["/a//b"], &[], "/a//b"),
            (&["/a/b/"], &[], "/a/b/"),
            (&["/"], &[], "/"),
            (&["/proc/self/mem"], &[], "/proc/self/mem"),
            (&["/dev/sda"], &[], "/dev/sda"),
            (&["/b", "/a"], &[], "/a"),
            (&["/a", "/a"], &[], "/a"),
            (&["/a", "/a/b"], &[], "/a"),
            (&["/a"], &["/a/x"], "/a"),
            (&["/a"], &["/a"], "/a"),
        ] {
            let e = inputs(files, dirs).validate().unwrap_err();
            assert!(e.to_string().contains(&format!("{named:?}")), "{files:?} {dirs:?}: {e}");
        }
        let mut big = inputs(&["/a"], &[]);
        big.files[0].size = MAX_FILE + 1;
        assert!(matches!(big.validate(), Err(InputsError::TooMany { .. })));
        assert!(!path_ok(&format!("/{}", "x".repeat(MAX_PATH))));
    }
}
