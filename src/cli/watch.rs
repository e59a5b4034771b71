//! `ccroute status --watch`: the status report, asked for every second over
//! one admin connection and shown in place until `q` or Ctrl-C.
//!
//! Where it goes decides how it is shown ([`Output`]):
//! - stdout a terminal: the alternate screen, redrawn from its top left
//!   corner each second (lines cut to the terminal's width and height), the
//!   cursor hidden, keys read one at a time (`stty -icanon -echo`: the
//!   workspace has no `unsafe` for termios); all of it undone on the way out,
//!   also on a panic ([`Terminal`]'s drop);
//! - stdout a pipe or a file: one report after another, each after a `---`
//!   line, so that `ccroute status --watch > log` keeps a history;
//! - `--json`: one JSON document per line, wherever it goes.
//!
//! When the scheduler does not answer within [`ANSWER_WAIT`] the connection
//! is dropped, the screen says so above the last report it had, and a new
//! connection is tried each second. Quitting never waits on the network:
//! `q`, Ctrl-C and SIGTERM end the wait at once.
//!
//! Left out: Ctrl-Z. A stopped watch gets the terminal back as the shell
//! leaves it (keys then need Enter); `q` then Enter still quits.

use std::io::{IsTerminal, Read, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ccroute_wire::StatusReport;
use tokio_util::sync::CancellationToken;

use super::status::{self, AdminLink};
use super::BoxError;
use crate::net::{self, Identity, TransportOptions};

/// Time between two questions.
pub const EVERY: Duration = Duration::from_secs(1);
/// How long a connection attempt, or an answer, may take before the
/// scheduler counts as away. Longer than any answer a live scheduler gives,
/// shorter than the transport's idle timeout.
pub const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// Runs the watch until `q`, Ctrl-C or SIGTERM; `json` prints JSON lines.
///
/// # Errors
/// Only when the client endpoint cannot be made: a scheduler that does not
/// answer is shown, not returned.
pub(crate) async fn run(addr: SocketAddr, identity: &Identity, json: bool) -> Result<(), BoxError> {
    let endpoint = net::client_endpoint(identity, &TransportOptions::default(), addr)?;
    let stop = super::signals();
    let stdin_is_tty = std::io::stdin().is_terminal();
    let mut output = if json {
        Output::Json
    } else if std::io::stdout().is_terminal() {
        Output::Screen(Terminal::enter(stdin_is_tty)?)
    } else {
        Output::Lines { shown: 0 }
    };
    if stdin_is_tty {
        read_keys(stop.clone());
    }
    let mut resized = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()).ok();
    let mut watch = Watch { addr, link: None, last: None, trouble: None };
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    output.show(&watch)?;
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            _ = tick.tick() => {
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = watch.refresh(&endpoint) => {}
                }
            }
            Some(()) = async { resized.as_mut()?.recv().await } => {
                if let Output::Screen(t) = &mut output {
                    t.size = terminal_size();
                }
            }
        }
        if !output.show(&watch)? {
            break; // stdout closed (`| head`): nothing more to show
        }
    }
    // The terminal first: quitting shows at once, whatever the network does.
    drop(output);
    if let Some(link) = watch.link.take() {
        let _ = tokio::time::timeout(ANSWER_WAIT, link.finish()).await;
    }
    net::shutdown(&endpoint, net::CloseReason::Done).await;
    Ok(())
}

/// What the watch knows: the connection, the last report, and what went
/// wrong since.
#[derive(Debug)]
struct Watch {
    addr: SocketAddr,
    link: Option<AdminLink>,
    /// The last report and when it came.
    last: Option<(StatusReport, Instant)>,
    /// Why the last attempt got no report, and since when it has none.
    trouble: Option<(String, Instant)>,
}

impl Watch {
    /// Asks for a report (connecting first if need be), within
    /// [`ANSWER_WAIT`] for each step; on failure drops the connection.
    async fn refresh(&mut self, endpoint: &net::Endpoint) {
        match self.ask(endpoint).await {
            Ok(report) => {
                self.last = Some((report, Instant::now()));
                self.trouble = None;
            }
            Err(why) => {
                self.link = None;
                let since = self.trouble.take().map_or_else(Instant::now, |(_, since)| since);
                self.trouble = Some((why, since));
            }
        }
    }

    async fn ask(&mut self, endpoint: &net::Endpoint) -> Result<StatusReport, String> {
        let waited = |what: &str| format!("no {what} within {} s", ANSWER_WAIT.as_secs());
        if self.link.is_none() {
            let link = tokio::time::timeout(ANSWER_WAIT, AdminLink::open(endpoint, self.addr))
                .await
                .map_err(|_| waited("connection"))?
                .map_err(|e| super::describe(&*e))?;
            self.link = Some(link);
        }
        let link = self.link.as_mut().ok_or("no connection")?;
        tokio::time::timeout(ANSWER_WAIT, link.status())
            .await
            .map_err(|_| waited("answer"))?
            .map_err(|e| super::describe(&*e))
    }

    /// The line that says the scheduler is away, if it is.
    fn trouble_line(&self) -> Option<String> {
        self.trouble.as_ref().map(|(why, since)| {
            format!(
                "no answer from the scheduler at {} for {} s ({why}); trying again every second",
                self.addr,
                since.elapsed().as_secs()
            )
        })
    }
}

/// Where the reports go.
#[derive(Debug)]
enum Output {
    /// A terminal, redrawn in place.
    Screen(Terminal),
    /// A pipe or a file: one report after another.
    Lines {
        /// Reports (or trouble lines) printed so far.
        shown: u64,
    },
    /// One JSON document per line.
    Json,
}

impl Output {
    /// Shows the watch's state; `Ok(false)` when stdout is gone.
    fn show(&mut self, w: &Watch) -> std::io::Result<bool> {
        let mut out = std::io::stdout().lock();
        let written = match self {
            Output::Screen(t) => out.write_all(t.frame(w).as_bytes()),
            Output::Lines { shown } => {
                let text = match (w.trouble_line(), &w.last) {
                    (Some(line), _) => format!("ccroute: {line}\n"),
                    (None, Some((report, _))) => status::render(report),
                    (None, None) => return Ok(true), // not asked yet
                };
                let sep = if *shown == 0 { "" } else { "---\n" };
                *shown += 1;
                out.write_all(format!("{sep}{text}").as_bytes())
            }
            Output::Json => match (w.trouble_line(), &w.last) {
                (Some(line), _) => {
                    eprintln!("ccroute: {line}");
                    Ok(())
                }
                (None, Some((report, _))) => writeln!(out, "{}", status::json(report)),
                (None, None) => Ok(()),
            },
        };
        match written.and_then(|()| out.flush()) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The terminal while the watch owns it: the alternate screen, no cursor,
/// keys unbuffered and unechoed; dropping it puts everything back.
#[derive(Debug)]
struct Terminal {
    /// `stty -g` from before, put back on drop.
    saved: Option<String>,
    /// Whether keys arrive as typed (else a line at a time).
    raw: bool,
    /// Rows and columns, when known.
    size: Option<(usize, usize)>,
}

impl Terminal {
    /// Takes the terminal over; `keys` also sets stdin's terminal to hand
    /// over each key as typed.
    fn enter(keys: bool) -> std::io::Result<Terminal> {
        let saved = if keys { stty(&["-g"]).filter(|s| !s.is_empty()) } else { None };
        let raw = saved.is_some() && stty(&["-icanon", "-echo", "min", "1", "time", "0"]).is_some();
        let t = Terminal { saved, raw, size: terminal_size() };
        let mut out = std::io::stdout().lock();
        // Alternate screen, cursor hidden.
        out.write_all(b"\x1b[?1049h\x1b[?25l")?;
        out.flush()?;
        Ok(t)
    }

    /// The whole screen for `w`: from the top left, each line cleared to its
    /// end, the rest of the screen cleared.
    fn frame(&self, w: &Watch) -> String {
        let quit = if self.raw { "q or ctrl-c quits" } else { "ctrl-c (or q, enter) quits" };
        let mut lines = vec![format!("ccroute status --watch: scheduler {}, every second; {quit}", w.addr)];
        match (w.trouble_line(), &w.last) {
            (Some(trouble), last) => {
                lines.push(trouble);
                if let Some((report, at)) = last {
                    lines.push(format!("the last report, from {} s ago:", at.elapsed().as_secs()));
                    lines.extend(status::render(report).lines().map(str::to_owned));
                }
            }
            (None, Some((report, _))) => {
                lines.push(String::new());
                lines.extend(status::render(report).lines().map(str::to_owned));
            }
            (None, None) => lines.push(format!("connecting to the scheduler at {}", w.addr)),
        }
        if let Some((rows, _)) = self.size {
            if lines.len() > rows && rows > 1 {
                let hidden = lines.len() - (rows - 1);
                lines.truncate(rows - 1);
                lines.push(format!("... {hidden} more lines (a taller terminal shows them)"));
            }
        }
        let mut frame = String::from("\x1b[H");
        for (i, line) in lines.iter().enumerate() {
            if i > 0 {
                frame.push_str("\r\n");
            }
            match self.size {
                Some((_, cols)) => frame.extend(line.chars().take(cols)),
                None => frame.push_str(line),
            }
            frame.push_str("\x1b[K");
        }
        frame.push_str("\x1b[J");
        frame
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let mut out = std::io::stdout().lock();
        // Cursor shown, main screen back.
        let _ = out.write_all(b"\x1b[?25h\x1b[?1049l");
        let _ = out.flush();
        if let Some(saved) = &self.saved {
            stty(&[saved]);
        }
    }
}

/// Runs `stty` on stdin's terminal; its output, or `None` when it failed.
fn stty(args: &[&str]) -> Option<String> {
    let out = Command::new("stty").args(args).stdin(Stdio::inherit()).stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Rows and columns of stdin's terminal (`stty size`).
fn terminal_size() -> Option<(usize, usize)> {
    let size = stty(&["size"])?;
    let (rows, cols) = size.split_once(' ')?;
    Some((rows.parse().ok().filter(|&r| r > 0)?, cols.parse().ok().filter(|&c| c > 0)?))
}

/// Reads stdin on a thread of its own (a blocking read has no place on the
/// runtime, whose shutdown would wait for it) and cancels `stop` on `q`.
/// Ctrl-C arrives as SIGINT; its byte counts too, for a terminal without
/// signals.
fn read_keys(stop: CancellationToken) {
    let reader = move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0_u8; 64];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) => return, // no more keys; signals still quit
                Ok(n) => {
                    if buf[..n].iter().any(|b| matches!(b, b'q' | b'Q' | 0x03)) {
                        stop.cancel();
                        return;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    };
    if let Err(e) = std::thread::Builder::new().name("keys".into()).spawn(reader) {
        tracing::warn!(error = %e, "cannot read keys: only ctrl-c quits");
    }
}
