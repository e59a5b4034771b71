//! A whole ccroute cluster in one process on 127.0.0.1: a scheduler, agents
//! and a consumerd with throw-away certificates. What `ccroute demo` and the
//! benches run; each part is the real daemon code, talking real QUIC and a
//! real Unix socket.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::daemon::AgentConfig;
use crate::consumerd::link::{Link, LinkConfig};
use crate::consumerd::{Config as ConsumerdConfig, Consumerd, Remote, Stats};
use crate::local_socket::SocketPath;
use crate::net::{tls, CertRole, Identity};
use crate::scheduler::{NetJob, Server, ServerConfig};
use ccroute_core::Scheduler;

/// What to run.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Agents to start.
    pub agents: usize,
    /// Each agent's `--jobs`.
    pub agent_jobs: u32,
    /// Whether agents look for real compilers in `PATH`.
    pub discover: bool,
    /// Whether agents offer the no-op test toolchain.
    pub test_toolchain: bool,
    /// The result cache's disk directory; `None`: no cache.
    pub cache_dir: Option<PathBuf>,
    /// Whether the optimizer tunes agents' token limits.
    pub tune_agents: bool,
    /// Whether to run a consumerd (its socket in the cluster's temp dir).
    pub consumerd: bool,
    /// The consumerd's local slots.
    pub local_slots: u32,
    /// Whether the consumerd prefers remote slots.
    pub prefer_remote: bool,
    /// The consumerd's direct-mode cache and local tier; `None`: none.
    pub consumerd_cache_dir: Option<PathBuf>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            agents: 1,
            agent_jobs: crate::host::online_cpus(),
            discover: true,
            test_toolchain: false,
            cache_dir: None,
            tune_agents: true,
            consumerd: true,
            local_slots: 1,
            prefer_remote: false,
            consumerd_cache_dir: None,
        }
    }
}

/// A running cluster; dropping it stops everything.
pub struct LocalCluster {
    /// Its temp dir (certificates, the consumerd's socket, scratch dirs).
    pub dir: tempfile::TempDir,
    /// The scheduler's address.
    pub addr: SocketAddr,
    /// The scheduler's core.
    pub scheduler: Scheduler<NetJob>,
    /// The consumerd's socket, when one runs.
    pub socket: PathBuf,
    /// The consumerd's counters, when one runs.
    pub consumerd_stats: Option<Arc<Stats>>,
    /// Cancelled to stop every part (also when the cluster is dropped).
    stop: CancellationToken,
    /// Every part's task: the scheduler, the agents, the consumerd.
    tasks: TaskTracker,
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl std::fmt::Debug for LocalCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCluster").field("addr", &self.addr).finish_non_exhaustive()
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl LocalCluster {
    /// Starts everything and waits until the agents joined and the
    /// consumerd is connected.
    ///
    /// # Errors
    /// When a part cannot start, or does not come up within 30 s.
    pub async fn start(config: ClusterConfig) -> Result<LocalCluster, BoxError> {
        let dir = tempfile::Builder::new().prefix("ccroute-cluster-").tempdir()?;
        let tls_dir = dir.path().join("tls");
        tls::init(&tls_dir, false)?;
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();

        let mut server_config = ServerConfig::new("127.0.0.1:0".parse()?, tls::load(&tls_dir, CertRole::Scheduler)?);
        if let Some(cache) = &config.cache_dir {
            server_config.cache = Some(crate::cache::StorageConfig::default().with_disk(cache));
        }
        if let Some(o) = server_config.optimizer.as_mut() {
            o.tune_agents = config.tune_agents;
        }
        let server = Server::bind(server_config).await?;
        let addr = server.local_addr()?;
        let scheduler = server.scheduler().clone();
        tasks.spawn(server.serve(stop.clone()));

        let identity = Arc::new(tls::load(&tls_dir, CertRole::Agent)?);
        for i in 0..config.agents {
            let mut agent = AgentConfig::new(addr, identity.clone());
            agent.jobs = config.agent_jobs;
            agent.discover = config.discover;
            agent.test_toolchain = config.test_toolchain;
            agent.host_name = format!("agent-{}", i + 1);
            // Agents of one host have its compilers: nothing to ship, and no
            // store to make in the user's cache directory.
            agent.shipping = None;
            let stopped = stop.clone();
            tasks.spawn(async move {
                if let Err(e) = crate::agent::daemon::run(agent, stopped).await {
                    tracing::error!(error = %e, "agent failed");
                }
            });
        }
        wait_for("the agents to join", || scheduler.agents().len() == config.agents).await?;

        let socket = dir.path().join("consumerd.sock");
        let mut consumerd_stats = None;
        if config.consumerd {
            let mut c = ConsumerdConfig::new(SocketPath::explicit(&socket));
            c.local_slots = config.local_slots.max(1);
            c.prefer_remote = config.prefer_remote;
            c.cache_dir.clone_from(&config.consumerd_cache_dir);
            let daemon = Consumerd::bind(c)?;
            let stats = daemon.stats();
            let link = Link::start(
                LinkConfig::new(addr, tls::load(&tls_dir, CertRole::Consumerd)?),
                stats.clone(),
                stop.clone(),
                &tasks,
            );
            let window = link.window();
            let remote: Arc<dyn Remote> = Arc::new(link);
            tasks.spawn(daemon.serve(remote, stop.clone()));
            if config.agents > 0 {
                wait_for("the consumerd to connect", || *window.borrow() > 0).await?;
            }
            consumerd_stats = Some(stats);
        }
        tasks.close();
        Ok(LocalCluster { dir, addr, scheduler, socket, consumerd_stats, stop, tasks })
    }

    /// The certificate directory.
    pub fn tls_dir(&self) -> PathBuf {
        self.dir.path().join("tls")
    }

    /// An identity of `role` in this cluster.
    ///
    /// # Errors
    /// When the certificate cannot be read.
    pub fn identity(&self, role: CertRole) -> Result<Identity, BoxError> {
        Ok(tls::load(&self.tls_dir(), role)?)
    }

    /// A consumerd link to this cluster's scheduler, beside the running
    /// consumerd (benches drive it directly).
    ///
    /// # Errors
    /// When the certificate cannot be read.
    pub fn link(&self, stats: Arc<Stats>) -> Result<Link, BoxError> {
        Ok(Link::start(
            LinkConfig::new(self.addr, self.identity(CertRole::Consumerd)?),
            stats,
            self.stop.child_token(),
            &self.tasks,
        ))
    }

    /// Stops everything and waits (at most 15 s) for every part to finish.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(15), self.tasks.wait()).await;
    }
}

/// Waits until `ready()` (at most 30 s).
///
/// # Errors
/// When it never is.
pub async fn wait_for(what: &str, ready: impl Fn() -> bool) -> Result<(), BoxError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// `make` in `project` (its `BUILD` set to `build`, then `targets`), with
/// the compilers behind `ccroute` when `wrapper` is given. Returns the wall
/// time.
///
/// # Errors
/// When make cannot run or fails (its output is in the error).
pub async fn make(
    project: &Path,
    build: &Path,
    jobs: u32,
    wrapper: Option<(&Path, &Path)>,
    targets: &[&str],
) -> Result<Duration, BoxError> {
    let mut cmd = tokio::process::Command::new("make");
    cmd.arg("-C").arg(project).arg(format!("BUILD={}", build.display())).arg(format!("-j{jobs}")).args(targets);
    if let Some((exe, socket)) = wrapper {
        cmd.arg(format!("CC={} gcc", exe.display())).arg(format!("CXX={} g++", exe.display()));
        cmd.env("CCROUTE_SOCKET", socket);
    }
    let t0 = Instant::now();
    let out = cmd.output().await.map_err(|e| format!("cannot run make: {e}"))?;
    let took = t0.elapsed();
    if !out.status.success() {
        return Err(format!(
            "make failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(took)
}
