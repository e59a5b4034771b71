//! No trust by default, end to end: hostile compiler arguments sent straight
//! to a real agent by a hand-written scheduler are refused and write nothing
//! outside the agent's scratch directory; peers with a certificate from
//! another CA, or issued for another role, are refused.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ccroute::net;
use ccroute_wire::{codec, payload, Message, Outcome, Role, TaskHeader, TaskSpec, Toolchain, ToolchainKind};
use common::{ccroute, Cluster};

fn spec(args: &[&str], input: &str) -> TaskSpec {
    TaskSpec {
        args: args.iter().map(|s| (*s).to_string()).collect(),
        input_path: input.into(),
        cwd: None,
        env: vec![],
        inputs: None,
    }
}

/// A scheduler written by hand: it welcomes a real agent, then sends it
/// tasks no consumerd would, and reads what comes back.
#[test]
fn hostile_arguments_are_refused_and_write_nothing_outside_scratch() {
    let cluster = Cluster::new();
    let victim = tempfile::tempdir().unwrap();
    let v = victim.path().display().to_string();
    let scratch = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let scheduler = common::raw::RawScheduler::bind(&cluster.tls);
        let addr = scheduler.addr;
        let log = std::fs::File::create(cluster.dir.path().join("agent.log")).unwrap();
        let mut agent = cluster
            .command(ccroute())
            .args(["agent", "--no-discover", "--compiler", "/usr/bin/gcc", "--scheduler", &addr.to_string()])
            .arg("--scratch-dir")
            .arg(scratch.path())
            .stdin(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut peer = scheduler.accept(Role::Agent, 8).await;
        let gcc: &Toolchain = peer.hello.body.toolchains.iter().find(|t| t.kind == ToolchainKind::Gnu).unwrap();
        let key = gcc.key();

        let planted = format!("{v}/planted.c");
        let hostile: Vec<(TaskSpec, &str)> = vec![
            (spec(&["-fplugin=/nonexistent/evil.so"], "a.c"), "-fplugin"),
            (spec(&["-B", &v], "a.c"), "-B"),
            (spec(&[&format!("-B{v}")], "a.c"), "-B"),
            (spec(&[&format!("-specs={v}/specs")], "a.c"), "-specs"),
            (spec(&["-wrapper", "/bin/sh,-c,touch"], "a.c"), "-wrapper"),
            (spec(&["-Xclang", "-load"], "a.c"), "-Xclang"),
            (spec(&[&format!("-Wl,-o,{v}/linked")], "a.c"), "-Wl"),
            (spec(&["-Xlinker", "-o"], "a.c"), "-Xlinker"),
            (spec(&[&format!("@{v}/args")], "a.c"), "@"),
            (spec(&["-o", &format!("{v}/out.o")], "a.c"), "-o"),
            (spec(&["-save-temps"], "a.c"), "-save-temps"),
            (spec(&["-fdump-tree-all"], "a.c"), "-fdump"),
            (spec(&["-I", &v], "a.c"), "-I"),
            (spec(&["-include", &format!("{v}/x.h")], "a.c"), "-include"),
            (spec(&[&format!("{v}/extra.c")], "a.c"), "input"),
            (spec(&["-x", "assembler"], "a.c"), "assembler"),
            (spec(&[], "src/../../escape.c"), ".."),
            (spec(&[], &format!("{v}/../{}/escape.c", victim.path().file_name().unwrap().to_string_lossy())), ".."),
        ];
        let source = b"int f(void) { return 42; }\n";
        let (packed, info) = payload::compress(source);
        let n = hostile.len() as u64;
        for (id, (s, _)) in hostile.iter().enumerate() {
            let header = TaskHeader {
                task_id: id as u64,
                toolchain: key,
                cache_key: None,
                spec: codec::encode_spec(s),
                payload: info,
                inputs: false,
                origin: None,
                resumed: false,
            };
            peer.send(Message::Task(header), Bytes::from(packed.clone())).await;
        }
        // An absolute input path, and a relative one that climbs out of the
        // working directory, are fine (`gcc -c ../src/a.c`): both are
        // recreated inside scratch, never at the path itself.
        let escape = format!("../../../..{v}/escape.c");
        for (i, input) in [planted.as_str(), escape.as_str()].into_iter().enumerate() {
            let t = TaskHeader {
                task_id: n + i as u64,
                toolchain: key,
                cache_key: None,
                spec: codec::encode_spec(&spec(&[], input)),
                payload: info,
                inputs: false,
                origin: None,
                resumed: false,
            };
            peer.send(Message::Task(t), Bytes::from(packed.clone())).await;
        }

        let mut answered = 0;
        while answered < n + 2 {
            let Message::TaskResult(r) = peer.frame().await.message else { continue };
            answered += 1;
            if r.task_id >= n {
                assert_eq!(r.outcome, Outcome::Success, "an outside input path compiles inside scratch");
                continue;
            }
            let (s, what) = &hostile[r.task_id as usize];
            match &r.outcome {
                Outcome::InternalError(why) => {
                    assert!(
                        why.starts_with("refused argument") && why.contains(what),
                        "{s:?} refused for an odd reason: {why}"
                    )
                }
                other => panic!("{s:?} was not refused: {other:?}"),
            }
        }
        let left: Vec<_> = std::fs::read_dir(victim.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(left.is_empty(), "files appeared outside the scratch directory: {left:?}");
        assert!(!Path::new(&planted).exists());
        let _ = agent.kill();
        let _ = agent.wait();
    });
}

/// A peer whose certificate comes from another cluster's CA, or that claims
/// a role its certificate was not issued for, never joins — the scheduler's
/// log says why, and the agent says once that it never will and exits.
#[test]
fn peers_with_a_foreign_or_wrong_role_certificate_are_refused() {
    let mut c = Cluster::new();
    let addr = c.start_scheduler(&[]).to_string();
    let other = tempfile::tempdir().unwrap();
    let foreign = other.path().join("tls");
    assert!(Command::new(ccroute()).args(["certs", "init"]).arg(&foreign).status().unwrap().success());
    // A set whose "agent" certificate is really the consumerd's.
    let wrong_role = other.path().join("wrong-role");
    std::fs::create_dir(&wrong_role).unwrap();
    for f in ["ca.pem", "ca.key"] {
        std::fs::copy(c.tls.join(f), wrong_role.join(f)).unwrap();
    }
    std::fs::copy(c.tls.join("consumerd.pem"), wrong_role.join("agent.pem")).unwrap();
    std::fs::copy(c.tls.join("consumerd.key"), wrong_role.join("agent.key")).unwrap();

    let run_agent = |dir: &Path, log: &str| {
        c.command(ccroute())
            .args(["agent", "--scheduler", &addr, "--test-toolchain", "--no-discover"])
            .env("CCROUTE_TLS_DIR", dir)
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(c.dir.path().join(log)).unwrap())
            .spawn()
            .unwrap()
    };
    let mut a = run_agent(&foreign, "foreign.log");
    let mut b = run_agent(&wrong_role, "wrong-role.log");
    // Both sides say why: the scheduler of each refusal, each agent of its own.
    let logs = || {
        let read = |name: &str| std::fs::read_to_string(c.dir.path().join(name)).unwrap_or_default();
        [c.scheduler.as_ref().unwrap().log_text(), read("foreign.log"), read("wrong-role.log")]
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let [scheduler, foreign, wrong] = logs();
        if scheduler.contains("not signed by")
            && scheduler.contains("certificate is issued for consumerd")
            && foreign.contains("server certificate not signed by the cluster CA")
            && wrong
                .contains("refused the connection: the hello says agent but the certificate is issued for consumerd")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a side never said why:\nscheduler:\n{scheduler}\nforeign agent:\n{foreign}\nwrong-role agent:\n{wrong}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(c.status()["agents"].as_array().unwrap().len(), 0, "a refused agent joined");
    // A refusal no retry can change is said once, and the agent exits with an
    // error instead of knocking again.
    let mut kept_running = Vec::new();
    for (p, log) in [(&mut a, "foreign.log"), (&mut b, "wrong-role.log")] {
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = p.try_wait().unwrap() {
                break Some(s);
            }
            if Instant::now() > deadline {
                let _ = p.kill();
                let _ = p.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let text = std::fs::read_to_string(c.dir.path().join(log)).unwrap();
        let Some(status) = status else {
            kept_running.push(format!("{log}:\n{text}"));
            continue;
        };
        assert!(!status.success(), "a refused agent exited 0:\n{text}");
        assert_eq!(text.matches("will never admit this agent").count(), 1, "{text}");
        assert!(text.contains("then start it again"), "no word of what to do:\n{text}");
        assert!(!text.contains("retrying"), "a refused agent retried:\n{text}");
    }
    assert!(kept_running.is_empty(), "refused agents kept running:\n{}", kept_running.join("\n"));
    // A consumerd so refused says so once and compiles locally without
    // knocking again (it stays up: its wrappers need it).
    let mut d = c
        .command(ccroute())
        .args(["consumerd", "--scheduler", &addr, "--idle-exit", "0", "--socket"])
        .arg(c.dir.path().join("foreign-consumerd.sock"))
        .env("CCROUTE_TLS_DIR", &foreign)
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(c.dir.path().join("foreign-consumerd.log")).unwrap())
        .spawn()
        .unwrap();
    let read = || std::fs::read_to_string(c.dir.path().join("foreign-consumerd.log")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !read().contains("will never admit this consumerd") {
        assert!(Instant::now() < deadline, "the consumerd never said why:\n{}", read());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Its reconnect backoff starts at 0.5 s: three seconds would show retries.
    std::thread::sleep(Duration::from_secs(3));
    assert!(d.try_wait().unwrap().is_none(), "the refused consumerd exited:\n{}", read());
    let text = read();
    assert_eq!(text.matches("tls handshake failed").count(), 1, "the refused consumerd knocked again:\n{text}");
    let _ = d.kill();
    let _ = d.wait();
    // The scheduler serves a proper peer all the while.
    c.start_agent(&["--test-toolchain", "--no-discover"]);
    c.wait_ready(1);
}

/// Bounded memory: past the scheduler's payload budget a task is answered
/// "run it locally" at once — its payload never read — and the scheduler
/// goes on serving tasks that fit.
#[test]
fn past_the_payload_budget_tasks_go_back_to_run_locally() {
    use ccroute_wire::{RetryAction, RetryReason};
    use common::raw::{spec, RawConsumerd};
    let mut c = Cluster::new();
    let addr = c.start_scheduler(&["--payload-budget", "200000", "--no-cache"]);
    c.start_agent(&["--test-toolchain", "--no-discover"]);
    c.wait_ready(1);
    // Incompressible, so the wire size is the size.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let big: Vec<u8> = (0..300_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let small = b"int s(void) { return 0; }\n".to_vec();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut cd = RawConsumerd::connect(&c.tls, addr).await;
        cd.send(1, &spec(0), &big, None).await;
        let (h, _) = cd.result().await;
        assert_eq!(h.outcome, Outcome::Retry(RetryAction::RunLocally, RetryReason::OverBudget));
        cd.send(2, &spec(0), &small, None).await;
        let (h, object) = cd.result().await;
        assert_eq!(h.outcome, Outcome::Success);
        assert_eq!(object, ccroute::agent::executor::test_object(&small));
    });
    let s = c.status();
    assert_eq!(s["payload_bytes"], 0, "every reservation came back: {s}");
}

/// Waits (10 s at most) until at least `bytes` of the scheduler's payload
/// budget are reserved: a header on a stream of its own passed the gate.
async fn reserved(c: &Cluster, bytes: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.status()["payload_bytes"].as_u64().unwrap() < bytes {
        assert!(Instant::now() < deadline, "the payload's budget was never reserved: {}", c.status());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A small honest task sent on `cd` under `id` compiles.
async fn an_honest_task_compiles(cd: &mut common::raw::RawConsumerd, id: u64) {
    let small = b"int s(void) { return 0; }\n".to_vec();
    cd.send(id, &common::raw::spec(0), &small, None).await;
    let (h, object) = cd.result().await;
    assert_eq!((h.task_id, h.outcome), (id, Outcome::Success));
    assert_eq!(object, ccroute::agent::executor::test_object(&small));
}

/// A payload stream that breaks after its header (reset, or ended short) is
/// answered at once — "run it locally", saying why — not left to the
/// consumerd's deadline; its budget comes back and the connection goes on.
#[test]
fn a_payload_stream_that_breaks_after_its_header_is_answered_at_once() {
    use ccroute_wire::{RetryAction, RetryReason};
    use common::raw::{spec, RawConsumerd};
    let mut c = Cluster::new();
    let addr = c.start_scheduler(&["--no-cache"]);
    c.start_agent(&["--test-toolchain", "--no-discover"]);
    c.wait_ready(1);
    let declared = 2u64 << 20;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut cd = RawConsumerd::connect(&c.tls, addr).await;
        for (id, reset) in [(1, true), (2, false)] {
            let mut stream = cd.send_stalling(id, &spec(0), declared).await;
            // Its header was read and passed the gate: the budget is reserved.
            reserved(&c, declared).await;
            if reset {
                stream.reset(quinn::VarInt::from_u32(9)).unwrap();
            } else {
                stream.finish().unwrap();
            }
            let (h, _) = cd.result().await;
            assert_eq!(h.task_id, id);
            match &h.outcome {
                Outcome::Retry(RetryAction::RunLocally, RetryReason::Rejected(why)) => {
                    let expected =
                        if reset { "reset the stream with code 9" } else { "ended in the middle of a frame" };
                    assert!(why.contains("could not be read") && why.contains(expected), "{why}")
                }
                other => panic!("the broken task was answered {other:?}"),
            }
            assert_eq!(c.status()["payload_bytes"], 0, "the broken payload's budget did not come back");
        }
        an_honest_task_compiles(&mut cd, 3).await;
    });
}

/// An agent's result whose object breaks off after its header answers its
/// task at once as the agent's failure (its consumerd compiles it) and
/// gives the agent's token back; before, the task waited for the agent's
/// session to end, and a later run of it on that agent with it.
#[test]
fn an_agents_result_that_breaks_after_its_header_answers_its_task_at_once() {
    use common::raw::{spec, RawAgent, RawConsumerd};
    let mut c = Cluster::new();
    let addr = c.start_scheduler(&["--no-cache", "--no-hedging"]);
    let declared = 2u64 << 20;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut agent = RawAgent::connect(&c.tls, addr).await;
        let mut cd = RawConsumerd::connect(&c.tls, addr).await;
        let small = b"int s(void) { return 0; }\n".to_vec();
        cd.send(1, &spec(0), &small, None).await;
        let (task, _) = agent.task().await;
        let mut stream = agent.answer_partly(task.task_id, declared).await;
        reserved(&c, declared).await;
        stream.reset(quinn::VarInt::from_u32(9)).unwrap();
        let (h, _) = cd.result().await;
        assert_eq!(h.task_id, 1);
        match &h.outcome {
            Outcome::InternalError(why) => {
                assert!(why.contains("without its object") && why.contains("reset the stream with code 9"), "{why}")
            }
            other => panic!("answered {other:?}"),
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let s = c.status();
            let held: u64 = s["agents"].as_array().unwrap().iter().map(|a| a["tokens_in_use"].as_u64().unwrap()).sum();
            if held == 0 && s["payload_bytes"] == 0 {
                break;
            }
            assert!(Instant::now() < deadline, "a token or the budget is still held: {s}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

/// A task whose source breaks after its header, sent to a real agent by a
/// hand-written scheduler, is answered at once — an internal error naming
/// the break, so that its token comes back — and the agent goes on.
#[test]
fn a_task_stream_that_breaks_after_its_header_is_answered_by_the_agent_at_once() {
    use common::raw::{spec, RawScheduler};
    let mut c = Cluster::new();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let scheduler = RawScheduler::for_cluster(&mut c);
        c.start_agent(&["--test-toolchain", "--no-discover", "--no-speed-probe"]);
        let mut agent = scheduler.accept(Role::Agent, 1).await;
        // Ended short rather than reset: a reset may arrive before the
        // header is read (then there is no task to answer), an end never.
        let mut stream = agent.send_task_partly(1, &spec(0), 2 << 20).await;
        stream.finish().unwrap();
        // Unanswered, the task's token would stay held: `result` fails at 60 s.
        let (h, _) = agent.result().await;
        assert_eq!(h.task_id, 1);
        match &h.outcome {
            Outcome::InternalError(why) => assert!(
                why.contains("did not reach the agent whole") && why.contains("ended in the middle of a frame"),
                "{why}"
            ),
            other => panic!("answered {other:?}\n{}", c.logs()),
        }
        let small = b"int s(void) { return 0; }\n";
        agent.send_task(2, &spec(0), small).await;
        let (h, object) = agent.result().await;
        assert_eq!((h.task_id, &h.outcome), (2, &Outcome::Success), "{}", c.logs());
        assert_eq!(object, ccroute::agent::executor::test_object(small));
    });
}

/// A result whose object breaks after its header, sent to a real consumerd
/// by a hand-written scheduler, has the unit compiled locally at once (not
/// at the unit's deadline, here 300 s): the build gets gcc's own object.
#[test]
fn a_result_stream_that_breaks_after_its_header_is_compiled_by_the_consumerd_at_once() {
    use common::raw::RawScheduler;
    let mut c = Cluster::new();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let scheduler = RawScheduler::for_cluster(&mut c);
        c.start_consumerd_with(1, true, &["--remote-deadline-floor", "300"]);
        let mut consumerd = scheduler.accept(Role::Consumerd, 8).await;
        let work = tempfile::tempdir().unwrap();
        std::fs::write(work.path().join("u.c"), "int u(int x) { return x * 3 + 1; }\n").unwrap();
        let local = Command::new("gcc").current_dir(work.path()).args(["-O2", "-c", "u.c", "-o", "local.o"]).output();
        assert!(local.unwrap().status.success());
        let mut wrapper = Command::new(ccroute());
        wrapper.current_dir(work.path()).args(["gcc", "-O2", "-c", "u.c", "-o", "remote.o"]).envs(c.wrapper_env());
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(wrapper.output().unwrap());
        });
        let (task, _) = consumerd.task().await;
        let mut stream = consumerd.answer_partly(task.task_id, 2 << 20).await;
        stream.finish().unwrap();
        let out = tokio::task::spawn_blocking(move || finished.recv_timeout(Duration::from_secs(60)))
            .await
            .unwrap()
            .unwrap_or_else(|_| panic!("the compile waited for its deadline\n{}", c.logs()));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            std::fs::read(work.path().join("remote.o")).unwrap(),
            std::fs::read(work.path().join("local.o")).unwrap()
        );
        let log = c.consumerd.as_ref().unwrap().log_text();
        assert!(log.contains("a result stream failed") && log.contains("ended in the middle of a frame"), "{log}");
    });
}

/// A peer that declares a payload and stops sending it holds its budget
/// only until the payload's deadline: then the bytes come back, its task is
/// answered "run it locally" saying why, and the scheduler goes on.
#[test]
fn a_payload_that_stops_arriving_gives_its_budget_back_at_its_deadline() {
    use ccroute_wire::{RetryAction, RetryReason};
    use common::raw::{spec, RawConsumerd};
    let mut c = Cluster::new();
    let addr = c.start_scheduler(&["--no-cache"]);
    c.start_agent(&["--test-toolchain", "--no-discover"]);
    c.wait_ready(1);
    let declared = 2u64 << 20;
    let allowed = net::payload_deadline(declared);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut cd = RawConsumerd::connect(&c.tls, addr).await;
        let t0 = Instant::now();
        let _stalled = cd.send_stalling(1, &spec(0), declared).await;
        reserved(&c, declared).await;
        let (h, _) = cd.result().await;
        let waited = t0.elapsed();
        match &h.outcome {
            Outcome::Retry(RetryAction::RunLocally, RetryReason::Rejected(why)) => {
                assert!(why.contains("stopped arriving"), "{why}")
            }
            other => panic!("the stalled task was answered {other:?}"),
        }
        assert_eq!(h.task_id, 1);
        assert!(waited >= allowed, "answered after {waited:?}, before its deadline of {allowed:?}");
        assert!(waited < allowed + Duration::from_secs(10), "answered only after {waited:?}");
        assert_eq!(c.status()["payload_bytes"], 0, "the stalled payload's budget did not come back");
        // The same connection goes on: an honest task compiles.
        an_honest_task_compiles(&mut cd, 2).await;
    });
}

/// An agent told to wait for rotated certificates does not exit when the
/// scheduler refuses its certificate: it says so once, waits without
/// knocking, and joins as soon as the right certificates replace its own.
#[test]
fn an_agent_waiting_for_rotated_certificates_joins_once_they_arrive() {
    let mut c = Cluster::new();
    let addr = c.start_scheduler(&[]).to_string();
    let other = tempfile::tempdir().unwrap();
    let dir = other.path().join("tls");
    assert!(Command::new(ccroute()).args(["certs", "init"]).arg(&dir).status().unwrap().success());
    let log = c.dir.path().join("waiting.log");
    let mut agent = c
        .command(ccroute())
        .args(["agent", "--scheduler", &addr, "--test-toolchain", "--no-discover", "--wait-for-certificates"])
        .env("CCROUTE_TLS_DIR", &dir)
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log).unwrap().contains("waiting for new certificates") {
        assert!(
            Instant::now() < deadline,
            "the agent never said it waits:\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
        assert!(agent.try_wait().unwrap().is_none(), "the agent exited:\n{}", std::fs::read_to_string(&log).unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Waiting, it does not knock.
    let handshakes = || c.scheduler.as_ref().unwrap().log_text().matches("not signed by").count();
    let before = handshakes();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(handshakes(), before, "the waiting agent kept knocking");
    assert!(agent.try_wait().unwrap().is_none(), "the agent exited while waiting");
    // The operator rotates its certificates: the cluster's own, key first.
    for f in ["agent.key", "agent.pem", "ca.pem"] {
        std::fs::copy(c.tls.join(f), dir.join(f)).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.status()["agents"].as_array().unwrap().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the agent never joined with its new certificates:\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.matches("waiting for new certificates").count(), 1, "{text}");
    let _ = agent.kill();
    let _ = agent.wait();
}

/// Two authenticated consumerds that declare 60 payloads of 60 MiB each and
/// then stall hold no more than their shares of the payload budget: an
/// honest consumerd that comes after them still has its 32 MiB of sources
/// taken, and every one of its tasks compiles remotely. (Before shares, the
/// stallers held 240 of the 256 MiB and the honest build ran locally.)
#[test]
fn stalling_consumerds_leave_an_honest_one_its_share_of_the_budget() {
    use common::raw::{spec, RawConsumerd};
    let mut c = Cluster::new();
    let addr = c.start_scheduler(&["--no-cache"]);
    c.start_agent(&["--test-toolchain", "--no-discover", "--jobs", "8"]);
    c.wait_ready(1);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let declared = 60u64 << 20;
        let mut streams = Vec::new();
        let mut stallers = Vec::new();
        for s in 0..2u64 {
            let cd = RawConsumerd::connect(&c.tls, addr).await;
            for i in 0..60 {
                streams.push(cd.send_stalling(1000 * (s + 1) + i, &spec(0), declared).await);
            }
            stallers.push(cd);
        }
        // Wait until the stallers' headers have all been through the gate
        // (each is reserved or answered "over budget").
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = c.status();
            let over = s["totals"]["retried"].as_u64().unwrap();
            let held = s["payload_bytes"].as_u64().unwrap();
            if over + held / declared >= 120 {
                assert!(held <= 3 * declared, "two stallers hold {} MiB of the budget", held >> 20);
                break;
            }
            assert!(Instant::now() < deadline, "the stallers' headers never all passed the gate: {s}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut honest = RawConsumerd::connect(&c.tls, addr).await;
        let mut sources = Vec::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for id in 1..=8u64 {
            // Noise: it does not compress, so each takes its 4 MiB of the budget.
            let mut src = Vec::with_capacity(4 << 20);
            while src.len() < 4 << 20 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                src.extend_from_slice(&x.to_le_bytes());
            }
            honest.send(id, &spec(2_000), &src, None).await;
            sources.push(src);
        }
        for _ in 0..8 {
            let (h, object) = honest.result().await;
            assert_eq!(h.outcome, Outcome::Success, "task {} of the honest consumerd: {:?}", h.task_id, h.outcome);
            assert_eq!(object, ccroute::agent::executor::test_object(&sources[h.task_id as usize - 1]));
        }
        drop(streams);
    });
}

/// A consumerd that ignores its remote limit and floods the scheduler with
/// tasks is answered "run it locally" past its cap of tasks in flight,
/// saying why, and its tasks below the cap are untouched.
#[test]
fn a_consumerd_past_its_cap_of_tasks_in_flight_is_told_to_compile_locally() {
    use ccroute_wire::{RetryAction, RetryReason};
    use common::raw::{spec, RawConsumerd};
    let mut c = Cluster::new();
    let addr = c.start_scheduler(&["--no-cache"]);
    c.start_agent(&["--test-toolchain", "--no-discover", "--jobs", "2"]);
    c.wait_ready(1);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut cd = RawConsumerd::connect(&c.tls, addr).await;
        let cap = 1024u64;
        for id in 1..=cap + 8 {
            cd.send(id, &spec(60_000), format!("int f{id}(void);\n").as_bytes(), None).await;
        }
        let mut refused = Vec::new();
        while refused.len() < 8 {
            let (h, _) = cd.result().await;
            match &h.outcome {
                Outcome::Retry(RetryAction::RunLocally, RetryReason::Rejected(why)) if why.contains("in flight") => {
                    assert!(why.contains("1024"), "{why}");
                    refused.push(h.task_id)
                }
                other => panic!("task {} was answered {other:?} while the flood was under way", h.task_id),
            }
        }
        refused.sort_unstable();
        assert_eq!(refused, (cap + 1..=cap + 8).collect::<Vec<_>>(), "only the tasks past the cap are refused");
        let s = c.status();
        assert_eq!(s["consumerds"][0]["in_flight"], cap, "{s}");
    });
}

/// A consumerd that disappears cancels its tasks on the agents: the agent
/// stops the compile and its token comes back long before the compile
/// would have ended.
#[test]
fn a_consumerd_leaving_frees_the_agents_it_was_using() {
    use common::raw::{spec, RawConsumerd};
    let mut c = Cluster::new();
    let addr = c.start_scheduler(&["--no-cache"]);
    c.start_agent(&["--test-toolchain", "--no-discover", "--jobs", "2"]);
    c.wait_ready(1);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let cd = RawConsumerd::connect(&c.tls, addr).await;
        cd.send(1, &spec(60_000), b"int slow(void);\n", None).await;
        cd.send(2, &spec(60_000), b"int slower(void);\n", None).await;
        let deadline = Instant::now() + Duration::from_secs(20);
        while c.status()["agents"][0]["tokens_in_use"] != 2 {
            assert!(Instant::now() < deadline, "the tasks never reached the agent");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        cd.conn.close(0u32.into(), b"gone");
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = c.status();
        if s["agents"][0]["tokens_in_use"] == 0 && s["consumerds"].as_array().unwrap().is_empty() {
            assert_eq!(s["totals"]["cancelled"], 2, "{s}");
            break;
        }
        assert!(Instant::now() < deadline, "the agent still runs a cancelled consumerd's tasks: {s}\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A cancel that overtakes its task (a large text travels on a stream of
/// its own, the cancel on the control stream) drops the task when it comes:
/// no agent compiles it, nothing answers it; the next task is served.
#[test]
fn a_task_whose_cancel_came_first_is_not_compiled() {
    use common::raw::{spec, RawConsumerd};
    let mut c = Cluster::new();
    let addr = c.start_scheduler(&["--no-cache"]);
    c.start_agent(&["--test-toolchain", "--no-discover"]);
    c.wait_ready(1);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut cd = RawConsumerd::connect(&c.tls, addr).await;
        cd.cancel(1).await;
        cd.send(1, &spec(0), b"int cancelled(void);\n", None).await;
        cd.send(2, &spec(0), b"int wanted(void);\n", None).await;
        let (h, _) = cd.result().await;
        assert_eq!((h.task_id, &h.outcome), (2, &Outcome::Success), "the cancelled task was answered: {h:?}");
    });
    let s = c.status();
    assert_eq!(s["totals"]["agent_results"], 1, "an agent compiled the cancelled task: {s}");
    assert_eq!(s["totals"]["requests"], 1, "{s}");
}
