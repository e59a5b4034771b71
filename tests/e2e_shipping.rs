//! Toolchains that travel, end to end: an agent whose file system holds no
//! gcc at all — its own mount namespace, every gcc, g++, cc1 and `as` of the
//! host masked — running as `nobody`, compiles Lua and the sample for a
//! consumerd using gcc 12 and, at the same time, for another using gcc 11,
//! with toolchains the consumerds ship it; every object is byte-identical to
//! the local build with the same compiler, with and without `-g`.
//!
//! Needs gcc-11/g++-11 and bubblewrap (`scripts/test` installs them as
//! root), and a mount namespace: as root the agent drops to `nobody` after
//! masking; otherwise it masks inside a user namespace of its own.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{assert_same_objects, ccroute, make, objects, Cluster, Daemon};

/// Masks the host's GNU compilers and assembler, checks they are gone, then
/// runs the rest of the command line (as `nobody` when `$DROP` is set).
const MASK: &str = r#"set -e
for f in /usr/bin/*gcc* /usr/bin/*g++* /usr/bin/cc /usr/bin/c++ /usr/bin/cpp* /usr/bin/*-as /usr/bin/as; do
  if [ -e "$f" ]; then mount --bind /dev/null "$f"; fi
done
mount -t tmpfs -o ro none /usr/lib/gcc
if [ -d /usr/libexec/gcc ]; then mount -t tmpfs -o ro none /usr/libexec/gcc; fi
for c in gcc gcc-12 gcc-11 g++ as; do
  if "$c" --version >/dev/null 2>&1; then echo "$c still runs in the agent's namespace" >&2; exit 97; fi
done
if [ -n "$(ls /usr/lib/gcc)" ]; then echo "/usr/lib/gcc still visible" >&2; exit 98; fi
if [ -n "$DROP" ]; then exec setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; fi
exec "$@"
"#;

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

fn require(program: &str, why: &str) {
    let found =
        Command::new("sh").args(["-c", &format!("command -v {program}")]).output().is_ok_and(|o| o.status.success());
    assert!(found, "{program} is needed {why}; install it (scripts/test does, as root)");
}

/// Lua 5.4's sources from the `lua-src` crate (a dev-dependency for them),
/// copied to `dir` with a Makefile that builds every object.
fn lua_project(dir: &Path) {
    // Offline, and only this host's packages: without the filter cargo wants
    // every platform's dependencies downloaded, which a fresh machine that
    // only built for itself has not done.
    let rustc = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into())).arg("-vV").output().unwrap();
    let host = String::from_utf8_lossy(&rustc.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .expect("rustc -vV names the host");
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["metadata", "--format-version", "1", "--offline", "--filter-platform", &host])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let manifest = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "lua-src")
        .and_then(|p| p["manifest_path"].as_str())
        .expect("lua-src is a dev-dependency");
    let src = Path::new(manifest).parent().unwrap().join("lua-5.4.9");
    std::fs::create_dir_all(dir).unwrap();
    let mut objs = Vec::new();
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        let name = e.file_name().into_string().unwrap();
        if name.ends_with(".c") || name.ends_with(".h") {
            std::fs::copy(e.path(), dir.join(&name)).unwrap();
        }
        if name.ends_with(".c") && name != "lua.c" && name != "luac.c" {
            objs.push(name.replace(".c", ".o"));
        }
    }
    objs.sort();
    let makefile = format!(
        "CFLAGS ?= -O2\nall: {}\n%.o: %.c\n\t$(CC) $(CFLAGS) -DLUA_USE_LINUX -DLUA_COMPAT_5_3 -c $< -o $@\nclean:\n\trm -f *.o\n",
        objs.join(" ")
    );
    std::fs::write(dir.join("Makefile"), makefile).unwrap();
}

/// A second consumerd beside the cluster's, with its own socket and cache.
fn second_consumerd(c: &Cluster) -> (Daemon, Vec<(String, String)>) {
    let socket = c.dir.path().join("consumerd2.sock");
    let home = c.dir.path().join("cache-home-2");
    let log = c.dir.path().join("consumerd2.log");
    let child = c
        .command(ccroute())
        .args(["consumerd", "--local-jobs", "1", "--idle-exit", "0", "--prefer-remote", "--no-local-cache"])
        .args(["--scheduler", &c.addr.unwrap().to_string()])
        .env("CCROUTE_SOCKET", &socket)
        .env("XDG_CACHE_HOME", &home)
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "the second consumerd never made its socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut env = c.wrapper_env();
    for (k, v) in &mut env {
        match k.as_str() {
            "CCROUTE_SOCKET" => *v = socket.display().to_string(),
            "XDG_CACHE_HOME" => *v = home.display().to_string(),
            _ => {}
        }
    }
    (Daemon { name: "consumerd2".into(), child, log }, env)
}

/// Starts the agent in a mount namespace without gcc.
fn start_masked_agent(c: &mut Cluster) {
    let work = c.dir.path().join("agent-home");
    std::fs::create_dir_all(work.join("store")).unwrap();
    std::fs::create_dir_all(work.join("scratch")).unwrap();
    let root = is_root();
    if root {
        // nobody reads the certificates and the binary, and owns its dirs.
        let everyone = |p: &Path| {
            let st = Command::new("chmod").arg("-R").arg("a+rX").arg(p).status().unwrap();
            assert!(st.success());
        };
        everyone(c.dir.path());
        let mut p = ccroute();
        while p.pop() {
            let _ = Command::new("chmod").arg("a+x").arg(&p).status();
        }
        let st = Command::new("chown").args(["-R", "65534:65534"]).arg(&work).status().unwrap();
        assert!(st.success());
    }
    let script = c.dir.path().join("mask.sh");
    std::fs::File::create(&script).unwrap().write_all(MASK.as_bytes()).unwrap();
    let log = c.dir.path().join("agent0.log");
    let mut cmd = c.command("unshare");
    if !root {
        cmd.args(["--user", "--map-root-user"]);
    }
    cmd.args(["--mount", "--propagation", "private", "sh"])
        .arg(&script)
        .arg(ccroute())
        .args(["agent", "--scheduler", &c.addr.unwrap().to_string(), "-j", "4"])
        .arg("--store-dir")
        .arg(work.join("store"))
        .arg("--scratch-dir")
        .arg(work.join("scratch"))
        .env("HOME", &work)
        .env("XDG_CACHE_HOME", &work);
    if root {
        cmd.env("DROP", "1");
    }
    let child = cmd.stdin(Stdio::null()).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
    c.agents.push(Daemon { name: "agent0".into(), child, log });
}

/// Builds `project` (a copy in `dir`) through ccroute with `cc`/`cxx`, then
/// locally with the plain compilers, and returns both object sets.
fn build_twice(
    dir: &Path,
    cc: &str,
    cxx: &str,
    cflags: &str,
    env: &[(String, String)],
) -> (BTreeMap<PathBuf, Vec<u8>>, BTreeMap<PathBuf, Vec<u8>>) {
    let via = |c: &str| format!("{} {c}", ccroute().display());
    let args = |cc: String, cxx: String| {
        vec![
            "-j4".to_string(),
            format!("CC={cc}"),
            format!("CXX={cxx}"),
            format!("CFLAGS={cflags}"),
            format!("CXXFLAGS={cflags}"),
        ]
    };
    let out = make(dir, &args(via(cc), via(cxx)), env);
    assert!(out.status.success(), "build through ccroute failed: {}", String::from_utf8_lossy(&out.stderr));
    let remote = objects(dir);
    assert!(make(dir, &["clean".into()], &[]).status.success());
    let out = make(dir, &args(cc.into(), cxx.into()), &[]);
    assert!(out.status.success(), "local build failed: {}", String::from_utf8_lossy(&out.stderr));
    (objects(dir), remote)
}

fn copy_tree(from: &Path, to: &Path) {
    let st = Command::new("cp").arg("-r").arg(from).arg(to).status().unwrap();
    assert!(st.success());
}

#[test]
fn an_agent_without_gcc_compiles_for_gcc_12_and_gcc_11_clients_at_once() {
    require("gcc-11", "as the second compiler (Debian: gcc-11 g++-11)");
    require("g++-11", "as the second compiler (Debian: g++-11)");
    require("bwrap", "for the agent's sandbox (Debian: bubblewrap)");
    require("unshare", "for the agent's mount namespace (util-linux)");
    let mut c = Cluster::new();
    c.start_scheduler(&[]);
    start_masked_agent(&mut c);
    // A second agent with gcc 12 installed (and nothing else, shipping off):
    // its route is the one gcc 12 is shipped on.
    c.start_agent(&["--no-shipping", "--no-discover", "--compiler", "/usr/bin/gcc-12", "-j", "1"]);
    c.start_consumerd_with(1, true, &["--no-local-cache"]);
    let (consumerd2, env2) = second_consumerd(&c);
    let env1 = c.wrapper_env();
    c.wait_ready(2);
    let status = c.status();
    let agents = status["agents"].as_array().unwrap();
    let by_shipping = |ready: bool| {
        agents.iter().find(|a| a["shipping"].get("Ready").is_some() == ready).map(|a| a["node_id"].clone())
    };
    let (shipped_agent, native_agent) = match (by_shipping(true), by_shipping(false)) {
        (Some(s), Some(n)) => (s, n),
        _ => panic!("one agent runs shipped toolchains in bubblewrap, one does not: {status}\n{}", c.logs()),
    };
    assert!(status.to_string().contains("bubblewrap"), "{status}");

    let root = c.dir.path().join("projects");
    std::fs::create_dir_all(&root).unwrap();
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample");
    let (s12, s11) = (root.join("sample-12"), root.join("sample-11"));
    copy_tree(&sample, &s12);
    copy_tree(&sample, &s11);
    let (l12, l11) = (root.join("lua-12"), root.join("lua-11"));
    lua_project(&l12);
    lua_project(&l11);

    // gcc 12 and gcc 11 clients at the same time: the sample without -g, Lua with it.
    let started = Instant::now();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| {
            let sample = build_twice(&s12, "gcc-12", "g++-12", "-O2 -Wall", &env1);
            let lua = build_twice(&l12, "gcc-12", "g++-12", "-O2 -g", &env1);
            (sample, lua)
        });
        let b = s.spawn(|| {
            let sample = build_twice(&s11, "gcc-11", "g++-11", "-O2 -Wall", &env2);
            let lua = build_twice(&l11, "gcc-11", "g++-11", "-O2 -g", &env2);
            (sample, lua)
        });
        (a.join(), b.join())
    });
    let logs = || format!("{}\n----- consumerd2 -----\n{}", c.logs(), consumerd2.log_text());
    let ((sample12, lua12), (sample11, lua11)) = match (a, b) {
        (Ok(a), Ok(b)) => (a, b),
        _ => panic!("a build failed\n{}", logs()),
    };
    for (name, (local, remote)) in
        [("sample gcc 12", sample12), ("lua gcc 12 -g", lua12), ("sample gcc 11", sample11), ("lua gcc 11 -g", lua11)]
    {
        eprintln!("{name}: {} objects", local.len());
        assert_same_objects(&local, &remote);
    }
    eprintln!("four builds through ccroute and locally in {:?}", started.elapsed());

    // Every gcc and g++ of both versions is shipped to the agent without
    // gcc; gcc 12's route is the same one the native agent serves.
    let status = c.status();
    let routes = status["routes"].as_array().unwrap();
    for version in ["12", "11"] {
        for compiler in ["gcc", "g++"] {
            let route = routes
                .iter()
                .find(|r| {
                    r["description"]["compiler"] == compiler
                        && r["description"]["version"].as_str().is_some_and(|v| v.starts_with(version))
                })
                .unwrap_or_else(|| panic!("no route for {compiler} {version}: {status}"));
            assert_eq!(route["shipped_to"], serde_json::json!([shipped_agent]), "{route}");
            let mut want = vec![shipped_agent.to_string()];
            if (compiler, version) == ("gcc", "12") {
                want.push(native_agent.to_string());
            }
            let mut have: Vec<String> = route["agents"].as_array().unwrap().iter().map(|v| v.to_string()).collect();
            have.sort();
            want.sort();
            assert_eq!(have, want, "one route for the shipped and the installed gcc 12: {route}");
        }
    }
    let shipped = agents_by_id(&status, &shipped_agent);
    let done = shipped["completed"].as_u64().unwrap();
    let failed = shipped["failed"].as_u64().unwrap();
    assert!(
        done >= 8 && failed == 0,
        "the agent without gcc compiled {done} units, {failed} failed: {status}\n{}",
        logs()
    );
    for cd in status["consumerds"].as_array().unwrap() {
        assert!(cd["submitted"].as_u64() > Some(0), "both clients sent units remote: {status}");
    }
    c.assert_each_task_ended_once();

    // What travelled, for the record.
    let agent_log = strip_ansi(&c.agents[0].log_text());
    let ready: Vec<&str> = agent_log.lines().filter(|l| l.contains("shipped toolchain ready")).collect();
    for line in &ready {
        eprintln!("{line}");
    }
    // g++ 12, gcc 11 and g++ 11 for sure; gcc 12 unless the native agent took every unit.
    assert!((3..=4).contains(&ready.len()), "each toolchain fetched once\n{agent_log}");
    let mut names: Vec<&str> = ready.iter().filter_map(|l| l.split("toolchain=").nth(1)?.split(" (").next()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), ready.len(), "no toolchain fetched twice: {ready:?}");
}

/// The text of a log without its colour codes.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(ch) = chars.next() {
        if ch == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(ch);
        }
    }
    out
}

fn agents_by_id<'a>(status: &'a serde_json::Value, id: &serde_json::Value) -> &'a serde_json::Value {
    status["agents"].as_array().unwrap().iter().find(|a| a["node_id"] == *id).unwrap()
}

/// A consumerd whose compiler no agent has and none can be shipped to
/// (the agent does not ship) compiles locally: the build never fails.
#[test]
fn a_toolchain_nobody_can_supply_compiles_locally() {
    let mut c = Cluster::new();
    c.start_scheduler(&[]);
    c.start_agent(&["--no-shipping", "--no-discover", "--test-toolchain"]);
    c.start_consumerd_with(1, true, &["--no-local-cache"]);
    c.wait_ready(1);
    let dir = c.dir.path().join("p");
    copy_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("sample"), &dir);
    let args =
        ["-j2".to_string(), format!("CC={} gcc", ccroute().display()), format!("CXX={} g++", ccroute().display())];
    let out = make(&dir, &args, &c.wrapper_env());
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), c.logs());
    let status = c.status();
    assert_eq!(status["agents"][0]["shipping"], "Off", "{status}");
    assert_eq!(status["agents"][0]["completed"].as_u64(), Some(0), "{status}");
}

/// An agent that cannot make the sandbox (here: no bwrap in its `PATH`) says
/// so in its log and in `status`, and still serves what it has.
#[test]
fn an_agent_without_a_sandbox_says_so_and_serves_its_own_compilers() {
    let mut c = Cluster::new();
    c.start_scheduler(&[]);
    let log = c.dir.path().join("agent0.log");
    let child = c
        .command(ccroute())
        .args(["agent", "--scheduler", &c.addr.unwrap().to_string(), "--test-toolchain"])
        .env("PATH", c.dir.path().join("empty-bin"))
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    c.agents.push(Daemon { name: "agent0".into(), child, log });
    c.wait_ready(1);
    let status = c.status();
    let why = status["agents"][0]["shipping"]["Unavailable"].as_str().unwrap_or_default().to_owned();
    assert!(why.contains("bubblewrap (bwrap) is not installed"), "{status}");
    assert!(c.agents[0].log_text().contains("cannot run shipped toolchains"), "{}", c.logs());
    assert_eq!(status["routes"].as_array().unwrap().len(), 1, "its test toolchain only: {status}");
    let text = Command::new(ccroute())
        .args(["status", "--scheduler", &c.addr.unwrap().to_string()])
        .env("CCROUTE_TLS_DIR", &c.tls)
        .env("XDG_CONFIG_HOME", c.dir.path().join("config"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("unavailable: bubblewrap (bwrap) is not installed"));
}

/// A consumerd that announces a toolchain and then supplies a package that
/// would write outside the toolchain root: the agent refuses it and writes
/// nothing, the task comes back to compile locally; a toolchain nobody
/// announced is sent back at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_outside_its_root_is_refused_and_the_unit_compiles_locally() {
    use ccroute_wire::{Entry, EntryKind, Fetch, Lang, Manifest, Outcome, Package, Toolchain, ToolchainKind};
    let mut c = Cluster::new();
    c.start_scheduler(&[]);
    let store = c.dir.path().join("store");
    let store_arg = store.display().to_string();
    c.start_agent(&["--no-discover", "--store-dir", &store_arg]);
    let mut entries = vec![
        Entry { path: "usr/bin/gcc".into(), kind: EntryKind::File { digest: [1; 32], size: 1, executable: true } },
        Entry {
            path: "usr/../../../etc/ccroute-pwned".into(),
            kind: EntryKind::File { digest: [2; 32], size: 1, executable: false },
        },
    ];
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    let manifest =
        Manifest { driver: "usr/bin/gcc".into(), arch: std::env::consts::ARCH.into(), search_path: vec![], entries };
    let toolchain = Toolchain {
        kind: ToolchainKind::Gnu,
        lang: Lang::C,
        compiler: "gcc".into(),
        target: "x86_64-linux-gnu".into(),
        version: "99".into(),
        pic_default: true,
        pie_default: true,
        binary_hash: manifest.id(),
    };
    let addr = c.addr.unwrap();
    let mut raw =
        common::raw::RawConsumerd::connect_with(&c.tls, addr, vec![toolchain.clone()], ccroute::net::system_info())
            .await;
    // Answer every fetch stream with the hostile package.
    let conn = raw.conn.clone();
    let answer = Package::Found { toolchain: toolchain.clone(), manifest };
    tokio::spawn(async move {
        while let Ok((send, recv)) = conn.accept_bi().await {
            let peer = conn.remote_address();
            let mut reader = ccroute::net::FrameReader::new(recv, peer, ccroute_wire::Limits::DEFAULT);
            let writer = ccroute::net::FrameWriter::spawn(send, peer, 2);
            if let Ok(Some(f)) = reader.next().await {
                assert!(matches!(f.message, ccroute_wire::Message::Fetch(Fetch::Toolchain(_))));
                let _ =
                    writer.send(ccroute_wire::Message::Package(Box::new(answer.clone())), bytes::Bytes::new()).await;
            }
            while let Ok(Some(_)) = reader.next().await {}
        }
    });
    // The agent is put on the announced route.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = tokio::task::block_in_place(|| c.status());
        let on_route =
            s["routes"].as_array().unwrap().iter().any(|r| r["shipped_to"].as_array().is_some_and(|a| !a.is_empty()));
        if on_route {
            break;
        }
        assert!(Instant::now() < deadline, "the shipping agent never joined the route: {s}\n{}", c.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let spec = common::raw::spec(0);
    raw.send_for(toolchain.key(), 1, &spec, b"int x;\n", None).await;
    let (header, _) = raw.result().await;
    match &header.outcome {
        Outcome::InternalError(why) => assert!(why.contains("not a relative path inside the toolchain root"), "{why}"),
        other => panic!("expected the agent to refuse the package, got {other:?}\n{}", c.logs()),
    }
    assert!(header.outcome.runs_locally());
    assert!(!Path::new("/etc/ccroute-pwned").exists());
    let tree: Vec<PathBuf> = common::files(&store, |_| true);
    assert!(tree.is_empty(), "nothing was written: {tree:?}");
    // A toolchain nobody announced: sent back to compile locally at once.
    raw.send_for(ccroute_wire::ToolchainKey(7), 2, &spec, b"int y;\n", None).await;
    let (header, _) = raw.result().await;
    assert!(header.outcome.runs_locally(), "{:?}", header.outcome);
}

/// clang and clang++ shipped to an agent that offers no compiler of its own
/// (`--no-discover`): its binary, libLLVM and libclang-cpp, and its resource
/// headers travel; the objects are the local clang's.
#[test]
fn a_shipped_clang_compiles_the_sample_as_the_local_one() {
    require("clang", "(Debian: clang)");
    let mut c = Cluster::new();
    c.start_scheduler(&[]);
    let store = c.dir.path().join("store").display().to_string();
    c.start_agent(&["--no-discover", "--store-dir", &store, "-j", "2"]);
    c.start_consumerd_with(1, true, &["--no-local-cache"]);
    c.wait_ready(1);
    let dir = c.dir.path().join("sample");
    copy_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("sample"), &dir);
    let (local, remote) = build_twice(&dir, "clang", "clang++", "-O2 -Wall", &c.wrapper_env());
    assert_same_objects(&local, &remote);
    let status = c.status();
    let routes = status["routes"].as_array().unwrap();
    // Each with its inputs twin (units sent as their inputs take those).
    assert_eq!(routes.len(), 4, "clang and clang++: {status}");
    let twins =
        routes.iter().filter(|r| r["description"]["compiler"].as_str().is_some_and(|c| c.ends_with(" (inputs)")));
    assert_eq!(twins.count(), 2, "{status}");
    for r in routes {
        assert_eq!(r["shipped_to"].as_array().map(Vec::len), Some(1), "{r}");
    }
    let done = status["agents"][0]["completed"].as_u64().unwrap();
    assert!(done >= 4 && status["agents"][0]["failed"] == 0, "{status}\n{}", c.logs());
}
