//! The consumerd's direct-mode cache and local tier, end to end: real gcc
//! compiles through the wrapper and a real consumerd process, each object
//! (and dependency file) compared byte for byte with plain gcc's at the same
//! path, after the change each case makes. A wrong hit would hand back the
//! object of the earlier build, which plain gcc no longer makes.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{ccroute, Cluster};

/// A cluster with a local-only consumerd (or one with a scheduler) and a project dir.
struct Case {
    c: Cluster,
    dir: PathBuf,
}

impl Case {
    fn new() -> Case {
        let mut c = Cluster::new();
        c.start_consumerd(2, false);
        let dir = c.dir.path().join("p");
        std::fs::create_dir_all(&dir).unwrap();
        Case { c, dir }
    }

    fn write(&self, name: &str, text: &str) {
        let p = self.dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// Sets every file's stamps well in the past, as a checkout's are, so
    /// that a record is not refused for a file changed just before it.
    fn age(&self) {
        let out = Command::new("find")
            .arg(&self.dir)
            .args(["-type", "f", "-exec", "touch", "-d", "-1 hour", "{}", "+"])
            .output()
            .unwrap();
        assert!(out.status.success());
        // ctime cannot be set back: let it fall behind the compile's start.
        std::thread::sleep(Duration::from_millis(150));
    }

    fn run(&self, dir: &Path, through_ccroute: bool, args: &[&str]) -> Output {
        let (compiler, args) = match args.first() {
            Some(&"clang") => ("clang", &args[1..]),
            _ => ("gcc", args),
        };
        let mut cmd = if through_ccroute {
            let mut cmd = self.c.command(ccroute());
            cmd.arg(compiler);
            cmd
        } else {
            Command::new(compiler)
        };
        cmd.current_dir(dir).args(args).env("CCROUTE_VERBOSE", "1").output().unwrap()
    }

    /// Compiles with plain gcc, then through ccroute, at the same path in
    /// `dir`; asserts the same status, object and (when named) dependency
    /// file. Returns ccroute's stderr.
    fn same_as_gcc_in(&self, dir: &Path, args: &[&str], outputs: &[&str]) -> String {
        for o in outputs {
            let _ = std::fs::remove_file(dir.join(o));
        }
        let plain = self.run(dir, false, args);
        let want: Vec<Option<Vec<u8>>> = outputs.iter().map(|o| std::fs::read(dir.join(o)).ok()).collect();
        for o in outputs {
            let _ = std::fs::remove_file(dir.join(o));
        }
        let got = self.run(dir, true, args);
        let stderr = String::from_utf8_lossy(&got.stderr).into_owned();
        assert_eq!(plain.status.code(), got.status.code(), "exit status; ccroute said: {stderr}\n{}", self.c.logs());
        for (o, want) in outputs.iter().zip(want) {
            let have = std::fs::read(dir.join(o)).ok();
            assert!(have == want, "{o} differs from gcc's; ccroute said: {stderr}\n{}", self.c.logs());
        }
        stderr
    }

    fn same_as_gcc(&self, args: &[&str], outputs: &[&str]) -> String {
        self.same_as_gcc_in(&self.dir, args, outputs)
    }

    fn stats(&self) -> serde_json::Value {
        let out = self.c.command(ccroute()).args(["stats", "--json"]).output().unwrap();
        assert!(out.status.success(), "stats: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn counter(&self, name: &str) -> u64 {
        self.stats()["counters"][name].as_u64().unwrap_or(0)
    }

    /// Records are written in the background: waits for the `n`-th.
    fn wait_recorded(&self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.counter("recorded") < n {
            assert!(Instant::now() < deadline, "never recorded {n}: {}\n{}", self.stats(), self.c.logs());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Compiles once through ccroute as a first build would (a miss that is
    /// recorded), then checks that the same compile is now a hit.
    fn prime(&self, args: &[&str], outputs: &[&str]) {
        let recorded = self.counter("recorded");
        self.same_as_gcc(args, outputs);
        self.wait_recorded(recorded + 1);
        let hits = self.counter("direct_hit");
        let said = self.same_as_gcc(args, outputs);
        assert_eq!(self.counter("direct_hit"), hits + 1, "the same compile again is a hit: {said}");
    }

    fn assert_hit(&self, args: &[&str], outputs: &[&str]) {
        let hits = self.counter("direct_hit");
        let said = self.same_as_gcc(args, outputs);
        assert_eq!(self.counter("direct_hit"), hits + 1, "must be a hit: {said}\n{}", self.stats());
    }

    fn assert_miss(&self, args: &[&str], outputs: &[&str]) {
        self.assert_miss_in(&self.dir, args, outputs);
    }

    fn assert_miss_in(&self, dir: &Path, args: &[&str], outputs: &[&str]) {
        let hits = self.counter("direct_hit");
        let said = self.same_as_gcc_in(dir, args, outputs);
        assert_eq!(self.counter("direct_hit"), hits, "must not be a hit: {said}\n{}", self.stats());
    }
}

const MAIN: &str = "#include <stdio.h>\n#include \"conf.h\"\nint main(void) { printf(\"%d\\n\", VALUE); return 0; }\n";
const OBJ: &[&str] = &["m.o"];

#[test]
fn a_header_edited_between_builds_is_a_miss_even_within_the_same_second() {
    let k = Case::new();
    k.write("m.c", MAIN);
    k.write("conf.h", "#define VALUE 1\n");
    k.age();
    let args = ["-O2", "-g", "-c", "m.c", "-o", "m.o"];
    k.prime(&args, OBJ);
    // Same size, written right after the last build: within the same second
    // (and likely the same kernel tick) as the stamp the cache saw.
    k.write("conf.h", "#define VALUE 2\n");
    k.assert_miss(&args, OBJ);
    k.write("conf.h", "#define VALUE 3\n");
    k.assert_miss(&args, OBJ);
}

#[test]
fn a_deleted_header_is_a_miss_and_fails_as_gcc_fails() {
    let k = Case::new();
    k.write("m.c", MAIN);
    k.write("conf.h", "#define VALUE 1\n");
    k.age();
    let args = ["-O2", "-c", "m.c", "-o", "m.o"];
    k.prime(&args, OBJ);
    std::fs::remove_file(k.dir.join("conf.h")).unwrap();
    let said = k.same_as_gcc(&args, OBJ);
    assert!(said.contains("conf.h"), "gcc's own error: {said}");
}

#[test]
fn a_new_header_that_shadows_one_on_the_include_path_is_a_miss() {
    let k = Case::new();
    k.write("src/m.c", MAIN);
    k.write("inc2/conf.h", "#define VALUE 2\n");
    k.write("inc1/other.h", "/* keeps inc1 a directory */\n");
    k.age();
    let args = ["-Iinc1", "-Iinc2", "-O2", "-c", "src/m.c", "-o", "m.o"];
    k.prime(&args, OBJ);
    // Earlier on the -I list: gcc now takes this one.
    k.write("inc1/conf.h", "#define VALUE 1\n");
    k.age();
    k.assert_miss(&args, OBJ);
    k.wait_recorded(2);
    k.assert_hit(&args, OBJ);
    // Beside the source, searched first for #include "...": shadows both.
    k.write("src/conf.h", "#define VALUE 0\n");
    k.age();
    k.assert_miss(&args, OBJ);
    // And a system header shadowed from the -I path.
    k.write("s.c", "#include <stdint.h>\nint32_t f(void) { return INT32_MAX; }\n");
    k.age();
    let sys = ["-Iinc1", "-O2", "-c", "s.c", "-o", "s.o"];
    k.prime(&sys, &["s.o"]);
    k.write("inc1/stdint.h", "typedef long int32_t;\n#define INT32_MAX 7\n");
    k.age();
    k.assert_miss(&sys, &["s.o"]);
}

/// `#include "..."` looks beside the header that includes it before the
/// include path: a header new there shadows the one the compile found on
/// the -I path (only the input's own directory was watched).
#[test]
fn a_new_header_beside_the_header_that_includes_it_is_a_miss() {
    let k = Case::new();
    k.write("src/m.c", "#include \"net/sock.h\"\nint f(void) { return VALUE; }\n");
    k.write("src/net/sock.h", "#include \"config.h\"\n");
    k.write("gen/config.h", "#define VALUE 1\n");
    k.age();
    let args = ["-Igen", "-O2", "-c", "src/m.c", "-o", "m.o"];
    k.prime(&args, OBJ);
    k.write("src/net/config.h", "#define VALUE 2\n");
    k.age();
    k.assert_miss(&args, OBJ);
}

/// `__has_include` asks whether a file exists without reading it, so no
/// dependency list names what it asked about: a file it asked about that
/// appears later is a miss; once it goes again, the first version is a hit.
#[test]
fn a_file_has_include_asked_about_appearing_is_a_miss_and_going_again_a_hit() {
    let k = Case::new();
    k.write(
        "m.c",
        "#if __has_include(\"local_cfg.h\")\n#include \"local_cfg.h\"\n#else\n#define LOCAL 0\n#endif\nint f(void) { return LOCAL; }\n",
    );
    k.age();
    let args = ["-O2", "-c", "m.c", "-o", "m.o"];
    k.prime(&args, OBJ);
    k.write("local_cfg.h", "#define LOCAL 5\n");
    k.age();
    k.assert_miss(&args, OBJ);
    k.wait_recorded(2);
    k.assert_hit(&args, OBJ);
    std::fs::remove_file(k.dir.join("local_cfg.h")).unwrap();
    k.assert_hit(&args, OBJ);
}

/// `include/../config.h`, where `include` is a symbolic link, is read from
/// beside the link's target; spelled out, it names another file that exists
/// too. Such a unit is not recorded: a digest of the other file would let a
/// later edit of the one read go unseen.
#[test]
fn a_header_reached_through_a_link_and_dotdot_is_not_recorded() {
    let k = Case::new();
    k.write("lib/include/foo.h", "#include \"../config.h\"\n");
    k.write("lib/config.h", "#define VALUE 1\n");
    k.write("p/config.h", "#define VALUE 9\n");
    k.write("p/m.c", "#include \"foo.h\"\nint f(void) { return VALUE; }\n");
    std::os::unix::fs::symlink(k.dir.join("lib/include"), k.dir.join("p/include")).unwrap();
    k.age();
    let p = k.dir.join("p");
    let args = ["-Iinclude", "-O2", "-MD", "-c", "m.c", "-o", "m.o"];
    k.same_as_gcc_in(&p, &args, OBJ);
    let why = "a path reached through `..` and a symbolic link";
    let deadline = Instant::now() + Duration::from_secs(20);
    while k.stats()["refusals"][why].as_u64().unwrap_or(0) < 1 {
        assert!(Instant::now() < deadline, "not refused: {}\n{}", k.stats(), k.c.logs());
        std::thread::sleep(Duration::from_millis(20));
    }
    k.write("lib/config.h", "#define VALUE 2\n");
    k.age();
    k.assert_miss_in(&p, &args, OBJ);
}

#[test]
fn a_changed_define_is_a_miss_and_each_version_is_kept() {
    let k = Case::new();
    k.write("m.c", "int f(void) { return X; }\n");
    k.age();
    let one = ["-DX=1", "-O2", "-c", "m.c", "-o", "m.o"];
    let two = ["-DX=2", "-O2", "-c", "m.c", "-o", "m.o"];
    k.prime(&one, OBJ);
    k.assert_miss(&two, OBJ);
    k.wait_recorded(2);
    let hits = k.counter("direct_hit");
    k.same_as_gcc(&one, OBJ);
    k.same_as_gcc(&two, OBJ);
    assert_eq!(k.counter("direct_hit"), hits + 2, "both versions are kept");
}

#[test]
fn date_enters_the_key_and_time_turns_direct_mode_off() {
    let k = Case::new();
    k.write("d.c", "const char *built = __DATE__;\n");
    k.write("t.h", "#define STAMP __TIME__\n");
    k.write("t.c", "#include \"t.h\"\nconst char *at = STAMP;\n");
    k.age();
    // __DATE__ is the same all day: a hit, byte-identical to gcc's today.
    k.prime(&["-c", "d.c", "-o", "d.o"], &["d.o"]);
    // __TIME__ in a header: never recorded, never a hit.
    let args = ["-c", "t.c", "-o", "t.o"];
    let hits = k.counter("direct_hit");
    for _ in 0..2 {
        let out = k.run(&k.dir, true, &args);
        assert!(out.status.success());
    }
    let s = k.stats();
    assert_eq!(k.counter("direct_hit"), hits, "{s}");
    assert!(s["refusals"]["__TIME__, __TIMESTAMP__, #embed or .incbin"].as_u64() >= Some(2), "{s}");
}

#[test]
fn the_same_source_in_two_directories_gets_each_its_own_object() {
    let k = Case::new();
    for d in ["a", "b"] {
        k.write(&format!("{d}/m.c"), MAIN);
        k.write(&format!("{d}/conf.h"), "#define VALUE 5\n");
    }
    k.age();
    let args = ["-g", "-O1", "-c", "m.c", "-o", "m.o"];
    let (a, b) = (k.dir.join("a"), k.dir.join("b"));
    k.same_as_gcc_in(&a, &args, OBJ);
    k.wait_recorded(1);
    let hits = k.counter("direct_hit");
    // Debug info names the directory: b's object is not a's.
    k.same_as_gcc_in(&b, &args, OBJ);
    assert_eq!(k.counter("direct_hit"), hits);
    assert_ne!(std::fs::read(a.join("m.o")).unwrap(), std::fs::read(b.join("m.o")).unwrap());
}

#[test]
fn a_hit_writes_the_dependency_file_gcc_would() {
    let k = Case::new();
    k.write("m.c", MAIN);
    k.write("conf.h", "#define VALUE 1\n");
    k.age();
    for args in [
        &["-MD", "-MP", "-O2", "-c", "m.c", "-o", "m.o"][..],
        &["-MMD", "-MT", "custom-target", "-MF", "deps/m.dep", "-O2", "-c", "m.c", "-o", "m.o"][..],
        &["-Wp,-MD,w.d", "-O2", "-c", "m.c", "-o", "m.o"][..],
    ] {
        std::fs::create_dir_all(k.dir.join("deps")).unwrap();
        let dep = if args.contains(&"-MF") {
            "deps/m.dep"
        } else if args[0].starts_with("-Wp") {
            "w.d"
        } else {
            "m.d"
        };
        // -MMD leaves system headers out: the consumerd learns them later
        // with a dependency-only run, and records the unit then.
        k.prime(args, &["m.o", dep]);
    }
}

#[test]
fn a_corrupt_manifest_file_is_ignored_and_a_restart_keeps_the_cache_warm() {
    let mut k = Case::new();
    k.write("m.c", MAIN);
    k.write("conf.h", "#define VALUE 1\n");
    k.age();
    let args = ["-O2", "-c", "m.c", "-o", "m.o"];
    k.prime(&args, OBJ);
    // A restart (SIGTERM writes the manifests out): the first compile hits.
    k.c.consumerd.as_mut().unwrap().stop();
    k.c.start_consumerd(2, false);
    k.same_as_gcc(&args, OBJ);
    assert_eq!(k.counter("direct_hit"), 1, "{}", k.c.logs());
    // Garbage in the manifest file: a warning, a miss, and the cache rebuilds.
    k.c.consumerd.as_mut().unwrap().stop();
    let file = k.c.dir.path().join("cache-home/ccroute/consumerd/direct-manifests");
    let mut bytes = std::fs::read(&file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    k.c.start_consumerd(2, false);
    k.assert_miss(&args, OBJ);
    assert!(k.c.logs().contains("ignoring the direct-mode manifests"), "{}", k.c.logs());
    k.wait_recorded(1);
    let hits = k.counter("direct_hit");
    k.same_as_gcc(&args, OBJ);
    assert_eq!(k.counter("direct_hit"), hits + 1);
    // `ccroute cache clear` empties it.
    let out = k.c.command(ccroute()).args(["cache", "clear"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(k.stats()["sizes"]["results"].as_u64(), Some(0));
    k.assert_miss(&args, OBJ);
}

#[test]
fn a_remote_compile_is_recorded_and_then_answered_before_any_slot() {
    let mut c = Cluster::new();
    let shared = c.dir.path().join("shared-cache").display().to_string();
    c.start_scheduler(&["--cache-dir", &shared]);
    c.start_agent(&[]);
    c.start_consumerd(1, true);
    c.wait_ready(1);
    let dir = c.dir.path().join("p");
    let k = Case { c, dir };
    std::fs::create_dir_all(&k.dir).unwrap();
    k.write("m.c", MAIN);
    k.write("conf.h", "#define VALUE 1\n");
    k.age();
    // -MMD: the preprocessed text's line markers list what it read, system headers too.
    let args = ["-MMD", "-O2", "-g", "-c", "m.c", "-o", "m.o"];
    k.prime(&args, &["m.o", "m.d"]);
    let s = k.stats();
    assert!(s["counters"]["remote"].as_u64() >= Some(1), "went through the agent: {s}");
    // With this user's tiers emptied, the scheduler's shared cache answers
    // it after a preprocessing here, and `stats` says so.
    let out = k.c.command(ccroute()).args(["cache", "clear"]).output().unwrap();
    assert!(out.status.success());
    k.assert_miss(&args, &["m.o", "m.d"]);
    assert_eq!(k.counter("preprocessed_hit"), 1, "{}", k.stats());
    k.write("conf.h", "#define VALUE 2\n");
    k.assert_miss(&args, &["m.o", "m.d"]);
}

#[test]
fn units_that_never_go_remote_are_cached_too() {
    let k = Case::new();
    k.write("m.c", MAIN);
    k.write("conf.h", "#define VALUE 1\n");
    k.age();
    // gcc with a pedantic flag: compiled here, never on an agent, yet
    // answered from the local tier the second time. (-flto is cached the same
    // way; its objects hold a random seed, so no two gcc runs match to compare.)
    k.prime(&["-Wpedantic", "-O2", "-g", "-c", "m.c", "-o", "m.o"], OBJ);
    k.write("conf.h", "#define VALUE 2\n");
    k.assert_miss(&["-Wpedantic", "-O2", "-g", "-c", "m.c", "-o", "m.o"], OBJ);
    // clang with -g (its debug info checksums the sources): the same.
    if Command::new("clang").arg("--version").output().is_err() {
        ccroute::test_env::lacking("clang", "no clang in PATH");
        return;
    }
    k.age();
    k.prime(&["clang", "-g", "-O1", "-c", "m.c", "-o", "m.o"], OBJ);
    k.write("conf.h", "#define VALUE 3\n");
    k.assert_miss(&["clang", "-g", "-O1", "-c", "m.c", "-o", "m.o"], OBJ);
}
