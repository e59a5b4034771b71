//! Wrapper tests with real processes. A wrapper `exec`s compilers and exits,
//! so each one runs in a child: this test binary re-run with a filter that
//! selects [`wrapper_child`], which reads its arguments from the environment
//! and calls [`run`]. Shared helpers for the consumerd's tests live here too.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use bytes::BytesMut;
use ccroute_wire::local::{encode_local, ConsumerdMsg, LocalDecoder, WrapperMsg, WRAPPER_LIMITS};

use super::*;

/// Arguments of a wrapper child, separated by [`SEP`].
const CHILD_ARGS_ENV: &str = "CCROUTE_TEST_WRAPPER_ARGS";
/// Set: the child may start a consumerd (a re-run of this binary, see
/// `consumerd::tests::consumerd_child`).
pub(crate) const CHILD_STARTER_ENV: &str = "CCROUTE_TEST_STARTER";
const SEP: &str = "\x1f";
/// What libtest prints on stdout before the child's own output.
const LIBTEST_PREFIX: &[u8] = b"\nrunning 1 test\n";

/// Not a test of its own: the entry point of a wrapper child, which other
/// tests run in a child process (with `--ignored`).
#[test]
#[ignore = "child-process entry point: tests run it as a child, with its arguments in the environment"]
fn wrapper_child() {
    let Some(args) = std::env::var_os(CHILD_ARGS_ENV) else { return };
    let args: Vec<OsString> = args.to_str().unwrap().split(SEP).map(OsString::from).collect();
    let mut config = Config::from_env();
    // Never the default starter: `<this binary> consumerd` would run tests.
    config.starter = std::env::var_os(CHILD_STARTER_ENV).map(|_| consumerd_starter());
    std::process::exit(run(&config, &args));
}

/// Starts `consumerd::tests::consumerd_child` in this binary.
pub(crate) fn consumerd_starter() -> Starter {
    Starter {
        program: std::env::current_exe().unwrap(),
        args: ["--exact", "consumerd::tests::consumerd_child", "--ignored", "--nocapture", "--test-threads=1", "-q"]
            .map(OsString::from)
            .to_vec(),
        wait: Duration::from_secs(20),
    }
}

/// A wrapper child running `args` (the compiler first) in `cwd`, with no
/// consumerd start unless the caller sets [`CHILD_STARTER_ENV`].
pub(crate) fn wrapper_command(cwd: &Path, socket: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", "wrapper::tests::wrapper_child", "--ignored", "--nocapture", "--test-threads=1", "-q"])
        .env(CHILD_ARGS_ENV, args.join(SEP))
        .env(crate::local_socket::SOCKET_ENV, socket)
        .env_remove(CHILD_STARTER_ENV)
        .env_remove(VERBOSE_ENV)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .current_dir(cwd);
    c
}

/// What a compile left: exit status, stdout, stderr, object, dependency file.
#[derive(PartialEq, Eq)]
pub(crate) struct Compile {
    pub status: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub object: Option<Vec<u8>>,
    pub deps: Option<Vec<u8>>,
}

impl std::fmt::Debug for Compile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let digest = |b: &Option<Vec<u8>>| b.as_ref().map(|b| (b.len(), blake3::hash(b).to_hex()[..16].to_owned()));
        f.debug_struct("Compile")
            .field("status", &self.status)
            .field("stdout", &String::from_utf8_lossy(&self.stdout))
            .field("stderr", &self.stderr)
            .field("object (len, hash)", &digest(&self.object))
            .field("deps", &self.deps.as_ref().map(|d| String::from_utf8_lossy(d).into_owned()))
            .finish()
    }
}

/// Collects a compile's outcome and removes its outputs (`obj/<stem>.o`, `.d`).
pub(crate) fn outcome(out: Output, dir: &Path, stem: &str) -> Compile {
    let object_path = dir.join(format!("obj/{stem}.o"));
    let deps_path = dir.join(format!("obj/{stem}.d"));
    let object = std::fs::read(&object_path).ok();
    let deps = std::fs::read(&deps_path).ok();
    let _ = std::fs::remove_file(object_path);
    let _ = std::fs::remove_file(deps_path);
    let stdout = out.stdout.strip_prefix(LIBTEST_PREFIX).unwrap_or(&out.stdout).to_vec();
    Compile {
        status: out.status.code(),
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        object,
        deps,
    }
}

/// A C source with warnings from the compiler proper. (One with a `#warning`
/// compiles locally: the preprocessor's diagnostics keep a unit here.)
pub(crate) const WARN_C: &str = "#include <stdio.h>\nint f(int a) {\n    int unused;\n    if (a) return 1;\n}\nint g(int n) { printf(\"%d\\n\", n); return f(n); }\n";
/// A C source that does not compile.
pub(crate) const BAD_C: &str = "#include <stdio.h>\nint f(void) { return undeclared + 1; }\n";

/// A project directory with `src/<n>.c` sources and an `obj/` directory.
pub(crate) fn project(sources: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    std::fs::create_dir(dir.path().join("obj")).unwrap();
    for (name, body) in sources {
        std::fs::write(dir.path().join("src").join(name), body).unwrap();
    }
    dir
}

/// The arguments to compile `src/<stem>.c` into `obj/<stem>.o` with a dependency file.
pub(crate) fn compile_args(stem: &str) -> Vec<String> {
    ["-g", "-O1", "-Wall", "-MD", "-c"]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("src/{stem}.c"), "-o".into(), format!("obj/{stem}.o")])
        .collect()
}

/// The same compile by plain gcc, for reference.
pub(crate) fn plain_gcc(dir: &Path, stem: &str) -> Compile {
    let out = Command::new("/usr/bin/gcc").args(compile_args(stem)).current_dir(dir).output().unwrap();
    outcome(out, dir, stem)
}

/// The compile through a wrapper child with `compiler` as its first argument.
pub(crate) fn wrapped(dir: &Path, socket: &Path, compiler: &str, stem: &str) -> Command {
    let args = compile_args(stem);
    let mut all = vec![compiler];
    all.extend(args.iter().map(String::as_str));
    wrapper_command(dir, socket, &all)
}

#[test]
fn without_a_consumerd_or_a_way_to_start_one_the_compile_is_local_and_identical() {
    let dir = project(&[("w.c", WARN_C), ("bad.c", BAD_C)]);
    std::fs::write(dir.path().join("file"), "").unwrap();
    // A socket under a regular file cannot even be tried; one in sysfs can be
    // tried, but its directory cannot be created (not even by root).
    let under_file = dir.path().join("file/sub/consumerd.sock");
    let in_sysfs = PathBuf::from(format!("/sys/ccroute-test-{}/consumerd.sock", std::process::id()));
    for (socket, why) in [(&under_file, "cannot connect to"), (&in_sysfs, "cannot create socket directory")] {
        for stem in ["w", "bad"] {
            let expected = plain_gcc(dir.path(), stem);
            let out = wrapped(dir.path(), socket, "gcc", stem).env(CHILD_STARTER_ENV, "1").output().unwrap();
            let got = outcome(out, dir.path(), stem);
            assert_eq!(got, expected, "{stem}");
        }
        // Asked to, it says why it compiled locally.
        let out =
            wrapped(dir.path(), socket, "gcc", "w").env(VERBOSE_ENV, "1").env(CHILD_STARTER_ENV, "1").output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with(&format!("ccroute: local ({why}")), "{stderr}");
        assert_eq!(out.status.code(), Some(0));
    }
    assert!(plain_gcc(dir.path(), "w").object.is_some());
    assert_eq!(plain_gcc(dir.path(), "bad").status, Some(1));
    assert!(plain_gcc(dir.path(), "bad").stderr.contains("undeclared"));
}

#[test]
fn a_masquerade_symlink_finds_the_real_compiler_and_does_not_recurse() {
    let dir = project(&[("w.c", WARN_C)]);
    let masq = dir.path().join("masq");
    std::fs::create_dir(&masq).unwrap();
    std::os::unix::fs::symlink(std::env::current_exe().unwrap(), masq.join("gcc")).unwrap();
    let path = std::env::join_paths([masq.as_path(), Path::new("/usr/bin"), Path::new("/bin")]).unwrap();
    let socket = dir.path().join("none.sock");
    let expected = plain_gcc(dir.path(), "w");
    // As a build runs it: by name through PATH, and by the symlink's own path.
    let masq_gcc = masq.join("gcc");
    for name in ["gcc", masq_gcc.to_str().unwrap()] {
        let out = wrapped(dir.path(), &socket, name, "w").env("PATH", &path).output().unwrap();
        assert_eq!(outcome(out, dir.path(), "w"), expected, "{name}");
    }
    // A link is a local compile: exec'd directly.
    std::fs::write(dir.path().join("src/main.c"), "int main(void) { return 7; }\n").unwrap();
    let out =
        wrapper_command(dir.path(), &socket, &["gcc", "src/main.c", "-o", "prog"]).env("PATH", &path).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(Command::new(dir.path().join("prog")).status().unwrap().code(), Some(7));
    // Only ccroute in PATH: an error naming the compiler, and the shell's "not found" status.
    let only_masq = std::env::join_paths([masq.as_path()]).unwrap();
    let out = wrapped(dir.path(), &socket, "gcc", "w").env("PATH", &only_masq).output().unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"gcc\" not found"));
}

/// A consumerd stand-in that grants a remote slot, takes the text, and dies.
fn dies_after_source(listener: UnixListener) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut dec = LocalDecoder::<WrapperMsg>::new(WRAPPER_LIMITS);
        let mut buf = BytesMut::new();
        let mut next = |s: &mut UnixStream| loop {
            if let Some(f) = dec.decode(&mut buf).unwrap() {
                return f;
            }
            let mut chunk = [0u8; 65536];
            let n = s.read(&mut chunk).unwrap();
            assert!(n > 0, "wrapper closed early");
            buf.extend_from_slice(&chunk[..n]);
        };
        assert!(matches!(next(&mut s).message, WrapperMsg::Job(_)));
        let mut out = BytesMut::new();
        encode_local(&ConsumerdMsg::Preprocess, b"", &mut out);
        s.write_all(&out).unwrap();
        let source = next(&mut s);
        assert!(matches!(source.message, WrapperMsg::Source(_)));
        source.payload.len()
    })
}

#[test]
fn a_consumerd_that_dies_after_the_source_means_a_local_compile() {
    let dir = project(&[("w.c", WARN_C)]);
    let socket = dir.path().join("c.sock");
    let server = dies_after_source(UnixListener::bind(&socket).unwrap());
    let expected = plain_gcc(dir.path(), "w");
    let out = wrapped(dir.path(), &socket, "gcc", "w").output().unwrap();
    assert!(server.join().unwrap() > 1000, "the preprocessed text was sent");
    // The preprocessor's #warning is not printed twice: the local compile prints its own.
    assert_eq!(outcome(out, dir.path(), "w"), expected);
}

#[test]
fn garbage_from_the_consumerd_means_a_local_compile() {
    let dir = project(&[("w.c", WARN_C)]);
    let expected = plain_gcc(dir.path(), "w");
    for reply in [&b"\x03\x00\x00\x00\xff\xff\xff"[..], &b"\xff\xff\xff\xff"[..], &b""[..]] {
        let socket = dir.path().join("g.sock");
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.write_all(reply).unwrap();
        });
        let out = wrapped(dir.path(), &socket, "gcc", "w").output().unwrap();
        server.join().unwrap();
        assert_eq!(outcome(out, dir.path(), "w"), expected, "{reply:?}");
    }
}

#[test]
fn compilers_are_resolved_and_missing_ones_reported() {
    let config = Config {
        socket: SocketPath::explicit("/nonexistent/x.sock"),
        starter: None,
        self_exe: PathBuf::from("/nonexistent/ccroute"),
        path_var: Some("/usr/bin:/bin".into()),
        verbose: false,
    };
    assert_eq!(resolve(&config, OsStr::new("gcc")).unwrap(), Path::new("/usr/bin/gcc"));
    assert!(resolve(&config, OsStr::new("no-such-cc")).is_err());
    assert_eq!(run(&config, &[]), 2);
    assert_eq!(run(&config, &["no-such-cc".into(), "-c".into(), "a.c".into()]), 127);
}
