//! The consumerd's local side with real wrapper processes and real gcc:
//! arbitration, the remote path behind a test [`Remote`] that compiles the
//! way an agent does, fallbacks, and a consumerd started by a wrapper.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Output};
use std::sync::atomic::AtomicUsize;
use std::time::Instant;

use super::*;
use crate::cc::{agent_command, validate};
use crate::wrapper::tests::{
    compile_args, consumerd_starter, outcome, plain_gcc, project, wrapped, wrapper_command, BAD_C, CHILD_STARTER_ENV,
    WARN_C,
};
use tokio_util::sync::CancellationToken;

const LONG: Duration = Duration::from_secs(60);
/// Set in a consumerd child: its behaviour (`no-remote`, `hang`).
const CHILD_MODE_ENV: &str = "CCROUTE_TEST_CONSUMERD";
/// Where a hanging child's remote marks that a compile reached it.
const CHILD_MARK_ENV: &str = "CCROUTE_TEST_MARK";

/// A remote side that compiles with the local gcc, laid out as an agent
/// lays a compile out, in a scratch directory of its own.
struct GccRemote {
    window: watch::Sender<u32>,
    calls: AtomicUsize,
    /// Never answers; creates this file when a compile arrives.
    hang: Option<PathBuf>,
}

impl GccRemote {
    fn new(window: u32) -> Arc<GccRemote> {
        Arc::new(GccRemote { window: watch::Sender::new(window), calls: AtomicUsize::new(0), hang: None })
    }
}

impl Remote for GccRemote {
    fn compile(&self, job: RemoteJob) -> BoxFuture<Result<Compiled, RemoteError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if let Some(mark) = &self.hang {
            std::fs::write(mark, job.spec.input_path.as_bytes()).unwrap();
            return Box::pin(std::future::pending());
        }
        Box::pin(async move { tokio::task::spawn_blocking(move || compile_like_an_agent(&job)).await.unwrap() })
    }

    fn window(&self) -> watch::Receiver<u32> {
        self.window.subscribe()
    }
}

fn compile_like_an_agent(job: &RemoteJob) -> Result<Compiled, RemoteError> {
    validate(&job.spec).map_err(|e| RemoteError::Agent(e.to_string()))?;
    assert_eq!(job.toolchain.compiler, "gcc");
    let scratch = tempfile::tempdir().unwrap();
    let cmd = agent_command(&job.spec, Path::new("/usr/bin/gcc"), scratch.path())
        .map_err(|e| RemoteError::Agent(e.to_string()))?;
    cmd.write_inputs(&job.text).map_err(|e| RemoteError::Agent(e.to_string()))?;
    let out = Command::new(&cmd.program).args(&cmd.args).current_dir(&cmd.cwd).output().unwrap();
    let object = if out.status.success() { std::fs::read(&cmd.object_path).unwrap() } else { vec![] };
    Ok(Compiled {
        exit_status: out.status.code().unwrap_or(1),
        parts: CompiledParts {
            stdout: out.stdout.into(),
            stderr: cmd.rewrite_output(&out.stderr).into(),
            object: object.into(),
        },
        cached: false,
        from_inputs: false,
        text_because: None,
    })
}

/// A consumerd on a thread of its own, shut down when dropped.
struct Running {
    stats: Arc<Stats>,
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<Ended>>,
}

impl Running {
    fn start(socket: &Path, local_slots: u32, remote: Arc<dyn Remote>) -> Running {
        Self::start_with(socket, local_slots, remote, |_| {})
    }

    fn start_with(
        socket: &Path,
        local_slots: u32,
        remote: Arc<dyn Remote>,
        tweak: impl FnOnce(&mut Config),
    ) -> Running {
        let mut config = Config::new(SocketPath::explicit(socket));
        config.local_slots = local_slots;
        // These tests are about slots and the remote path; the direct-mode
        // cache has its own (tests/e2e_direct.rs), and none writes to the
        // user's cache directory.
        config.cache_dir = None;
        tweak(&mut config);
        let consumerd = Consumerd::bind(config).unwrap();
        let stats = consumerd.stats();
        let stop = CancellationToken::new();
        let shutdown = stop.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(consumerd.serve(remote, shutdown))
        });
        Running { stats, stop, thread: Some(thread) }
    }

    /// Waits until `pred` holds for the counters.
    fn wait_for(&self, what: &str, pred: impl Fn(&StatsSnapshot) -> bool) {
        let deadline = Instant::now() + LONG;
        while !pred(&self.stats.snapshot()) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}: {:?}", self.stats.snapshot());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn stop(&mut self) -> Ended {
        self.stop.cancel();
        self.thread.take().map(|t| t.join().unwrap()).unwrap_or(Ended::Shutdown)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A gcc stand-in (named gcc, so it classifies as one) that logs when each
/// compile proper starts (`S`) and ends (`E`), holds it `pause` seconds,
/// and, with `gate`, until that file exists. Preprocessing and queries pass straight through.
fn logging_gcc(dir: &Path, pause: &str, gate: Option<&Path>) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.join("compiles.log");
    let gate = gate
        .map(|g| format!("n=0; while [ ! -e '{}' ] && [ $n -lt 3000 ]; do sleep 0.02; n=$((n+1)); done", g.display()));
    let script = format!(
        "#!/bin/sh\ncase \" $* \" in *\" -E \"*) exec /usr/bin/gcc \"$@\";; *\" -c \"*) ;; *) exec /usr/bin/gcc \"$@\";; esac\n\
         echo \"S $$\" >> '{log}'\n{gate}\nsleep {pause}\n/usr/bin/gcc \"$@\"\nrc=$?\necho \"E $$\" >> '{log}'\nexit $rc\n",
        log = log.display(),
        gate = gate.unwrap_or_default(),
    );
    let path = bin.join("gcc");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Compiles proper that the stand-in ran, and the most that ran at once.
fn local_compiles(dir: &Path) -> (usize, usize) {
    let log = std::fs::read_to_string(dir.join("compiles.log")).unwrap_or_default();
    let (mut running, mut peak, mut starts) = (0usize, 0usize, 0usize);
    for line in log.lines() {
        if line.starts_with('S') {
            starts += 1;
            running += 1;
            peak = peak.max(running);
        } else {
            running -= 1;
        }
    }
    (starts, peak)
}

fn sources(n: usize) -> Vec<(String, String)> {
    (0..n).map(|i| (format!("u{i}.c"), WARN_C.replace("int g(", &format!("int g{i}(")))).collect()
}

fn spawn_all(dir: &Path, socket: &Path, compiler: &Path, n: usize) -> Vec<Child> {
    (0..n).map(|i| wrapped(dir, socket, compiler.to_str().unwrap(), &format!("u{i}")).spawn().unwrap()).collect()
}

fn finish(children: Vec<Child>) -> Vec<Output> {
    children.into_iter().map(|c| c.wait_with_output().unwrap()).collect()
}

#[test]
fn without_a_scheduler_two_local_slots_run_eight_compiles_two_at_a_time() {
    let srcs = sources(8);
    let refs: Vec<(&str, &str)> = srcs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let dir = project(&refs);
    let gcc = logging_gcc(dir.path(), "0.2", None);
    let socket = dir.path().join("consumerd.sock");
    let running = Running::start(&socket, 2, Arc::new(NoRemote::new()));
    let outputs = finish(spawn_all(dir.path(), &socket, &gcc, 8));
    let (starts, peak) = local_compiles(dir.path());
    assert_eq!(starts, 8);
    assert!(peak <= 2, "{peak} compiles ran at once with 2 local slots");
    for (i, out) in outputs.into_iter().enumerate() {
        let stem = format!("u{i}");
        let got = outcome(out, dir.path(), &stem);
        assert_eq!(got, plain_gcc(dir.path(), &stem), "{stem}");
    }
    let s = running.stats.snapshot();
    assert_eq!((s.local, s.remote, s.fallbacks), (8, 0, 0));
    assert!(s.peak_local <= 2 && s.peak_remote == 0, "{s:?}");
    running.wait_for("all connections closed", |s| s.in_flight == 0 && s.local_running == 0);
}

#[test]
fn with_a_remote_window_compiles_split_and_remote_objects_are_identical() {
    let srcs = sources(8);
    let refs: Vec<(&str, &str)> = srcs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let dir = project(&refs);
    let gate = dir.path().join("go");
    let gcc = logging_gcc(dir.path(), "0", Some(&gate));
    let socket = dir.path().join("consumerd.sock");
    let remote = GccRemote::new(4);
    let running = Running::start(&socket, 2, remote.clone());
    let children = spawn_all(dir.path(), &socket, &gcc, 8);
    // The first two hold the local slots (their compiles wait at the gate);
    // the other six go through the window of four.
    running.wait_for("six remote results", |s| s.remote == 6 && s.local_running == 2);
    std::fs::write(&gate, "").unwrap();
    let outputs = finish(children);
    let s = running.stats.snapshot();
    assert_eq!((s.local, s.remote, s.fallbacks), (2, 6, 0), "{s:?}");
    assert!(s.peak_remote <= 4, "{s:?}");
    assert_eq!(remote.calls.load(Ordering::SeqCst), 6);
    assert_eq!(local_compiles(dir.path()).0, 2);
    for (i, out) in outputs.into_iter().enumerate() {
        let stem = format!("u{i}");
        let got = outcome(out, dir.path(), &stem);
        // Object, dependency file, and diagnostics (each warning once) as plain gcc.
        assert_eq!(got, plain_gcc(dir.path(), &stem), "{stem}");
        assert!(got.stderr.matches("warning: unused variable").count() == 1, "{}", got.stderr);
        assert!(got.deps.is_some());
    }
}

/// Holds the only local slot of a consumerd: a raw client that got `RunLocally`.
fn hold_local_slot(socket: &Path) -> std::os::unix::net::UnixStream {
    use ccroute_wire::local::{Job, WrapperMsg, LOCAL_PROTOCOL_VERSION};
    let s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    let job = Job {
        version: LOCAL_PROTOCOL_VERSION,
        compiler: b"/usr/bin/gcc".to_vec(),
        spec: TaskSpec { args: vec![], input_path: "x.c".into(), cwd: None, env: vec![], inputs: None },
        pid: 0,
        direct: None,
        inputs_args: None,
        text_refused: None,
    };
    let mut session = crate::wrapper::session::Session::new(s.try_clone().unwrap());
    session.send(&WrapperMsg::Job(job), b"").unwrap();
    let f = session.recv().unwrap();
    assert!(matches!(f.message, ccroute_wire::local::ConsumerdMsg::RunLocally { .. }), "{:?}", f.message);
    s
}

#[test]
fn a_remote_compile_error_has_the_local_status_and_stderr() {
    let dir = project(&[("bad.c", BAD_C)]);
    let socket = dir.path().join("consumerd.sock");
    let remote = GccRemote::new(4);
    let running = Running::start(&socket, 1, remote.clone());
    let _slot = hold_local_slot(&socket);
    let got = outcome(wrapped(dir.path(), &socket, "gcc", "bad").output().unwrap(), dir.path(), "bad");
    assert_eq!(remote.calls.load(Ordering::SeqCst), 1, "went remote");
    let expected = plain_gcc(dir.path(), "bad");
    assert_eq!(expected.status, Some(1));
    assert_eq!(got, expected);
    assert_eq!(running.stats.snapshot().remote, 1);
}

#[test]
fn a_local_compile_error_has_the_local_status_and_stderr() {
    let dir = project(&[("bad.c", BAD_C)]);
    let socket = dir.path().join("consumerd.sock");
    let running = Running::start(&socket, 1, Arc::new(NoRemote::new()));
    let got = outcome(wrapped(dir.path(), &socket, "gcc", "bad").output().unwrap(), dir.path(), "bad");
    assert_eq!(got, plain_gcc(dir.path(), "bad"));
    assert_eq!(running.stats.snapshot().local, 1);
}

#[test]
fn abandoned_and_failed_remote_compiles_wait_for_a_local_slot() {
    // A pragma the preprocessor would consume: the wrapper abandons remote.
    let pragma = "#pragma push_macro(\"X\")\n#define X 1\n#pragma pop_macro(\"X\")\nint v;\n";
    let dir = project(&[("p.c", pragma), ("w.c", WARN_C)]);
    let socket = dir.path().join("consumerd.sock");

    /// Fails every compile.
    struct Failing(watch::Sender<u32>);
    impl Remote for Failing {
        fn compile(&self, _job: RemoteJob) -> BoxFuture<Result<Compiled, RemoteError>> {
            Box::pin(async { Err(RemoteError::SentBack(ccroute_wire::RetryReason::NoAgents)) })
        }
        fn window(&self) -> watch::Receiver<u32> {
            self.0.subscribe()
        }
    }
    let running = Running::start(&socket, 1, Arc::new(Failing(watch::Sender::new(2))));
    let slot = hold_local_slot(&socket);
    let p = wrapped(dir.path(), &socket, "gcc", "p").spawn().unwrap();
    let w = wrapped(dir.path(), &socket, "gcc", "w").spawn().unwrap();
    // Both got a remote slot, gave it back, and now wait for the local one.
    running.wait_for("two waiting fallbacks", |s| s.waiting == 2 && s.remote_running == 0);
    drop(slot);
    let (p, w) = (p.wait_with_output().unwrap(), w.wait_with_output().unwrap());
    assert_eq!(outcome(p, dir.path(), "p"), plain_gcc(dir.path(), "p"));
    assert_eq!(outcome(w, dir.path(), "w"), plain_gcc(dir.path(), "w"));
    let s = running.stats.snapshot();
    assert_eq!((s.local, s.remote, s.fallbacks), (1, 0, 2), "{s:?}");
    assert!(s.peak_local <= 1);
}

#[test]
fn a_remote_compile_without_an_answer_falls_back_after_the_timeout() {
    let dir = project(&[("w.c", WARN_C)]);
    let socket = dir.path().join("consumerd.sock");
    let mark = dir.path().join("reached-remote");
    let remote = Arc::new(GccRemote { window: watch::Sender::new(1), calls: AtomicUsize::new(0), hang: Some(mark) });
    let running = Running::start_with(&socket, 1, remote.clone(), |c| c.remote_timeout = Duration::from_millis(200));
    let slot = hold_local_slot(&socket);
    let w = wrapped(dir.path(), &socket, "gcc", "w").spawn().unwrap();
    running.wait_for("the timed-out compile to wait for a local slot", |s| s.waiting == 1 && s.remote_running == 0);
    drop(slot);
    assert_eq!(outcome(w.wait_with_output().unwrap(), dir.path(), "w"), plain_gcc(dir.path(), "w"));
    assert_eq!(remote.calls.load(Ordering::SeqCst), 1);
    let s = running.stats.snapshot();
    assert_eq!((s.remote, s.fallbacks), (0, 1), "{s:?}");
}

#[test]
fn a_window_that_opens_sends_waiting_compiles_remote() {
    let dir = project(&[("w.c", WARN_C)]);
    let socket = dir.path().join("consumerd.sock");
    let remote = GccRemote::new(0);
    let running = Running::start(&socket, 1, remote.clone());
    let _slot = hold_local_slot(&socket);
    let w = wrapped(dir.path(), &socket, "gcc", "w").spawn().unwrap();
    running.wait_for("a waiting compile", |s| s.waiting == 1);
    remote.window.send_replace(1);
    assert_eq!(outcome(w.wait_with_output().unwrap(), dir.path(), "w"), plain_gcc(dir.path(), "w"));
    assert_eq!(running.stats.snapshot().remote, 1);
    assert_eq!(remote.calls.load(Ordering::SeqCst), 1);
}

/// A remote whose link fails under its first `fails` compiles (the window
/// closing with it, as a lost connection's does), then compiles as an agent.
struct FlakyLink {
    window: watch::Sender<u32>,
    calls: AtomicUsize,
    fails: usize,
}

impl Remote for FlakyLink {
    fn compile(&self, job: RemoteJob) -> BoxFuture<Result<Compiled, RemoteError>> {
        if self.calls.fetch_add(1, Ordering::SeqCst) < self.fails {
            self.window.send_replace(0);
            return Box::pin(async { Err(RemoteError::ConnectionLost) });
        }
        Box::pin(async move { tokio::task::spawn_blocking(move || compile_like_an_agent(&job)).await.unwrap() })
    }

    fn window(&self) -> watch::Receiver<u32> {
        self.window.subscribe()
    }
}

#[test]
fn a_compile_whose_link_failed_goes_remote_again_when_the_link_is_back_first() {
    let dir = project(&[("w.c", WARN_C)]);
    let socket = dir.path().join("consumerd.sock");
    let remote = Arc::new(FlakyLink { window: watch::Sender::new(1), calls: AtomicUsize::new(0), fails: 1 });
    let running = Running::start(&socket, 1, remote.clone());
    let _slot = hold_local_slot(&socket);
    let w = wrapped(dir.path(), &socket, "gcc", "w").spawn().unwrap();
    running.wait_for("a first failure", |_| remote.calls.load(Ordering::SeqCst) >= 1);
    // The link is back before the local slot frees (or the consumerd had not
    // yet seen it go when the failure came): the farm takes the unit again,
    // without the wrapper preprocessing again.
    remote.window.send_replace(1);
    running.wait_for("the compile to go remote again", |s| s.remote == 1);
    assert_eq!(outcome(w.wait_with_output().unwrap(), dir.path(), "w"), plain_gcc(dir.path(), "w"));
    assert_eq!(remote.calls.load(Ordering::SeqCst), 2);
    let s = running.stats.snapshot();
    assert_eq!((s.remote, s.fallbacks), (1, 0), "{s:?}");
}

#[test]
fn a_compile_goes_remote_again_once_and_then_waits_for_a_local_slot() {
    let dir = project(&[("w.c", WARN_C)]);
    let socket = dir.path().join("consumerd.sock");
    let remote = Arc::new(FlakyLink { window: watch::Sender::new(1), calls: AtomicUsize::new(0), fails: 2 });
    let running = Running::start(&socket, 1, remote.clone());
    let slot = hold_local_slot(&socket);
    let w = wrapped(dir.path(), &socket, "gcc", "w").spawn().unwrap();
    running.wait_for("a first failure", |_| remote.calls.load(Ordering::SeqCst) >= 1);
    remote.window.send_replace(1);
    running.wait_for("a second failure", |_| remote.calls.load(Ordering::SeqCst) == 2);
    // The window is open again, but a unit goes remote again only once.
    remote.window.send_replace(1);
    running.wait_for("the second failure to wait for a local slot", |s| s.waiting == 1 && s.remote_running == 0);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(remote.calls.load(Ordering::SeqCst), 2);
    drop(slot);
    assert_eq!(outcome(w.wait_with_output().unwrap(), dir.path(), "w"), plain_gcc(dir.path(), "w"));
    let s = running.stats.snapshot();
    assert_eq!((s.remote, s.fallbacks), (0, 1), "{s:?}");
}

/// Not a test of its own: the entry point of a consumerd child, started by
/// a wrapper child (through [`consumerd_starter`]) or by a test.
#[test]
#[ignore = "child-process entry point: tests run it as a child, with its mode in the environment"]
fn consumerd_child() {
    let Some(mode) = std::env::var_os(CHILD_MODE_ENV) else { return };
    let mut config = Config::new(SocketPath::from_env());
    config.cache_dir = None;
    config.idle_exit = Duration::from_millis(500);
    config.local_slots = 1;
    let remote: Arc<dyn Remote> = match mode.to_str() {
        Some("hang") => Arc::new(GccRemote {
            window: watch::Sender::new(4),
            calls: AtomicUsize::new(0),
            hang: std::env::var_os(CHILD_MARK_ENV).map(PathBuf::from),
        }),
        _ => Arc::new(NoRemote::new()),
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let code = match rt.block_on(async {
        Ok::<_, ConsumerdError>(Consumerd::bind(config)?.serve(remote, CancellationToken::new()).await)
    }) {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("ccroute: {e}");
            2
        }
    };
    std::process::exit(code);
}

fn wait_until(what: &str, pred: impl Fn() -> bool) {
    let deadline = Instant::now() + LONG;
    while !pred() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_wrapper_starts_a_consumerd_which_exits_when_idle() {
    let dir = project(&[("w.c", WARN_C)]);
    let socket = dir.path().join("run/consumerd.sock");
    let out = wrapped(dir.path(), &socket, "gcc", "w")
        .env(CHILD_STARTER_ENV, "1")
        .env(CHILD_MODE_ENV, "no-remote")
        .output()
        .unwrap();
    assert_eq!(outcome(out, dir.path(), "w"), plain_gcc(dir.path(), "w"));
    let log = std::fs::read_to_string(dir.path().join("run/consumerd.sock.log")).unwrap();
    assert!(log.contains("running 1 test"), "the started consumerd logs to its file: {log:?}");
    // It was there (it wrote its socket and log), and leaves when idle.
    wait_until("the consumerd's idle exit", || !socket.exists());
    // A second wrapper starts a new one.
    let out = wrapped(dir.path(), &socket, "gcc", "w")
        .env(CHILD_STARTER_ENV, "1")
        .env(CHILD_MODE_ENV, "no-remote")
        .output()
        .unwrap();
    assert_eq!(outcome(out, dir.path(), "w"), plain_gcc(dir.path(), "w"));
    wait_until("the second consumerd's idle exit", || !socket.exists());
}

#[test]
fn a_consumerd_killed_between_preprocess_and_compiled_means_a_local_compile() {
    let dir = project(&[("w.c", WARN_C)]);
    let socket = dir.path().join("consumerd.sock");
    let mark = dir.path().join("reached-remote");
    let starter = consumerd_starter();
    let mut consumerd = Command::new(&starter.program)
        .args(&starter.args)
        .env(crate::local_socket::SOCKET_ENV, &socket)
        .env(CHILD_MODE_ENV, "hang")
        .env(CHILD_MARK_ENV, &mark)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the consumerd's socket", || std::os::unix::net::UnixStream::connect(&socket).is_ok());
    // Its one local slot is taken, so the wrapper is sent remote.
    let mut args = vec!["gcc".to_owned()];
    args.extend(compile_args("w"));
    let slot = hold_local_slot(&socket);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let wrapper = wrapper_command(dir.path(), &socket, &argv).spawn().unwrap();
    wait_until("the remote compile to start", || mark.exists());
    consumerd.kill().unwrap();
    consumerd.wait().unwrap();
    drop(slot);
    let got = outcome(wrapper.wait_with_output().unwrap(), dir.path(), "w");
    assert_eq!(got, plain_gcc(dir.path(), "w"));
}

/// A gcc stand-in whose preprocessing of a unit (`-E`, not the identity
/// probe's `-dM`) logs its start (`P`) and end (`Q`) and takes `pause`
/// seconds; everything else is gcc's.
fn slow_preprocessing_gcc(dir: &Path, pause: &str) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.join("preprocess.log");
    let script = format!(
        "#!/bin/sh\ncase \" $* \" in *\" -dM \"*) exec /usr/bin/gcc \"$@\";; *\" -E \"*) ;; *) exec /usr/bin/gcc \"$@\";; esac\n\
         echo \"P $$ $*\" >> '{log}'\nsleep {pause}\n/usr/bin/gcc \"$@\"\nrc=$?\necho \"Q $$\" >> '{log}'\nexit $rc\n",
        log = log.display(),
    );
    let path = bin.join("gcc");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A window of eight remote slots has no more than `preprocess_slots`
/// wrappers preprocessing at once (the rest wait their turn with their
/// slot), and every unit still goes remote with gcc's own object.
#[test]
fn a_wide_window_runs_no_more_preprocessors_than_the_preprocess_slots() {
    let srcs = sources(8);
    let refs: Vec<(&str, &str)> = srcs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let dir = project(&refs);
    let gcc = slow_preprocessing_gcc(dir.path(), "0.3");
    let socket = dir.path().join("consumerd.sock");
    let remote = GccRemote::new(8);
    let running = Running::start_with(&socket, 1, remote.clone(), |c| c.preprocess_slots = 2);
    let _local = hold_local_slot(&socket);
    let outputs = finish(spawn_all(dir.path(), &socket, &gcc, 8));
    let log = std::fs::read_to_string(dir.path().join("preprocess.log")).unwrap();
    let (mut now, mut peak) = (0usize, 0usize);
    for line in log.lines() {
        if line.starts_with('P') {
            now += 1;
            peak = peak.max(now);
        } else {
            now -= 1;
        }
    }
    assert_eq!(log.lines().filter(|l| l.starts_with('P')).count(), 8, "{log}");
    assert!(peak <= 2, "{peak} wrappers preprocessed at once with 2 preprocess slots:\n{log}");
    let s = running.stats.snapshot();
    // The one local compile is the slot held above.
    assert_eq!((s.local, s.remote, s.fallbacks), (1, 8, 0), "{s:?}");
    assert_eq!(remote.calls.load(Ordering::SeqCst), 8);
    for (i, out) in outputs.into_iter().enumerate() {
        let stem = format!("u{i}");
        assert_eq!(outcome(out, dir.path(), &stem), plain_gcc(dir.path(), &stem), "{stem}");
    }
}
