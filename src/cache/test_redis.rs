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
    /// Starts one on a free port.
    ///
    /// # Panics
    /// When `redis-server` is not installed (the tests must not pass without
    /// it) or does not answer within ten seconds.
    pub(crate) fn start() -> RedisServer {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        RedisServer::start_on(port)
    }

    /// Starts one on `port`, e.g. again after [`RedisServer::kill`].
    pub(crate) fn start_on(port: u16) -> RedisServer {
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
        server.wait_ready();
        server
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!("redis-server on port {} exited at start ({status})", self.port);
            }
            if ping(self.port) {
                return;
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
