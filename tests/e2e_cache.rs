//! The result cache end to end: hits without an agent, the second build of
//! the sample all from the cache and byte-identical, no poisoning, restarts,
//! corruption, two schedulers sharing a real Redis (killed mid-build, too),
//! and identical tasks in flight compiled once.

#![allow(clippy::unwrap_used)]

mod common;
// The library's test Redis (a real `redis-server` on a free port), shared rather than written twice.
#[path = "../src/cache/test_redis.rs"]
#[allow(dead_code)]
mod test_redis;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ccroute::agent::executor::test_object;
use ccroute_wire::Outcome;
use common::raw::{honest_key, spec, RawConsumerd};
use common::{assert_same_objects, ccroute, make, objects, Cluster};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap()
}

fn totals(c: &Cluster, key: &str) -> u64 {
    c.status()["totals"][key].as_u64().unwrap()
}

fn cache_dir_args(dir: &Path) -> Vec<String> {
    vec!["--cache-dir".into(), dir.display().to_string()]
}

fn start_scheduler(c: &mut Cluster, extra: &[String]) -> SocketAddr {
    let refs: Vec<&str> = extra.iter().map(String::as_str).collect();
    c.start_scheduler(&refs)
}

/// Waits until the disk tier holds `n` entries (writes are in the background).
fn wait_disk_entries(c: &Cluster, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = c.status();
        let disk = s["cache"]["tiers"].as_array().unwrap().iter().find(|t| t["name"] == "disk").cloned().unwrap();
        if disk["entries"].as_u64().unwrap() >= n {
            return;
        }
        assert!(Instant::now() < deadline, "disk tier never held {n} entries: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_hit_is_served_with_no_agent_connected_and_survives_a_restart() {
    let mut c = Cluster::new();
    let cache = c.dir.path().join("cache");
    let addr = start_scheduler(&mut c, &cache_dir_args(&cache));
    c.start_agent(&["--test-toolchain", "--no-discover"]);
    c.wait_ready(1);
    let source = b"int answer(void) { return 42; }\n";
    let s = spec(0);
    let key = honest_key(&s, source);
    rt().block_on(async {
        let mut cd = RawConsumerd::connect(&c.tls, addr).await;
        cd.send(1, &s, source, Some(key)).await;
        let (h, object) = cd.result().await;
        assert_eq!(h.outcome, Outcome::Success);
        assert_eq!(object, test_object(source));
    });
    wait_disk_entries(&c, 1);
    // No agent: still answered, from the cache.
    c.agents[0].kill();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !c.status()["agents"].as_array().unwrap().is_empty() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(50));
    }
    let hits_before = totals(&c, "intercepted");
    rt().block_on(async {
        let mut cd = RawConsumerd::connect(&c.tls, addr).await;
        cd.send(2, &s, source, Some(key)).await;
        let (h, object) = cd.result().await;
        assert_eq!(h.outcome, Outcome::Success, "a hit with no agent: {h:?}");
        assert_eq!(object, test_object(source));
    });
    assert_eq!(totals(&c, "intercepted"), hits_before + 1);
    // A new scheduler over the same directory: hits from disk.
    c.scheduler.as_mut().unwrap().stop();
    let addr = start_scheduler(&mut c, &cache_dir_args(&cache));
    rt().block_on(async {
        let mut cd = RawConsumerd::connect(&c.tls, addr).await;
        cd.send(3, &s, source, Some(key)).await;
        let (h, object) = cd.result().await;
        assert_eq!(h.outcome, Outcome::Success, "restarted, no agent: {h:?}");
        assert_eq!(object, test_object(source));
    });
    assert_eq!(totals(&c, "intercepted"), 1);
}

/// A compile failure is shared with the identical requests waiting for
/// it (the same source fails the same way) — unless it may be its agent's:
/// a full scratch disk, a killed compiler. Such a failure goes to its own
/// request only; a waiting one compiles again. (Agents answer such failures
/// as their own errors; this agent is hand-written and does not.)
#[test]
fn a_failure_that_may_be_its_agents_is_not_shared() {
    use bytes::Bytes;
    use ccroute_wire::ResultHeader;
    use common::raw::RawAgent;
    let mut c = Cluster::new();
    let args = cache_dir_args(&c.dir.path().join("cache"));
    let addr = start_scheduler(&mut c, &[args, vec!["--no-hedging".into()]].concat());
    let (a, b) = (&b"int f(void) { return 1 }\n"[..], &b"char big[400000] = {1};\n"[..]);
    let s = spec(0);
    let failed = |id: u64, stderr: &str| ResultHeader {
        exit_status: 1,
        stderr: Bytes::from(stderr.to_owned()),
        ..ResultHeader::bare(id, Outcome::CompileFailed)
    };
    let waiting = |n: u64| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while c.status()["cache"]["deduplicated"].as_u64() != Some(n) {
            assert!(Instant::now() < deadline, "no request waits for the first: {}", c.status());
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    rt().block_on(async {
        let mut agent = RawAgent::connect(&c.tls, addr).await;
        let mut cd = RawConsumerd::connect(&c.tls, addr).await;
        // The source's own failure: its twin waiting for it gets it too.
        cd.send(1, &s, a, Some(honest_key(&s, a))).await;
        let (task, _) = agent.task().await;
        cd.send(2, &s, a, Some(honest_key(&s, a))).await;
        waiting(1);
        agent.answer(failed(task.task_id, "t.c:1:25: error: expected ';' before '}' token\n"), vec![]).await;
        let mut ids = Vec::new();
        for _ in 0..2 {
            let (h, _) = cd.result().await;
            assert_eq!(h.outcome, Outcome::CompileFailed);
            ids.push(h.task_id);
        }
        ids.sort_unstable();
        assert_eq!(ids, [1, 2]);
        // The machine's failure: passed on to its own request (a real
        // consumerd compiles it locally); the twin reaches the agent.
        cd.send(3, &s, b, Some(honest_key(&s, b))).await;
        let (task, _) = agent.task().await;
        cd.send(4, &s, b, Some(honest_key(&s, b))).await;
        waiting(2);
        let full = "/s/task-1/tmp/cc0l.s: Fatal error: can't fill 256 bytes in section .data of /s/task-1/out.o: \
                    'No space left on device'\n";
        agent.answer(failed(task.task_id, full), vec![]).await;
        let (h, _) = cd.result().await;
        assert_eq!((h.task_id, &h.outcome), (3, &Outcome::CompileFailed));
        let (task, _) = agent.task().await;
        let (packed, info) = ccroute_wire::payload::compress(&test_object(b));
        agent
            .answer(ResultHeader { payload: info, ..ResultHeader::bare(task.task_id, Outcome::Success) }, packed)
            .await;
        let (h, object) = cd.result().await;
        assert_eq!((h.task_id, &h.outcome), (4, &Outcome::Success));
        assert_eq!(object, test_object(b));
    });
}

#[test]
fn a_poisoning_attempt_stores_nothing_and_the_honest_request_compiles() {
    let mut c = Cluster::new();
    let args = cache_dir_args(&c.dir.path().join("cache"));
    let addr = start_scheduler(&mut c, &args);
    c.start_agent(&["--test-toolchain", "--no-discover"]);
    c.wait_ready(1);
    let (a, b) = (&b"int f(void) { return 1; }\n"[..], &b"int f(void) { return 666; }\n"[..]);
    let s = spec(0);
    rt().block_on(async {
        let mut cd = RawConsumerd::connect(&c.tls, addr).await;
        // The key of source A with the bytes of source B.
        cd.send(1, &s, b, Some(honest_key(&s, a))).await;
        let (h, object) = cd.result().await;
        assert_eq!(h.outcome, Outcome::Success);
        assert_eq!(object, test_object(b), "the liar gets its own bytes compiled");
        // Give a background store time to happen, if it wrongly would.
        tokio::time::sleep(Duration::from_millis(500)).await;
        // An honest request for A: compiled, not served B's object.
        cd.send(2, &s, a, Some(honest_key(&s, a))).await;
        let (h, object) = cd.result().await;
        assert_eq!(h.outcome, Outcome::Success);
        assert_eq!(object, test_object(a), "the cache served a poisoned object");
    });
    let st = c.status();
    assert_eq!(st["cache"]["poison_rejected"], 1, "{st}");
    assert_eq!(st["totals"]["intercepted"], 0, "the honest request must not be a hit: {st}");
}

#[test]
fn a_corrupted_cache_file_is_a_miss_not_a_wrong_object() {
    let mut c = Cluster::new();
    let cache = c.dir.path().join("cache");
    let addr = start_scheduler(&mut c, &cache_dir_args(&cache));
    c.start_agent(&["--test-toolchain", "--no-discover"]);
    c.wait_ready(1);
    let source = b"int g(void) { return 7; }\n";
    let s = spec(0);
    let key = honest_key(&s, source);
    rt().block_on(async {
        let mut cd = RawConsumerd::connect(&c.tls, addr).await;
        cd.send(1, &s, source, Some(key)).await;
        cd.result().await;
    });
    wait_disk_entries(&c, 1);
    c.scheduler.as_mut().unwrap().stop();
    // Flip a byte near the end of every entry (the object).
    let mut flipped = 0;
    for entry in walk(&cache) {
        let mut bytes = std::fs::read(&entry).unwrap();
        let n = bytes.len();
        bytes[n - 3] ^= 0x40;
        std::fs::write(&entry, bytes).unwrap();
        flipped += 1;
    }
    assert_eq!(flipped, 1);
    let addr = start_scheduler(&mut c, &cache_dir_args(&cache));
    c.agents.clear();
    c.start_agent(&["--test-toolchain", "--no-discover"]);
    c.wait_ready(1);
    rt().block_on(async {
        let mut cd = RawConsumerd::connect(&c.tls, addr).await;
        cd.send(2, &s, source, Some(key)).await;
        let (h, object) = cd.result().await;
        assert_eq!(h.outcome, Outcome::Success);
        assert_eq!(object, test_object(source));
    });
    let st = c.status();
    assert_eq!(st["totals"]["intercepted"], 0, "a corrupt entry was served: {st}");
    assert_eq!(st["totals"]["completed"], 1, "it was compiled again: {st}");
}

/// The disk tier's entries (named by their 64-hex-digit key).
fn walk(dir: &Path) -> Vec<PathBuf> {
    common::files(dir, |p| p.file_name().is_some_and(|n| n.len() == 64))
}

#[test]
fn identical_tasks_in_flight_reach_an_agent_once() {
    let mut c = Cluster::new();
    let args = cache_dir_args(&c.dir.path().join("cache"));
    let addr = start_scheduler(&mut c, &args);
    c.start_agent(&["--test-toolchain", "--no-discover", "--jobs", "16"]);
    c.wait_ready(1);
    let source = b"int h(void) { return 3; }\n";
    let s = spec(800);
    let key = honest_key(&s, source);
    rt().block_on(async {
        let mut cd = RawConsumerd::connect(&c.tls, addr).await;
        for id in 0..8 {
            cd.send(id, &s, source, Some(key)).await;
        }
        let mut ids = vec![];
        for _ in 0..8 {
            let (h, object) = cd.result().await;
            assert_eq!(h.outcome, Outcome::Success);
            assert_eq!(object, test_object(source));
            ids.push(h.task_id);
        }
        ids.sort_unstable();
        assert_eq!(ids, (0..8).collect::<Vec<_>>(), "every waiter answered once");
    });
    let st = c.status();
    assert_eq!(st["agents"][0]["assigned"], 1, "8 identical tasks reached the agent more than once: {st}");
    assert_eq!(st["cache"]["deduplicated"], 7, "{st}");
}

/// The second build of the bundled sample: every remote compile answered by
/// the cache, every object identical to the first build's and a local one's.
#[test]
fn the_second_build_of_the_sample_is_served_from_the_cache() {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample");
    let mut c = Cluster::new();
    // Agents keep their 16 tokens (this 2-core machine would have the
    // optimizer lower them), so that every unit can go remote.
    let mut args = cache_dir_args(&c.dir.path().join("cache"));
    args.push("--no-optimizer".into());
    start_scheduler(&mut c, &args);
    c.start_agent(&["--jobs", "16"]);
    c.start_consumerd(1, true);
    c.wait_ready(1);
    let build = |name: &str, wrapped: bool| {
        let dir = c.dir.path().join(name);
        let (cc, cxx) = if wrapped {
            (format!("CC={} gcc", ccroute().display()), format!("CXX={} g++", ccroute().display()))
        } else {
            ("CC=gcc".into(), "CXX=g++".into())
        };
        let out = make(
            &sample,
            &[format!("BUILD={}", dir.display()), "-j16".into(), cc, cxx, "check".into()],
            &c.wrapper_env(),
        );
        assert!(
            out.status.success(),
            "{}\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            c.logs()
        );
        objects(&dir)
    };
    let local = build("local", false);
    let first = build("first", true);
    let compiled = totals(&c, "completed");
    let hits = totals(&c, "intercepted");
    let second = build("second", true);
    assert_same_objects(&local, &first);
    assert_same_objects(&local, &second);
    let new_hits = totals(&c, "intercepted") - hits;
    assert!(compiled >= 40, "most of the 45 units went remote the first time: {compiled}");
    assert_eq!(new_hits, compiled, "every unit compiled remotely the first time is a hit the second time");
    assert_eq!(totals(&c, "completed"), compiled, "nothing compiled again");
}

#[test]
fn two_schedulers_share_hits_through_redis() {
    let redis = test_redis::RedisServer::start();
    let mut a = Cluster::new();
    let args_a = vec![
        "--cache-dir".into(),
        a.dir.path().join("cache").display().to_string(),
        "--cache-redis".into(),
        redis.url(),
    ];
    let addr_a = start_scheduler(&mut a, &args_a);
    a.start_agent(&["--test-toolchain", "--no-discover"]);
    a.wait_ready(1);
    let s = spec(0);
    let sources: Vec<Vec<u8>> = (0..5).map(|i| format!("int v{i}(void) {{ return {i}; }}\n").into_bytes()).collect();
    rt().block_on(async {
        let mut cd = RawConsumerd::connect(&a.tls, addr_a).await;
        for (i, src) in sources.iter().enumerate() {
            cd.send(i as u64, &s, src, Some(honest_key(&s, src))).await;
            cd.result().await;
        }
    });
    // A second scheduler of the same cluster, its own disk, the same Redis, no agent.
    let mut b = Cluster::new();
    for f in [
        "ca.pem",
        "ca.key",
        "scheduler.pem",
        "scheduler.key",
        "consumerd.pem",
        "consumerd.key",
        "admin.pem",
        "admin.key",
    ] {
        std::fs::copy(a.tls.join(f), b.tls.join(f)).unwrap();
    }
    let args_b = vec![
        "--cache-dir".into(),
        b.dir.path().join("cache").display().to_string(),
        "--cache-redis".into(),
        redis.url(),
    ];
    let addr_b = start_scheduler(&mut b, &args_b);
    let deadline = Instant::now() + Duration::from_secs(20);
    rt().block_on(async {
        let mut cd = RawConsumerd::connect(&b.tls, addr_b).await;
        for (i, src) in sources.iter().enumerate() {
            // Writes to Redis are in the background: retry a miss a moment later.
            loop {
                cd.send(100 + i as u64, &s, src, Some(honest_key(&s, src))).await;
                let (h, object) = cd.result().await;
                if h.outcome == Outcome::Success {
                    assert_eq!(object, test_object(src));
                    break;
                }
                assert!(Instant::now() < deadline, "scheduler B never saw A's result: {h:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    assert_eq!(b.status()["totals"]["intercepted"], 5);
}

#[test]
fn killing_redis_mid_build_does_not_fail_the_build() {
    let mut redis = test_redis::RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    common::project::generate(dir.path(), common::project::Shape { c: 10, cxx: 3 });
    let mut c = Cluster::new();
    let args = vec![
        "--cache-dir".into(),
        c.dir.path().join("cache").display().to_string(),
        "--cache-redis".into(),
        redis.url(),
    ];
    start_scheduler(&mut c, &args);
    c.start_agent(&["--jobs", "8"]);
    c.start_consumerd(1, true);
    c.wait_ready(1);
    let env = c.wrapper_env();
    let root = dir.path().to_path_buf();
    let wrapped = |x: &str| format!("{} {x}", ccroute().display());
    let args: Vec<String> = vec![
        "-j8".into(),
        "BUILD=remote".into(),
        format!("CC={}", wrapped("gcc")),
        format!("CXX={}", wrapped("g++")),
        "check".into(),
    ];
    let builder = std::thread::spawn(move || make(&root, &args, &env));
    // Once some compiles are done, Redis dies.
    let deadline = Instant::now() + Duration::from_secs(60);
    while totals(&c, "completed") < 3 {
        assert!(Instant::now() < deadline, "no compile finished\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(20));
    }
    let at_kill = totals(&c, "completed");
    redis.kill();
    let out = builder.join().unwrap();
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), c.logs());
    // Not by falling back to local compiles: the scheduler kept compiling.
    assert!(totals(&c, "completed") > at_kill, "nothing was compiled remotely after Redis died\n{}", c.logs());
    let local = make(dir.path(), &["-j8".into(), "BUILD=local".into(), "check".into()], &[]);
    assert!(local.status.success());
    assert_same_objects(&objects(&dir.path().join("local")), &objects(&dir.path().join("remote")));
}
