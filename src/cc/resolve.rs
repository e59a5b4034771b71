//! Which compiler a wrapper invocation means.
//!
//! Three ways in: `ccroute gcc ...` (a name, looked up in `PATH`),
//! `ccroute /usr/bin/cc ...` (a path, as CMake's compiler launcher passes
//! it), and a masquerade symlink (`gcc` → ccroute, early in `PATH`; the
//! wrapper passes the base name of argv\[0\]). A name is looked up in `PATH`
//! skipping every candidate that is ccroute itself: the same file as the
//! running executable once canonicalized, or any file named `ccroute` — else
//! a masquerade symlink would run itself forever.
//!
//! Main items: [`resolve_compiler`], [`ResolveError`].

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Why no compiler could be found.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// Nothing in `PATH` (other than ccroute) has that name.
    #[error("compiler {name:?} not found in PATH (ccroute itself skipped)")]
    NotFound {
        /// The name looked up.
        name: String,
    },
    /// A path was given, and it is ccroute.
    #[error("{path} is ccroute itself, not a compiler")]
    IsSelf {
        /// The path given.
        path: PathBuf,
    },
    /// A path was given that is not an executable file.
    #[error("{path} is not an executable file")]
    NotExecutable {
        /// The path given.
        path: PathBuf,
    },
}

/// Whether `p` is a file this user may run.
pub fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether `candidate` is ccroute: the running executable or a file named
/// `ccroute` or `ccroute-cc` (a masquerade symlink may lead to either).
fn is_self(candidate: &Path, self_canonical: Option<&Path>) -> bool {
    match std::fs::canonicalize(candidate) {
        Ok(c) => {
            Some(c.as_path()) == self_canonical
                || [OsStr::new("ccroute"), OsStr::new(crate::wrapper::LEAN_NAME)]
                    .contains(&c.file_name().unwrap_or_default())
        }
        Err(_) => false,
    }
}

/// Finds the compiler for `name` (a bare name or a path), given the value of
/// `PATH` and the running executable (`std::env::current_exe()`).
///
/// # Errors
/// [`ResolveError`] when nothing fits.
pub fn resolve_compiler(name: &OsStr, path_var: Option<&OsStr>, self_exe: &Path) -> Result<PathBuf, ResolveError> {
    let self_canonical = std::fs::canonicalize(self_exe).ok();
    let given = Path::new(name);
    if name.as_encoded_bytes().contains(&b'/') {
        if is_self(given, self_canonical.as_deref()) {
            return Err(ResolveError::IsSelf { path: given.to_owned() });
        }
        if !is_executable(given) {
            return Err(ResolveError::NotExecutable { path: given.to_owned() });
        }
        return Ok(given.to_owned());
    }
    let not_found = || ResolveError::NotFound { name: name.to_string_lossy().into_owned() };
    if name.is_empty() {
        return Err(not_found());
    }
    path_candidates(name, path_var).find(|c| !is_self(c, self_canonical.as_deref())).ok_or_else(not_found)
}

/// The executables named `name` in `PATH`, in the order execvp tries them.
pub fn path_candidates<'a>(name: &'a OsStr, path_var: Option<&'a OsStr>) -> impl Iterator<Item = PathBuf> + 'a {
    std::env::split_paths(path_var.unwrap_or_default()).filter_map(move |dir| {
        // An empty PATH entry means the current directory, as execvp reads it.
        let candidate = if dir.as_os_str().is_empty() { PathBuf::from(".").join(name) } else { dir.join(name) };
        is_executable(&candidate).then_some(candidate)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn exe(path: &Path) {
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn masquerade_symlink_finds_the_real_compiler_further_down_path() {
        let t = tempfile::tempdir().unwrap();
        let (bin, wrap, real) = (t.path().join("bin"), t.path().join("wrap"), t.path().join("real"));
        for d in [&bin, &wrap, &real] {
            std::fs::create_dir(d).unwrap();
        }
        let me = bin.join("ccroute");
        exe(&me);
        symlink(&me, wrap.join("gcc")).unwrap();
        exe(&real.join("gcc"));
        std::fs::write(real.join("cc"), "not executable").unwrap();
        let path = std::env::join_paths([&wrap, &bin, &real]).unwrap();
        assert_eq!(resolve_compiler(OsStr::new("gcc"), Some(&path), &me).unwrap(), real.join("gcc"));
        // Not executable: skipped, and then nothing is left.
        assert!(matches!(resolve_compiler(OsStr::new("cc"), Some(&path), &me), Err(ResolveError::NotFound { .. })));
        // A copy (not a link) of ccroute elsewhere is skipped by its name.
        let other = t.path().join("other");
        std::fs::create_dir(&other).unwrap();
        exe(&other.join("ccroute"));
        symlink(other.join("ccroute"), wrap.join("g++")).unwrap();
        let path = std::env::join_paths([&wrap]).unwrap();
        let err = resolve_compiler(OsStr::new("g++"), Some(&path), &me).unwrap_err();
        assert!(err.to_string().contains("\"g++\" not found"), "{err}");
        // So is the wrapper alone, ccroute-cc, that a masquerade link may
        // lead to while ccroute runs (or the other way round).
        exe(&other.join("ccroute-cc"));
        symlink(other.join("ccroute-cc"), wrap.join("clang")).unwrap();
        exe(&real.join("clang"));
        let path = std::env::join_paths([&wrap, &real]).unwrap();
        assert_eq!(resolve_compiler(OsStr::new("clang"), Some(&path), &me).unwrap(), real.join("clang"));
    }

    #[test]
    fn paths_are_taken_as_given_but_never_ccroute() {
        let t = tempfile::tempdir().unwrap();
        let me = t.path().join("ccroute");
        exe(&me);
        let cc = t.path().join("cc");
        exe(&cc);
        assert_eq!(resolve_compiler(cc.as_os_str(), None, &me).unwrap(), cc);
        assert!(matches!(resolve_compiler(me.as_os_str(), None, &me), Err(ResolveError::IsSelf { .. })));
        let link = t.path().join("gcc");
        symlink(&me, &link).unwrap();
        assert!(matches!(resolve_compiler(link.as_os_str(), None, &me), Err(ResolveError::IsSelf { .. })));
        let missing = t.path().join("nope");
        assert!(matches!(resolve_compiler(missing.as_os_str(), None, &me), Err(ResolveError::NotExecutable { .. })));
        assert!(resolve_compiler(OsStr::new(""), None, &me).is_err());
    }

    #[test]
    fn real_gcc_is_found_in_path() {
        let me = Path::new("/nonexistent/ccroute");
        let found = resolve_compiler(OsStr::new("gcc"), Some(OsStr::new("/usr/local/bin:/usr/bin")), me).unwrap();
        assert!(found.ends_with("gcc"));
    }
}
