//! End-to-end checks with the real compilers: a command compiled the ccroute
//! way (classify → local preprocess → post-process → agent layout in a
//! separate scratch dir → agent compile) must write the same object, the same
//! dependency files and the same diagnostics as the plain local command.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

const HEADER: &str = "#ifndef A_H\n#define A_H\n#define SQUARE(x) ((x) * (x))\nstatic inline int twice(int v) { return v + v; }\n#endif\n";
const SOURCE_C: &str = "#include <stdio.h>\n#include \"a.h\"\n#ifdef X\nint x_val = X;\n#endif\nconst char *base = __BASE_FILE__;\nint main(void) {\n    int q = SQUARE(3) + twice(2);\n    printf(\"%s %d\\n\", __FILE__, q);\n    return 0;\n}\n";
const SOURCE_CXX: &str = "#include <string>\n#include <vector>\n#include \"a.h\"\nnamespace { struct S { std::string s; S() : s(__FILE__) {} }; S global_s; }\ntemplate <class T> T add(T a, T b) { return a + b; }\nint run(std::vector<int> &v) { return add(v.at(0), SQUARE(2)) + twice(1); }\n";
const SOURCE_WARN: &str = "#include <stdio.h>\n#include <sys_w.h>\n#include \"a.h\"\n#warning a preprocessor warning\nint f(int a) {\n    int unused_var;\n\tint q = SQUARE(a);\n    if (a) return q;\n}\nint main(void) { printf(\"%s\\n\", __FILE__); return f(1); }\n";
/// llhttp's shape, reduced: an `#ifdef` indented inside a function body, whose
/// line marker `-fdirectives-only` writes indented too, and a function that is
/// not static (so that the lines after it reach the debug info).
const SOURCE_INDENTED: &str = concat!(
    "#include <stddef.h>\nint parse(const char *p, size_t n) {\n  int r = 0;\n  for (size_t i = 0; i < n; i++) {\n",
    // More than eight lines left out, or gcc fills the gap with blank lines.
    "      #ifdef __SSE4_2__\n",
    "      r += 2;\n      r += 2;\n      r += 2;\n      r += 2;\n      r += 2;\n      r += 2;\n",
    "      r += 2;\n      r += 2;\n      r += 2;\n      r += 2;\n      r += 2;\n      r += 2;\n",
    "      #endif\n      r += p[i];\n  }\n  return r;\n}\n",
);
const SYS_HEADER: &str =
    "static int sys_unused(void) { int u; return 1; }\nstatic inline int sys_bad(int a) { if (a) return 1; }\n";

/// What one way of compiling produced.
#[derive(Debug, PartialEq, Eq)]
struct Observed {
    status: i32,
    object: Option<Vec<u8>>,
    deps: Vec<(String, Vec<u8>)>,
    stderr: String,
}

struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    fn new() -> Project {
        let dir = tempfile::tempdir().unwrap();
        for (name, body) in [
            ("src/a.h", HEADER),
            ("src/a.c", SOURCE_C),
            ("src/b.cc", SOURCE_CXX),
            ("src/w.c", SOURCE_WARN),
            ("src/ind.c", SOURCE_INDENTED),
            ("sys/sys_w.h", SYS_HEADER),
        ] {
            let p = dir.path().join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, body).unwrap();
        }
        for d in ["obj", "build"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        Project { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Dependency files anywhere in the project, removed after reading.
    fn take_deps(&self) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![self.path().to_owned()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "d") {
                    out.push((p.strip_prefix(self.path()).unwrap().display().to_string(), std::fs::read(&p).unwrap()));
                    std::fs::remove_file(&p).unwrap();
                }
            }
        }
        out.sort();
        out
    }
}

fn subst(args: &[&str], root: &Path) -> Vec<OsString> {
    args.iter().map(|a| OsString::from(a.replace("{P}", root.to_str().unwrap()))).collect()
}

fn local_compile(compiler: &str, p: &Project, cwd: &Path, args: &[OsString], output: &Path) -> Observed {
    let out = Command::new(compiler).args(args).current_dir(cwd).output().unwrap();
    let object = std::fs::read(output).ok();
    let _ = std::fs::remove_file(output);
    Observed {
        status: out.status.code().unwrap_or(-1),
        object,
        deps: p.take_deps(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn remote_compile(compiler: &str, p: &Project, cwd: &Path, args: &[OsString]) -> (Observed, PathBuf) {
    let family = Family::of_compiler(Path::new(compiler));
    let plan = match classify(family, args, cwd, |_| None) {
        Classification::Remote(plan) => plan,
        Classification::Local(r) => {
            panic!("{args:?} classified local: {r}")
        }
    };
    let pre = Command::new(compiler).args(&plan.preprocess_args).current_dir(cwd).output().unwrap();
    assert!(pre.status.success(), "preprocess failed: {}", String::from_utf8_lossy(&pre.stderr));
    let text = plan.postprocess(&pre.stdout);
    if family == Family::Gnu {
        for f in &text.files {
            let path = cwd.join(std::str::from_utf8(f).unwrap());
            if let Ok(bytes) = std::fs::read(&path) {
                assert_eq!(find_unsafe_pragma(&bytes), None, "{}", path.display());
            }
        }
    }
    validate(&plan.spec).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let cmd = agent_command(&plan.spec, Path::new(compiler), scratch.path()).unwrap();
    cmd.write_inputs(&text.text).unwrap();
    let out = Command::new(&cmd.program).args(&cmd.args).current_dir(&cmd.cwd).output().unwrap();
    let object = std::fs::read(&cmd.object_path).ok();
    if let Some(o) = &object {
        std::fs::write(&plan.output, o).unwrap();
    }
    let mut stderr = String::from_utf8_lossy(&pre.stderr).into_owned();
    stderr.push_str(&String::from_utf8_lossy(&cmd.rewrite_output(&out.stderr)));
    let object = std::fs::read(&plan.output).ok();
    let _ = std::fs::remove_file(&plan.output);
    let outcome = Observed { status: out.status.code().unwrap_or(-1), object, deps: p.take_deps(), stderr };
    (outcome, plan.output)
}

/// Compiles `args` (with `{P}` standing for the project root) both ways from
/// `cwd_rel` and asserts the outcomes are the same.
fn same_both_ways(compiler: &str, cwd_rel: &str, args: &[&str]) {
    let p = Project::new();
    let cwd = p.path().join(cwd_rel);
    let args = subst(args, p.path());
    let (remote, output) = remote_compile(compiler, &p, &cwd, &args);
    let local = local_compile(compiler, &p, &cwd, &args, &output);
    assert_eq!(local.status, 0, "{}", local.stderr);
    assert!(local.object.is_some());
    assert_eq!(local.stderr, remote.stderr, "{compiler} {args:?}: diagnostics differ");
    assert_eq!(local.deps, remote.deps, "{compiler} {args:?}: dependency files differ");
    assert!(local.object == remote.object, "{compiler} {args:?}: objects differ");
}

fn have(compiler: &str) -> bool {
    Command::new(compiler).arg("--version").output().is_ok_and(|o| o.status.success())
}

const C_CASES: &[&[&str]] = &[
    &["-c", "src/a.c", "-o", "obj/a.o"],
    &["-g", "-c", "src/a.c", "-o", "obj/a.o"],
    &["-g", "-O2", "-c", "src/a.c", "-o", "obj/a.o"],
    &["-g3", "-c", "src/a.c", "-o", "obj/a.o"],
    &["-g3", "-O1", "-DX=1", "-UY", "-D", "Z", "-c", "src/a.c", "-o", "obj/a.o"],
    &["-g3", "-O2", "-include", "src/a.h", "-c", "src/a.c", "-o", "obj/a.o"],
    &["-g", "-Wp,-D_FORTIFY_SOURCE=2", "-O2", "-DX=2", "-c", "src/a.c", "-o", "obj/a.o"],
    &["-g", "-pthread", "-fPIC", "-std=gnu11", "-c", "src/a.c"],
    &["-g", "-c", "{P}/src/a.c", "-o", "obj/a.o", "-I{P}/src"],
    &["-g", "-ffile-prefix-map={P}=.", "-c", "src/a.c", "-o", "obj/a.o"],
    &["-g", "-fdebug-prefix-map={P}/src=/S", "-fmacro-prefix-map={P}=/M", "-c", "{P}/src/a.c", "-o", "obj/a.o"],
    &["-g", "-fdebug-prefix-map={P}=/all", "-fdebug-prefix-map={P}/obj=/o", "-c", "src/a.c", "-o", "obj/a.o"],
];

const DEP_CASES: &[&[&str]] = &[
    &["-MD", "-c", "src/a.c", "-o", "obj/a.o"],
    &["-MD", "-c", "src/a.c"],
    &["-MMD", "-MP", "-c", "src/a.c", "-o", "obj/a.o"],
    &["-MD", "-MF", "obj/x.d", "-MT", "foo", "-MQ", "b$r", "-c", "src/a.c", "-o", "obj/a.o"],
    &["-MD", "-MT", "t", "-c", "src/a.c", "-o", "obj/a$b.o"],
    &["-MMD", "-MF", "obj/y.d", "-c", "src/a.c", "-o", "obj/a.o"],
    &["-Wp,-MD,obj/w.d", "-c", "src/a.c", "-o", "obj/a.o"],
    &["-Wp,-MMD,obj/w.d", "-g", "-c", "src/a.c", "-o", "obj/a.o"],
];

#[test]
fn gcc_c_objects_are_byte_identical() {
    for args in C_CASES {
        same_both_ways("gcc", "", args);
    }
}

/// The object of libgit2's llhttp.c differed: its indented line markers kept
/// the client's absolute path while the others pointed into the scratch
/// mirror, so the line table named the main file twice.
#[test]
fn gcc_indented_line_markers_by_absolute_path() {
    for args in [
        &["-O2", "-g", "-c", "{P}/src/ind.c", "-o", "obj/ind.o"][..],
        &["-O2", "-g", "-msse4.2", "-c", "{P}/src/ind.c", "-o", "obj/ind.o"],
        &["-O2", "-g", "-c", "src/ind.c", "-o", "obj/ind.o"],
    ] {
        same_both_ways("gcc", "", args);
    }
}

#[test]
fn gcc_relative_input_above_cwd() {
    same_both_ways("gcc", "build", &["-g", "-c", "../src/a.c", "-o", "a.o"]);
    same_both_ways("gcc", "build", &["-g", "-O2", "-I../src", "-c", "../src/a.c", "-o", "../obj/a.o"]);
}

#[test]
fn gcc_dependency_files_are_byte_identical() {
    for args in DEP_CASES {
        same_both_ways("gcc", "", args);
    }
}

#[test]
fn gxx_objects_are_byte_identical() {
    for args in [
        &["-c", "src/b.cc", "-o", "obj/b.o"][..],
        &["-g", "-O2", "-c", "src/b.cc", "-o", "obj/b.o"],
        &["-g3", "-std=c++17", "-c", "{P}/src/b.cc", "-o", "obj/b.o", "-MD"],
    ] {
        same_both_ways("g++", "", args);
    }
}

#[test]
fn gcc_diagnostics_match_a_local_compile() {
    // -Wall warnings in the main file (with a tab), a #warning, warnings
    // hidden in a system header, with and without debug info and for an
    // absolute input.
    same_both_ways("gcc", "", &["-Wall", "-Wextra", "-isystem", "sys", "-c", "src/w.c", "-o", "obj/w.o"]);
    same_both_ways("gcc", "", &["-g", "-Wall", "-isystem", "{P}/sys", "-c", "{P}/src/w.c", "-o", "obj/w.o"]);
}

#[test]
fn clang_objects_are_byte_identical() {
    if !have("clang") {
        return crate::test_env::lacking("clang", "no clang in PATH");
    }
    // With -g (source checksums in the line table) and -Wp,-MD clang stays local.
    for args in
        C_CASES.iter().chain(DEP_CASES).filter(|a| !a.iter().any(|x| x.starts_with("-g") || x.starts_with("-Wp,")))
    {
        same_both_ways("clang", "", args);
    }
    same_both_ways("clang", "build", &["-O2", "-c", "../src/a.c", "-o", "a.o"]);
    // Not checked: clang diagnostics differ (a #warning prints in both runs,
    // and each run prints its own "N warnings generated").
}

#[test]
fn unsafe_pragmas_in_headers_are_found() {
    let p = Project::new();
    std::fs::write(
        p.path().join("src/m.h"),
        "#pragma push_macro(\"SQUARE\")\n#undef SQUARE\n#pragma pop_macro(\"SQUARE\")\n",
    )
    .unwrap();
    std::fs::write(p.path().join("src/m.c"), "#include \"m.h\"\nint v;\n").unwrap();
    let args = subst(&["-c", "src/m.c"], p.path());
    let Classification::Remote(plan) = classify(Family::Gnu, &args, p.path(), |_| None) else { panic!() };
    let pre = Command::new("gcc").args(&plan.preprocess_args).current_dir(p.path()).output().unwrap();
    let text = plan.postprocess(&pre.stdout);
    let hits: Vec<_> = text
        .files
        .iter()
        .filter_map(|f| std::fs::read(p.path().join(std::str::from_utf8(f).unwrap())).ok())
        .filter_map(|b| find_unsafe_pragma(&b))
        .collect();
    assert_eq!(hits, ["push_macro"]);
}
