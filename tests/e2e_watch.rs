//! `ccroute status --watch` in a real terminal: a detached tmux session on a
//! tmux server of the test's own runs it against a scheduler and an agent;
//! the pane shows the agent and the totals, keeps going when the scheduler
//! goes away, and the program ends — terminal restored — on `q` and on
//! Ctrl-C. Without a terminal it prints one report after another.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{ccroute, Cluster};

/// A tmux server of the test's own (`tmux -L`), with one session running a
/// command; killed on drop, pass or fail.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// Starts `shell_line` under bash in a detached 200x50 session.
    fn start(name: &str, env: &[(String, String)], shell_line: &str) -> Tmux {
        let t = Tmux { socket: format!("ccroute-test-{name}-{}", std::process::id()) };
        // A fresh server (no config file): its panes get this environment,
        // not the one of a server started earlier.
        let mut new = t.tmux();
        new.args(["-f", "/dev/null", "new-session", "-d", "-s", "w", "-x", "200", "-y", "50"]);
        for (k, v) in env {
            new.args(["-e", &format!("{k}={v}")]);
        }
        // bash, not sh: after Ctrl-C it goes on with the line when the
        // program it waited for exited of its own accord.
        new.args(["bash", "--norc", "--noprofile", "-c", shell_line]);
        let out = new.output().unwrap();
        assert!(out.status.success(), "tmux new-session: {}", String::from_utf8_lossy(&out.stderr));
        t
    }

    fn tmux(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]).stdin(Stdio::null());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.tmux().args(args).output().unwrap()
    }

    /// The pane's text.
    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "w"]).stdout).into_owned()
    }

    /// `tmux display -p FORMAT` for the pane.
    fn display(&self, format: &str) -> String {
        String::from_utf8_lossy(&self.run(&["display", "-p", "-t", "w", format]).stdout).trim().to_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "w"];
        args.extend_from_slice(keys);
        let out = self.run(&args);
        assert!(out.status.success(), "send-keys: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Waits up to `limit` for the screen to satisfy `ok`; the last screen.
    fn wait_screen(&self, limit: Duration, ok: impl Fn(&str) -> bool) -> Result<String, String> {
        let deadline = Instant::now() + limit;
        loop {
            let s = self.screen();
            if ok(&s) {
                return Ok(s);
            }
            if Instant::now() > deadline {
                return Err(s);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux().args(["kill-server"]).stdout(Stdio::null()).stderr(Stdio::null()).status();
    }
}

/// tmux must be there: a test that cannot run here fails, saying why.
fn need_tmux() {
    let found = Command::new("tmux").arg("-V").output().is_ok_and(|o| o.status.success());
    assert!(found, "tmux is not installed (./scripts/test installs it: apt-get install tmux)");
}

/// The watch's command line in the pane: after the watch, its exit status
/// and the terminal's modes go to `marks`, then "ended"; the pane then
/// stays (a dead pane's cursor is tmux's, not the program's).
fn watch_line(addr: &str, marks: &Path) -> String {
    format!(
        "{} status --watch --scheduler {addr}; echo \"exit=$?\" > {m}; stty -a >> {m}; echo ended >> {m}; exec sleep 600",
        ccroute().display(),
        m = marks.display()
    )
}

/// Asserts the watch ended within 10 s with status 0 and left the terminal
/// as it found it: canonical input and echo on, the main screen back, the
/// cursor shown.
fn ended_cleanly(t: &Tmux, marks: &Path, cluster: &Cluster) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let marks = loop {
        let text = std::fs::read_to_string(marks).unwrap_or_default();
        if text.ends_with("ended\n") {
            break text;
        }
        assert!(Instant::now() < deadline, "the watch did not end:\n{}\n{}", t.screen(), cluster.logs());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(marks.starts_with("exit=0\n"), "{marks}");
    let modes: Vec<&str> = marks.split_whitespace().collect();
    assert!(modes.contains(&"icanon") && modes.contains(&"echo"), "terminal left raw: {marks}");
    assert_eq!(t.display("#{alternate_on}"), "0", "still on the alternate screen");
    assert_eq!(t.display("#{cursor_flag}"), "1", "cursor still hidden");
}

fn cluster_env(cluster: &Cluster) -> Vec<(String, String)> {
    vec![
        ("CCROUTE_TLS_DIR".into(), cluster.tls.display().to_string()),
        ("XDG_CONFIG_HOME".into(), cluster.dir.path().join("config").display().to_string()),
        ("XDG_CACHE_HOME".into(), cluster.dir.path().join("cache-home").display().to_string()),
        ("TERM".into(), "xterm-256color".into()),
    ]
}

fn marks_file(cluster: &Cluster, name: &str) -> PathBuf {
    cluster.dir.path().join(format!("{name}.marks"))
}

#[test]
fn watch_shows_the_farm_and_quits_on_q() {
    need_tmux();
    let mut cluster = Cluster::new();
    let addr = cluster.start_scheduler(&[]).to_string();
    cluster.start_agent(&["--name", "watched-agent", "--jobs", "2"]);
    cluster.wait_ready(1);
    let marks = marks_file(&cluster, "q");
    let t = Tmux::start("q", &cluster_env(&cluster), &watch_line(&addr, &marks));
    let shown = t.wait_screen(Duration::from_secs(20), |s| s.contains("watched-agent") && s.contains("totals: "));
    let screen = shown.unwrap_or_else(|s| panic!("no agent and totals on the screen:\n{s}\n{}", cluster.logs()));
    assert!(screen.contains(&format!("scheduler {addr}")), "{screen}");
    assert_eq!(t.display("#{alternate_on}"), "1", "not on the alternate screen");
    // It redraws: the scheduler's uptime moves on.
    let uptime = |s: &str| s.lines().find_map(|l| l.split(" up ").nth(1)?.split('s').next()?.parse::<u64>().ok());
    let first = uptime(&screen).unwrap_or_else(|| panic!("no uptime:\n{screen}"));
    t.wait_screen(Duration::from_secs(10), |s| uptime(s).is_some_and(|u| u > first))
        .unwrap_or_else(|s| panic!("the screen was not redrawn:\n{s}"));
    t.keys(&["q"]);
    ended_cleanly(&t, &marks, &cluster);
}

#[test]
fn watch_outlives_the_scheduler_and_quits_on_ctrl_c() {
    need_tmux();
    let mut cluster = Cluster::new();
    let addr = cluster.start_scheduler(&[]).to_string();
    cluster.start_agent(&["--name", "watched-agent", "--jobs", "2"]);
    cluster.wait_ready(1);
    let marks = marks_file(&cluster, "ctrl-c");
    let t = Tmux::start("ctrl-c", &cluster_env(&cluster), &watch_line(&addr, &marks));
    t.wait_screen(Duration::from_secs(20), |s| s.contains("watched-agent"))
        .unwrap_or_else(|s| panic!("no agent on the screen:\n{s}\n{}", cluster.logs()));
    // Killed outright: no close reaches the watch, only silence.
    cluster.scheduler.as_mut().unwrap().kill();
    let away = t.wait_screen(Duration::from_secs(15), |s| s.contains("no answer from the scheduler"));
    let screen = away.unwrap_or_else(|s| panic!("the scheduler's absence is not shown:\n{s}"));
    // The last report stays below the news.
    assert!(screen.contains("watched-agent") && screen.contains("the last report"), "{screen}");
    t.keys(&["C-c"]);
    ended_cleanly(&t, &marks, &cluster);
}

#[test]
fn watch_into_a_pipe_prints_report_after_report() {
    let mut cluster = Cluster::new();
    let addr = cluster.start_scheduler(&[]).to_string();
    cluster.start_agent(&["--name", "piped-agent", "--jobs", "2"]);
    cluster.wait_ready(1);
    let mut child = cluster
        .command(ccroute())
        .args(["status", "--watch", "--scheduler", &addr])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Reads until three reports came, on a thread: the watch never ends by itself.
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut seen = String::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            seen.push_str(&line);
            seen.push('\n');
            if seen.matches("totals: ").count() >= 3 {
                break;
            }
        }
        seen
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !reader.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    // SIGTERM ends it as Ctrl-C does, with status 0 (so does the pipe the
    // reader closed).
    let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the watch did not end on SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let seen = reader.join().unwrap();
    assert_eq!(seen.matches("totals: ").count(), 3, "{seen}\n{}", cluster.logs());
    assert_eq!(seen.matches("\n---\n").count(), 2, "reports not separated:\n{seen}");
    assert_eq!(seen.matches("piped-agent").count(), 3, "{seen}");
    assert!(!seen.contains('\u{1b}'), "escape sequences into a pipe:\n{seen}");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
}
