//! Classification of one compiler invocation: run it locally (and why), or
//! the plan for a remote compile.
//!
//! Main items: [`classify`], [`Classification`], [`RemotePlan`]. A remote
//! compile is: run the same compiler locally with [`RemotePlan::preprocess_args`]
//! (which also writes any dependency file, byte-identical to what the `-c`
//! compile would write), clean its stdout with [`RemotePlan::postprocess`],
//! send the result with [`RemotePlan::spec`], and write the object the agent
//! returns to [`RemotePlan::output`]. Running processes is the caller's job.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use ccroute_wire::TaskSpec;

use super::args::{scan, Scan};
use super::lang::{is_probe_input, language_of_path, replace_extension, Language};
use super::preprocessed::{postprocess, Preprocessed};
use super::{Family, LocalReason};

/// Environment variables that change a compile and would not reach the agent.
const LOCAL_ENV: &[&str] = &[
    "SOURCE_DATE_EPOCH",
    "GCC_EXEC_PREFIX",
    "COMPILER_PATH",
    "DEPENDENCIES_OUTPUT",
    "SUNPRO_DEPENDENCIES",
    "GCC_COMPARE_DEBUG",
];

/// Output extensions a compile to an object may have.
const OBJECT_EXTENSIONS: &[&str] = &["o", "obj", "os", "lo"];

/// Whether an invocation may go remote.
// Made once per compile and taken apart at once: a box would only add an
// allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Classification {
    /// Run the command as given, on this machine.
    Local(LocalReason),
    /// Preprocess here, compile on an agent (or, when
    /// [`RemotePlan::text_refused`] says so, only from its inputs).
    Remote(RemotePlan),
}

/// Everything a consumerd needs to run one compile remotely.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemotePlan {
    /// Which preprocessing mode and post-processing apply.
    pub family: Family,
    /// Arguments (without argv\[0\]) for the local preprocess run: same
    /// compiler, same working directory, preprocessed text on stdout. Any
    /// dependency file comes out of this run.
    pub preprocess_args: Vec<OsString>,
    /// What the agent compiles with.
    pub spec: TaskSpec,
    /// The input, absolute.
    pub input: PathBuf,
    /// Where the object goes, absolute.
    pub output: PathBuf,
    /// The input's language.
    pub language: Language,
    /// What the consumerd's direct-mode cache needs besides the command.
    pub direct: DirectInputs,
    /// The agent's arguments when the unit is sent as its inputs (the
    /// command's own, preprocessor options included; see
    /// [`ccroute_wire::inputs`]); `None` when it cannot be sent so.
    pub inputs_args: Option<Vec<String>>,
    /// Only as its inputs may the unit go remote (why the text would not
    /// compile as the source does); without them it compiles here.
    pub text_refused: Option<LocalReason>,
}

/// The parts of a command that decide which files its preprocessing reads
/// and what it writes besides the object, for the consumerd's direct-mode
/// cache (`crate::consumerd::direct`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DirectInputs {
    /// The dependency file the compile writes, absolute.
    pub dep_file: Option<PathBuf>,
    /// The command's dependency output leaves system headers out (`-MMD`),
    /// so it cannot say what a local compile read.
    pub deps_user_only: bool,
    /// Include directories, absolute, in search order: `-iquote`, `-I`,
    /// `CPATH`, `-isystem`, `C_INCLUDE_PATH` and its kin, `-idirafter`.
    pub include_dirs: Vec<PathBuf>,
    /// The environment variables that add include directories, as set.
    pub include_env: Vec<(String, OsString)>,
}

/// Environment variables that add include directories (gcc and clang).
pub const INCLUDE_ENV: &[&str] = &["CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "OBJC_INCLUDE_PATH"];

impl RemotePlan {
    /// Cleans the preprocess run's stdout into the text the agent compiles.
    pub fn postprocess(&self, raw: &[u8]) -> Preprocessed {
        postprocess(self.family, raw)
    }

    /// Whether the agent's diagnostics for this text read exactly as a local
    /// compile's. gcc prints the source line under a diagnostic by reading
    /// the file its location names: with `-g3` the agent's main file is the
    /// text itself (see [`super::layout`]), and a `#line` that names another
    /// file (bison, flex) points at a file the agent does not have as the
    /// client has it.
    pub fn diagnostics_trusted(&self, text: &Preprocessed) -> bool {
        let macro_debug = self.family == Family::Gnu && super::layout::macro_debug(&self.spec.args);
        !macro_debug && !text.renamed_files
    }

    /// The mode a new object file gets, as gcc creates it: `0o666 & !umask`.
    pub fn output_mode(umask: u32) -> u32 {
        0o666 & !umask
    }
}

/// Decides whether `args` (without argv\[0\]), run by a compiler of `family` in
/// `cwd` with the environment `env`, can go remote.
pub fn classify(
    family: Family,
    args: &[OsString],
    cwd: &Path,
    env: impl Fn(&str) -> Option<OsString>,
) -> Classification {
    match plan(family, args, cwd, &env) {
        Ok(p) => Classification::Remote(p),
        Err(r) => Classification::Local(r),
    }
}

fn plan(
    family: Family,
    args: &[OsString],
    cwd: &Path,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<RemotePlan, LocalReason> {
    let s = scan(family, args)?;
    if !s.compile {
        return Err(LocalReason::NoCompile);
    }
    let (input, x_lang) = match s.inputs.as_slice() {
        [] => return Err(LocalReason::NoInput),
        [one] => one.clone(),
        more => return Err(LocalReason::SeveralInputs(more.len())),
    };
    if s.x_after_input {
        return Err(LocalReason::XAfterInput);
    }
    let language =
        x_lang.or_else(|| language_of_path(input.as_ref())).ok_or_else(|| LocalReason::NotSource(input.clone()))?;
    if !language.is_remote_capable() {
        return Err(LocalReason::Language(format!("{language:?}")));
    }
    if is_probe_input(input.as_ref()) {
        return Err(LocalReason::Probe(input));
    }
    check_input_path(&input)?;
    if let Some(var) = LOCAL_ENV.iter().find(|v| env(v).is_some()) {
        return Err(LocalReason::Env(var));
    }
    if s.deps_driver && s.deps_wp {
        return Err(LocalReason::Option { arg: "-Wp,-MD".to_owned(), why: "two dependency outputs" });
    }
    for inc in &s.forced_includes {
        let gch = cwd.join(format!("{inc}.gch"));
        if gch.exists() {
            return Err(LocalReason::PrecompiledHeader(gch.display().to_string()));
        }
    }

    let output_name = match &s.output {
        Some(o) => o.clone(),
        // gcc: `-c` without `-o` writes `<input stem>.o` in the working directory.
        None => replace_extension(Path::new(&input).file_name().and_then(|n| n.to_str()).unwrap_or_default(), ".o"),
    };
    let ext = Path::new(&output_name).extension().and_then(|e| e.to_str()).unwrap_or_default();
    if output_name == "-" || !OBJECT_EXTENSIONS.contains(&ext) {
        return Err(LocalReason::OutputExtension(output_name));
    }

    if family == Family::Clang && s.deps_wp {
        return Err(LocalReason::Option {
            arg: "-Wp,-MD".to_owned(),
            why: "clang names its target after -o, which -E lacks",
        });
    }
    // Past this point a reason to stay local is about the remote compile
    // alone: the unit is an ordinary compile, which the consumerd's cache may answer.
    // These compile remotely only from their inputs, at their real paths.
    let text_refused = if s.lto {
        Some(LocalReason::Option {
            arg: "-flto".to_owned(),
            why: "LTO bytecode records the agent's scratch paths, which no prefix map reaches",
        })
    } else if family == Family::Gnu && s.pedantic {
        Some(LocalReason::Option {
            arg: "-pedantic".to_owned(),
            why: "gcc reports the line markers of the preprocessed text as an extension",
        })
    } else if family == Family::Clang && s.debug {
        Some(LocalReason::Option {
            arg: "-g".to_owned(),
            why: "clang's debug info records checksums of the source files, which the rewritten text cannot match",
        })
    } else {
        None
    };
    let inputs_args = match s.inputs_refused {
        None if cwd.to_str().is_some() => Some(s.inputs_args.clone()),
        _ => None,
    };
    let preprocess_args = preprocess_args(family, &s);
    let direct = direct_inputs(&s, cwd, &output_name, env);
    let mut remote = s.remote;
    remote.extend(s.remote_wp_macros);
    let spec = TaskSpec {
        args: remote,
        input_path: input.clone(),
        cwd: if s.debug { Some(cwd_string(cwd)?) } else { None },
        env: diagnostic_env(env),
        inputs: None,
    };
    let plan = RemotePlan {
        family,
        preprocess_args,
        spec,
        input: cwd.join(&input),
        output: cwd.join(output_name),
        language,
        direct,
        inputs_args,
        text_refused,
    };
    Ok(plan)
}

/// Where the dependency file goes (as gcc's driver names it) and the include
/// search directories, with `CPATH` and its kin in their place.
fn direct_inputs(s: &Scan, cwd: &Path, output: &str, env: &dyn Fn(&str) -> Option<OsString>) -> DirectInputs {
    let dep_file = match (&s.deps_file, s.deps_driver || s.deps_wp) {
        (Some(f), true) => Some(cwd.join(f)),
        (None, true) => Some(cwd.join(replace_extension(output, ".d"))),
        _ => None,
    };
    let include_env: Vec<(String, OsString)> =
        INCLUDE_ENV.iter().filter_map(|k| env(k).map(|v| ((*k).to_owned(), v))).collect();
    let env_dirs = |names: &[&str]| -> Vec<PathBuf> {
        include_env
            .iter()
            .filter(|(k, _)| names.contains(&k.as_str()))
            .flat_map(|(_, v)| std::env::split_paths(v).collect::<Vec<_>>())
            // An empty element means the working directory.
            .map(|d| if d.as_os_str().is_empty() { cwd.to_owned() } else { cwd.join(d) })
            .collect()
    };
    // `CPATH` acts like `-I` after the command's `-I`s, the others like
    // `-isystem`: appended after the command's own, which keeps each
    // directory after those it follows in gcc's search.
    let mut include_dirs: Vec<PathBuf> = s.include_dirs.iter().map(|d| cwd.join(d)).collect();
    include_dirs.extend(env_dirs(&["CPATH"]));
    include_dirs.extend(env_dirs(&["C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "OBJC_INCLUDE_PATH"]));
    DirectInputs { dep_file, deps_user_only: s.deps_user_only, include_dirs, include_env }
}

fn diagnostic_env(env: &dyn Fn(&str) -> Option<OsString>) -> Vec<(String, String)> {
    super::spec::DIAGNOSTIC_ENV
        .iter()
        .filter_map(|k| env(k).and_then(|v| v.into_string().ok()).map(|v| ((*k).to_owned(), v)))
        .filter(|(_, v)| super::spec::env_value_ok(v))
        .collect()
}

/// The local run's arguments: the command's own (minus `-c` and `-o`) plus
/// preprocess-only mode. Without `-o` in its arguments the driver would name
/// the dependency file and its target after the input, so where the `-c`
/// compile would name them after `-o`, say so explicitly — the way gcc's
/// driver spec does for `-c`: `-MF <output minus extension>.d`, `-MQ <output>`.
fn preprocess_args(family: Family, s: &Scan) -> Vec<OsString> {
    let mut a = s.preprocess.clone();
    a.push("-E".into());
    a.push(match family {
        Family::Gnu => "-fdirectives-only".into(),
        Family::Clang => "-frewrite-includes".into(),
    });
    if let (true, Some(out)) = (s.deps_driver, &s.output) {
        if !s.deps_file_given {
            a.push("-MF".into());
            a.push(replace_extension(out, ".d").into());
        }
        if !s.deps_target_given {
            a.push("-MQ".into());
            a.push(out.into());
        }
    }
    a
}

/// The working directory as gcc records it (`getcwd`: no trailing slash).
fn cwd_string(cwd: &Path) -> Result<String, LocalReason> {
    let s = cwd.to_str().ok_or(LocalReason::NotUtf8)?;
    let trimmed = s.trim_end_matches('/');
    if !s.starts_with('/') {
        return Err(LocalReason::InputPath(s.to_owned(), "working directory is not absolute"));
    }
    Ok(if trimmed.is_empty() { "/".to_owned() } else { trimmed.to_owned() })
}

/// An input path the agent can recreate under the same name (the agent's
/// own rule, [`super::allow`]).
fn check_input_path(input: &str) -> Result<(), LocalReason> {
    match super::spec::input_path_problem(input) {
        Some(why) => Err(LocalReason::InputPath(input.to_owned(), why)),
        None => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<OsString> {
        None
    }

    fn classify_in(cwd: &str, args: &[&str]) -> Classification {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        classify(Family::Gnu, &args, Path::new(cwd), no_env)
    }

    fn remote(args: &[&str]) -> RemotePlan {
        match classify_in("/home/dev/p", args) {
            Classification::Remote(p) => p,
            Classification::Local(r) => panic!("{args:?} local: {r}"),
        }
    }

    fn local(args: &[&str]) -> LocalReason {
        match classify_in("/home/dev/p", args) {
            Classification::Remote(p) => panic!("{args:?} remote: {p:?}"),
            Classification::Local(r) => r,
        }
    }

    fn strs(v: &[OsString]) -> Vec<&str> {
        v.iter().map(|a| a.to_str().unwrap()).collect()
    }

    #[test]
    fn kubecc_example_goes_remote() {
        let p = remote(&["-Werror", "-g", "-O2", "-MD", "-W", "-Wall", "-o", "src/test.o", "-c", "src/test.c"]);
        assert_eq!(p.spec.args, ["-Werror", "-g", "-O2", "-W", "-Wall"]);
        assert_eq!(p.spec.input_path, "src/test.c");
        assert_eq!(p.spec.cwd.as_deref(), Some("/home/dev/p"));
        assert_eq!(p.output, Path::new("/home/dev/p/src/test.o"));
        assert_eq!(p.input, Path::new("/home/dev/p/src/test.c"));
        assert_eq!(
            strs(&p.preprocess_args),
            [
                "-Werror",
                "-g",
                "-O2",
                "-MD",
                "-W",
                "-Wall",
                "src/test.c",
                "-E",
                "-fdirectives-only",
                "-MF",
                "src/test.d",
                "-MQ",
                "src/test.o"
            ]
        );
    }

    #[test]
    fn kubecc_remove_local_args_example() {
        let p = remote(&[
            "-Wp,-MD,x.d",
            "-L",
            "test",
            "-Ltest",
            "-l",
            "test",
            "-ltest",
            "-Da=b",
            "-I.",
            "-I",
            "test",
            "-D",
            "a=b",
            "-o",
            "src/test.o",
            "-c",
            "src/test.c",
        ]);
        assert_eq!(p.spec.args, ["-Da=b", "-Da=b"]);
    }

    #[test]
    fn kubecc_qt_pch_style_command_is_remote() {
        let p = remote(&[
            "-DQT_CORE_LIB",
            "-DQT_GUI_LIB",
            "-I/b/app_autogen/include",
            "-isystem",
            "/usr/include/qt5",
            "-g",
            "-fPIC",
            "-std=gnu++11",
            "-include",
            "/b/cmake_pch.hxx",
            "-MD",
            "-MT",
            "x.cpp.o",
            "-MF",
            "x.cpp.o.d",
            "-o",
            "x.cpp.o",
            "-c",
            "/src/x.cpp",
        ]);
        assert_eq!(p.spec.args, ["-DQT_CORE_LIB", "-DQT_GUI_LIB", "-g", "-fPIC", "-std=gnu++11"]);
        assert_eq!(p.language, Language::Cxx);
        // -MF and -MT were given: nothing to add.
        assert_eq!(strs(&p.preprocess_args[p.preprocess_args.len() - 2..]), ["-E", "-fdirectives-only"]);
    }

    #[test]
    fn default_output_is_input_stem_in_cwd() {
        let p = remote(&["-c", "src/dir.x/a.cpp"]);
        assert_eq!(p.output, Path::new("/home/dev/p/a.o"));
        assert_eq!(p.spec.cwd, None);
        let p = remote(&["-c", "/abs/b.c", "-MD"]);
        assert_eq!(p.output, Path::new("/home/dev/p/b.o"));
        // Without -o the driver names dependency files after the input in both modes.
        assert_eq!(strs(&p.preprocess_args), ["/abs/b.c", "-MD", "-E", "-fdirectives-only"]);
    }

    #[test]
    fn wp_macros_follow_plain_ones() {
        let p = remote(&["-Wp,-D_FORTIFY_SOURCE=2", "-DA", "-UB", "-c", "a.c"]);
        assert_eq!(p.spec.args, ["-DA", "-UB", "-D_FORTIFY_SOURCE=2"]);
    }

    #[test]
    fn local_reasons() {
        assert!(matches!(local(&["a.c"]), LocalReason::NoCompile));
        assert!(matches!(local(&["a.c", "-o", "a"]), LocalReason::NoCompile));
        assert!(matches!(local(&["-c"]), LocalReason::NoInput));
        assert!(matches!(local(&["-c", "a.c", "b.c"]), LocalReason::SeveralInputs(2)));
        assert!(matches!(local(&["-c", "a.s"]), LocalReason::Language(_)));
        assert!(matches!(local(&["-c", "a.S"]), LocalReason::Language(_)));
        assert!(matches!(local(&["-c", "a.m"]), LocalReason::Language(_)));
        assert!(matches!(local(&["-c", "a.i"]), LocalReason::Language(_)));
        assert!(matches!(local(&["-c", "-x", "assembler-with-cpp", "a.c"]), LocalReason::Language(_)));
        assert!(matches!(local(&["-c", "-xc-header", "a.h"]), LocalReason::Language(_)));
        assert!(matches!(local(&["-c", "a.c", "-x", "c++"]), LocalReason::XAfterInput));
        assert!(matches!(local(&["-c", "conftest.c"]), LocalReason::Probe(_)));
        assert!(matches!(local(&["-c", "a.c", "-o", "a.s"]), LocalReason::OutputExtension(_)));
        assert!(matches!(local(&["-c", "a.c", "-o", "a"]), LocalReason::OutputExtension(_)));
        assert!(matches!(local(&["-c", "a.c", "-o", "-"]), LocalReason::OutputExtension(_)));
        assert!(matches!(local(&["-c", "src/../a.c"]), LocalReason::InputPath(..)));
        assert!(matches!(local(&["-c", "src/./a.c"]), LocalReason::InputPath(..)));
        assert!(matches!(local(&["-c", "-MD", "-Wp,-MD,x.d", "a.c"]), LocalReason::Option { .. }));
        assert!(matches!(local(&["-c", "-M", "a.c"]), LocalReason::Option { .. }));
        assert!(matches!(local(&["-c", "-MM", "-MD", "a.c"]), LocalReason::Option { .. }));
        // Relative inputs going up and ./ are fine.
        assert_eq!(remote(&["-c", "../../x.c"]).input, Path::new("/home/dev/p/../../x.c"));
        remote(&["-c", "./x.c"]);
        remote(&["-c", "-x", "c++", "x.txt", "-o", "x.obj"]);
    }

    #[test]
    fn env_that_would_not_reach_the_agent() {
        let args: Vec<OsString> = ["-c", "a.c"].iter().map(OsString::from).collect();
        for var in LOCAL_ENV {
            let env = |k: &str| (k == *var).then(|| OsString::from("1"));
            assert!(
                matches!(classify(Family::Gnu, &args, Path::new("/p"), env), Classification::Local(LocalReason::Env(v)) if v == *var)
            );
        }
        let env = |k: &str| (k == "CPATH").then(|| OsString::from("/x"));
        assert!(matches!(classify(Family::Gnu, &args, Path::new("/p"), env), Classification::Remote(_)));
    }

    #[test]
    fn precompiled_header_beside_forced_include_is_local() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pch.h"), "").unwrap();
        let args: Vec<OsString> = ["-include", "pch.h", "-c", "a.c"].iter().map(OsString::from).collect();
        assert!(matches!(classify(Family::Gnu, &args, dir.path(), no_env), Classification::Remote(_)));
        std::fs::write(dir.path().join("pch.h.gch"), "").unwrap();
        assert!(matches!(
            classify(Family::Gnu, &args, dir.path(), no_env),
            Classification::Local(LocalReason::PrecompiledHeader(_))
        ));
    }

    #[test]
    fn clang_rewrites_includes() {
        let args: Vec<OsString> = ["-c", "a.c", "-stdlib=libc++"].iter().map(OsString::from).collect();
        let Classification::Remote(p) = classify(Family::Clang, &args, Path::new("/p"), no_env) else { panic!() };
        assert_eq!(strs(&p.preprocess_args), ["a.c", "-stdlib=libc++", "-E", "-frewrite-includes"]);
        assert!(p.spec.args.is_empty());
    }

    #[test]
    fn output_mode_follows_umask() {
        assert_eq!(RemotePlan::output_mode(0o022), 0o644);
        assert_eq!(RemotePlan::output_mode(0o077), 0o600);
        assert_eq!(RemotePlan::output_mode(0), 0o666);
    }

    /// A small deterministic generator (xorshift) over plausible and hostile
    /// argument pieces: classification must never panic.
    #[test]
    fn never_panics_on_random_arguments() {
        use std::os::unix::ffi::OsStringExt;
        const PIECES: &[&str] = &[
            "",
            "-",
            "-c",
            "-o",
            "-x",
            "-xc++",
            "-x",
            "c",
            "a.c",
            "b.cc",
            "-I",
            "-D",
            "-U",
            "-MD",
            "-MF",
            "-MT",
            "-MQ",
            "-Wp,",
            "-Wp,-MD",
            "-Wp,-MD,",
            "-Wp,-D",
            "-include",
            "--param",
            "--param=",
            "-g",
            "-g0",
            "-O2",
            "@",
            "-B",
            "../x.c",
            "/abs/y.c",
            ".",
            "..",
            "./",
            "-o-",
            "-oa.o",
            "a.o",
            "-E",
            "-S",
            "=",
            "-fdebug-prefix-map=",
            "-ffile-prefix-map==",
            "--sysroot",
            "-isystem",
            "-march=native",
            "\u{e9}.c",
            "-W",
            "-m",
            "-f",
            "x.obj",
        ];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut remote = 0;
        for _ in 0..20_000 {
            let n = (next() % 7) as usize;
            let mut args = Vec::with_capacity(n);
            for _ in 0..n {
                let r = next();
                if r % 17 == 0 {
                    args.push(OsString::from_vec(vec![(r >> 8) as u8, (r >> 16) as u8, 0xff]));
                } else {
                    args.push(OsString::from(PIECES[(r >> 5) as usize % PIECES.len()]));
                }
            }
            if let Classification::Remote(p) = classify(Family::Gnu, &args, Path::new("/w"), no_env) {
                remote += 1;
                assert!(!p.spec.input_path.is_empty());
                assert!(super::super::allow::validate(&p.spec).is_ok(), "{args:?} -> {:?}", p.spec);
            }
        }
        assert!(remote > 0, "the generator never produced a remote-capable command");
    }
}
