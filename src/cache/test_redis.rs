//! A real `redis-server` for tests: on 127.0.0.1, a free port, no
//! persistence, killed on drop.

#![allow(clippy::unwrap_used)] // test support may unwrap

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server`.
pub(crate) struct RedisServer {
    child: Option<Child>,
    port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts one on a free port. The port is picked by binding port 0 and
    /// letting go of it, so another process may take it before Redis binds
    /// it: Redis then exits at start, and another port is tried.
    ///
    /// # Panics
    /// When `redis-server` is not installed (the tests must not pass without
    /// it), or does not answer within ten seconds, or five ports in turn
    /// were taken.
    pub(crate) fn start() -> RedisServer {
        for _ in 0..4 {
            let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            if let Ok(server) = RedisServer::try_start_on(port) {
                return server;
            }
        }
        RedisServer::start_on(TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port())
    }

    /// Starts one on `port`, e.g. again after [`RedisServer::kill`].
    ///
    /// # Panics
    /// As [`RedisServer::start`], or when Redis exits at start (the port is taken).
    pub(crate) fn start_on(port: u16) -> RedisServer {
        RedisServer::try_start_on(port).unwrap_or_else(|why| panic!("{why}"))
    }

    /// Starts one on `port`; `Err` when it exits at start (the port is taken).
    fn try_start_on(port: u16) -> Result<RedisServer, String> {
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--loglevel", "warning", "--dir"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "redis-server is not installed; these tests need a real one: \
                 apt-get update && apt-get install -y redis-server"
            ),
            Err(e) => panic!("cannot start redis-server: {e}"),
        };
        let mut server = RedisServer { child: Some(child), port, _dir: dir };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                return Err(format!("redis-server on port {} exited at start ({status})", self.port));
            }
            if ping(self.port) {
                return Ok(());
            }
            assert!(Instant::now() < deadline, "redis-server on port {} did not answer PING", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis://127.0.0.1:<port>/`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port it listens on.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Kills it (SIGKILL) and waits for it to be gone.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether a Redis on `port` answers PING.
fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let mut buf = [0; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}
