//! The agent's side of a remote compile: the command to run, and the scratch
//! layout that makes its object byte-identical to a local compile's.
//!
//! Layout under the scratch directory `S` (absolute):
//!
//! - `S/i/`: the preprocessed text, under the input's own relative name
//!   (nested one `d/` per leading `..`), or `S/i/<absolute input>`. The
//!   compiler is given this path; `-ffile-prefix-map=S/i/=` turns it back
//!   into the input as the command named it, so the object's file names and
//!   `__BASE_FILE__` come out as they would locally.
//! - `S/c/d/d/...`: the working directory the compiler runs in, mapped back
//!   to the original cwd when the spec carries one (debug info records it).
//!   Relative paths named by line markers resolve here.
//! - `S/r/`: a mirror for absolute paths. Line markers naming an absolute
//!   file are rewritten to point here, mapped back with `S/r=`.
//! - Beside those, [`AgentCommand::write_inputs`] writes each source file's
//!   original lines, rebuilt from the text: gcc prints the source line under
//!   a diagnostic by reading the file the location names, and it must find
//!   the original, not the preprocessed text.
//!
//! The compile adds `-nostdinc` (gcc would otherwise include `stdc-predef.h`
//! a second time; the agent never reads a header of its own). Prefix maps are
//! not recorded in the object; they compose with the user's (see
//! [`super::prefix_map`]). [`AgentCommand::rewrite_output`] turns scratch
//! paths in the compiler's stderr back into the original ones.
//!
//! Main items: [`agent_command`], [`AgentCommand`]. Running the compiler,
//! removing the scratch directory and checking the spec ([`super::validate`],
//! which must come first) are the caller's.

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

use ccroute_wire::TaskSpec;

use super::prefix_map::{map_args, UserMaps};
use super::preprocessed::{escape_marker_name, is_directive, shadow_files, Linemarker};

/// Extra nesting of the scratch cwd, so that headers named `../../x.h`
/// relative to it still land inside the scratch directory.
const EXTRA_DEPTH: usize = 4;

/// Why a command could not be laid out.
#[derive(Debug, thiserror::Error)]
pub enum AgentSetupError {
    /// The scratch path cannot be used in a prefix map.
    #[error("scratch directory {0:?} must be an absolute UTF-8 path without '='")]
    BadScratch(PathBuf),
    /// Writing the inputs failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
}

/// One compile, laid out in a scratch directory.
#[derive(Debug, Clone)]
pub struct AgentCommand {
    /// The compiler to run.
    pub program: PathBuf,
    /// Its arguments: the spec's, `-nostdinc`, prefix maps, `-c <input> -o <object>`.
    pub args: Vec<OsString>,
    /// The directory to run it in.
    pub cwd: PathBuf,
    /// Where the preprocessed text goes.
    pub source_path: PathBuf,
    /// Where the object appears.
    pub object_path: PathBuf,
    scratch: PathBuf,
    root: String,
    input_prefix: String,
    cwd_str: String,
    original_cwd: Option<String>,
}

/// Lays out a compile of `spec` (already [`super::validate`]d) by `compiler`
/// in `scratch`, an empty absolute directory the agent owns.
///
/// # Errors
/// [`AgentSetupError::BadScratch`] when `scratch` is relative, not UTF-8 or has a `=`.
pub fn agent_command(spec: &TaskSpec, compiler: &Path, scratch: &Path) -> Result<AgentCommand, AgentSetupError> {
    let s = scratch.to_str().filter(|s| s.starts_with('/') && !s.contains('=')).map(|s| s.trim_end_matches('/'));
    let Some(s) = s else {
        return Err(AgentSetupError::BadScratch(scratch.to_owned()));
    };
    let ups = Path::new(&spec.input_path).components().take_while(|c| *c == Component::ParentDir).count();
    let input_prefix =
        if spec.input_path.starts_with('/') { format!("{s}/i") } else { format!("{s}/i/{}", "d/".repeat(ups)) };
    let cwd_str = format!("{s}/c{}", "/d".repeat(ups + EXTRA_DEPTH));
    let root = format!("{s}/r");
    // With macro debug info (-g3) gcc numbers files by name, and the main
    // input must carry the very name its line markers use; the text then sits
    // where the markers point, and diagnostics in the main file show its
    // preprocessed lines instead of the original ones.
    // clang numbers files by name even for plain -g.
    let same_name = macro_debug(&spec.args) || super::Family::of_compiler(compiler) == super::Family::Clang;
    let input_arg = match (same_name, spec.input_path.starts_with('/')) {
        (true, true) => format!("{root}{}", spec.input_path),
        (true, false) => spec.input_path.clone(),
        (false, _) => format!("{input_prefix}{}", spec.input_path),
    };
    let source_path = normalize(&Path::new(&cwd_str).join(&input_arg));
    let object_path = scratch.join("out.o");

    let user = UserMaps::from_args(&spec.args);
    let mut pairs = vec![(input_prefix.as_str(), ""), (root.as_str(), "")];
    if let Some(c) = &spec.cwd {
        pairs.push((cwd_str.as_str(), c.as_str()));
    }
    let mut args: Vec<OsString> = spec.args.iter().map(OsString::from).collect();
    args.push("-nostdinc".into());
    args.extend(map_args(&user, &pairs).into_iter().map(OsString::from));
    args.extend(["-c".into(), input_arg.into(), "-o".into(), object_path.clone().into_os_string()]);
    Ok(AgentCommand {
        program: compiler.to_owned(),
        args,
        cwd: PathBuf::from(&cwd_str),
        source_path,
        object_path,
        scratch: scratch.to_owned(),
        root,
        input_prefix,
        cwd_str,
        original_cwd: spec.cwd.clone(),
    })
}

/// Whether the last level-setting `-g` flag asks for macro information (level 3).
pub(crate) fn macro_debug(args: &[String]) -> bool {
    let level = args.iter().rev().find(|a| {
        a.starts_with("-g") && a[2..].chars().last().is_some_and(|c| c.is_ascii_digit()) && !a.starts_with("-gdwarf")
    });
    level.is_some_and(|a| a.ends_with('3'))
}

/// Lexically resolves `.` and `..` (the scratch tree has no symlinks).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

impl AgentCommand {
    /// Writes the preprocessed text (its absolute line markers pointed into
    /// the scratch mirror) and the rebuilt original sources.
    ///
    /// # Errors
    /// An I/O error, with the path.
    pub fn write_inputs(&self, text: &[u8]) -> Result<(), AgentSetupError> {
        let text = self.rewrite_markers(text);
        let dirs = [self.cwd.clone(), self.source_path.parent().map(Path::to_owned).unwrap_or_default()];
        for d in dirs {
            std::fs::create_dir_all(&d).map_err(|source| AgentSetupError::Write { path: d.clone(), source })?;
        }
        // The compiler opens `S/i/d/../x.c`, which needs `S/i/d` to exist.
        let nested = Path::new(&self.input_prefix);
        std::fs::create_dir_all(nested).map_err(|source| AgentSetupError::Write { path: nested.to_owned(), source })?;
        write(&self.source_path, &text)?;
        for (name, body) in shadow_files(&text) {
            let Ok(name) = std::str::from_utf8(&name) else { continue };
            let (base, rel) = match name.strip_prefix(self.root.as_str()) {
                Some(rest) => (PathBuf::from(&self.root), rest.trim_start_matches('/').to_owned()),
                None if name.starts_with('/') => continue,
                None => (self.cwd.clone(), name.to_owned()),
            };
            if let Some(path) = self.contained(&base, &rel)? {
                if path != self.source_path {
                    write(&path, &body)?;
                }
            }
        }
        Ok(())
    }

    /// Walks `rel` from `base` the way the OS will, creating each directory
    /// it passes through; `None` if it would leave the scratch directory.
    fn contained(&self, base: &Path, rel: &str) -> Result<Option<PathBuf>, AgentSetupError> {
        let comps: Vec<Component> = Path::new(rel).components().collect();
        let mut cur = base.to_owned();
        for (i, c) in comps.iter().enumerate() {
            match c {
                Component::Normal(n) => {
                    cur.push(n);
                    if i + 1 < comps.len() {
                        std::fs::create_dir_all(&cur)
                            .map_err(|source| AgentSetupError::Write { path: cur.clone(), source })?;
                    }
                }
                Component::ParentDir => {
                    cur.pop();
                    if !cur.starts_with(&self.scratch) || cur == self.scratch {
                        return Ok(None);
                    }
                }
                Component::CurDir => {}
                Component::RootDir | Component::Prefix(_) => return Ok(None),
            }
        }
        Ok(cur.starts_with(&self.scratch).then_some(cur))
    }

    /// Points absolute line markers into the scratch mirror.
    fn rewrite_markers(&self, text: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(text.len() + 4096);
        for with_nl in text.split_inclusive(|b| *b == b'\n') {
            let line = with_nl.strip_suffix(b"\n").unwrap_or(with_nl);
            if is_directive(line) {
                if let Some(m) = Linemarker::parse(line) {
                    if m.file.first() == Some(&b'/') {
                        let mut name = self.root.as_bytes().to_vec();
                        name.extend_from_slice(&m.file);
                        out.extend_from_slice(&line[..m.name_span.start]);
                        out.extend_from_slice(&escape_marker_name(&name));
                        out.extend_from_slice(&with_nl[m.name_span.end..]);
                        continue;
                    }
                }
            }
            out.extend_from_slice(with_nl);
        }
        out
    }

    /// Turns scratch paths in the compiler's stderr or stdout back into the
    /// paths a local compile would print.
    pub fn rewrite_output(&self, bytes: &[u8]) -> Vec<u8> {
        let root_slash = format!("{}/", self.root);
        let mut pats: Vec<(&[u8], &[u8])> = vec![(root_slash.as_bytes(), b"/"), (self.input_prefix.as_bytes(), b"")];
        if let Some(c) = &self.original_cwd {
            pats.push((self.cwd_str.as_bytes(), c.as_bytes()));
        }
        let Some(lead) = self.scratch.to_str().map(str::as_bytes) else { return bytes.to_vec() };
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == lead.first().copied().unwrap_or(b'/') && bytes[i..].starts_with(lead) {
                if let Some((from, to)) = pats.iter().find(|(from, _)| bytes[i..].starts_with(from)) {
                    out.extend_from_slice(to);
                    i += from.len();
                    continue;
                }
            }
            out.push(bytes[i]);
            i += 1;
        }
        out
    }
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), AgentSetupError> {
    std::fs::write(path, bytes).map_err(|source| AgentSetupError::Write { path: path.to_owned(), source })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn spec(args: &[&str], input: &str, cwd: Option<&str>) -> TaskSpec {
        TaskSpec {
            args: args.iter().map(|s| s.to_string()).collect(),
            input_path: input.into(),
            cwd: cwd.map(Into::into),
            env: vec![],
            inputs: None,
        }
    }

    fn strs(c: &AgentCommand) -> Vec<String> {
        c.args.iter().map(|a| a.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn relative_input_layout() {
        let c =
            agent_command(&spec(&["-O2"], "src/a.c", Some("/home/u/p")), Path::new("/usr/bin/gcc"), Path::new("/s"))
                .unwrap();
        assert_eq!(
            strs(&c),
            [
                "-O2",
                "-nostdinc",
                "-ffile-prefix-map=/s/i/=",
                "-ffile-prefix-map=/s/r=",
                "-ffile-prefix-map=/s/c/d/d/d/d=/home/u/p",
                "-c",
                "/s/i/src/a.c",
                "-o",
                "/s/out.o",
            ]
        );
        assert_eq!(c.cwd, Path::new("/s/c/d/d/d/d"));
        assert_eq!(c.source_path, Path::new("/s/i/src/a.c"));
        assert_eq!(c.object_path, Path::new("/s/out.o"));
    }

    #[test]
    fn parent_and_absolute_inputs_stay_inside() {
        let c = agent_command(&spec(&[], "../../x.c", None), Path::new("gcc"), Path::new("/s/")).unwrap();
        assert!(strs(&c).contains(&"/s/i/d/d/../../x.c".to_owned()));
        assert_eq!(c.source_path, Path::new("/s/i/x.c"));
        assert!(!strs(&c).iter().any(|a| a.contains("/s/c/")), "no cwd map without cwd");
        let c = agent_command(&spec(&[], "/abs/dir/y.c", None), Path::new("gcc"), Path::new("/s")).unwrap();
        assert!(strs(&c).contains(&"/s/i/abs/dir/y.c".to_owned()));
        assert!(strs(&c).contains(&"-ffile-prefix-map=/s/i=".to_owned()));
        assert_eq!(c.source_path, Path::new("/s/i/abs/dir/y.c"));
    }

    #[test]
    fn bad_scratch_is_an_error() {
        let s = spec(&[], "a.c", None);
        assert!(agent_command(&s, Path::new("gcc"), Path::new("rel")).is_err());
        assert!(agent_command(&s, Path::new("gcc"), Path::new("/a=b")).is_err());
    }

    #[test]
    fn rewrites_output_paths() {
        let c = agent_command(&spec(&[], "/abs/y.c", Some("/home/u/p")), Path::new("gcc"), Path::new("/s")).unwrap();
        let err = b"/s/r/abs/y.c:3:1: warning: x\nIn file included from /s/r/usr/include/z.h:2,\n/s/i/abs/y.c: fatal\n/s/c/d/d/d/d/q\n/sx/r/k\n";
        assert_eq!(
            String::from_utf8_lossy(&c.rewrite_output(err)),
            "/abs/y.c:3:1: warning: x\nIn file included from /usr/include/z.h:2,\n/abs/y.c: fatal\n/home/u/p/q\n/sx/r/k\n"
        );
    }

    #[test]
    fn writes_text_and_shadows_inside_scratch() {
        let dir = tempfile::tempdir().unwrap();
        let scratch = dir.path().join("job");
        let c = agent_command(&spec(&[], "src/a.c", None), Path::new("gcc"), &scratch).unwrap();
        let text = b"# 0 \"src/a.c\"\n# 1 \"src/a.c\"\n# 1 \"/abs/h.h\" 1\nint h;\n# 2 \"src/a.c\" 2\nint a;\n# 1 \"../../../../../../../../evil.h\" 1\nint e;\n";
        c.write_inputs(text).unwrap();
        let written = std::fs::read(&c.source_path).unwrap();
        let root = format!("{}/r/abs/h.h", scratch.display());
        assert!(String::from_utf8_lossy(&written).contains(&format!("# 1 \"{root}\" 1")));
        assert_eq!(std::fs::read(&root).unwrap(), b"int h;\n");
        assert_eq!(std::fs::read(c.cwd.join("src/a.c")).unwrap(), b"\nint a;\n");
        assert!(!dir.path().join("evil.h").exists());
        assert!(!scratch.join("evil.h").exists());
    }
}
