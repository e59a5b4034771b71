//! The differential suite: many ordinary command shapes, each run once plainly
//! and once through ccroute (a consumerd that sends every unit it can to an
//! agent over the real scheduler), at the same path, in the same directory.
//! What a user can see must be the same: exit status, stdout, stderr, and
//! every file written, byte for byte. Each shape either goes remote or is one
//! that ccroute keeps local on purpose, named below with its reason; the test
//! fails on any difference and on any shape that goes another way than said.
//!
//! Twice: with an agent that can make the sandbox, where units go as their
//! inputs and compile at their real paths (so `-pedantic`, clang `-g` and
//! units whose text would not print the same diagnostics go remote too), and
//! with one that cannot, where units go as preprocessed text.
//!
//! The figures (shapes tried, sent remote, identical, kept local and why) are
//! printed at the end: `cargo test --test e2e_differential -- --nocapture`.
//!
//! Left out: shapes whose output differs between two plain runs (coverage
//! notes and `-fprofile-arcs` objects carry a time stamp); ccroute keeps
//! those local (`-fprofile-*`, `-ftest-coverage`, `--coverage`).

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{ccroute, files, Cluster};

/// Where a shape must end up.
#[derive(Debug, Clone, Copy)]
enum Way {
    /// Compiled by an agent.
    Remote,
    /// Kept local on purpose; the wrapper's reason contains this text.
    Local(&'static str),
}

struct Shape {
    compiler: &'static str,
    /// Relative to the project root.
    cwd: &'static str,
    /// `{P}` stands for the project root.
    args: &'static [&'static str],
    way: Way,
}

const fn remote(compiler: &'static str, args: &'static [&'static str]) -> Shape {
    Shape { compiler, cwd: "", args, way: Way::Remote }
}

const fn local(compiler: &'static str, args: &'static [&'static str], why: &'static str) -> Shape {
    Shape { compiler, cwd: "", args, way: Way::Local(why) }
}

const FILES: &[(&str, &str)] = &[
    ("src/a.h", "#ifndef A_H\n#define A_H\n#define SQUARE(x) ((x) * (x))\nstatic inline int twice(int v) { return v + v; }\n#endif\n"),
    ("src/main.c", "#include <stdio.h>\n#include \"a.h\"\n#ifdef X\nint x_val = X;\n#endif\nconst char *base = __BASE_FILE__;\nconst char *file = __FILE__;\nint main(void) {\n    printf(\"%d\\n\", SQUARE(3) + twice(2));\n    return 0;\n}\n"),
    ("src/warn.h", "static int in_header(int a) { int unused_in_header; if (a) return 1; }\n"),
    ("src/w.c", "#include \"warn.h\"\nint f(int a) {\n    int unused_var;\n    if (a) return in_header(a);\n}\n"),
    ("src/err.h", "int broken(void) { return undeclared_name; }\n"),
    ("src/e.c", "#include \"err.h\"\nint ok(void) { return 1; }\n"),
    ("src/ec.c", "int f(void) { return nope; }\n"),
    ("src/pw.c", "#warning a preprocessor warning\nint pw;\n"),
    ("src/q.c", "const char *msg = MSG;\nint n = N;\n"),
    ("src/ped.c", "int mul(int a, int b) { return a * b; }\n"),
    ("src/line.c", "int before;\n#line 100 \"grammar.y\"\nint g(void) { int unused_in_grammar; return 0; }\n"),
    ("src/grammar.y", "%%\n"),
    ("src/gen.c", "#line 7 \"absent.y\"\nint h(void) { int unused_gen; return 0; }\n"),
    ("src/g3w.c", "#include \"a.h\"\nint k(void) { int unused_g3; return SQUARE(2); }\n"),
    ("src/t.c", "int fn_tm(void) { return sizeof(__TIME__) + sizeof(__DATE__); }\n"),
    ("src/plain.txt.c", "int odd_name = 1;\n"),
    ("src/noext", "int no_extension = 2;\n"),
    ("src/b.cc", "#include <string>\n#include <vector>\n#include \"a.h\"\nstd::string s = __FILE__;\ntemplate <class T> T add(T a, T b) { return a + b; }\nint run(std::vector<int> &v) { return add(v.at(0), SQUARE(2)) + twice(1); }\n"),
    ("src/bw.cc", "#include <vector>\nint f(std::vector<int> &v) { int unused_cc; return v.size(); }\n"),
    ("src/pch.h", "#define FROM_PCH 1\n"),
    ("src/pc.c", "#include \"pch.h\"\nint p = FROM_PCH;\n"),
    ("src/ind.c", concat!(
        "int parse(const char *p, int n) {\n  int r = 0;\n  for (int i = 0; i < n; i++) {\n      #ifdef __SSE4_2__\n",
        "      r += 2;\n      r += 2;\n      r += 2;\n      r += 2;\n      r += 2;\n      r += 2;\n",
        "      r += 2;\n      r += 2;\n      r += 2;\n      r += 2;\n      r += 2;\n      r += 2;\n",
        "      #endif\n      r += p[i];\n  }\n  return r;\n}\n",
    )),
    ("inc/quote/qh.h", "#define QH 3\n"),
    ("inc/sys/sh.h", "static int sys_fn(void) { int unused_sys; return 1; }\n"),
    ("inc/after/ah.h", "#define AH 4\n"),
    ("src/paths.c", "#include \"qh.h\"\n#include <sh.h>\n#include <ah.h>\nint v = QH + AH;\nint u(void) { return sys_fn(); }\n"),
    ("build/.keep", ""),
];

/// Every shape, gcc and g++ first; clang's only where clang is installed.
fn shapes() -> Vec<Shape> {
    let mut v = vec![
        remote("gcc", &["-c", "src/main.c", "-o", "build/main.o"]),
        remote("gcc", &["-c", "src/main.c"]),
        remote("gcc", &["-c", "./src/main.c", "-o", "./build/main.o"]),
        remote("gcc", &["-c", "{P}/src/main.c", "-o", "{P}/build/main.o"]),
        remote("gcc", &["-O2", "-g", "-c", "{P}/src/main.c", "-o", "build/main.o"]),
        remote("gcc", &["-O2", "-g", "-c", "{P}/src/ind.c", "-o", "build/ind.o"]),
        remote("gcc", &["-O2", "-g", "-msse4.2", "-c", "{P}/src/ind.c", "-o", "build/ind.o"]),
        remote("gcc", &["-g", "-c", "link/main.c", "-o", "build/main.o", "-Ilink"]),
        remote("gcc", &["-g", "-c", "src/main.c", "-o", "build/main.o", "-Iinc-link/quote"]),
        remote("gcc", &["-MD", "-c", "src/main.c", "-o", "build/main.o"]),
        remote("gcc", &["-MMD", "-MP", "-c", "src/main.c", "-o", "build/main.o"]),
        remote(
            "gcc",
            &["-MD", "-MF", "build/x.d", "-MT", "tgt", "-MQ", "$q", "-c", "src/main.c", "-o", "build/main.o"],
        ),
        remote("gcc", &["-Wp,-MD,build/wp.d", "-c", "src/main.c", "-o", "build/main.o"]),
        local("gcc", &["-M", "src/main.c"], "dependency output only"),
        local("gcc", &["-MM", "-c", "src/main.c"], "dependency output only"),
        remote("gcc", &["-x", "c", "-c", "src/plain.txt.c", "-o", "build/p.o"]),
        remote("gcc", &["-x", "c", "-c", "src/noext", "-o", "build/n.o"]),
        remote("gcc", &["-include", "src/a.h", "-c", "src/main.c", "-o", "build/main.o"]),
        remote(
            "gcc",
            &[
                "-iquote",
                "inc/quote",
                "-isystem",
                "inc/sys",
                "-idirafter",
                "inc/after",
                "-Wall",
                "-c",
                "src/paths.c",
                "-o",
                "build/paths.o",
            ],
        ),
        remote("gcc", &["-DX=7", "-c", "src/main.c", "-o", "build/main.o"]),
        remote("gcc", &["-DMSG=\"hi there\"", "-DN=(1+2)", "-c", "src/q.c", "-o", "build/q.o"]),
        remote("gcc", &["-DMSG='\"q\"'", "-D", "N=1", "-c", "src/q.c", "-o", "build/q.o"]),
        local(
            "gcc",
            &["-DX=1", "-DX=2", "-c", "src/main.c", "-o", "build/main.o"],
            "the preprocessor printed diagnostics",
        ),
        local(
            "gcc",
            &["-Wp,-DX=2", "-DX=1", "-c", "src/main.c", "-o", "build/main.o"],
            "the preprocessor printed diagnostics",
        ),
        local("gcc", &["-c", "src/pw.c", "-o", "build/pw.o"], "the preprocessor printed diagnostics"),
        remote("gcc", &["-Wall", "-Wextra", "-c", "src/w.c", "-o", "build/w.o"]),
        remote("gcc", &["-Wall", "-Werror", "-c", "src/w.c", "-o", "build/w.o"]),
        remote("gcc", &["-Wall", "-fdiagnostics-color=always", "-c", "src/w.c", "-o", "build/w.o"]),
        remote("gcc", &["-Wall", "-fno-diagnostics-show-caret", "-c", "src/w.c", "-o", "build/w.o"]),
        remote("gcc", &["-c", "src/e.c", "-o", "build/e.o"]),
        remote("gcc", &["-c", "src/ec.c", "-o", "build/ec.o"]),
        remote("gcc", &["-c", "{P}/src/ec.c", "-o", "build/ec.o"]),
        local(
            "gcc",
            &["-Wall", "-c", "src/line.c", "-o", "build/line.o"],
            "the agent's diagnostics would not read as here",
        ),
        remote("gcc", &["-c", "src/line.c", "-o", "build/line.o"]),
        local(
            "gcc",
            &["-Wall", "-c", "src/gen.c", "-o", "build/gen.o"],
            "the agent's diagnostics would not read as here",
        ),
        remote("gcc", &["-g", "-c", "src/line.c", "-o", "build/line.o"]),
        remote("gcc", &["-g3", "-c", "src/main.c", "-o", "build/main.o"]),
        remote("gcc", &["-g3", "-O2", "-DX=3", "-c", "{P}/src/main.c", "-o", "build/main.o"]),
        local(
            "gcc",
            &["-g3", "-Wall", "-c", "src/g3w.c", "-o", "build/g3w.o"],
            "the agent's diagnostics would not read as here",
        ),
        remote("gcc", &["-g", "-ffile-prefix-map={P}=.", "-c", "{P}/src/main.c", "-o", "build/main.o"]),
        remote("gcc", &["-g", "-fdebug-prefix-map={P}/src=/S", "-c", "src/main.c", "-o", "build/main.o"]),
        remote("gcc", &["-g", "-fmacro-prefix-map={P}=/M", "-c", "{P}/src/main.c", "-o", "build/main.o"]),
        // LTO objects name a random seed unless one is given: plain runs differ among themselves.
        local("gcc", &["-flto", "-frandom-seed=x", "-c", "src/main.c", "-o", "build/main.o"], "-flto"),
        local("gcc", &["-flto=auto", "-g", "-frandom-seed=x", "-c", "src/main.c", "-o", "build/main.o"], "-flto"),
        remote("gcc", &["-flto", "-fno-lto", "-c", "src/main.c", "-o", "build/main.o"]),
        local("gcc", &["-std=c99", "-pedantic-errors", "-c", "src/ped.c", "-o", "build/ped.o"], "-pedantic"),
        local("gcc", &["-Wpedantic", "-Werror", "-c", "src/ped.c", "-o", "build/ped.o"], "-pedantic"),
        local("gcc", &["-pedantic", "-c", "src/main.c", "-o", "build/main.o"], "-pedantic"),
        remote("gcc", &["-std=c89", "-c", "src/ped.c", "-o", "build/ped.o"]),
        remote("gcc", &["-std=gnu17", "-O1", "-c", "src/main.c", "-o", "build/main.o"]),
        remote("gcc", &["-std=c11", "-fPIC", "-pthread", "-c", "src/main.c", "-o", "build/main.o"]),
        remote("gcc", &["-O2", "-g", "-Wa,--noexecstack", "-c", "src/main.c", "-o", "build/main.o"]),
        remote("gcc", &["-Wa,--compress-debug-sections=zlib", "-g", "-c", "src/main.c", "-o", "build/main.o"]),
        local(
            "gcc",
            &["-Wa,-adhln=build/listing.txt", "-c", "src/main.c", "-o", "build/main.o"],
            "passes assembler options",
        ),
        local("gcc", &["-gsplit-dwarf", "-c", "src/main.c", "-o", "build/main.o"], "-gsplit-dwarf"),
        local("gcc", &["-include", "src/pch.h", "-c", "src/pc.c", "-o", "build/pc.o"], "precompiled header"),
        // Compiled remotely (the agent's clock) and never cached.
        remote("gcc", &["-c", "src/t.c", "-o", "build/t.o"]),
        remote("g++", &["-c", "src/b.cc", "-o", "build/b.o"]),
        remote("g++", &["-O2", "-g", "-c", "{P}/src/b.cc", "-o", "build/b.o", "-MD"]),
        remote("g++", &["-std=c++17", "-g3", "-c", "src/b.cc", "-o", "build/b.o"]),
        remote("g++", &["-Wall", "-c", "src/bw.cc", "-o", "build/bw.o"]),
        remote("g++", &["-x", "c++", "-c", "src/main.c", "-o", "build/mainxx.o"]),
        local("g++", &["-pedantic", "-c", "src/b.cc", "-o", "build/b.o"], "-pedantic"),
        Shape { compiler: "gcc", cwd: "build", args: &["-g", "-c", "../src/main.c", "-o", "m.o"], way: Way::Remote },
        Shape {
            compiler: "gcc",
            cwd: "build",
            args: &["-g", "-O2", "-I../src", "-Wall", "-c", "../src/w.c"],
            way: Way::Remote,
        },
    ];
    if !have("clang") {
        ccroute::test_env::lacking("clang", "no clang in PATH");
    } else {
        v.extend([
            remote("clang", &["-c", "src/main.c", "-o", "build/main.o"]),
            remote("clang", &["-O2", "-c", "{P}/src/main.c", "-o", "build/main.o", "-MD"]),
            remote("clang", &["-Wall", "-c", "src/w.c", "-o", "build/w.o"]),
            remote("clang", &["-c", "src/e.c", "-o", "build/e.o"]),
            remote("clang", &["-std=c99", "-pedantic-errors", "-c", "src/ped.c", "-o", "build/ped.o"]),
            remote("clang", &["-Wpedantic", "-Werror", "-c", "src/main.c", "-o", "build/main.o"]),
            local("clang", &["-g", "-c", "src/main.c", "-o", "build/main.o"], "checksums"),
            remote("clang++", &["-O2", "-c", "src/b.cc", "-o", "build/b.o"]),
        ]);
    }
    v
}

fn have(compiler: &str) -> bool {
    Command::new(compiler).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Every file under the project, by relative path.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    files(root, |_| true)
        .into_iter()
        .filter_map(|p| Some((p.strip_prefix(root).ok()?.to_path_buf(), std::fs::read(&p).ok()?)))
        .collect()
}

/// What one run left: exit status, stdout, stderr, and the files it wrote.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    status: Option<i32>,
    stdout: String,
    stderr: String,
    written: BTreeMap<PathBuf, Vec<u8>>,
}

/// Runs `cmd` in the project and puts the project back as it was.
fn run(root: &Path, before: &BTreeMap<PathBuf, Vec<u8>>, mut cmd: Command) -> Seen {
    let out = cmd.output().unwrap();
    let after = snapshot(root);
    let written: BTreeMap<PathBuf, Vec<u8>> = after.into_iter().filter(|(p, b)| before.get(p) != Some(b)).collect();
    for p in written.keys() {
        match before.get(p) {
            Some(old) => std::fs::write(root.join(p), old).unwrap(),
            None => std::fs::remove_file(root.join(p)).unwrap(),
        }
    }
    Seen {
        status: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        written,
    }
}

/// What differs between two runs, readably (objects by name, not by bytes).
fn describe(plain: &Seen, through: &Seen) -> String {
    let mut out = String::new();
    if plain.status != through.status {
        out += &format!("  status: plain {:?}, ccroute {:?}\n", plain.status, through.status);
    }
    if plain.stdout != through.stdout {
        out += &format!("  stdout: plain {:?}\n          ccroute {:?}\n", plain.stdout, through.stdout);
    }
    if plain.stderr != through.stderr {
        out += &format!("  stderr: plain {:?}\n          ccroute {:?}\n", plain.stderr, through.stderr);
    }
    let names: std::collections::BTreeSet<&PathBuf> = plain.written.keys().chain(through.written.keys()).collect();
    for name in names {
        if plain.written.get(name) != through.written.get(name) {
            let len = |s: &Seen| s.written.get(name).map(Vec::len);
            out += &format!("  {}: plain {:?} bytes, ccroute {:?} bytes\n", name.display(), len(plain), len(through));
        }
    }
    out
}

fn project(root: &Path) {
    for (name, body) in FILES {
        let p = root.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    std::os::unix::fs::symlink(root.join("src"), root.join("link")).unwrap();
    std::os::unix::fs::symlink(root.join("inc"), root.join("inc-link")).unwrap();
    let pch =
        Command::new("gcc").args(["-x", "c-header", "src/pch.h", "-o", "src/pch.h.gch"]).current_dir(root).status();
    assert!(pch.unwrap().success());
}

#[test]
fn command_shapes_match_plain_gcc_and_clang() {
    differential(&[], true);
}

#[test]
fn command_shapes_match_plain_gcc_and_clang_as_text() {
    differential(&["--no-shipping"], false);
}

/// Reasons to stay local that only the text has: sent as inputs, these go remote.
const TEXT_ONLY: &[&str] = &[
    "-pedantic",
    "checksums",
    "the agent's diagnostics would not read as here",
    "-flto",
    "the preprocessor printed diagnostics",
];

fn differential(agent: &[&str], inputs: bool) {
    let mut c = Cluster::new();
    c.start_scheduler(&["--no-cache"]);
    let mut args = vec!["--jobs", "2"];
    args.extend_from_slice(agent);
    c.start_agent(&args);
    c.start_consumerd(1, true);
    c.wait_ready(1);
    let root = c.dir.path().join("project");
    project(&root);
    let before = snapshot(&root);

    let shapes = shapes();
    let (mut went_remote, mut identical, mut differing) = (0, 0, Vec::new());
    let mut kept_local: BTreeMap<&str, usize> = BTreeMap::new();
    for shape in &shapes {
        let cwd = root.join(shape.cwd);
        let args: Vec<String> = shape.args.iter().map(|a| a.replace("{P}", root.to_str().unwrap())).collect();
        let mut plain = Command::new(shape.compiler);
        plain.args(&args).current_dir(&cwd).env_remove("GCC_COLORS");
        let plain = run(&root, &before, plain);
        let mut through = c.command(ccroute());
        through.arg(shape.compiler).args(&args).current_dir(&cwd).env("CCROUTE_VERBOSE", "1").env_remove("GCC_COLORS");
        let mut through = run(&root, &before, through);
        // The wrapper's own note says where the compile ran; it is not the compiler's output.
        let (notes, rest): (Vec<&str>, Vec<&str>) =
            through.stderr.split_inclusive('\n').partition(|l| l.starts_with("ccroute: "));
        let where_ran = notes.concat();
        through.stderr = rest.concat();
        let label = format!("{} {} (in {:?})", shape.compiler, shape.args.join(" "), shape.cwd);
        if plain == through {
            identical += 1;
        } else {
            differing.push(format!("{label}\n{}", describe(&plain, &through)));
        }
        let way = match shape.way {
            Way::Local(why) if inputs && TEXT_ONLY.contains(&why) => Way::Remote,
            way => way,
        };
        match (way, where_ran.is_empty()) {
            (Way::Remote, true) => went_remote += 1,
            (Way::Local(why), false) if where_ran.contains(why) => *kept_local.entry(why).or_default() += 1,
            (way, _) => differing.push(format!("{label}: expected {way:?}, wrapper said {where_ran:?}")),
        }
    }
    let stats = c.command(ccroute()).args(["stats", "--json"]).output().unwrap();
    let stats: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    let (as_inputs, as_text) = (&stats["counters"]["remote_inputs"], &stats["counters"]["remote_text"]);
    println!(
        "differential suite ({}): {as_inputs} compiled from their inputs, {as_text} from text",
        if inputs { "inputs" } else { "text" }
    );
    if inputs {
        assert_eq!(stats["counters"]["remote_text"], 0, "with a sandbox every remote unit goes as inputs: {stats}");
    } else {
        assert_eq!(stats["counters"]["remote_inputs"], 0, "{stats}");
    }
    println!("differential suite: {} shapes tried, {went_remote} sent remote, {identical} identical, {} kept local on purpose, {} differing",
        shapes.len(), kept_local.values().sum::<usize>(), differing.len());
    for (why, n) in &kept_local {
        println!("  kept local ({why}): {n}");
    }
    assert!(differing.is_empty(), "{} shapes differ:\n{}", differing.len(), differing.join("\n"));
    assert!(went_remote > shapes.len() / 2, "too few shapes went remote: {went_remote}");
}
