//! The result cache against ccache, on the bundled sample project:
//! a cold build and a warm rebuild (after `make clean`) through ccroute — a
//! scheduler with its disk cache, one agent and a consumerd on 127.0.0.1 —
//! and the same pair through ccache (Debian's package) with an empty
//! `CCACHE_DIR`, all in this one run, as ratios to a plain local build.
//! The consumerd here has no direct-mode cache of its own, so the warm build
//! measures the scheduler's shared cache alone; `benches/peers.sh` measures
//! the consumerd's direct-mode cache and local tier against ccache.
//!
//! `cargo bench --bench cache`. Under `cargo test` it only checks that the
//! cluster starts and one compile goes through it.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use ccroute::cluster::{make, ClusterConfig, LocalCluster};

fn sample() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("sample")
}

async fn ccache_build(build: &Path, ccache_dir: &Path) -> Duration {
    let mut cmd = tokio::process::Command::new("make");
    cmd.arg("-C").arg(sample()).arg(format!("BUILD={}", build.display())).arg("-j8").arg("check");
    cmd.arg("CC=ccache gcc").arg("CXX=ccache g++").env("CCACHE_DIR", ccache_dir);
    let t0 = std::time::Instant::now();
    let out = cmd.output().await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    t0.elapsed()
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let cache = tempfile::tempdir().unwrap();
        let cluster = LocalCluster::start(ClusterConfig {
            agents: 1,
            agent_jobs: 8,
            cache_dir: Some(cache.path().to_path_buf()),
            tune_agents: false,
            local_slots: 1,
            prefer_remote: true,
            ..ClusterConfig::default()
        })
        .await
        .unwrap();
        let exe = Path::new(env!("CARGO_BIN_EXE_ccroute"));
        let build = cluster.dir.path().join("build");
        if !bench {
            // One compile through the cluster, twice: the second from the cache.
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("a.c"), "int a(void) { return 1; }\n").unwrap();
            for round in 0..2 {
                let out = tokio::process::Command::new(exe)
                    .current_dir(dir.path())
                    .args(["gcc", "-O2", "-c", "a.c", "-o", &format!("a{round}.o")])
                    .env("CCROUTE_SOCKET", &cluster.socket)
                    .output()
                    .await
                    .unwrap();
                assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            }
            let t = cluster.scheduler.totals();
            assert_eq!((t.completed, t.intercepted), (1, 1), "one compiled, one from the cache: {t:?}");
            println!("cache: smoke ok");
            cluster.shutdown().await;
            return;
        }
        let have_ccache = std::process::Command::new("ccache").arg("--version").output().is_ok_and(|o| o.status.success());
        if !have_ccache {
            cluster.shutdown().await;
            // The comparison is the point of this bench: without its baseline it fails.
            eprintln!("cache bench: ccache is not installed (apt-get install ccache); the warm-rebuild comparison needs it");
            std::process::exit(2);
        }
        let clean = |b: &Path| {
            let b = b.to_path_buf();
            async move { make(&sample(), &b, 1, None, &["clean"]).await.unwrap() }
        };
        let local = make(&sample(), &build, 8, None, &["check"]).await.unwrap();
        clean(&build).await;
        let cold = make(&sample(), &build, 8, Some((exe, &cluster.socket)), &["check"]).await.unwrap();
        clean(&build).await;
        let warm = make(&sample(), &build, 8, Some((exe, &cluster.socket)), &["check"]).await.unwrap();
        clean(&build).await;
        let report = cluster.scheduler.totals();
        println!("sample project, make -j8, 2-core machine; ratios to a plain local build ({:.1} s)", local.as_secs_f64());
        println!(
            "ccroute  cold {:>6.1} s ({:.2}x)   warm {:>6.1} s ({:.2}x)   warm/cold {:.2}   ({} compiled remotely, {} answered by the cache)",
            cold.as_secs_f64(),
            cold.as_secs_f64() / local.as_secs_f64(),
            warm.as_secs_f64(),
            warm.as_secs_f64() / local.as_secs_f64(),
            warm.as_secs_f64() / cold.as_secs_f64(),
            report.completed,
            report.intercepted
        );
        {
            let dir = tempfile::tempdir().unwrap();
            let cold_c = ccache_build(&build, dir.path()).await;
            clean(&build).await;
            let warm_c = ccache_build(&build, dir.path()).await;
            clean(&build).await;
            println!(
                "ccache   cold {:>6.1} s ({:.2}x)   warm {:>6.1} s ({:.2}x)   warm/cold {:.2}",
                cold_c.as_secs_f64(),
                cold_c.as_secs_f64() / local.as_secs_f64(),
                warm_c.as_secs_f64(),
                warm_c.as_secs_f64() / local.as_secs_f64(),
                warm_c.as_secs_f64() / cold_c.as_secs_f64()
            );
            println!("warm rebuild, ccroute / ccache: {:.2}", warm.as_secs_f64() / warm_c.as_secs_f64());
        }
        cluster.shutdown().await;
    });
}
