//! The scheduler's live web view in a real headless Chromium during a real
//! build: the page lists every agent, shows their slots, updates itself
//! from the server's events, and its counters move from one load to the
//! next. A screenshot is left in the test's output folder
//! (`target/tmp/web-view.png`).
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
    let mut cmd = Command::new(chromium());
    cmd.args([
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1400,1000",
        "--virtual-time-budget=15000",
    ]);
    match png {
        Some(p) => cmd.arg(format!("--screenshot={}", p.display())),
        None => cmd.arg("--dump-dom"),
    };
    let out = cmd.arg(format!("{url}/?stop=3")).output().unwrap();
    assert!(out.status.success(), "chromium: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The number the page shows in the element with `id`.
fn figure(dom: &str, id: &str) -> Option<f64> {
    let at = dom.find(&format!("id=\"{id}\">"))? + id.len() + 6;
    let text: String = dom[at..].chars().take_while(|c| *c != '<').filter(|c| *c != ',').collect();
    text.trim().parse().ok()
}

#[test]
fn the_web_view_shows_the_farm_live_in_a_real_browser() {
    let listen =
        format!("127.0.0.1:{}", std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port());
    let url = format!("http://{listen}");
    let mut c = Cluster::new();
    c.start_scheduler(&["--no-cache", "--no-optimizer", "--metrics", &listen]);
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
