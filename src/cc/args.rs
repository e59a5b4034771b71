//! One pass over a compiler command line: what each argument means for a
//! remote compile.
//!
//! [`scan`] reads the arguments (without argv\[0\]) once, left to right, and
//! fills a [`Scan`]: the action, the inputs and output, the dependency-file
//! flags, and two argument lists — the one for the local preprocess run and
//! the one the agent compiles with. The first argument that cannot go remote
//! ends the scan with a [`LocalReason`].
//!
//! It is an allow-list: an option it does not know keeps the compile local.
//! It never panics, whatever the input (empty arguments, a lone `-o`,
//! non-UTF-8 bytes). Deciding what the scan means as a whole (one input, an
//! object output, ...) is [`super::plan`]'s job.

use std::ffi::OsString;

use super::lang::{language_of_path, language_of_x, Language};
use super::{Family, LocalReason};

/// What one pass over the arguments found.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// `-c` was given.
    pub compile: bool,
    /// The `-o` value, if any.
    pub output: Option<String>,
    /// Inputs, each with the `-x` language in force where it appeared.
    pub inputs: Vec<(String, Option<Language>)>,
    /// A `-x` came after the (first) input, where it no longer applies to it.
    pub x_after_input: bool,
    /// `-MD` or `-MMD` at driver level.
    pub deps_driver: bool,
    /// `-MD`/`-MMD` inside `-Wp,`.
    pub deps_wp: bool,
    /// `-MF` was given.
    pub deps_file_given: bool,
    /// `-MT` or `-MQ` was given.
    pub deps_target_given: bool,
    /// The dependency file named by `-MF` or `-Wp,-MD,file` (the last one).
    pub deps_file: Option<String>,
    /// The dependency output leaves system headers out (`-MMD`).
    pub deps_user_only: bool,
    /// `-I` directories given inside `-Wp,` (searched before the driver's).
    pub wp_include_dirs: Vec<String>,
    /// Include directories in gcc's search order: `-iquote`, `-I`,
    /// `-isystem`, `-idirafter` (each list in command-line order).
    pub include_dirs: Vec<String>,
    /// Debug info is requested (the last level-setting `-g` flag is not level 0).
    pub debug: bool,
    /// `-include` files (a precompiled `.gch` beside one keeps the compile local).
    pub forced_includes: Vec<String>,
    /// Arguments for the local preprocess run: all but `-c` and `-o X`.
    pub preprocess: Vec<OsString>,
    /// Arguments for the agent, normalized to one argument per flag where
    /// gcc allows it (`-DX`, `--param=x`), except `-x` which stays `-x`, `lang`.
    pub remote: Vec<String>,
    /// `-D`/`-U` found inside `-Wp,`: the driver passes them after every
    /// plain `-D`/`-U`, so they go at the end of `remote`.
    pub remote_wp_macros: Vec<String>,
    /// Arguments for an agent that compiles the unit from its inputs at
    /// their real paths: `remote` with the preprocessor's own options in
    /// their places (`-I`, `-include`, `-nostdinc`, ... each value as an
    /// argument of its own), without the action, the output, the input and
    /// the dependency output.
    pub inputs_args: Vec<String>,
    /// Why the unit cannot be sent as its inputs, if it cannot.
    pub inputs_refused: Option<&'static str>,
    /// Link-time optimization is on (the last of `-flto*` / `-fno-lto`).
    pub lto: bool,
    /// A pedantic flag is named (`-pedantic*`, `-Wpedantic`, `-Werror=pedantic`,
    /// `-Wno-pedantic`).
    pub pedantic: bool,
}

/// Options whose value may be the next argument or joined (`-Ifoo`), that
/// only the preprocessor needs. Longest names first: `-iwithprefixbefore`
/// must not be read as `-iwithprefix` + `before...`.
const PREPROCESSOR_PATH_OPTIONS: &[&str] = &[
    "-iwithprefixbefore",
    "-iwithprefix",
    "-idirafter",
    "-imultilib",
    "-isysroot",
    "-isystem",
    "-iprefix",
    "-iquote",
    "-imacros",
    "-include",
    "--sysroot",
    "-I",
    "-A",
];

/// Options only the linker reads; gcc ignores them with `-c`, silently.
const LINK_ONLY_FLAGS: &[&str] = &[
    "-shared",
    "-static",
    "-static-pie",
    "-static-libgcc",
    "-static-libstdc++",
    "-rdynamic",
    "-pie",
    "-no-pie",
    "-nostdlib",
    "-nodefaultlibs",
    "-nostartfiles",
    "-s",
];

/// Options that keep a compile local, matched exactly, with why.
const LOCAL_EXACT: &[(&str, &str)] = &[
    ("-E", "preprocessing only"),
    ("-S", "assembly output"),
    ("-M", "dependency output only"),
    ("-MM", "dependency output only"),
    ("-v", "verbose driver output"),
    ("-###", "driver dry run"),
    ("-H", "prints the include tree"),
    ("-C", "keeps comments in preprocessor output"),
    ("-CC", "keeps comments in preprocessor output"),
    ("-P", "preprocessor output option"),
    ("-wrapper", "runs the compiler under a wrapper"),
    ("-Xclang", "passes raw frontend options"),
    ("-Xassembler", "passes assembler options"),
    ("-Xpreprocessor", "passes raw preprocessor options"),
    ("-mllvm", "passes raw backend options"),
    ("-aux-info", "writes an extra output file"),
    ("-fsyntax-only", "writes no object"),
    ("-gsplit-dwarf", "writes an extra output file"),
    ("-ftest-coverage", "profiling"),
    ("--coverage", "profiling"),
    ("-coverage", "profiling"),
    ("-fbranch-probabilities", "reads profile data"),
    ("-fstack-usage", "writes an extra output file"),
    ("-frecord-gcc-switches", "records the command line, which differs remotely"),
    ("-frecord-command-line", "records the command line, which differs remotely"),
    ("-grecord-command-line", "records the command line, which differs remotely"),
    ("-fdirectives-only", "preprocessor mode ccroute uses itself"),
    ("-fno-directives-only", "preprocessor mode ccroute uses itself"),
    ("-fpreprocessed", "input is already preprocessed"),
    ("-frewrite-includes", "preprocessor mode ccroute uses itself"),
    ("-fpch-preprocess", "precompiled headers"),
    ("-frepo", "writes an extra output file"),
    ("-Wunused-macros", "gcc cannot combine it with -fdirectives-only"),
    ("-traditional", "traditional preprocessing"),
    ("-traditional-cpp", "traditional preprocessing"),
    ("-no-canonical-prefixes", "changes how the driver finds its parts"),
    ("-p", "profiling"),
    ("-pg", "profiling"),
    ("-Q", "prints compiler statistics"),
    ("-target", "cross-compiles for another target"),
    ("-arch", "cross-compiles for another target"),
    ("--version", "prints the version"),
    ("-pass-exit-codes", "changes the driver's exit status"),
];

/// Option prefixes that keep a compile local, with why.
const LOCAL_PREFIX: &[(&str, &str)] = &[
    ("-fplugin", "loads a compiler plugin"),
    ("-fdump-", "writes extra output files"),
    ("-fprofile-", "profiling"),
    ("-fauto-profile", "profiling"),
    ("-fcallgraph-info", "writes an extra output file"),
    ("-fsave-optimization-record", "writes an extra output file"),
    ("-fsanitize-blacklist", "names a file"),
    ("-fsanitize-ignorelist", "names a file"),
    ("-fsanitize-coverage-allowlist", "names a file"),
    ("-fsanitize-coverage-blocklist", "names a file"),
    ("-fcompare-debug", "compiles twice and writes extra files"),
    ("-fmodule", "modules need files beside the source"),
    ("-fcxx-modules", "modules need files beside the source"),
    ("-fdiagnostics-format=json-file", "writes an extra output file"),
    ("-fdiagnostics-format=sarif-file", "writes an extra output file"),
    ("-save-temps", "writes extra output files"),
    ("-specs", "reads a driver specs file"),
    ("--specs", "reads a driver specs file"),
    ("-B", "changes where the driver finds its parts"),
    ("-print-", "prints driver information"),
    ("--print", "prints driver information"),
    ("-dump", "driver information or dump names"),
    ("--help", "prints help"),
    ("--target", "cross-compiles for another target"),
    ("-iplugindir", "loads a compiler plugin"),
    ("-time", "prints timings"),
    ("-Wa,", "passes assembler options"),
    ("-Xlinker", "passes linker options"),
    ("@", "reads a response file"),
];

/// `-g` flags that do not set the debug level.
fn is_debug_level_flag(arg: &str) -> bool {
    const NOT_LEVEL: &[&str] = &[
        "-gno-",
        "-gz",
        "-gcolumn-info",
        "-gstrict-dwarf",
        "-grecord-gcc-switches",
        "-gstatement-frontiers",
        "-gvariable-location-views",
        "-ginline-points",
        "-gdescribe-dies",
        "-ginternal-reset-location-views",
        "-gas-loc-support",
        "-gas-locview-support",
        "-gpubnames",
        "-ggnu-pubnames",
        "-gsimple-template-names",
        "-gembed-source",
    ];
    arg.starts_with("-g") && !NOT_LEVEL.iter().any(|p| arg.starts_with(p))
}

/// Whether a level-setting `-g` flag turns debug info off (`-g0`, `-ggdb0`, ...).
fn is_debug_off(arg: &str) -> bool {
    arg.ends_with('0') && !arg.ends_with("10") && !arg.starts_with("-gdwarf")
}

fn local(arg: &str, why: &'static str) -> LocalReason {
    LocalReason::Option { arg: arg.to_owned(), why }
}

/// Takes the value of an option that may be separate (`-o x`) or joined
/// (`-ox`): `name` is the option, `arg` the argument that matched it.
fn take_value<'a>(
    name: &str,
    arg: &'a str,
    rest: &mut std::slice::Iter<'a, OsString>,
    preprocess: &mut Vec<OsString>,
    keep_for_preprocess: bool,
) -> Result<&'a str, LocalReason> {
    if arg.len() > name.len() {
        let v = &arg[name.len()..];
        // `--sysroot=x` and `--param=x` spell the joined form with `=`.
        return Ok(if name.starts_with("--") { v.strip_prefix('=').unwrap_or(v) } else { v });
    }
    let Some(next) = rest.next() else {
        return Err(LocalReason::MissingValue(name.to_owned()));
    };
    let value = next.to_str().ok_or(LocalReason::NotUtf8)?;
    if keep_for_preprocess {
        preprocess.push(next.clone());
    }
    Ok(value)
}

/// Reads the arguments of one compiler invocation (without argv\[0\]).
///
/// # Errors
/// The first reason the compile must run locally.
pub(crate) fn scan(family: Family, args: &[OsString]) -> Result<Scan, LocalReason> {
    let mut s = Scan::default();
    let mut lang: Option<Language> = None;
    let mut rest = args.iter();
    let (mut quote_dirs, mut plain_dirs, mut system_dirs, mut after_dirs) = (vec![], vec![], vec![], vec![]);
    while let Some(raw) = rest.next() {
        let arg = raw.to_str().ok_or(LocalReason::NotUtf8)?;
        let pp = &mut s.preprocess;

        if arg.is_empty() {
            return Err(LocalReason::Unrecognized(String::new()));
        }
        if !arg.starts_with('-') && !arg.starts_with('@') {
            pp.push(raw.clone());
            let input_lang = lang.or_else(|| language_of_path(raw));
            if input_lang.is_none() {
                return Err(LocalReason::NotSource(arg.to_owned()));
            }
            s.inputs.push((arg.to_owned(), lang));
            continue;
        }
        if arg == "-" {
            return Err(LocalReason::StdinInput);
        }
        if let Some((_, why)) = LOCAL_EXACT.iter().find(|(name, _)| *name == arg) {
            return Err(local(arg, why));
        }
        if arg.strip_prefix("-Wa,").is_some_and(super::spec::assembler_options_remote) {
            pp.push(raw.clone());
            s.remote.push(arg.to_owned());
            s.inputs_args.push(arg.to_owned());
            continue;
        }
        if let Some((_, why)) = LOCAL_PREFIX.iter().find(|(p, _)| arg.starts_with(p)) {
            return Err(local(arg, why));
        }

        // The action and the output: never in the preprocess run's arguments.
        if arg == "-c" {
            s.compile = true;
            continue;
        }
        if arg.starts_with("-o") {
            if s.output.is_some() {
                return Err(local(arg, "more than one output"));
            }
            s.output = Some(take_value("-o", arg, &mut rest, pp, false)?.to_owned());
            continue;
        }

        pp.push(raw.clone());
        if arg.starts_with("-x") {
            let v = take_value("-x", arg, &mut rest, pp, true)?;
            lang = language_of_x(v).map_err(|()| LocalReason::Language(v.to_owned()))?;
            if !s.inputs.is_empty() {
                s.x_after_input = true;
            }
            s.remote.push("-x".to_owned());
            s.remote.push(v.to_owned());
            s.inputs_args.extend(["-x".to_owned(), v.to_owned()]);
        } else if arg.starts_with("-D") || arg.starts_with("-U") {
            let name = &arg[..2];
            let v = take_value(name, arg, &mut rest, pp, true)?;
            s.remote.push(format!("{name}{v}"));
            s.inputs_args.push(format!("{name}{v}"));
        } else if let Some(name) = PREPROCESSOR_PATH_OPTIONS.iter().find(|n| arg.starts_with(*n)) {
            let v = take_value(name, arg, &mut rest, pp, true)?;
            match *name {
                "-include" => s.forced_includes.push(v.to_owned()),
                "-iquote" => quote_dirs.push(v.to_owned()),
                "-I" => plain_dirs.push(v.to_owned()),
                "-isystem" => system_dirs.push(v.to_owned()),
                "-idirafter" => after_dirs.push(v.to_owned()),
                _ => {}
            }
            match *name {
                "--sysroot" => s.inputs_args.push(format!("--sysroot={v}")),
                "-A" => s.inputs_refused = Some("-A asserts a predicate"),
                _ => s.inputs_args.extend([(*name).to_owned(), v.to_owned()]),
            }
        } else if matches!(arg, "-nostdinc" | "-nostdinc++" | "-I-") {
            // Preprocessor-only: nothing for an agent compiling text.
            s.inputs_args.push(arg.to_owned());
        } else if matches!(arg, "-MP" | "-MG" | "-pipe") {
            // Preprocessor-only (or, for -pipe, driver-only): nothing for the agent.
        } else if matches!(arg, "-MD" | "-MMD") {
            s.deps_driver = true;
            s.deps_user_only = arg == "-MMD";
        } else if let Some(name) = ["-MF", "-MT", "-MQ"].iter().find(|n| arg.starts_with(*n)) {
            let v = take_value(name, arg, &mut rest, pp, true)?;
            if *name == "-MF" {
                s.deps_file_given = true;
                s.deps_file = Some(v.to_owned());
            } else {
                s.deps_target_given = true;
            }
        } else if arg.starts_with("-M") {
            return Err(LocalReason::Unrecognized(arg.to_owned()));
        } else if let Some(list) = arg.strip_prefix("-Wp,") {
            scan_wp(arg, list, &mut s)?;
        } else if arg.starts_with("-Wl,") || arg.starts_with("-L") || arg.starts_with("-l") {
            if arg == "-L" || arg == "-l" {
                take_value(arg, arg, &mut rest, &mut s.preprocess, true)?;
            }
        } else if LINK_ONLY_FLAGS.contains(&arg) {
        } else if arg == "--param" || arg.starts_with("--param=") {
            let v = take_value("--param", arg, &mut rest, pp, true)?;
            s.remote.push(format!("--param={v}"));
            s.inputs_args.push(format!("--param={v}"));
        } else if arg.starts_with("-g") {
            if is_debug_level_flag(arg) {
                s.debug = !is_debug_off(arg);
            }
            s.remote.push(arg.to_owned());
            s.inputs_args.push(arg.to_owned());
        } else if arg.starts_with("-f") {
            if arg.starts_with("-fopt-info") && arg.contains('=') {
                return Err(local(arg, "writes an extra output file"));
            }
            if arg.starts_with("-fuse-ld=") {
                continue;
            }
            if arg == "-flto" || arg.starts_with("-flto=") {
                s.lto = true;
            } else if arg == "-fno-lto" {
                s.lto = false;
            }
            s.remote.push(arg.to_owned());
            s.inputs_args.push(arg.to_owned());
        } else if arg.starts_with("-m") {
            if arg.ends_with("=native") {
                return Err(local(arg, "depends on the local CPU"));
            }
            s.remote.push(arg.to_owned());
            s.inputs_args.push(arg.to_owned());
        } else if arg.starts_with("-stdlib=") && family == Family::Clang {
            // Only picks include and library directories: only the inputs need it.
            s.inputs_args.push(arg.to_owned());
        } else if arg.starts_with("-O")
            || arg.starts_with("-W")
            || arg.starts_with("-std=")
            || arg.starts_with("-pedantic")
            || matches!(arg, "-w" | "-ansi" | "-pthread" | "-undef" | "-trigraphs")
        {
            // Any mention counts, `-Wno-pedantic` too: how a later flag
            // undoes an earlier one differs between gcc's warning kinds.
            if arg.starts_with("-pedantic") || arg.ends_with("pedantic") {
                s.pedantic = true;
            }
            s.remote.push(arg.to_owned());
            s.inputs_args.push(arg.to_owned());
        } else {
            return Err(LocalReason::Unrecognized(arg.to_owned()));
        }
    }
    let wp_macros = s.remote_wp_macros.clone();
    s.inputs_args.extend(wp_macros);
    if !s.wp_include_dirs.is_empty() {
        s.inputs_refused = Some("-Wp,-I");
    }
    let wp_dirs = std::mem::take(&mut s.wp_include_dirs);
    s.include_dirs = [quote_dirs, wp_dirs, plain_dirs, system_dirs, after_dirs].concat();
    Ok(s)
}

/// `-Wp,a,b,c` hands `a b c` to the preprocessor. Dependency files and macro
/// definitions are understood; anything else keeps the compile local.
fn scan_wp(arg: &str, list: &str, s: &mut Scan) -> Result<(), LocalReason> {
    let mut items = list.split(',');
    while let Some(item) = items.next() {
        match item {
            "-MD" | "-MMD" => {
                let Some(file) = items.next().filter(|f| !f.is_empty()) else {
                    return Err(local(arg, "dependency flag without a file"));
                };
                s.deps_wp = true;
                s.deps_user_only = item == "-MMD";
                s.deps_file = Some(file.to_owned());
            }
            "-MP" => {}
            _ if item.len() > 2 && (item.starts_with("-D") || item.starts_with("-U")) => {
                s.remote_wp_macros.push(item.to_owned());
            }
            _ if item.len() > 2 && item.starts_with("-I") => s.wp_include_dirs.push(item[2..].to_owned()),
            _ => return Err(local(arg, "unsupported preprocessor option")),
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn ok(args: &[&str]) -> Scan {
        match scan(Family::Gnu, &os(args)) {
            Ok(s) => s,
            Err(e) => panic!("{args:?}: {e}"),
        }
    }

    fn reason(args: &[&str]) -> LocalReason {
        match scan(Family::Gnu, &os(args)) {
            Ok(s) => panic!("{args:?} scanned as remote-capable: {s:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn kubecc_basic_command() {
        let s = ok(&["-Werror", "-g", "-O2", "-MD", "-W", "-Wall", "-o", "src/test.o", "-c", "src/test.c"]);
        assert!(s.compile);
        assert_eq!(s.output.as_deref(), Some("src/test.o"));
        assert_eq!(s.inputs, vec![("src/test.c".to_owned(), None)]);
        assert!(s.deps_driver && s.debug);
        assert_eq!(s.remote, ["-Werror", "-g", "-O2", "-W", "-Wall"]);
        assert_eq!(s.preprocess, os(&["-Werror", "-g", "-O2", "-MD", "-W", "-Wall", "src/test.c"]));
    }

    #[test]
    fn joined_and_split_values_normalize() {
        let s = ok(&[
            "-D",
            "A=1",
            "-DB",
            "-U",
            "C",
            "-I",
            "inc",
            "-Iinc2",
            "-isystem",
            "sys",
            "-include",
            "x.h",
            "--param",
            "l1-cache-size=8",
            "--param=max-inline-insns-auto=3",
            "-c",
            "a.c",
        ]);
        assert_eq!(s.remote, ["-DA=1", "-DB", "-UC", "--param=l1-cache-size=8", "--param=max-inline-insns-auto=3"]);
        assert_eq!(s.forced_includes, ["x.h"]);
        assert_eq!(s.preprocess.len(), 16);
    }

    #[test]
    fn remote_drops_local_only_flags() {
        let s = ok(&[
            "-nostdinc",
            "-iquote",
            "q",
            "-idirafter",
            "d",
            "-iprefix",
            "p",
            "-iwithprefix",
            "w",
            "-iwithprefixbefore",
            "b",
            "--sysroot=/s",
            "--sysroot",
            "/t",
            "-isysroot",
            "/u",
            "-imacros",
            "m.h",
            "-MD",
            "-MMD",
            "-MF",
            "a.d",
            "-MTt",
            "-MQ",
            "q",
            "-MP",
            "-MG",
            "-Wp,-MD,x.d",
            "-lm",
            "-L",
            "lib",
            "-Wl,-z,now",
            "-shared",
            "-pipe",
            "-fuse-ld=gold",
            "-c",
            "a.c",
            "-o",
            "a.o",
        ]);
        assert!(s.remote.is_empty(), "{:?}", s.remote);
        assert!(s.deps_driver && s.deps_wp && s.deps_file_given && s.deps_target_given);
    }

    #[test]
    fn remote_keeps_compile_flags_in_order() {
        let s = ok(&[
            "-std=c11",
            "-O3",
            "-g3",
            "-fPIC",
            "-march=x86-64-v2",
            "-Wextra",
            "-w",
            "-ansi",
            "-pedantic-errors",
            "-pthread",
            "-x",
            "c",
            "a.c",
            "-c",
        ]);
        assert_eq!(
            s.remote,
            [
                "-std=c11",
                "-O3",
                "-g3",
                "-fPIC",
                "-march=x86-64-v2",
                "-Wextra",
                "-w",
                "-ansi",
                "-pedantic-errors",
                "-pthread",
                "-x",
                "c"
            ]
        );
    }

    #[test]
    fn joined_x_is_read_from_the_same_argument() {
        // kubecc inspected the next argument for `-xc++` (its C10).
        let s = ok(&["-xc++", "a.c", "-c"]);
        assert_eq!(s.inputs, vec![("a.c".to_owned(), Some(Language::Cxx))]);
        assert_eq!(s.remote, ["-x", "c++"]);
        assert_eq!(ok(&["-xassembler", "a.c", "-c"]).inputs[0].1, Some(Language::Assembler));
        assert!(matches!(reason(&["-xklingon", "a.c"]), LocalReason::Language(v) if v == "klingon"));
    }

    #[test]
    fn debug_level_follows_the_last_g_flag() {
        assert!(ok(&["-g", "-c", "a.c"]).debug);
        assert!(ok(&["-ggdb3", "-c", "a.c"]).debug);
        assert!(ok(&["-gdwarf-4", "-c", "a.c"]).debug);
        assert!(!ok(&["-g", "-g0", "-c", "a.c"]).debug);
        assert!(!ok(&["-gz", "-c", "a.c"]).debug);
        assert!(!ok(&["-gno-column-info", "-c", "a.c"]).debug);
        assert!(ok(&["-g0", "-g", "-gno-column-info", "-c", "a.c"]).debug);
        assert!(!ok(&["-c", "a.c"]).debug);
    }

    #[test]
    fn local_only_options() {
        for (args, needle) in [
            (&["-E", "a.c"][..], "-E"),
            (&["-S", "a.c"], "-S"),
            (&["-M", "a.c"], "-M"),
            (&["-MM", "a.c"], "-MM"),
            (&["-march=native", "-c", "a.c"], "-march=native"),
            (&["-mtune=native", "-c", "a.c"], "-mtune=native"),
            (&["-mcpu=native", "-c", "a.c"], "-mcpu=native"),
            (&["-specs=x", "-c", "a.c"], "-specs=x"),
            (&["-B/x", "-c", "a.c"], "-B/x"),
            (&["-B", "/x", "-c", "a.c"], "-B"),
            (&["-wrapper", "gdb", "-c", "a.c"], "-wrapper"),
            (&["-fplugin=x.so", "-c", "a.c"], "-fplugin=x.so"),
            (&["-fplugin-arg-x-y", "-c", "a.c"], "-fplugin-arg-x-y"),
            (&["-Xclang", "-x", "-c", "a.c"], "-Xclang"),
            (&["-Wa,-adhln", "-c", "a.c"], "-Wa,-adhln"),
            (&["-Wa,--noexecstack,-adhln", "-c", "a.c"], "-Wa,--noexecstack,-adhln"),
            (&["@rsp", "-c", "a.c"], "@rsp"),
            (&["-fprofile-arcs", "-c", "a.c"], "-fprofile-arcs"),
            (&["-fprofile-generate", "-c", "a.c"], "-fprofile-generate"),
            (&["-fprofile-use=x", "-c", "a.c"], "-fprofile-use=x"),
            (&["-ftest-coverage", "-c", "a.c"], "-ftest-coverage"),
            (&["--coverage", "-c", "a.c"], "--coverage"),
            (&["-fauto-profile=x", "-c", "a.c"], "-fauto-profile=x"),
            (&["-save-temps", "-c", "a.c"], "-save-temps"),
            (&["-save-temps=obj", "-c", "a.c"], "-save-temps=obj"),
            (&["-fdump-tree-all", "-c", "a.c"], "-fdump-tree-all"),
            (&["-gsplit-dwarf", "-c", "a.c"], "-gsplit-dwarf"),
            (&["-fstack-usage", "-c", "a.c"], "-fstack-usage"),
            (&["-fcallgraph-info=su", "-c", "a.c"], "-fcallgraph-info=su"),
            (&["-fsave-optimization-record", "-c", "a.c"], "-fsave-optimization-record"),
            (&["-fopt-info-vec=x.txt", "-c", "a.c"], "-fopt-info-vec=x.txt"),
            (&["-aux-info", "x", "-c", "a.c"], "-aux-info"),
            (&["-fsyntax-only", "a.c"], "-fsyntax-only"),
            (&["-Wunused-macros", "-c", "a.c"], "-Wunused-macros"),
            (&["-fsanitize-ignorelist=x", "-c", "a.c"], "-fsanitize-ignorelist=x"),
            (&["-frecord-gcc-switches", "-c", "a.c"], "-frecord-gcc-switches"),
            (&["-v", "-c", "a.c"], "-v"),
            (&["-print-search-dirs"], "-print-search-dirs"),
            (&["-dumpbase", "x", "-c", "a.c"], "-dumpbase"),
            (&["-Xlinker", "x", "-c", "a.c"], "-Xlinker"),
        ] {
            let r = reason(args);
            assert!(r.to_string().contains(needle), "{args:?}: {r}");
        }
    }

    #[test]
    fn wp_forms() {
        let s = ok(&["-Wp,-MD,dir/x.d", "-DA", "-Wp,-D_FORTIFY_SOURCE=2,-UB", "-Wp,-Iinc", "-c", "a.c"]);
        assert!(s.deps_wp && !s.deps_driver);
        assert_eq!(s.remote, ["-DA"]);
        assert_eq!(s.remote_wp_macros, ["-D_FORTIFY_SOURCE=2", "-UB"]);
        assert!(reason(&["-Wp,-MD", "-c", "a.c"]).to_string().contains("-Wp,-MD"));
        assert!(reason(&["-Wp,-dM", "-c", "a.c"]).to_string().contains("-Wp,-dM"));
    }

    #[test]
    fn inputs_and_odd_arguments() {
        assert!(matches!(reason(&["-c", "-"]), LocalReason::StdinInput));
        assert!(matches!(reason(&["-c", "a.c", "b.o"]), LocalReason::NotSource(p) if p == "b.o"));
        assert!(matches!(reason(&["-c", ""]), LocalReason::Unrecognized(_)));
        assert!(matches!(reason(&["-o"]), LocalReason::MissingValue(_)));
        assert!(matches!(reason(&["-c", "a.c", "-I"]), LocalReason::MissingValue(_)));
        assert!(matches!(reason(&["--frobnicate", "-c", "a.c"]), LocalReason::Unrecognized(_)));
        assert!(matches!(reason(&["-o", "a.o", "-o", "b.o", "-c", "a.c"]), LocalReason::Option { .. }));
        // With -x, any bare argument is a source of that language.
        assert_eq!(ok(&["-x", "c", "file.txt", "-c"]).inputs.len(), 1);
        assert!(ok(&["a.c", "-x", "c++", "-c"]).x_after_input);
        let two = ok(&["a.c", "b.cc", "-c"]);
        assert_eq!(two.inputs.len(), 2);
    }

    #[test]
    fn non_utf8_is_local() {
        use std::os::unix::ffi::OsStringExt;
        let args = vec![OsString::from("-c"), OsString::from_vec(vec![b'a', 0xff, b'.', b'c'])];
        assert!(matches!(scan(Family::Gnu, &args), Err(LocalReason::NotUtf8)));
    }

    #[test]
    fn inputs_args_keep_the_preprocessor_options_in_order_and_drop_outputs() {
        let s = ok(&[
            "-Iinc",
            "-c",
            "-DX=1",
            "-isystem",
            "/opt/x",
            "-MD",
            "-MF",
            "a.d",
            "-MT",
            "a.o",
            "-MP",
            "-o",
            "a.o",
            "-include",
            "cfg.h",
            "-nostdinc",
            "--sysroot=/sr",
            "-O2",
            "-g",
            "a.c",
            "-Wp,-DLATE",
            "-UY",
            "-Wall",
            "-std=c11",
            "-pipe",
        ]);
        assert_eq!(
            s.inputs_args,
            [
                "-I",
                "inc",
                "-DX=1",
                "-isystem",
                "/opt/x",
                "-include",
                "cfg.h",
                "-nostdinc",
                "--sysroot=/sr",
                "-O2",
                "-g",
                "-UY",
                "-Wall",
                "-std=c11",
                "-DLATE",
            ]
        );
        assert_eq!(s.inputs_refused, None);
        assert!(ok(&["-c", "-Wp,-Iearly", "a.c"]).inputs_refused.is_some());
        assert!(ok(&["-c", "-A", "sys=linux", "a.c"]).inputs_refused.is_some());
    }
}
