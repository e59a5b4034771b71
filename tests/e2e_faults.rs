//! The scheduler dies and comes back: its peers learn it at once and are
//! back within about half a second of it listening again.
//!
//! - Restarted at once (`kill -9`, then a new process on the same address):
//!   the new scheduler answers the old connections' packets with stateless
//!   resets its peers recognise (the reset key is derived from its
//!   certificate's key), so they drop the dead connection on its next packet
//!   instead of waiting out their idle timeout.
//! - Down for longer than the idle timeout: the peers knock every 0.5 s while
//!   nothing answers, instead of backing off or waiting on a retransmission
//!   timer.
//!
//! The times are printed, not asserted (this machine is shared); what is
//! asserted is the mechanism, from the peers' own log lines.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::Cluster;

#[test]
fn a_restarted_scheduler_has_its_agents_and_consumerds_back_at_once() {
    let mut c = Cluster::new();
    let addr = c.start_scheduler(&["--no-cache"]);
    c.start_agent(&["--test-toolchain", "--no-discover"]);
    c.start_consumerd(2, false);
    c.wait_ready(1);
    let listen = addr.to_string();
    // Connections that have worked a while are dialled again at once.
    std::thread::sleep(Duration::from_secs(2));

    // Killed and restarted at once.
    c.scheduler.as_mut().unwrap().kill();
    let t = Instant::now();
    c.start_scheduler_as("scheduler-2", &listen, &["--no-cache"]);
    let listening = t.elapsed();
    c.wait_ready(1);
    let at_once = t.elapsed() - listening;
    let agent_log = c.agents[0].log_text();
    let consumerd_log = c.consumerd.as_ref().unwrap().log_text();
    for (who, log) in [("agent", &agent_log), ("consumerd", &consumerd_log)] {
        let lost = log.lines().find(|l| l.contains("connection lost") || l.contains("connection ended"));
        let lost = lost.unwrap_or_else(|| panic!("the {who} never noticed the restart\n{}", c.logs()));
        assert!(
            lost.contains("reset by peer"),
            "the {who} learnt of the restart otherwise than from the new scheduler's reset: {lost}\n{}",
            c.logs()
        );
    }

    // Down for 12 s, past every idle timeout and the 5 s after which a
    // knocking peer says so: the peers knock until it is back.
    std::thread::sleep(Duration::from_secs(2));
    c.scheduler.as_mut().unwrap().kill();
    std::thread::sleep(Duration::from_secs(12));
    let t = Instant::now();
    c.start_scheduler_as("scheduler-3", &listen, &["--no-cache"]);
    let listening = t.elapsed();
    c.wait_ready(1);
    let after_down = t.elapsed() - listening;
    for (who, daemon) in [("agent", &c.agents[0]), ("consumerd", c.consumerd.as_ref().unwrap())] {
        let log = daemon.log_text();
        assert!(
            log.contains("no answer from the scheduler; knocking"),
            "the {who} did not knock while the scheduler was down\n{}",
            c.logs()
        );
    }
    eprintln!(
        "both peers back (status lists them), after the new scheduler listened: restarted at once {:.0} ms, \
         after 12 s down {:.0} ms",
        at_once.as_secs_f64() * 1e3,
        after_down.as_secs_f64() * 1e3
    );
}
