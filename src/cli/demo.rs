//! `ccroute demo`: the whole system on 127.0.0.1 in one process — a
//! scheduler, two agents and a consumerd with throw-away certificates —
//! building the bundled sample project with `make -j` through the wrapper:
//! once plainly for reference, then twice through ccroute (a clean in
//! between). Prints each build's wall time, where its compiles ran, and the
//! scheduler's routes and totals.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::args::DemoArgs;
use super::{bundled_sample, flipped, link_config, online_cpus, status, BoxError};
use crate::agent::daemon::AgentConfig;
use crate::consumerd::{Config as ConsumerdConfig, Consumerd, Remote};
use crate::net::{tls, CertRole, TransportOptions};
use crate::scheduler::server::{Server, ServerConfig};
use crate::wrapper::socket::SocketPath;

/// Runs the demo.
pub(crate) async fn run(a: DemoArgs) -> Result<(), BoxError> {
    let sample = a.sample.clone().or_else(bundled_sample).ok_or("no sample project found: pass --sample DIR")?;
    let tmp = tempfile::Builder::new().prefix("ccroute-demo-").tempdir()?;
    let tls_dir = tmp.path().join("tls");
    tls::init(&tls_dir, false)?;
    let (stop_tx, stop) = watch::channel(false);

    let mut config = ServerConfig::new("127.0.0.1:0".parse()?, tls::load(&tls_dir, CertRole::Scheduler)?);
    // The user's cache directory, as a scheduler started without flags uses.
    let cache_dir = crate::cache::default_dir().unwrap_or_else(|| tmp.path().join("cache"));
    config.cache = Some(crate::cache::StorageConfig::default().with_disk(&cache_dir));
    let server = Server::bind(config).await?;
    let addr = server.local_addr()?;
    let scheduler = server.scheduler().clone();
    let serving = tokio::spawn(server.serve(flipped(stop.clone())));
    println!("scheduler on {addr}, result cache in {}", cache_dir.display());

    let agent_jobs = a.agent_jobs.unwrap_or_else(online_cpus);
    let identity = Arc::new(tls::load(&tls_dir, CertRole::Agent)?);
    for i in 0..2 {
        let config = AgentConfig {
            scheduler: addr,
            identity: identity.clone(),
            transport: TransportOptions::default(),
            jobs: agent_jobs,
            compilers: vec![],
            discover: true,
            test_toolchain: false,
            scratch_parent: tmp.path().to_path_buf(),
            node_id: crate::scheduler::server::random_id(),
            host_name: format!("demo-agent-{}", i + 1),
        };
        let stop = stop.clone();
        tokio::spawn(async move {
            if let Err(e) = crate::agent::daemon::run(config, stop).await {
                tracing::error!(error = %e, "demo agent failed");
            }
        });
    }
    wait_for("two agents to join", || scheduler.agents().len() == 2).await?;

    let socket = tmp.path().join("consumerd.sock");
    let mut config = ConsumerdConfig::new(SocketPath::explicit(&socket));
    config.local_slots = a.local_jobs.max(1);
    // Remote while the scheduler's window has room: every compile can be
    // answered by the cache on the second build.
    config.prefer_remote = true;
    let daemon = Consumerd::bind(config)?;
    let stats = daemon.stats();
    let link = crate::consumerd::link::Link::start(
        link_config(addr, tls::load(&tls_dir, CertRole::Consumerd)?),
        stats.clone(),
        stop.clone(),
    );
    let window = link.window();
    let remote: Arc<dyn Remote> = Arc::new(link);
    tokio::spawn(daemon.serve(remote, flipped(stop.clone())));
    wait_for("the consumerd to connect", || *window.borrow() > 0).await?;
    println!(
        "2 agents ({agent_jobs} jobs each) and a consumerd ({} local slot{}) connected; building {} with make -j{}\n",
        a.local_jobs,
        if a.local_jobs == 1 { "" } else { "s" },
        sample.display(),
        a.jobs
    );

    let exe = std::env::current_exe()?;
    let build = tmp.path().join("build");
    let local = make(&sample, &build, a.jobs, None, &socket).await?;
    println!("local build (plain gcc/g++):   {:>6.1} s", local.as_secs_f64());
    make_clean(&sample, &build).await?;
    let admin = tls::load(&tls_dir, CertRole::Admin)?;
    for round in 1..=2 {
        let before = stats.snapshot();
        let hits_before = status::fetch(addr, &admin).await?.totals.intercepted;
        let took = make(&sample, &build, a.jobs, Some(&exe), &socket).await?;
        let after = stats.snapshot();
        let hits = status::fetch(addr, &admin).await?.totals.intercepted - hits_before;
        println!(
            "build {round} through ccroute:     {:>6.1} s  ({:.2}x local)  {} compiles remote ({hits} answered by the cache), {} local, {} fell back to local",
            took.as_secs_f64(),
            took.as_secs_f64() / local.as_secs_f64(),
            after.remote - before.remote,
            after.local - before.local,
            after.fallbacks - before.fallbacks
        );
        if round == 1 {
            make_clean(&sample, &build).await?;
        }
    }
    let report = status::fetch(addr, &admin).await?;
    println!("\n{}", status::render(&report));

    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(15), serving).await;
    Ok(())
}

async fn wait_for(what: &str, ready: impl Fn() -> bool) -> Result<(), BoxError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// `make check` of the sample into `build`, with the compilers behind
/// `ccroute` when `exe` is given. Returns the wall time.
async fn make(
    sample: &Path,
    build: &Path,
    jobs: u32,
    exe: Option<&PathBuf>,
    socket: &Path,
) -> Result<Duration, BoxError> {
    let mut cmd = tokio::process::Command::new("make");
    cmd.arg("-C").arg(sample).arg(format!("BUILD={}", build.display())).arg(format!("-j{jobs}")).arg("check");
    if let Some(exe) = exe {
        cmd.arg(format!("CC={} gcc", exe.display())).arg(format!("CXX={} g++", exe.display()));
    }
    cmd.env("CCROUTE_SOCKET", socket);
    let t0 = Instant::now();
    let out = cmd.output().await.map_err(|e| format!("cannot run make: {e}"))?;
    let took = t0.elapsed();
    if !out.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&out.stdout));
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        return Err(format!("the build failed ({})", out.status).into());
    }
    Ok(took)
}

async fn make_clean(sample: &Path, build: &Path) -> Result<(), BoxError> {
    let out = tokio::process::Command::new("make")
        .arg("-C")
        .arg(sample)
        .arg(format!("BUILD={}", build.display()))
        .arg("clean")
        .output()
        .await?;
    if !out.status.success() {
        return Err(format!("make clean failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(())
}
