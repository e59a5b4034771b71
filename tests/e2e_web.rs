//! The scheduler's live web view in a real headless Chromium during a real
//! build: the page lists every agent, shows their slots, updates itself
//! from the server's events, and its counters move from one load to the
//! next. A screenshot is left in the test's output folder
//! (`target/tmp/web-view.png`).
//!
//! With 200 real agent processes (the no-op test toolchain, long farm host
//! names, the optimizer's decisions beside them) in a laptop-sized window,
//! the page stays readable: each agent one line, the agents' table scrolling
//! in its own box, nothing wider than the window, the consumerds on the
//! first screen (`target/tmp/web-view-200.png`). Before the fix that came
//! with it, a long decision squeezed each row's slots onto two lines.
//!
//! The page is loaded with `?stop=3`: it closes its event stream after three
//! updates, so that Chromium's `--dump-dom` and `--screenshot` can take it
//! once it holds still.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{ccroute, Cluster};

fn chromium() -> &'static str {
    let found = Command::new("chromium").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(found, "chromium is not installed (./scripts/test installs it: apt-get install chromium)");
    "chromium"
}

/// The page after three updates: its DOM, or a screenshot at `png`.
fn load(url: &str, png: Option<&Path>) -> String {
    load_in(url, png, "1400,1000")
}

/// [`load`] in a window of `size` ("width,height" in pixels).
fn load_in(url: &str, png: Option<&Path>, size: &str) -> String {
    let mut cmd = Command::new(chromium());
    cmd.args([
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        &format!("--window-size={size}"),
        "--virtual-time-budget=15000",
    ]);
    match png {
        Some(p) => cmd.arg(format!("--screenshot={}", p.display())),
        None => cmd.arg("--dump-dom"),
    };
    // A page that never holds still (its script broken, say) keeps the
    // browser loading for ever: it is given a minute, then it fails. Its
    // output is read as it comes (a DOM of 200 agents outgrows a pipe).
    let mut child = cmd
        .arg(format!("{url}/?stop=3"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            String::from_utf8_lossy(&v).into_owned()
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (out, err) = (stdout.join().unwrap(), stderr.join().unwrap());
    match status {
        None => panic!("the page did not hold still within 60 s (its script broken?)\n{err}"),
        Some(s) => assert!(s.success(), "chromium: {err}"),
    }
    out
}

/// The number the page shows in the element with `id`.
fn figure(dom: &str, id: &str) -> Option<f64> {
    let at = dom.find(&format!("id=\"{id}\">"))? + id.len() + 6;
    let text: String = dom[at..].chars().take_while(|c| *c != '<').filter(|c| *c != ',').collect();
    text.trim().parse().ok()
}

#[test]
fn the_web_view_shows_the_farm_live_in_a_real_browser() {
    let mut c = Cluster::new();
    // Any free port, read back from its log.
    c.start_scheduler(&["--no-cache", "--no-optimizer", "--metrics", "127.0.0.1:0"]);
    let url = format!("http://{}", c.scheduler.as_ref().unwrap().metrics_addr());
    let agents = ["web-agent-1", "web-agent-2", "web-agent-3"];
    for name in agents {
        c.start_agent(&["--jobs", "1", "--name", name, "--no-shipping"]);
    }
    c.start_consumerd(1, true);
    c.wait_ready(agents.len());

    let dir = tempfile::tempdir().unwrap();
    common::slow_project(dir.path(), 40);
    let mut make = Command::new("make");
    make.current_dir(dir.path()).args(["-j6", "BUILD=out", &format!("CC={} gcc", ccroute().display())]);
    for (k, v) in c.wrapper_env() {
        make.env(k, v);
    }
    let child = make.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    // Under way: tasks have reached the scheduler.
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.status()["totals"]["requests"].as_u64() < Some(2) {
        assert!(Instant::now() < deadline, "the build never reached the scheduler\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(50));
    }

    let first = load(&url, None);
    for name in agents {
        assert!(first.contains(&format!("data-agent=\"{name}\"")), "agent {name} not listed:\n{first}");
    }
    assert!(first.contains("data-updates=\"3\""), "the page did not update itself three times:\n{first}");
    assert!(first.contains("stopped after 3 updates"), "{first}");
    // A busy slot is drawn in its consumerd's colour.
    assert!(first.contains("class=\"slot\" style=\"background:hsl("), "no busy slot drawn:\n{first}");
    let rate = figure(&first, "rate").unwrap_or_else(|| panic!("no tasks per second after three updates:\n{first}"));
    let requests = figure(&first, "requests").unwrap();

    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("web-view.png");
    let _ = std::fs::remove_file(&shot);
    load(&url, Some(&shot));
    assert!(std::fs::metadata(&shot).is_ok_and(|m| m.len() > 10_000), "no screenshot at {}", shot.display());

    let second = load(&url, None);
    let later = figure(&second, "requests").unwrap();
    assert!(later > requests, "the counters did not move: {requests} requests, then {later}");
    assert!(second.contains("class=\"file\""), "no last tasks listed:\n{second}");

    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "build: {}\n{}", String::from_utf8_lossy(&out.stderr), c.logs());
    eprintln!(
        "web view: {requests} then {later} requests, {rate} tasks/s on the page; screenshot at {}",
        shot.display()
    );
}

/// `data-NAME="N"` on the page's state element, set once it holds still.
fn measured(dom: &str, name: &str) -> i64 {
    let key = format!("data-{name}=\"");
    let at = dom.find(&key).unwrap_or_else(|| panic!("the page did not measure {name}:\n{dom}")) + key.len();
    dom[at..].split('"').next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{name} is not a number"))
}

#[test]
fn the_page_stays_readable_with_200_agents() {
    let mut c = Cluster::new();
    // The optimizer on: its decisions are the page's longest cells. Any
    // free port, read back from its log.
    c.start_scheduler(&["--no-cache", "--metrics", "127.0.0.1:0"]);
    let url = format!("http://{}", c.scheduler.as_ref().unwrap().metrics_addr());
    // Real agent processes on loopback (the no-op test toolchain: nothing
    // to compile, ~20 MB each), with a farm's names.
    const AGENTS: usize = 200;
    for i in 0..AGENTS {
        let name = format!("build-node-{i:03}.farm.example.net");
        c.start_agent_logged(
            &["--jobs", "8", "--name", &name, "--test-toolchain", "--no-discover", "--no-shipping"],
            Some("warn"),
        );
    }
    c.start_consumerd(1, true);
    c.wait_ready(AGENTS);

    // The screenshot first: it shows what a failed check below is about.
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("web-view-200.png");
    let _ = std::fs::remove_file(&shot);
    // A laptop's screen: the agents' column is narrower than its table.
    let size = "1100,900";
    load_in(&url, Some(&shot), size);
    assert!(std::fs::metadata(&shot).is_ok_and(|m| m.len() > 10_000), "no screenshot at {}", shot.display());
    let dom = load_in(&url, None, size);
    assert_eq!(measured(&dom, "rows"), AGENTS as i64, "every agent a row");
    assert!(dom.contains("200 agents, busiest slots first in each row"), "no note on a large farm:\n{dom}");
    let row = measured(&dom, "row-px");
    assert!(row <= 24, "an agent's row is {row} px high: one line each");
    let (boxed, view) = (measured(&dom, "box-px"), measured(&dom, "view-px"));
    assert!(boxed * 10 <= view * 6 + 20, "the agents' table ({boxed} px) scrolls in its own box of 60 % of {view} px");
    assert_eq!(measured(&dom, "overflow-x"), 0, "the page is wider than the window");
    let top = measured(&dom, "consumerds-top");
    assert!(top < view, "the consumerds ({top} px down) are on the first screen of {view} px");

    eprintln!(
        "web view with {AGENTS} agents: rows {row} px, table box {boxed} of {view} px; screenshot at {}",
        shot.display()
    );
}
