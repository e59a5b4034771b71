//! A line on stderr while a command takes long: `ccroute: clearing the
//! cache... 3 s`, redrawn each second on a terminal and wiped when the work
//! ends; elsewhere (a log, CI) one summary line once it ends, and only when
//! it took [`SLOW`] or more.
//!
//! It shows elapsed time, not a fraction done: the one long command,
//! `ccroute cache clear` (about 10 s for 100,000 entries on a disk), does
//! its work in the consumerd, which answers only when it has finished (or,
//! with none running, in one `remove_dir_all`).

use std::io::Write;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Work shorter than this shows nothing.
pub const SLOW: Duration = Duration::from_secs(1);

/// Runs `work`, telling `out` (stderr in use; `tty` when it is a terminal)
/// that `label` is going on while it lasts past [`SLOW`].
///
/// While the line is on the terminal the ticker holds stdout's lock, and it
/// wipes the line before letting go: what `work` prints at its end (it
/// waits for the lock, a second at most) never lands behind the line.
pub fn while_running<T>(label: &str, tty: bool, out: impl Write + Send, work: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let (done, ended) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let ticker = scope.spawn(move || {
            let running = |wait: Duration| matches!(ended.recv_timeout(wait), Err(mpsc::RecvTimeoutError::Timeout));
            let mut out = out;
            if running(SLOW) && tty {
                loop {
                    let stdout = std::io::stdout().lock();
                    let elapsed = started.elapsed();
                    let _ = write!(out, "\r\x1b[Kccroute: {label}... {} s", elapsed.as_secs());
                    let _ = out.flush();
                    // Until the next whole second.
                    let more = running(SLOW - Duration::from_nanos(u64::from(elapsed.subsec_nanos())));
                    let _ = write!(out, "\r\x1b[K");
                    let _ = out.flush();
                    drop(stdout);
                    // A moment for a print waiting on the lock.
                    if !more || !running(Duration::from_millis(20)) {
                        break;
                    }
                }
            } else if !tty {
                while running(Duration::from_secs(3600)) {}
                let took = started.elapsed();
                if took >= SLOW {
                    let _ = writeln!(out, "ccroute: {label} took {:.1} s", took.as_secs_f64());
                    let _ = out.flush();
                }
            }
        });
        let result = work();
        drop(done);
        let _ = ticker.join();
        result
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::{Arc, Mutex};

    use super::*;

    /// A sink the test can read while the ticker writes.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Sink {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
        }
    }

    #[test]
    fn a_terminal_sees_the_time_go_by_then_a_clean_line() {
        let sink = Sink::default();
        let seen = sink.clone();
        let answer = while_running("clearing the cache", true, sink.clone(), || {
            // The work lasts until the line has shown (or a minute passed).
            let deadline = Instant::now() + Duration::from_secs(60);
            while !seen.text().contains("ccroute: clearing the cache... ") && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            42
        });
        assert_eq!(answer, 42);
        let text = sink.text();
        let first = text.strip_prefix("\r\x1b[Kccroute: clearing the cache... ").unwrap_or_else(|| panic!("{text:?}"));
        let secs: String = first.chars().take_while(char::is_ascii_digit).collect();
        assert!(secs.parse::<u64>().unwrap() >= 1 && first[secs.len()..].starts_with(" s"), "{text:?}");
        assert!(text.ends_with("\r\x1b[K"), "the line is left behind: {text:?}");
        assert!(!text.contains("took"), "{text:?}");
    }

    #[test]
    fn elsewhere_only_long_work_gets_a_summary() {
        let sink = Sink::default();
        while_running("clearing the cache", false, sink.clone(), || ());
        assert_eq!(sink.text(), "");
        while_running("clearing the cache", false, sink.clone(), || std::thread::sleep(SLOW + SLOW / 10));
        let text = sink.text();
        assert!(text.starts_with("ccroute: clearing the cache took ") && text.ends_with(" s\n"), "{text:?}");
        assert_eq!(text.lines().count(), 1, "{text:?}");
        assert!(!text.contains('\x1b'), "{text:?}");
    }
}
