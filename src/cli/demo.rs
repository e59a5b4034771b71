//! `ccroute demo`: the whole system on 127.0.0.1 in one process — a
//! scheduler, two agents and a consumerd with throw-away certificates, and
//! the result cache in the user's cache directory — building the bundled
//! sample project with `make -j` through the wrapper: once plainly for
//! reference, then twice through ccroute (a clean in between). Prints each
//! build's wall time, where its compiles ran, how many the cache answered,
//! and the scheduler's routes and totals.

use super::args::DemoArgs;
use super::{bundled_sample, status, BoxError};
use crate::cluster::{make, ClusterConfig, LocalCluster};
use crate::host::online_cpus;
use crate::net::CertRole;

/// Runs the demo.
pub(crate) async fn run(a: DemoArgs) -> Result<(), BoxError> {
    let sample = a.sample.clone().or_else(bundled_sample).ok_or("no sample project found: pass --sample DIR")?;
    let agent_jobs = a.agent_jobs.unwrap_or_else(online_cpus);
    // The user's cache directory, as a scheduler started without flags uses.
    let cache_dir = crate::cache::default_dir();
    let cluster = LocalCluster::start(ClusterConfig {
        agents: 2,
        agent_jobs,
        cache_dir: cache_dir.clone(),
        local_slots: a.local_jobs.max(1),
        // Remote while the scheduler's window has room, so that the cache
        // can answer every compile of the second build.
        prefer_remote: true,
        consumerd_cache_dir: crate::consumerd::default_cache_dir(),
        ..ClusterConfig::default()
    })
    .await?;
    let stats = cluster.consumerd_stats.clone().ok_or("the demo cluster has no consumerd")?;
    println!(
        "scheduler on {}, result cache in {}",
        cluster.addr,
        cache_dir.as_ref().map_or_else(|| "memory only (no HOME)".into(), |d| d.display().to_string())
    );
    println!(
        "2 agents ({agent_jobs} jobs each) and a consumerd ({} local slot{}) connected; building {} with make -j{}\n",
        a.local_jobs,
        if a.local_jobs == 1 { "" } else { "s" },
        sample.display(),
        a.jobs
    );

    let exe = std::env::current_exe()?;
    let build = cluster.dir.path().join("build");
    let local = make(&sample, &build, a.jobs, None, &["check"]).await?;
    println!("local build (plain gcc/g++):   {:>6.1} s", local.as_secs_f64());
    make(&sample, &build, 1, None, &["clean"]).await?;
    let admin = cluster.identity(CertRole::Admin)?;
    for round in 1..=2 {
        let before = stats.snapshot();
        let hits_before = cluster.scheduler.totals().intercepted;
        let took = make(&sample, &build, a.jobs, Some((&exe, &cluster.socket)), &["check"]).await?;
        let after = stats.snapshot();
        let hits = cluster.scheduler.totals().intercepted - hits_before;
        println!(
            "build {round} through ccroute:     {:>6.1} s  ({:.2}x local)  {} answered by the consumerd's cache, {} compiles remote ({hits} answered by the scheduler's cache), {} local, {} fell back to local",
            took.as_secs_f64(),
            took.as_secs_f64() / local.as_secs_f64(),
            after.direct_hits - before.direct_hits,
            after.remote - before.remote,
            after.local - before.local,
            after.fallbacks - before.fallbacks
        );
        if round == 1 {
            make(&sample, &build, 1, None, &["clean"]).await?;
        }
    }
    let report = status::fetch(cluster.addr, &admin).await?;
    println!("\n{}", status::render(&report));
    cluster.shutdown().await;
    Ok(())
}
