//! The links' delay: a userspace UDP relay in the hub namespace (this
//! kernel has no `netem`). Each host's link gets a port on the hub; every
//! datagram from the host goes on to the scheduler, and every answer back,
//! each after its direction's delay (half the RTT, ± half the jitter, never
//! reordered within a direction, as a wire does not reorder). One thread
//! receives from every socket (epoll through mio), one sends what is due
//! (a heap of due times, waited on with a condition variable, which sleeps
//! with nanosecond resolution where tokio's timers have a millisecond).
//! Both run at real-time priority ([`realtime`]).
//!
//! At start the relay measures what it adds itself: round trips to an echo
//! socket straight and through a zero-delay link, and prints the difference.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, ErrorKind};
use std::net::{SocketAddr, UdpSocket as StdUdp};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};

use crate::trace::Rng;

/// One link: the hub port its host sends to, and each direction's delay.
#[derive(Debug, Clone, Copy)]
pub struct LinkSpec {
    pub port: u16,
    /// One way, microseconds.
    pub delay_us: u64,
    /// Total spread around the delay, microseconds.
    pub jitter_us: u64,
}

impl LinkSpec {
    pub fn parse(s: &str) -> Option<LinkSpec> {
        let mut it = s.split(':').map(str::parse::<u64>);
        let (Some(Ok(port)), Some(Ok(delay_us)), Some(Ok(jitter_us))) = (it.next(), it.next(), it.next()) else {
            return None;
        };
        Some(LinkSpec { port: u16::try_from(port).ok()?, delay_us, jitter_us })
    }
}

struct Pending {
    due: Instant,
    seq: u64,
    socket: usize,
    to: SocketAddr,
    bytes: Vec<u8>,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(o.due, o.seq))
    }
}

#[derive(Default)]
struct Queue {
    heap: Mutex<BinaryHeap<Reverse<Pending>>>,
    ready: Condvar,
}

/// Counters the relay prints when it ends.
#[derive(Debug, Default)]
pub struct Counters {
    pub forwarded: AtomicU64,
    pub dropped: AtomicU64,
    /// Datagrams sent more than [`LATE`] after they were due: the relay's
    /// own thread was not on a CPU in time (the delay it gives is then
    /// longer than the link's).
    pub late: AtomicU64,
    /// The most any datagram was sent after it was due, µs.
    pub latest_us: AtomicU64,
}

/// How late a datagram is sent before it counts as late.
pub const LATE: Duration = Duration::from_millis(1);

impl Counters {
    /// The line the relay prints (the harness reads the last one).
    fn line(&self) -> String {
        format!(
            "relay: forwarded {} datagrams, dropped {} (socket buffers full), {} sent over {} µs late (at worst {} µs)",
            self.forwarded.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
            self.late.load(Ordering::Relaxed),
            LATE.as_micros(),
            self.latest_us.load(Ordering::Relaxed),
        )
    }
}

/// The counts of the last of the relay's lines in `log`: forwarded,
/// dropped, late, at worst (µs).
pub fn parse_counts(log: &str) -> Option<[u64; 4]> {
    let line = log.lines().rev().find(|l| l.starts_with("relay: forwarded"))?;
    let nums: Vec<u64> =
        line.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).filter_map(|s| s.parse().ok()).collect();
    // forwarded, dropped, late, the threshold, at worst.
    match nums[..] {
        [forwarded, dropped, late, _, worst] => Some([forwarded, dropped, late, worst]),
        _ => None,
    }
}

struct Link {
    spec: LinkSpec,
    /// Faces the host.
    down: UdpSocket,
    /// Faces the scheduler.
    up: UdpSocket,
    /// The scheduler's address (what `up` is connected to).
    upstream: SocketAddr,
    peer: Mutex<Option<SocketAddr>>,
    /// Last due time per direction (down→up, up→down): no reordering.
    last: [Mutex<Instant>; 2],
}

/// Runs the relay until stdin closes (the harness holds it open).
pub fn run(listen_ip: std::net::IpAddr, upstream: SocketAddr, specs: &[LinkSpec]) -> io::Result<()> {
    let (added_p50, added_p99) = self_test(listen_ip)?;
    let counters = Arc::new(Counters::default());
    let links = start(listen_ip, upstream, specs, counters.clone())?;
    println!("relay ready: {} links, adds {added_p50} µs p50 / {added_p99} µs p99 per round trip", links);
    // The harness closes stdin (or dies): the relay goes. Until then its
    // counters every two seconds, when they moved.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let _ = io::copy(&mut io::stdin(), &mut io::sink());
        let _ = tx.send(());
    });
    let mut last = String::new();
    loop {
        let closed = rx.recv_timeout(Duration::from_secs(2)).is_ok();
        let now = counters.line();
        if now != last || closed {
            eprintln!("{now}");
            last = now;
        }
        if closed {
            return Ok(());
        }
    }
}

/// Binds every link and starts the two threads; returns the links started.
pub fn start(
    listen_ip: std::net::IpAddr,
    upstream: SocketAddr,
    specs: &[LinkSpec],
    counters: Arc<Counters>,
) -> io::Result<usize> {
    let now = Instant::now();
    let mut links = Vec::with_capacity(specs.len());
    for spec in specs {
        let down = UdpSocket::bind(SocketAddr::new(listen_ip, spec.port))?;
        let up = UdpSocket::bind(SocketAddr::new(upstream.ip(), 0))?;
        big_buffers(&down);
        big_buffers(&up);
        up.connect(upstream)?;
        links.push(Link {
            spec: *spec,
            down,
            up,
            upstream,
            peer: Mutex::new(None),
            last: [Mutex::new(now), Mutex::new(now)],
        });
    }
    let mut poll = Poll::new()?;
    for (i, l) in links.iter_mut().enumerate() {
        // Tokens: 2i the host side, 2i+1 the scheduler side.
        poll.registry().register(&mut l.down, Token(2 * i), Interest::READABLE)?;
        poll.registry().register(&mut l.up, Token(2 * i + 1), Interest::READABLE)?;
    }
    let links = Arc::new(links);
    let queue = Arc::new(Queue::default());
    let n = links.len();
    {
        let (links, queue, counters) = (links.clone(), queue.clone(), counters.clone());
        std::thread::Builder::new().name("relay-send".into()).spawn(move || {
            realtime("relay-send");
            send_loop(&links, &queue, &counters);
        })?;
    }
    std::thread::Builder::new().name("relay-recv".into()).spawn(move || {
        realtime("relay-recv");
        if let Err(e) = recv_loop(&mut poll, &links, &queue) {
            eprintln!("relay: receiving stopped: {e}");
        }
    })?;
    Ok(n)
}

fn recv_loop(poll: &mut Poll, links: &[Link], queue: &Queue) -> io::Result<()> {
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 65_536];
    let mut rng = Rng(0x5eed);
    let mut seq = 0u64;
    loop {
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        for ev in &events {
            let (i, from_host) = (ev.token().0 / 2, ev.token().0 % 2 == 0);
            let link = &links[i];
            loop {
                let got = if from_host {
                    link.down.recv_from(&mut buf)
                } else {
                    link.up.recv(&mut buf).map(|n| (n, link.upstream))
                };
                let (len, from) = match got {
                    Ok(x) => x,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::ConnectionRefused => continue,
                    Err(e) => return Err(e),
                };
                let to = if from_host {
                    *lock(&link.peer) = Some(from);
                    link.upstream
                } else {
                    match *lock(&link.peer) {
                        Some(p) => p,
                        None => continue,
                    }
                };
                let jitter =
                    if link.spec.jitter_us > 0 { (rng.unit() - 0.5) * link.spec.jitter_us as f64 } else { 0.0 };
                let delay = Duration::from_secs_f64(((link.spec.delay_us as f64 + jitter).max(0.0)) / 1e6);
                let dir = usize::from(!from_host);
                let due = {
                    let mut last = lock(&link.last[dir]);
                    let due = (Instant::now() + delay).max(*last);
                    *last = due;
                    due
                };
                seq += 1;
                let socket = if from_host { 2 * i + 1 } else { 2 * i };
                let p = Pending { due, seq, socket, to, bytes: buf[..len].to_vec() };
                let mut heap = lock(&queue.heap);
                let earliest = heap.peek().is_none_or(|Reverse(top)| p.due < top.due);
                heap.push(Reverse(p));
                drop(heap);
                if earliest {
                    queue.ready.notify_one();
                }
            }
        }
    }
}

fn send_loop(links: &[Link], queue: &Queue, counters: &Counters) {
    let mut heap = lock(&queue.heap);
    loop {
        let now = Instant::now();
        match heap.peek() {
            None => heap = queue.ready.wait(heap).unwrap_or_else(std::sync::PoisonError::into_inner),
            Some(Reverse(top)) if top.due > now => {
                let wait = top.due - now;
                heap = queue.ready.wait_timeout(heap, wait).unwrap_or_else(std::sync::PoisonError::into_inner).0;
            }
            Some(_) => {
                let Some(Reverse(p)) = heap.pop() else { continue };
                drop(heap);
                let late = now.saturating_duration_since(p.due);
                if late > LATE {
                    counters.late.fetch_add(1, Ordering::Relaxed);
                }
                counters.latest_us.fetch_max(u64::try_from(late.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
                let link = &links[p.socket / 2];
                let sent = if p.socket % 2 == 0 { link.down.send_to(&p.bytes, p.to) } else { link.up.send(&p.bytes) };
                match sent {
                    Ok(_) => counters.forwarded.fetch_add(1, Ordering::Relaxed),
                    // A full socket buffer or a peer gone: the datagram is lost, as on a wire.
                    Err(_) => counters.dropped.fetch_add(1, Ordering::Relaxed),
                };
                heap = lock(&queue.heap);
            }
        }
    }
}

/// Real-time priority for the calling thread (`SCHED_FIFO`, the lowest
/// level; the relay runs as root): a wire's delay does not wait for a CPU,
/// and on a machine of two cores shared by the scheduler and every host, a
/// relay at normal priority sent most datagrams over [`LATE`] late (87 % of
/// lan-64's, 91 % of wan's on one machine). Both threads sleep until a
/// datagram arrives or one is due, so they take no more CPU than before,
/// only take it at once; the kernel's real-time throttling (95 % of each
/// second by default) bounds them in any case.
#[allow(unsafe_code)]
fn realtime(thread: &str) {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: 0 is the calling thread; a valid sched_param.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc != 0 {
        eprintln!(
            "relay: {thread} stays at normal priority ({}); its datagrams may be sent late",
            io::Error::last_os_error()
        );
    }
}

/// 8 MiB socket buffers each way (`SO_*BUFFORCE`: the relay runs as root),
/// so that bursts queue rather than drop.
#[allow(unsafe_code)]
fn big_buffers(socket: &UdpSocket) {
    use std::os::fd::AsRawFd;
    let size: libc::c_int = 8 << 20;
    for opt in [libc::SO_SNDBUFFORCE, libc::SO_RCVBUFFORCE] {
        // SAFETY: a valid socket and a pointer to a c_int of the size given.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                std::ptr::from_ref(&size).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            eprintln!("relay: cannot enlarge a socket buffer: {}", io::Error::last_os_error());
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Round trips to an echo socket, straight and through a zero-delay link:
/// the relay's own added latency, p50 and p99, microseconds.
fn self_test(ip: std::net::IpAddr) -> io::Result<(u64, u64)> {
    let echo = StdUdp::bind(SocketAddr::new(ip, 0))?;
    let echo_addr = echo.local_addr()?;
    std::thread::spawn(move || {
        let mut b = [0u8; 1500];
        while let Ok((n, from)) = echo.recv_from(&mut b) {
            let _ = echo.send_to(&b[..n], from);
        }
    });
    let probe_port = {
        let s = StdUdp::bind(SocketAddr::new(ip, 0))?;
        s.local_addr()?.port()
    };
    start(ip, echo_addr, &[LinkSpec { port: probe_port, delay_us: 0, jitter_us: 0 }], Arc::new(Counters::default()))?;
    let client = StdUdp::bind(SocketAddr::new(ip, 0))?;
    client.set_read_timeout(Some(Duration::from_secs(1)))?;
    let rtt = |to: SocketAddr| -> io::Result<Vec<u64>> {
        let mut b = [0u8; 1500];
        let mut out = Vec::with_capacity(2000);
        for _ in 0..2000 {
            let t = Instant::now();
            client.send_to(&[7u8; 1200], to)?;
            client.recv_from(&mut b)?;
            out.push(t.elapsed().as_micros() as u64);
        }
        out.sort_unstable();
        Ok(out)
    };
    let straight = rtt(echo_addr)?;
    let relayed = rtt(SocketAddr::new(ip, probe_port))?;
    let pick = |v: &[u64], q: f64| v[((v.len() - 1) as f64 * q) as usize];
    Ok((
        pick(&relayed, 0.5).saturating_sub(pick(&straight, 0.5)),
        pick(&relayed, 0.99).saturating_sub(pick(&straight, 0.99)),
    ))
}

#[cfg(test)]
mod tests {
    #[allow(unused_imports)] // used by the tests, which only the test harness build runs
    use super::*;

    #[test]
    fn the_last_counts_line_is_read() {
        let c = Counters::default();
        c.forwarded.store(120_345, Ordering::Relaxed);
        c.dropped.store(2, Ordering::Relaxed);
        c.late.store(7_001, Ordering::Relaxed);
        c.latest_us.store(48_113, Ordering::Relaxed);
        let log = format!("relay: forwarded 5 datagrams, dropped 0 (socket buffers full)\nnoise 1 2 3\n{}\n", c.line());
        assert_eq!(parse_counts(&log), Some([120_345, 2, 7_001, 48_113]));
        assert_eq!(parse_counts("nothing here"), None);
        // A line of another shape is not misread.
        assert_eq!(parse_counts("relay: forwarded 5 datagrams, dropped 0 (socket buffers full)"), None);
    }
}
