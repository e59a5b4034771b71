//! End-to-end test harness: real daemons (the `ccroute` binary) on
//! 127.0.0.1 with certificates made by `ccroute certs init`, in a temp dir
//! each test owns. Every child is killed when its handle drops; its stderr
//! goes to a log file that a failing test can print.

#![allow(dead_code, clippy::unwrap_used)]

pub mod project;
pub mod raw;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub fn ccroute() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ccroute"))
}

/// A daemon child; killed on drop.
pub struct Daemon {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Daemon {
    /// SIGKILL, at once.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait (SIGKILL after 15 s).
    pub fn stop(&mut self) {
        let pid = self.child.id();
        let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The address its metrics listener took, from its log line: start it
    /// with `--metrics 127.0.0.1:0` (a port picked here and passed down
    /// could be taken by another test in between).
    pub fn metrics_addr(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let log = self.log_text();
            let found = log.split("metrics on http://").nth(1).and_then(|rest| rest.split("/metrics").next());
            if let Some(addr) = found {
                return addr.to_owned();
            }
            assert!(Instant::now() < deadline, "{} logged no metrics address in 20 s\n{log}", self.name);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A cluster on loopback in a temp dir.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub tls: PathBuf,
    pub scheduler: Option<Daemon>,
    pub addr: Option<SocketAddr>,
    pub agents: Vec<Daemon>,
    pub consumerd: Option<Daemon>,
    pub socket: PathBuf,
}

impl Cluster {
    /// A temp dir with fresh certificates; nothing running.
    pub fn new() -> Cluster {
        let dir = tempfile::Builder::new().prefix("ccroute-e2e-").tempdir().unwrap();
        let tls = dir.path().join("tls");
        let out = Command::new(ccroute()).args(["certs", "init"]).arg(&tls).output().unwrap();
        assert!(out.status.success(), "certs init: {}", String::from_utf8_lossy(&out.stderr));
        let socket = dir.path().join("consumerd.sock");
        Cluster { dir, tls, scheduler: None, addr: None, agents: vec![], consumerd: None, socket }
    }

    /// `program` with this cluster's environment: its certificates and
    /// socket, its own config and cache directories (never the user's), and
    /// info logs.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("RUST_LOG", std::env::var("CCROUTE_TEST_LOG").unwrap_or_else(|_| "info".into()))
            .env("CCROUTE_TLS_DIR", &self.tls)
            .env("CCROUTE_SOCKET", &self.socket)
            .env_remove("CCROUTE_SCHEDULER")
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"))
            .env("XDG_CACHE_HOME", self.dir.path().join("cache-home"));
        cmd
    }

    fn spawn(&self, name: &str, args: &[&str]) -> Daemon {
        self.spawn_logged(name, args, None)
    }

    fn spawn_logged(&self, name: &str, args: &[&str], rust_log: Option<&str>) -> Daemon {
        self.spawn_in(name, args, rust_log, None)
    }

    /// [`Cluster::spawn_logged`], started in `cwd` when given (else where
    /// the test runs).
    fn spawn_in(&self, name: &str, args: &[&str], rust_log: Option<&str>, cwd: Option<&Path>) -> Daemon {
        let log = self.dir.path().join(format!("{name}.log"));
        let mut cmd = self.command(ccroute());
        if let Some(filter) = rust_log {
            cmd.env("RUST_LOG", filter);
        }
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        let child = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Daemon { name: name.into(), child, log }
    }

    /// Starts the scheduler on 127.0.0.1, port 0, and learns its address.
    pub fn start_scheduler(&mut self, extra: &[&str]) -> SocketAddr {
        self.start_scheduler_as("scheduler", "127.0.0.1:0", extra)
    }

    /// Starts a scheduler named `name` (its log file) listening on `listen`,
    /// in place of any before it, and learns its address.
    #[allow(dead_code)] // not every test file restarts the scheduler
    pub fn start_scheduler_as(&mut self, name: &str, listen: &str, extra: &[&str]) -> SocketAddr {
        let mut args = vec!["scheduler", "--listen", listen];
        args.extend_from_slice(extra);
        let mut d = self.spawn(name, &args);
        let stdout = d.child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let addr: SocketAddr = line
            .trim()
            .rsplit(' ')
            .next()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("scheduler did not say where it listens: {line:?}\n{}", d.log_text()));
        self.scheduler = Some(d);
        self.addr = Some(addr);
        addr
    }

    /// Starts an agent with `extra` flags.
    pub fn start_agent(&mut self, extra: &[&str]) -> usize {
        self.start_agent_logged(extra, None)
    }

    /// Starts an agent with `extra` flags, logging with the `RUST_LOG`
    /// filter `rust_log` (the cluster's default when `None`).
    pub fn start_agent_logged(&mut self, extra: &[&str], rust_log: Option<&str>) -> usize {
        self.start_agent_in(extra, rust_log, None)
    }

    fn start_agent_in(&mut self, extra: &[&str], rust_log: Option<&str>, cwd: Option<&Path>) -> usize {
        let addr = self.addr.unwrap().to_string();
        let mut args = vec!["agent", "--scheduler", addr.as_str()];
        args.extend_from_slice(extra);
        let n = self.agents.len();
        let d = self.spawn_in(&format!("agent{n}"), &args, rust_log, cwd);
        self.agents.push(d);
        n
    }

    /// Starts an agent with `extra` flags in the cluster's directory, so
    /// that relative paths among them are taken from there.
    #[allow(dead_code)] // not every test file gives an agent relative paths
    pub fn start_agent_in_cluster_dir(&mut self, extra: &[&str]) -> usize {
        let dir = self.dir.path().to_owned();
        self.start_agent_in(extra, None, Some(&dir))
    }

    /// Starts the consumerd with `local_jobs` local slots, talking to the
    /// scheduler if one runs.
    pub fn start_consumerd(&mut self, local_jobs: u32, prefer_remote: bool) {
        self.start_consumerd_with(local_jobs, prefer_remote, &[]);
    }

    /// [`Cluster::start_consumerd`] with `extra` flags.
    pub fn start_consumerd_with(&mut self, local_jobs: u32, prefer_remote: bool, extra: &[&str]) {
        let jobs = local_jobs.to_string();
        let mut args = vec!["consumerd", "--local-jobs", jobs.as_str(), "--idle-exit", "0"];
        args.extend_from_slice(extra);
        if prefer_remote {
            args.push("--prefer-remote");
        }
        let addr;
        if let Some(a) = self.addr {
            addr = a.to_string();
            args.push("--scheduler");
            args.push(addr.as_str());
        }
        let d = self.spawn("consumerd", &args);
        self.consumerd = Some(d);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.socket.exists() {
            assert!(
                Instant::now() < deadline,
                "consumerd never made its socket\n{}",
                self.consumerd.as_ref().unwrap().log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The scheduler's status as JSON.
    pub fn status(&self) -> serde_json::Value {
        self.try_status().unwrap_or_else(|e| panic!("status: {e}"))
    }

    /// The scheduler's status as JSON, or what `ccroute status` said.
    pub fn try_status(&self) -> Result<serde_json::Value, String> {
        let out = Command::new(ccroute())
            .args(["status", "--json", "--scheduler"])
            .arg(self.addr.unwrap().to_string())
            .env("CCROUTE_TLS_DIR", &self.tls)
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"))
            .output()
            .unwrap();
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(serde_json::from_slice(&out.stdout).unwrap())
    }

    /// Waits until `n` agents have joined and a consumerd (if running) has a
    /// non-zero remote limit. A status call that fails meanwhile (a
    /// scheduler busy admitting hundreds of agents can be late to answer an
    /// admin handshake) is tried again until the deadline.
    pub fn wait_ready(&self, agents: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = match self.try_status() {
                Ok(s) => s,
                Err(e) => {
                    assert!(Instant::now() < deadline, "cluster not ready: status: {e}\n{}", self.logs());
                    continue;
                }
            };
            let joined = s["agents"].as_array().map_or(0, Vec::len);
            let cd_ok = self.consumerd.is_none()
                || s["consumerds"].as_array().is_some_and(|c| c.iter().any(|c| c["remote_limit"].as_u64() > Some(0)));
            if joined == agents && cd_ok {
                return;
            }
            assert!(Instant::now() < deadline, "cluster not ready: {s}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Asserts that every task the scheduler took ended exactly once, and
    /// returns its totals.
    pub fn assert_each_task_ended_once(&self) -> serde_json::Value {
        let s = self.status();
        let t = &s["totals"];
        let total = |k: &str| t[k].as_u64().unwrap();
        assert_eq!(
            total("requests"),
            total("completed") + total("failed") + total("retried") + total("intercepted") + total("cancelled"),
            "every task ended exactly once: {t}"
        );
        t.clone()
    }

    /// Every daemon's log, for a failure message.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for d in self.scheduler.iter().chain(self.agents.iter()).chain(self.consumerd.iter()) {
            out.push_str(&format!("----- {} -----\n{}\n", d.name, d.log_text()));
        }
        out
    }

    /// Environment for wrapper runs against this cluster.
    pub fn wrapper_env(&self) -> Vec<(String, String)> {
        vec![
            ("CCROUTE_SOCKET".into(), self.socket.display().to_string()),
            ("CCROUTE_TLS_DIR".into(), self.tls.display().to_string()),
            ("XDG_CONFIG_HOME".into(), self.dir.path().join("config").display().to_string()),
            // A consumerd a wrapper starts keeps its cache here, never in the user's.
            ("XDG_CACHE_HOME".into(), self.dir.path().join("cache-home").display().to_string()),
        ]
    }
}

/// Runs make in `dir` with `args` and `env`; returns its output.
pub fn make(dir: &Path, args: &[String], env: &[(String, String)]) -> Output {
    let mut cmd = Command::new("make");
    cmd.current_dir(dir).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// The files under `dir` that `keep` picks; a directory that cannot be
/// read (not made yet, or removed meanwhile) holds none.
pub fn files(dir: &Path, keep: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for p in std::fs::read_dir(&d).into_iter().flatten().filter_map(Result::ok).map(|e| e.path()) {
            if p.is_dir() {
                stack.push(p);
            } else if keep(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// Whether `p` is an object file.
pub fn is_object(p: &Path) -> bool {
    p.extension().is_some_and(|x| x == "o")
}

/// Every `.o` under `dir`, by path relative to it.
pub fn objects(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    files(dir, is_object)
        .into_iter()
        .map(|p| (p.strip_prefix(dir).unwrap().to_path_buf(), std::fs::read(&p).unwrap()))
        .collect()
}

/// Asserts two object sets are byte-identical, naming the first that differs.
pub fn assert_same_objects(
    local: &std::collections::BTreeMap<PathBuf, Vec<u8>>,
    remote: &std::collections::BTreeMap<PathBuf, Vec<u8>>,
) {
    assert_eq!(local.keys().collect::<Vec<_>>(), remote.keys().collect::<Vec<_>>(), "different object files");
    for (path, bytes) in local {
        assert!(remote[path] == *bytes, "{} differs from the local build's", path.display());
    }
    assert!(!local.is_empty(), "no objects at all");
}

/// A project of `units` C files, each about half a second of gcc -O2, with
/// a Makefile that puts objects in `$(BUILD)`.
#[allow(dead_code)] // not every test file builds it
pub fn slow_project(dir: &Path, units: usize) {
    slow_project_of(dir, units, 250);
}

/// [`slow_project`] with one long function of `statements` pairs of
/// statements per file (250: about half a second of gcc -O2; 1,500: about
/// six; the time grows faster than the count).
#[allow(dead_code)] // not every test file builds it
pub fn slow_project_of(dir: &Path, units: usize, statements: usize) {
    let mut objs = Vec::new();
    for u in 0..units {
        let mut src = format!("static int g{u}(int x) {{\n");
        for i in 0..statements {
            src.push_str(&format!(
                "    x = x * {} + (x >> {}) ^ {};\n    if (x & {}) x += {};\n",
                i + 3 + u,
                i % 7 + 1,
                i * 17,
                1 << (i % 12),
                i
            ));
        }
        src.push_str(&format!("    return x;\n}}\nint unit{u}(int x) {{ return g{u}(x) + g{u}(x + 1); }}\n"));
        std::fs::write(dir.join(format!("u{u}.c")), src).unwrap();
        objs.push(format!("$(BUILD)/u{u}.o"));
    }
    let makefile = format!(
        "OBJS = {}\nall: $(OBJS)\n$(BUILD)/%.o: %.c\n\t@mkdir -p $(BUILD)\n\t$(CC) -O2 -c $< -o $@\n",
        objs.join(" ")
    );
    std::fs::write(dir.join("Makefile"), makefile).unwrap();
}
