//! The agent's allow-list for a received [`TaskSpec`].
//!
//! An agent compiles for peers it does not control, so it runs only flags
//! that change how the text compiles and name no file: optimization, debug,
//! code generation, warnings, macros, the language standard. Anything else —
//! plugins, other drivers' parts, response files, outputs, inputs, include
//! paths, dumps — is refused with the argument and why ([`RefusedArg`]), and
//! the consumerd compiles locally. Main item: [`validate`].

use ccroute_wire::TaskSpec;

/// A spec the agent will not run: which argument, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refused argument {arg:?}: {why}")]
pub struct RefusedArg {
    /// The argument (or input path, or cwd) as received.
    pub arg: String,
    /// Why it is refused.
    pub why: &'static str,
}

/// `-f` prefixes that are refused even though `-f` is allowed.
const REFUSED_F: &[(&str, &str)] = &[
    ("-fplugin", "loads a plugin"),
    ("-fdump", "writes dump files"),
    ("-fprofile", "reads or writes profile files"),
    ("-fauto-profile", "reads a profile file"),
    ("-fbranch-probabilities", "reads profile files"),
    ("-ftest-coverage", "writes coverage files"),
    ("-fstack-usage", "writes an extra file"),
    ("-fcallgraph-info", "writes an extra file"),
    ("-fsave-optimization-record", "writes an extra file"),
    ("-fsanitize-blacklist", "names a file"),
    ("-fsanitize-ignorelist", "names a file"),
    ("-fsanitize-coverage-allowlist", "names a file"),
    ("-fsanitize-coverage-blocklist", "names a file"),
    ("-fuse-ld", "linker option"),
    ("-fsyntax-only", "writes no object"),
    ("-fcompare-debug", "writes extra files"),
    ("-fdirectives-only", "would be recorded in the object"),
    ("-fpreprocessed", "would be recorded in the object"),
    ("-frewrite-includes", "preprocessor mode"),
    ("-fmodule", "reads module files"),
    ("-fdeps-", "writes an extra file"),
    ("-fdiagnostics-format=json-file", "writes an extra file"),
    ("-fdiagnostics-format=sarif-file", "writes an extra file"),
    ("-fpch", "precompiled headers"),
    ("-frepo", "writes an extra file"),
    ("-fltrans", "link-time optimization internals name files"),
    ("-fwpa", "link-time optimization internals name files"),
    ("-fresolution", "names a file"),
    ("-frecord-gcc-switches", "records the agent's command line"),
    ("-frecord-command-line", "records the agent's command line"),
];

fn refuse(arg: &str, why: &'static str) -> RefusedArg {
    RefusedArg { arg: arg.to_owned(), why }
}

fn check_arg(arg: &str) -> Result<(), &'static str> {
    if !arg.starts_with('-') {
        return Err(if arg.starts_with('@') { "response file" } else { "bare argument (an input or a value)" });
    }
    if arg.starts_with("-f") {
        if let Some((_, why)) = REFUSED_F.iter().find(|(p, _)| arg.starts_with(p)) {
            return Err(why);
        }
        if arg.starts_with("-fopt-info") && arg.contains('=') {
            return Err("writes an extra file");
        }
        return Ok(());
    }
    if arg.starts_with("-g") {
        return match arg {
            "-gsplit-dwarf" => Err("writes an extra file"),
            "-grecord-command-line" => Err("records the agent's command line"),
            _ => Ok(()),
        };
    }
    if arg.starts_with("-m") {
        if arg == "-mllvm" {
            return Err("passes raw backend options");
        }
        if arg.ends_with("=native") {
            return Err("depends on the agent's CPU");
        }
        return Ok(());
    }
    if arg.starts_with("-W") {
        if let Some(list) = arg.strip_prefix("-Wa,") {
            if super::spec::assembler_options_remote(list) {
                return Ok(());
            }
        }
        if arg.starts_with("-Wl,") || arg.starts_with("-Wa,") || arg.starts_with("-Wp,") {
            return Err("passes options to another tool");
        }
        return Ok(());
    }
    if (arg.starts_with("-D") || arg.starts_with("-U")) && arg.len() > 2 {
        return Ok(());
    }
    if arg.starts_with("-O")
        || arg.starts_with("-std=")
        || arg.starts_with("-pedantic")
        || arg.starts_with("--param=")
        || matches!(arg, "-w" | "-ansi" | "-pthread" | "-undef" | "-trigraphs")
    {
        return Ok(());
    }
    Err(match arg {
        "-o" => "names an output",
        "-c" | "-S" | "-E" => "the agent chooses the action",
        "-B" | "-wrapper" => "changes which programs run",
        "-Xclang" | "-Xlinker" | "-Xassembler" | "-Xpreprocessor" => "passes raw options to another tool",
        "-v" | "-###" => "driver diagnostics",
        "-save-temps" => "writes extra files",
        "-D" | "-U" => "takes the next argument as its value",
        _ if arg.starts_with("-specs") || arg.starts_with("--specs") => "reads a specs file",
        _ if arg.starts_with("-B") => "changes which programs run",
        _ if arg.starts_with("-I") || arg.starts_with("-i") || arg.starts_with("--sysroot") => {
            "names a file or directory"
        }
        _ if arg.starts_with("-L") || arg.starts_with("-l") => "names a file or directory",
        _ if arg.starts_with("-save-temps") => "writes extra files",
        _ if arg.starts_with("-print") || arg.starts_with("--print") => "driver query",
        _ if arg.starts_with("-dump") => "names an output",
        _ if arg.starts_with("-o") => "names an output",
        _ => "not on the allow-list",
    })
}

/// Checks a spec before the agent runs it.
///
/// # Errors
/// The first argument not on the allow-list, an unsafe `input_path`, or a
/// `cwd` that is not an absolute path.
pub fn validate(spec: &TaskSpec) -> Result<(), RefusedArg> {
    let mut args = spec.args.iter();
    while let Some(arg) = args.next() {
        if arg == "-x" {
            match args.next().map(String::as_str) {
                Some("c" | "c++") => continue,
                Some(other) => return Err(refuse(other, "language other than c or c++")),
                None => return Err(refuse(arg, "-x without a language")),
            }
        }
        if arg.starts_with("-x") {
            return Err(refuse(arg, "write the language as -x, lang"));
        }
        check_arg(arg).map_err(|why| refuse(arg, why))?;
    }
    check_input_path(&spec.input_path)?;
    for (name, value) in &spec.env {
        if !super::spec::DIAGNOSTIC_ENV.contains(&name.as_str()) {
            return Err(refuse(name, "not an environment variable the agent passes on"));
        }
        if !super::spec::env_value_ok(value) {
            return Err(refuse(value, "environment value is not short printable ASCII"));
        }
    }
    if let Some(cwd) = &spec.cwd {
        if !cwd.starts_with('/') || cwd.contains('\0') {
            return Err(refuse(cwd, "cwd is not an absolute path"));
        }
    }
    Ok(())
}

/// Preprocessor options whose value is the next argument, which a unit sent
/// as its inputs carries ([`super::args`] writes them so): in the sandbox
/// only the unit's own files exist, so a path there can only name one of them.
const INPUTS_PATH_OPTIONS: &[&str] = &[
    "-I",
    "-iquote",
    "-isystem",
    "-idirafter",
    "-include",
    "-imacros",
    "-iprefix",
    "-iwithprefix",
    "-iwithprefixbefore",
    "-isysroot",
    "-imultilib",
];

/// Checks a spec that carries its inputs ([`ccroute_wire::inputs`]): the
/// same allow-list as [`validate`], and besides it the preprocessor's own
/// options (include paths, forced includes, `--sysroot`, `-nostdinc`) and
/// the include-path variables, since the compile reads only the sandbox's
/// files; the working directory is required.
///
/// # Errors
/// As [`validate`], and a spec without inputs or a working directory.
pub fn validate_inputs(spec: &TaskSpec) -> Result<(), RefusedArg> {
    let Some(inputs) = &spec.inputs else {
        return Err(refuse("inputs", "the spec lists no inputs"));
    };
    if let Err(e) = inputs.validate() {
        return Err(RefusedArg { arg: e.to_string(), why: "the list of inputs is refused" });
    }
    let mut plain = Vec::with_capacity(spec.args.len());
    let mut args = spec.args.iter();
    while let Some(arg) = args.next() {
        if INPUTS_PATH_OPTIONS.contains(&arg.as_str()) {
            match args.next() {
                Some(v) if !v.contains('\0') && v.len() <= ccroute_wire::inputs::MAX_PATH => continue,
                _ => return Err(refuse(arg, "a path option without a usable path")),
            }
        }
        if matches!(arg.as_str(), "-nostdinc" | "-nostdinc++" | "-I-")
            || arg.strip_prefix("--sysroot=").is_some_and(|v| !v.is_empty() && !v.contains('\0'))
            || (arg.starts_with("-stdlib=") && arg.len() > 8)
        {
            continue;
        }
        plain.push(arg.clone());
    }
    let env: Vec<(String, String)> = spec
        .env
        .iter()
        .filter(|(k, v)| {
            !(super::plan::INCLUDE_ENV.contains(&k.as_str())
                && !v.contains('\0')
                && v.len() <= ccroute_wire::inputs::MAX_PATH)
        })
        .cloned()
        .collect();
    let Some(cwd) = &spec.cwd else {
        return Err(refuse("cwd", "a unit sent as its inputs names its working directory"));
    };
    if !ccroute_wire::inputs::path_ok(cwd) && cwd != "/" {
        return Err(refuse(cwd, "cwd is not an absolute normalised path"));
    }
    validate(&TaskSpec { args: plain, env, inputs: None, ..spec.clone() })
}

fn check_input_path(p: &str) -> Result<(), RefusedArg> {
    match super::spec::input_path_problem(p) {
        Some(why) => Err(refuse(p, why)),
        None => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn spec(args: &[&str], input: &str) -> TaskSpec {
        TaskSpec {
            args: args.iter().map(|s| s.to_string()).collect(),
            input_path: input.to_owned(),
            cwd: None,
            env: vec![],
            inputs: None,
        }
    }

    #[test]
    fn allows_compile_flags() {
        let ok = spec(
            &[
                "-O2",
                "-Os",
                "-g",
                "-g3",
                "-ggdb",
                "-fPIC",
                "-fno-omit-frame-pointer",
                "-fsanitize=address",
                "-march=x86-64-v3",
                "-mno-red-zone",
                "-Wall",
                "-Werror=format",
                "-Wno-unused",
                "-w",
                "-DX=1",
                "-DY",
                "-UZ",
                "-std=c++17",
                "-ansi",
                "-pedantic-errors",
                "-x",
                "c++",
                "--param=max-inline-insns-auto=10",
                "-pthread",
                "-ffile-prefix-map=/a=/b",
                "-fdebug-prefix-map=/c=",
                "-fmacro-prefix-map=/d=/e",
                "-fopt-info-vec",
                "-flto",
                "-Wa,--noexecstack",
                "-Wa,--compress-debug-sections=zlib,-mrelax-relocations=no",
            ],
            "src/a.cc",
        );
        assert_eq!(validate(&ok), Ok(()));
        for input in ["a.c", "./a.c", "../../x/a.c", "/abs/dir/a.c", "dir/sub/a.c"] {
            assert_eq!(validate(&spec(&[], input)), Ok(()), "{input}");
        }
    }

    #[test]
    fn refuses_hostile_specs_naming_the_argument() {
        for (args, named) in [
            (&["-fplugin=/tmp/evil.so"][..], "-fplugin=/tmp/evil.so"),
            (&["-fplugin-arg-evil-x=1"], "-fplugin-arg-evil-x=1"),
            (&["-B/tmp/evil"], "-B/tmp/evil"),
            (&["-B"], "-B"),
            (&["-specs=/tmp/evil.specs"], "-specs=/tmp/evil.specs"),
            (&["-wrapper"], "-wrapper"),
            (&["-Xclang"], "-Xclang"),
            (&["-Xlinker"], "-Xlinker"),
            (&["-Wl,-rpath,/x"], "-Wl,-rpath,/x"),
            (&["-Wa,-adhln=/tmp/x"], "-Wa,-adhln=/tmp/x"),
            (&["-Wa,--noexecstack,-adhln=/tmp/x"], "-Wa,--noexecstack,-adhln=/tmp/x"),
            (&["-Wa,@/etc/passwd"], "-Wa,@/etc/passwd"),
            (&["-Wp,-MD,/tmp/x"], "-Wp,-MD,/tmp/x"),
            (&["@/etc/passwd"], "@/etc/passwd"),
            (&["-o"], "-o"),
            (&["-o/tmp/x"], "-o/tmp/x"),
            (&["-c"], "-c"),
            (&["-S"], "-S"),
            (&["-E"], "-E"),
            (&["/etc/passwd"], "/etc/passwd"),
            (&["-I/etc"], "-I/etc"),
            (&["-include"], "-include"),
            (&["-isystem"], "-isystem"),
            (&["--sysroot=/"], "--sysroot=/"),
            (&["-L/x"], "-L/x"),
            (&["-lfoo"], "-lfoo"),
            (&["-save-temps"], "-save-temps"),
            (&["-save-temps=obj"], "-save-temps=obj"),
            (&["-fdump-tree-all"], "-fdump-tree-all"),
            (&["-fprofile-use=/x"], "-fprofile-use=/x"),
            (&["-fstack-usage"], "-fstack-usage"),
            (&["-fsanitize-ignorelist=/etc/x"], "-fsanitize-ignorelist=/etc/x"),
            (&["-fuse-ld=gold"], "-fuse-ld=gold"),
            (&["-fsyntax-only"], "-fsyntax-only"),
            (&["-fopt-info=/tmp/x"], "-fopt-info=/tmp/x"),
            (&["-gsplit-dwarf"], "-gsplit-dwarf"),
            (&["-march=native"], "-march=native"),
            (&["-v"], "-v"),
            (&["-print-prog-name=cc1"], "-print-prog-name=cc1"),
            (&["-dumpbase"], "-dumpbase"),
            (&["-dumpdir"], "-dumpdir"),
            (&["-D"], "-D"),
            (&["-x", "assembler"], "assembler"),
            (&["-x"], "-x"),
            (&["-xc"], "-xc"),
            (&["-fpreprocessed"], "-fpreprocessed"),
            (&[""], ""),
        ] {
            let err = validate(&spec(args, "a.c")).expect_err(named);
            assert_eq!(err.arg, named, "{args:?}");
            assert!(err.to_string().contains(&format!("{named:?}")), "{err}");
        }
    }

    #[test]
    fn refuses_unclean_input_paths() {
        for input in
            ["", "a\0.c", "src/../../etc/x.c", "/abs/../etc/x.c", "/..", "..", ".", "./", "src/./a.c", "dir/", "/"]
        {
            let err = validate(&spec(&[], input)).expect_err(input);
            assert_eq!(err.arg, input);
        }
        let mut s = spec(&[], "a.c");
        s.cwd = Some("relative".into());
        assert!(validate(&s).is_err());
    }
}
