//! [`Executor::run`] end to end: real gcc, g++ and clang (where installed)
//! against a local compile, fake compilers for the failure paths, and the
//! test toolchain.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::sync::Arc;

use ccroute_wire::codec::encode_spec;

use super::*;
use crate::cc::{classify, Classification, Family, RemotePlan};

const GCC: ToolchainKey = ToolchainKey(0x6cc);
const GXX: ToolchainKey = ToolchainKey(0x6ff);
const CLANG: ToolchainKey = ToolchainKey(0xc1a);
const FAKE: ToolchainKey = ToolchainKey(0xfa4e);

const HEADER: &str = "#define SQUARE(x) ((x) * (x))\nstatic inline int twice(int v) { return v + v; }\n";
const SOURCE: &str = "#include <stdio.h>\n#include \"a.h\"\nint main(void) {\n    int unused;\n    printf(\"%s %d\\n\", __FILE__, SQUARE(3) + twice(2));\n    return 0;\n}\n";
const BROKEN: &str = "#include \"a.h\"\nint f(void) {\n    return SQUARE(undeclared_thing);\n}\n";
const SOURCE_CXX: &str = "#include <string>\n#include <vector>\nint run(std::vector<std::string> &v) { return v.at(0).size() + __LINE__; }\n";

/// A project on disk: `src/a.h`, `src/a.c`, `src/e.c` (does not compile),
/// `src/b.cc`, and an empty `obj/`.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, body) in [("src/a.h", HEADER), ("src/a.c", SOURCE), ("src/e.c", BROKEN), ("src/b.cc", SOURCE_CXX)] {
        let p = dir.path().join(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, body).unwrap();
    }
    fs::create_dir_all(dir.path().join("obj")).unwrap();
    dir
}

fn installed(compiler: &str) -> bool {
    Command::new(compiler).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// An executor for gcc, g++, clang and `fake`, with its scratch root in `parent`.
fn executor(parent: &Path, fake: Option<&Path>, limits: ExecLimits) -> Executor {
    let mut config = ExecutorConfig { scratch_parent: parent.to_owned(), ..ExecutorConfig::default() }
        .with_toolchain(GCC, "/usr/bin/gcc")
        .with_toolchain(GXX, "/usr/bin/g++")
        .with_toolchain(CLANG, "/usr/bin/clang")
        .with_limits(limits);
    if let Some(fake) = fake {
        config = config.with_toolchain(FAKE, fake);
    }
    Executor::new(config).unwrap()
}

/// Writes an executable shell script.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn task(toolchain: ToolchainKey, spec: &TaskSpec, source: &[u8]) -> ExecTask {
    let (wire, payload) = compress(source);
    ExecTask { toolchain, fetch: None, spec: encode_spec(spec), payload, source: wire.into(), task_id: 0 }
}

fn spec(args: &[&str], input: &str) -> TaskSpec {
    TaskSpec {
        args: args.iter().map(|s| s.to_string()).collect(),
        input_path: input.to_owned(),
        cwd: None,
        env: vec![],
        inputs: None,
    }
}

/// Preprocesses `args` in `cwd` the consumerd's way; the task, the plan and
/// the preprocessor's stderr.
fn consumerd_task(compiler: &str, key: ToolchainKey, cwd: &Path, args: &[&str]) -> (ExecTask, RemotePlan, Vec<u8>) {
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    let plan = match classify(Family::of_compiler(Path::new(compiler)), &args, cwd, |_| None) {
        Classification::Remote(plan) => plan,
        Classification::Local(why) => {
            panic!("{args:?} stays local: {why}")
        }
    };
    let pre = Command::new(compiler).args(&plan.preprocess_args).current_dir(cwd).output().unwrap();
    assert!(pre.status.success(), "{}", String::from_utf8_lossy(&pre.stderr));
    let text = plan.postprocess(&pre.stdout).text;
    (task(key, &plan.spec, &text), plan, pre.stderr)
}

/// A local compile with the environment the agent gives its compiler (no
/// locale): exit status, object, stderr.
fn local_compile(compiler: &str, cwd: &Path, args: &[&str], output: &Path) -> (i32, Option<Vec<u8>>, Vec<u8>) {
    let out = Command::new(compiler)
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .output()
        .unwrap();
    let object = fs::read(output).ok();
    let _ = fs::remove_file(output);
    (out.status.code().unwrap(), object, out.stderr)
}

fn object_of(result: &ExecResult) -> Vec<u8> {
    decompress(&result.header.payload, &result.object, 1 << 30).unwrap()
}

fn internal_error(result: &ExecResult) -> &str {
    match &result.header.outcome {
        Outcome::InternalError(why) => why,
        other => {
            panic!("expected an internal error, got {other:?}: {}", String::from_utf8_lossy(&result.header.stderr))
        }
    }
}

fn assert_scratch_empty(exec: &Executor) {
    let left: Vec<_> = fs::read_dir(exec.scratch_root()).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(left.is_empty(), "left in the scratch root: {left:?}");
}

/// Processes (not zombies) whose command line names `path`.
fn processes_naming(path: &Path) -> Vec<String> {
    let needle = path.to_str().unwrap().as_bytes();
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else { continue };
        if cmdline.windows(needle.len()).any(|w| w == needle) && process::tests::pid_alive(name.parse().unwrap()) {
            found.push(format!("{name}: {}", String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    found
}

/// Waits (without a deadline of its own: the test harness has one) until `path` exists.
/// Waits until the script has written its child's pid whole (the file
/// exists a moment before its contents do).
async fn appears(path: &Path) {
    while !fs::read_to_string(path).is_ok_and(|s| s.trim().parse::<libc::pid_t>().is_ok()) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn read_pid(path: &Path) -> libc::pid_t {
    fs::read_to_string(path).unwrap().trim().parse().unwrap()
}

/// Compiles `args` remotely (through the executor) and locally, and checks
/// that the objects and the diagnostics are the same.
async fn same_as_local(exec: &Executor, compiler: &str, key: ToolchainKey, args: &[&str], output: &str) {
    let p = project();
    let (t, plan, pre_stderr) = consumerd_task(compiler, key, p.path(), args);
    let remote = exec.run(t, CancellationToken::new()).await;
    assert_eq!(remote.header.outcome, Outcome::Success, "{}", String::from_utf8_lossy(&remote.header.stderr));
    assert_eq!(remote.header.exit_status, 0);
    assert!(remote.header.cpu_time_us > 0);
    assert_eq!(plan.output, p.path().join(output));
    let (status, local_object, local_stderr) = local_compile(compiler, p.path(), args, &plan.output);
    assert_eq!(status, 0);
    assert!(local_object.as_deref() == Some(object_of(&remote).as_slice()), "{compiler} {args:?}: objects differ");
    let mut remote_stderr = pre_stderr;
    remote_stderr.extend_from_slice(&remote.header.stderr);
    assert_eq!(String::from_utf8_lossy(&remote_stderr), String::from_utf8_lossy(&local_stderr), "{args:?}");
    assert_scratch_empty(exec);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcc_objects_and_warnings_match_a_local_compile() {
    let parent = tempfile::tempdir().unwrap();
    let exec = executor(parent.path(), None, ExecLimits::default());
    same_as_local(&exec, "/usr/bin/gcc", GCC, &["-c", "src/a.c", "-o", "obj/a.o"], "obj/a.o").await;
    same_as_local(&exec, "/usr/bin/gcc", GCC, &["-g", "-c", "src/a.c", "-o", "obj/a.o"], "obj/a.o").await;
    same_as_local(&exec, "/usr/bin/gcc", GCC, &["-g", "-O2", "-Wall", "-c", "src/a.c", "-o", "obj/a.o"], "obj/a.o")
        .await;

    // The warning really is there, under the user's file name.
    let p = project();
    let (t, _, _) = consumerd_task("/usr/bin/gcc", GCC, p.path(), &["-Wall", "-c", "src/a.c"]);
    let r = exec.run(t, CancellationToken::new()).await;
    let stderr = String::from_utf8_lossy(&r.header.stderr);
    assert!(stderr.contains("src/a.c:4:9: warning: unused variable 'unused'"), "{stderr}");
    assert!(!stderr.contains(exec.scratch_root().to_str().unwrap()), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gxx_and_clang_objects_match_a_local_compile() {
    let parent = tempfile::tempdir().unwrap();
    let exec = executor(parent.path(), None, ExecLimits::default());
    same_as_local(&exec, "/usr/bin/g++", GXX, &["-g", "-O2", "-c", "src/b.cc", "-o", "obj/b.o"], "obj/b.o").await;
    if !installed("/usr/bin/clang") {
        return crate::test_env::lacking("clang", "no /usr/bin/clang");
    }
    // clang keeps -g local (see crate::cc), so only without it.
    same_as_local(&exec, "/usr/bin/clang", CLANG, &["-O2", "-Wall", "-c", "src/a.c", "-o", "obj/a.o"], "obj/a.o").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compile_error_is_compile_failed_with_the_local_diagnostics() {
    let parent = tempfile::tempdir().unwrap();
    let exec = executor(parent.path(), None, ExecLimits::default());
    let p = project();
    let args = ["-c", "src/e.c", "-o", "obj/e.o"];
    let (t, plan, _) = consumerd_task("/usr/bin/gcc", GCC, p.path(), &args);
    let r = exec.run(t, CancellationToken::new()).await;
    assert_eq!((&r.header.outcome, r.header.exit_status), (&Outcome::CompileFailed, 1));
    assert!(r.object.is_empty() && r.header.payload == PayloadInfo::EMPTY);
    let stderr = String::from_utf8_lossy(&r.header.stderr);
    assert!(stderr.contains("src/e.c:3:19: error: 'undeclared_thing' undeclared"), "{stderr}");
    let (status, object, local_stderr) = local_compile("/usr/bin/gcc", p.path(), &args, &plan.output);
    assert_eq!((status, object), (1, None));
    assert_eq!(stderr, String::from_utf8_lossy(&local_stderr));
    assert_scratch_empty(&exec);
}

/// `/tmp/ccXXXXXX.s` with its random part as `ccXXXXXX`.
fn without_temp_names(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("/cc") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let random = tail.chars().take_while(char::is_ascii_alphanumeric).count();
        out.push_str("XXXXXX");
        rest = &tail[random..];
    }
    out.push_str(rest);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assembler_error_names_its_temporary_file_as_a_local_compile_does() {
    let parent = tempfile::tempdir().unwrap();
    let exec = executor(parent.path(), None, ExecLimits::default());
    let p = project();
    // An error at the end of the assembly is the `.s` file's, not a line's.
    fs::write(p.path().join("src/asm.c"), "__asm__(\".if 1\");\nint x;\n").unwrap();
    let args = ["-c", "src/asm.c", "-o", "obj/asm.o"];
    let (t, plan, _) = consumerd_task("/usr/bin/gcc", GCC, p.path(), &args);
    let r = exec.run(t, CancellationToken::new()).await;
    assert_eq!((&r.header.outcome, r.header.exit_status), (&Outcome::CompileFailed, 1));
    let stderr = String::from_utf8_lossy(&r.header.stderr).into_owned();
    assert!(stderr.contains("Assembler messages:") && stderr.starts_with("/tmp/cc"), "{stderr}");
    let (status, object, local_stderr) = local_compile("/usr/bin/gcc", p.path(), &args, &plan.output);
    assert_eq!((status, object), (1, None));
    assert_eq!(without_temp_names(&stderr), without_temp_names(&String::from_utf8_lossy(&local_stderr)));
    assert_scratch_empty(&exec);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_specs_are_refused_and_nothing_is_written_or_run() {
    let parent = tempfile::tempdir().unwrap();
    let victim = tempfile::tempdir().unwrap();
    let v = |name: &str| victim.path().join(name).to_str().unwrap().to_owned();
    // A compiler that leaves a mark if it is ever started.
    let fake = script(victim.path(), "gcc", &format!("touch '{}'", v("ran")));
    let exec = executor(parent.path(), Some(&fake), ExecLimits::default());
    let plugin = format!("-fplugin={}", v("x.so"));
    let b = format!("-B{}", v(""));
    let out = v("out.o");
    let at = format!("@{}", v("args"));
    let specs_ = format!("-specs={}", v("specs"));
    let mf = v("deps.d");
    let wl = format!("-Wl,-o,{}", v("linked"));
    let hostile: Vec<TaskSpec> = vec![
        spec(&[&plugin], "a.c"),
        spec(&[&b], "a.c"),
        spec(&["-B", victim.path().to_str().unwrap()], "a.c"),
        spec(&["-o", &out], "a.c"),
        spec(&[&at], "a.c"),
        spec(&[&specs_], "a.c"),
        spec(&["-MD", "-MF", &mf], "a.c"),
        spec(&[&wl], "a.c"),
        spec(&["-save-temps"], "a.c"),
        spec(&["-fdump-tree-all"], "a.c"),
        spec(&[], "src/../../../x.c"),
        spec(&[], "/abs/./x.c"),
        spec(&[], ""),
        TaskSpec { cwd: Some("relative/dir".into()), ..spec(&[], "a.c") },
        TaskSpec { env: vec![("LD_PRELOAD".into(), v("x.so"))], ..spec(&[], "a.c") },
    ];
    for s in &hostile {
        for key in [GCC, FAKE] {
            let r = exec.run(task(key, s, b"int x;\n"), CancellationToken::new()).await;
            let why = internal_error(&r);
            assert!(why.starts_with("refused argument"), "{s:?}: {why}");
            assert_scratch_empty(&exec);
        }
    }
    let left: Vec<_> = fs::read_dir(victim.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, [OsString::from("gcc")], "the victim directory changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_named_outside_the_scratch_dir_compile_inside_it() {
    let parent = tempfile::tempdir().unwrap();
    let victim = tempfile::tempdir().unwrap();
    let exec = executor(parent.path(), None, ExecLimits::default());
    let passwd_before = fs::read("/etc/passwd").unwrap();
    let absolute = victim.path().join("sub/v.c");
    for s in [
        spec(&["-x", "c"], "../../../etc/passwd"),
        spec(&["-x", "c"], "/etc/passwd"),
        spec(&[], absolute.to_str().unwrap()),
    ] {
        let r = exec.run(task(GCC, &s, b"int from_the_wire = 1;\n"), CancellationToken::new()).await;
        assert_eq!(r.header.outcome, Outcome::Success, "{s:?}: {}", String::from_utf8_lossy(&r.header.stderr));
        assert!(object_of(&r).starts_with(b"\x7fELF"));
        assert_scratch_empty(&exec);
    }
    assert_eq!(fs::read("/etc/passwd").unwrap(), passwd_before);
    assert!(!victim.path().join("sub").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_specs_and_unknown_toolchains_are_internal_errors() {
    let parent = tempfile::tempdir().unwrap();
    let exec = executor(parent.path(), None, ExecLimits::default());
    let mut t = task(GCC, &spec(&[], "a.c"), b"int x;\n");
    t.spec = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    let r = exec.run(t, CancellationToken::new()).await;
    assert!(internal_error(&r).starts_with("malformed task spec: "), "{}", internal_error(&r));

    let unknown = ToolchainKey(0x1234_5678_9abc);
    let r = exec.run(task(unknown, &spec(&[], "a.c"), b"int x;\n"), CancellationToken::new()).await;
    assert_eq!(internal_error(&r), format!("toolchain {unknown} is not offered by this agent"));
    assert_scratch_empty(&exec);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_source_object_and_output_are_internal_errors() {
    let parent = tempfile::tempdir().unwrap();
    let tools = tempfile::tempdir().unwrap();
    let chatty = script(tools.path(), "gcc", "head -c 5000 /dev/zero >&2; exit 1");
    let limits =
        ExecLimits { max_source_bytes: 1000, max_object_bytes: 100, max_output_bytes: 4096, ..ExecLimits::default() };
    let exec = executor(parent.path(), Some(&chatty), limits);

    let big = vec![b'\n'; 1001];
    let r = exec.run(task(GCC, &spec(&[], "a.c"), &big), CancellationToken::new()).await;
    assert_eq!(internal_error(&r), "source payload: payload of 1001 bytes exceeds limit 1000");
    // A compressed payload that claims a size it does not have.
    let mut t = task(GCC, &spec(&[], "a.c"), &[b'x'; 900]);
    t.payload.raw_len = 800;
    assert!(internal_error(&exec.run(t, CancellationToken::new()).await).starts_with("source payload: "));

    let r = exec.run(task(GCC, &spec(&[], "a.c"), b"int x;\n"), CancellationToken::new()).await;
    let why = internal_error(&r);
    assert!(why.starts_with("object of ") && why.ends_with(" bytes exceeds limit 100"), "{why}");

    let r = exec.run(task(FAKE, &spec(&[], "a.c"), b"int x;\n"), CancellationToken::new()).await;
    assert_eq!(internal_error(&r), "compiler stderr exceeds the limit of 4096 bytes");
    assert_scratch_empty(&exec);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compiler_killed_by_a_signal_is_an_internal_error() {
    let parent = tempfile::tempdir().unwrap();
    let tools = tempfile::tempdir().unwrap();
    let crashes = script(tools.path(), "gcc", "echo partial >&2; kill -SEGV $$");
    let exec = executor(parent.path(), Some(&crashes), ExecLimits::default());
    let r = exec.run(task(FAKE, &spec(&[], "a.c"), b"int x;\n"), CancellationToken::new()).await;
    assert_eq!(internal_error(&r), "compiler killed by signal 11 (SIGSEGV)");
    assert_scratch_empty(&exec);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_zero_without_an_object_is_an_internal_error() {
    let parent = tempfile::tempdir().unwrap();
    let tools = tempfile::tempdir().unwrap();
    let lazy = script(tools.path(), "gcc", "exit 0");
    let exec = executor(parent.path(), Some(&lazy), ExecLimits::default());
    let r = exec.run(task(FAKE, &spec(&[], "a.c"), b"int x;\n"), CancellationToken::new()).await;
    assert!(
        internal_error(&r).starts_with("compiler exited 0 but its object cannot be read"),
        "{}",
        internal_error(&r)
    );
}

/// A compiler (a shipped one is not trusted) that leaves a link to one of
/// the agent's files, or a FIFO, where the object goes: neither is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_that_is_a_link_or_a_fifo_is_not_read() {
    let parent = tempfile::tempdir().unwrap();
    let tools = tempfile::tempdir().unwrap();
    let secret = tools.path().join("agent.key");
    std::fs::write(&secret, "PRIVATE KEY").unwrap();
    let body = format!("for a; do last=$a; done; ln -s '{}' \"$last\"; exit 0", secret.display());
    let linker = script(tools.path(), "gcc", &body);
    let exec = executor(parent.path(), Some(&linker), ExecLimits::default());
    let r = exec.run(task(FAKE, &spec(&[], "a.c"), b"int x;\n"), CancellationToken::new()).await;
    assert!(
        internal_error(&r).starts_with("compiler exited 0 but its object cannot be read"),
        "{}",
        internal_error(&r)
    );
    assert!(r.object.is_empty());
    let fifo_dir = tempfile::tempdir().unwrap();
    let fifo = script(fifo_dir.path(), "gcc", "for a; do last=$a; done; mkfifo \"$last\"; exit 0");
    let exec = executor(parent.path(), Some(&fifo), ExecLimits::default());
    let r = exec.run(task(FAKE, &spec(&[], "a.c"), b"int x;\n"), CancellationToken::new()).await;
    assert!(internal_error(&r).contains("not a regular file"), "{}", internal_error(&r));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compiler_sees_only_path_a_private_tmpdir_and_the_specs_locale() {
    let parent = tempfile::tempdir().unwrap();
    let tools = tempfile::tempdir().unwrap();
    // Prints its environment and where the source is, then fails.
    let env = script(tools.path(), "gcc", "env | sort; for a; do last=$a; done; echo \"object=$last\"; exit 1");
    let exec = executor(parent.path(), Some(&env), ExecLimits::default());
    let with_locale = TaskSpec { env: vec![("LANG".into(), "C.UTF-8".into())], ..spec(&["-O2"], "a.c") };
    let r = exec.run(task(FAKE, &with_locale, b"int x;\n"), CancellationToken::new()).await;
    assert_eq!((&r.header.outcome, r.header.exit_status), (&Outcome::CompileFailed, 1));
    let stdout = String::from_utf8_lossy(&r.header.stdout).into_owned();
    assert!(stdout.contains("LANG=C.UTF-8\n"), "{stdout}");
    let names: Vec<&str> = stdout.lines().filter_map(|l| l.split_once('=').map(|(k, _)| k)).collect();
    // sh adds PWD (and may add SHLVL, _); nothing of the agent's leaks through.
    for name in &names {
        assert!(
            ["PATH", "TMPDIR", "LANG", "PWD", "SHLVL", "_", "OLDPWD", "object"].contains(name),
            "{name} in {stdout}"
        );
    }
    assert!(stdout.contains(&format!("PATH={}\n", std::env::var("PATH").unwrap())), "{stdout}");
    let root = exec.scratch_root().to_str().unwrap();
    let tmpdir = stdout.lines().find_map(|l| l.strip_prefix("TMPDIR=")).unwrap();
    let object = stdout.lines().find_map(|l| l.strip_prefix("object=")).unwrap();
    assert!(tmpdir.starts_with(root) && object.starts_with(root), "{stdout}");
    assert_eq!(Path::new(tmpdir).parent(), Path::new(object).parent());
    assert_scratch_empty(&exec);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_compiler_kills_its_whole_group() {
    let parent = tempfile::tempdir().unwrap();
    let tools = tempfile::tempdir().unwrap();
    let (leader, child) = (tools.path().join("leader"), tools.path().join("child"));
    // A driver that starts a child and waits for it, like gcc and cc1.
    let body = format!("echo $$ > '{}'; sleep 60 & echo $! > '{}'; wait", leader.display(), child.display());
    let hangs = script(tools.path(), "gcc", &body);
    let exec = Arc::new(executor(parent.path(), Some(&hangs), ExecLimits::default()));
    let cancel = CancellationToken::new();
    let running = tokio::spawn({
        let (exec, cancel) = (Arc::clone(&exec), cancel.clone());
        async move { exec.run(task(FAKE, &spec(&[], "a.c"), b"int x;\n"), cancel).await }
    });
    appears(&child).await;
    assert_eq!(exec.running(), 1);
    cancel.cancel();
    let r = running.await.unwrap();
    assert_eq!(internal_error(&r), "cancelled");
    for pid in [read_pid(&leader), read_pid(&child)] {
        assert!(!process::tests::pid_alive(pid), "process {pid} survived the cancel");
    }
    assert_scratch_empty(&exec);
    assert_eq!(exec.running(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_long_real_compile_leaves_nothing_behind() {
    let parent = tempfile::tempdir().unwrap();
    let exec = Arc::new(executor(parent.path(), None, ExecLimits::default()));
    // A function gcc takes many seconds over at -O2.
    let mut source = String::from("int f(int *v, int n) {\n  int x = n;\n");
    for i in 0..3000 {
        source.push_str(&format!(
            "  x = x * {} + v[{}]; if (x & {}) v[{}] ^= x;\n",
            i % 13 + 3,
            i % 101,
            i % 7 + 1,
            (i * 7) % 101
        ));
    }
    source.push_str("  return x;\n}\n");
    let cancel = CancellationToken::new();
    let running = tokio::spawn({
        let (exec, cancel) = (Arc::clone(&exec), cancel.clone());
        async move { exec.run(task(GCC, &spec(&["-O2"], "big.c"), source.as_bytes()), cancel).await }
    });
    // Until cc1 runs on the file in the scratch root.
    let root = exec.scratch_root().to_owned();
    while !processes_naming(&root).iter().any(|p| p.contains("cc1")) {
        assert!(!running.is_finished(), "the compile ended before it could be cancelled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cancel.cancel();
    let r = running.await.unwrap();
    assert_eq!(internal_error(&r), "cancelled");
    assert_eq!(processes_naming(&root), Vec::<String>::new());
    assert_scratch_empty(&exec);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_time_limit_kills_the_compiler() {
    let parent = tempfile::tempdir().unwrap();
    let tools = tempfile::tempdir().unwrap();
    let child = tools.path().join("child");
    let hangs = script(tools.path(), "gcc", &format!("sleep 60 & echo $! > '{}'; wait", child.display()));
    // Long enough for the script to have forked and written its child's
    // pid on a loaded machine.
    let limits = ExecLimits { time_limit: Duration::from_secs(2), ..ExecLimits::default() };
    let exec = executor(parent.path(), Some(&hangs), limits);
    let r = exec.run(task(FAKE, &spec(&[], "a.c"), b"int x;\n"), CancellationToken::new()).await;
    assert_eq!(internal_error(&r), "timed out after 2s");
    assert!(!process::tests::pid_alive(read_pid(&child)));
    assert_scratch_empty(&exec);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_run_kills_its_compiler() {
    let parent = tempfile::tempdir().unwrap();
    let tools = tempfile::tempdir().unwrap();
    let child = tools.path().join("child");
    let hangs = script(tools.path(), "gcc", &format!("sleep 600 & echo $! > '{}'; wait", child.display()));
    let exec = Arc::new(executor(parent.path(), Some(&hangs), ExecLimits::default()));
    let running = tokio::spawn({
        let exec = Arc::clone(&exec);
        async move { exec.run(task(FAKE, &spec(&[], "a.c"), b"int x;\n"), CancellationToken::new()).await }
    });
    appears(&child).await;
    running.abort();
    assert!(running.await.unwrap_err().is_cancelled());
    // The task directory went with the future; the reaper finishes on its own.
    assert_scratch_empty(&exec);
    // The child would sleep for ten minutes; polled for at most a minute.
    let pid = read_pid(&child);
    let mut polls = 0;
    while process::tests::pid_alive(pid) {
        polls += 1;
        assert!(polls < 6000, "process {pid} of an abandoned run still runs");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(exec.running(), 0);
}

#[tokio::test]
async fn test_toolchain_answers_the_digest_of_the_source() {
    let parent = tempfile::tempdir().unwrap();
    let exec = executor(parent.path(), None, ExecLimits::default());
    let key = test_toolchain().key();
    let source = b"int main(void) { return 0; }\n".repeat(100);
    let r = exec.run(task(key, &spec(&["-O2", "-g"], "a.c"), &source), CancellationToken::new()).await;
    assert_eq!((&r.header.outcome, r.header.exit_status), (&Outcome::Success, 0));
    assert!(r.header.stdout.is_empty() && r.header.stderr.is_empty());
    let object = object_of(&r);
    assert_eq!(object, test_object(&source));
    let text = String::from_utf8(object).unwrap();
    assert_eq!(text, format!("ccroute-test-object\n{}\n", blake3::hash(&source).to_hex()));

    let r = exec.run(task(key, &spec(&["-fplugin=x.so"], "a.c"), &source), CancellationToken::new()).await;
    assert!(internal_error(&r).starts_with("refused argument \"-fplugin=x.so\""));
    let r = exec.run(task(key, &spec(&["-sleep=soon"], "a.c"), &source), CancellationToken::new()).await;
    assert_eq!(internal_error(&r), "invalid test-toolchain argument \"-sleep=soon\": expected -sleep=<milliseconds>");
    // Large sources go through the blocking pool; same answer.
    let large = vec![7u8; (INLINE_DECOMPRESS as usize) * 2];
    let r = exec.run(task(key, &spec(&[], "a.c"), &large), CancellationToken::new()).await;
    assert_eq!(object_of(&r), test_object(&large));
    assert_scratch_empty(&exec);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn test_toolchain_sleeps_until_cancelled_or_out_of_time() {
    let parent = tempfile::tempdir().unwrap();
    let limits = ExecLimits { time_limit: Duration::from_secs(5), ..ExecLimits::default() };
    let exec = Arc::new(executor(parent.path(), None, limits));
    let key = test_toolchain().key();

    let r = exec.run(task(key, &spec(&["-sleep=60000"], "a.c"), b"x"), CancellationToken::new()).await;
    assert_eq!(internal_error(&r), "timed out after 5s");
    let r = exec.run(task(key, &spec(&["-sleep=4000"], "a.c"), b"x"), CancellationToken::new()).await;
    assert_eq!(r.header.outcome, Outcome::Success);
    let unlimited = ExecutorConfig {
        scratch_parent: parent.path().to_owned(),
        limits: ExecLimits { time_limit: Duration::MAX, ..ExecLimits::default() },
        ..ExecutorConfig::default()
    };
    let unlimited = Executor::new(unlimited).unwrap();
    let r = unlimited.run(task(key, &spec(&["-sleep=1"], "a.c"), b"x"), CancellationToken::new()).await;
    assert_eq!(r.header.outcome, Outcome::Success);

    let cancel = CancellationToken::new();
    let running = tokio::spawn({
        let (exec, cancel) = (Arc::clone(&exec), cancel.clone());
        async move { exec.run(task(key, &spec(&["-sleep=60000"], "a.c"), b"x"), cancel).await }
    });
    while exec.running() == 0 {
        tokio::task::yield_now().await;
    }
    cancel.cancel();
    assert_eq!(internal_error(&running.await.unwrap()), "cancelled");
    assert_eq!(exec.running(), 0);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn fifty_concurrent_test_tasks_all_complete() {
    let parent = tempfile::tempdir().unwrap();
    let exec = Arc::new(executor(parent.path(), None, ExecLimits::default()));
    let key = test_toolchain().key();
    let mut handles = Vec::new();
    for i in 0..50u32 {
        let exec = Arc::clone(&exec);
        let source = format!("int v{i} = {i};\n").repeat(i as usize + 1).into_bytes();
        let sleep = format!("-sleep={}", 1000 + i);
        handles.push(tokio::spawn(async move {
            let r = exec.run(task(key, &spec(&[&sleep], "a.c"), &source), CancellationToken::new()).await;
            (r, source)
        }));
    }
    // All fifty are in flight at once before any sleep ends.
    while exec.running() < 50 {
        tokio::task::yield_now().await;
    }
    let mut ok = 0;
    for h in handles {
        let (r, source) = h.await.unwrap();
        assert_eq!(r.header.outcome, Outcome::Success);
        assert_eq!(object_of(&r), test_object(&source));
        ok += 1;
    }
    assert_eq!((ok, exec.running()), (50, 0));
}

#[test]
fn the_scratch_root_goes_with_the_executor() {
    let parent = tempfile::tempdir().unwrap();
    let exec = Executor::new(ExecutorConfig { scratch_parent: parent.path().to_owned(), ..ExecutorConfig::default() })
        .unwrap();
    let root = exec.scratch_root().to_owned();
    assert!(root.is_dir() && root.starts_with(fs::canonicalize(parent.path()).unwrap()));
    assert!(root.file_name().unwrap().to_str().unwrap().starts_with(&format!("{ROOT_PREFIX}{}-", std::process::id())));
    drop(exec);
    assert!(!root.exists());
}

/// bwrap that cannot make the sandbox (it says `bwrap: ...` and exits 1
/// before the compiler runs) is the agent's failure, which the consumerd
/// answers by compiling the unit itself; a compiler's own failure inside a
/// working sandbox stays the compile's result.
#[test]
fn a_sandbox_that_cannot_be_made_is_the_agents_failure_not_the_compiles() {
    use std::os::unix::process::ExitStatusExt;
    let ran = |code: i32, stderr: &[u8]| super::process::Finished {
        status: std::process::ExitStatus::from_raw(code << 8),
        stdout: Vec::new(),
        stderr: stderr.to_vec(),
        cpu_time_us: 0,
    };
    let e = super::sandbox_set_up(ran(1, b"bwrap: Can't mount proc on /newroot/proc: Operation not permitted\n"))
        .unwrap_err();
    assert!(matches!(&e, TaskError::Sandbox(why) if why.contains("Can't mount proc")), "{e:?}");
    let compile_error = ran(1, b"a.c:1:1: error: expected ';' before '}' token\n");
    assert!(super::sandbox_set_up(compile_error).is_ok());
    assert!(super::sandbox_set_up(ran(0, b"bwrap: a warning the compile survived\n")).is_ok());
}

/// A tmpfs of a few KiB on a fresh directory, unmounted when dropped.
struct SmallTmpfs {
    dir: tempfile::TempDir,
}

impl SmallTmpfs {
    /// Mounts one of `kib` KiB, or says why it cannot (mounting needs root).
    fn mount(kib: u32) -> Result<SmallTmpfs, String> {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(SmallTmpfs { dir })
    }

    /// Fills it up to `left` bytes free.
    fn fill(&self, left: u64) {
        let free = free_bytes(self.dir.path()).unwrap();
        fs::write(self.dir.path().join("fill"), vec![1u8; (free - left) as usize]).unwrap();
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_the_compiler_blames_on_the_machine_is_an_internal_error() {
    let parent = tempfile::tempdir().unwrap();
    let tools = tempfile::tempdir().unwrap();
    let said = "x.s: Fatal error: can't write 4096 bytes to section .text of out.o: 'No space left on device'";
    let full = script(tools.path(), "gcc", &format!("echo \"{said}\" >&2; exit 1"));
    let exec = executor(parent.path(), Some(&full), ExecLimits::default());
    let r = exec.run(task(FAKE, &spec(&[], "a.c"), b"int x;\n"), CancellationToken::new()).await;
    let why = internal_error(&r);
    assert!(why.starts_with("the compile failed in a way that may be this agent's") && why.contains(said), "{why}");
    // An internal compiler error, exit 4 (gcc's own status for it).
    let ice = script(tools.path(), "gcc", "echo 'a.c:1:1: internal compiler error: Segmentation fault' >&2; exit 4");
    let exec = executor(parent.path(), Some(&ice), ExecLimits::default());
    let r = exec.run(task(FAKE, &spec(&[], "a.c"), b"int x;\n"), CancellationToken::new()).await;
    assert!(internal_error(&r).contains("internal compiler error"), "{}", internal_error(&r));
    assert_scratch_empty(&exec);
}

/// gcc on a scratch filesystem that fills up mid-compile fails with exit 1
/// as if the source were wrong; the agent answers it as its own failure (the
/// consumerd compiles the unit locally, nothing is cached), and also any
/// failure on a scratch with under [`SCRATCH_LOW`] free, whatever the
/// compiler said (its words may be in the user's language).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_scratch_disk_is_the_agents_failure_not_the_sources() {
    let tmpfs = match SmallTmpfs::mount(2048) {
        Ok(t) => t,
        Err(why) => return crate::test_env::lacking("root", &format!("cannot mount a tmpfs: {why}")),
    };
    let tools = tempfile::tempdir().unwrap();
    let plain = script(tools.path(), "gcc", "echo 'a.c:1:1: error: expected something' >&2; exit 1");
    let exec = executor(tmpfs.dir.path(), Some(&plain), ExecLimits::default());
    let p = project();
    fs::write(p.path().join("src/big.c"), "char big[600000] = {1};\nint g(int i) { return big[i]; }\n").unwrap();
    let args = ["-O2", "-c", "src/big.c", "-o", "obj/big.o"];
    let (t, _, _) = consumerd_task("/usr/bin/gcc", GCC, p.path(), &args);
    let r = exec.run(t, CancellationToken::new()).await;
    assert_eq!(r.header.outcome, Outcome::Success, "with room: {}", String::from_utf8_lossy(&r.header.stderr));
    tmpfs.fill(128 << 10);
    let (t, _, _) = consumerd_task("/usr/bin/gcc", GCC, p.path(), &args);
    let r = exec.run(t, CancellationToken::new()).await;
    let why = internal_error(&r);
    assert!(why.contains("No space left on device"), "{why}");
    let r = exec.run(task(FAKE, &spec(&[], "a.c"), b"int x;\n"), CancellationToken::new()).await;
    let why = internal_error(&r);
    assert!(why.contains("exit status 1 with") && why.contains("KiB free on the scratch filesystem"), "{why}");
    assert_scratch_empty(&exec);
}
