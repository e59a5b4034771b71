//! The store and the fetch over real QUIC on loopback, against a supplier
//! played by the test (so that it can lie): corrupt blobs, paths outside the
//! root, a toolchain nobody has, blobs shared between toolchains, eviction,
//! a restart, and many tasks waiting on one fetch.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use ccroute_wire::payload::compress;
use ccroute_wire::{
    BlobHeader, Entry, EntryKind, Fetch, Lang, Limits, Manifest, Message, Package, Toolchain, ToolchainKey,
    ToolchainKind,
};

use super::store::Store;
use crate::net::tls::{self, CertRole};
use crate::net::{self, FrameReader, FrameWriter, TransportOptions};

/// One toolchain as the test's supplier knows it.
#[derive(Clone)]
struct Offer {
    toolchain: Toolchain,
    manifest: Manifest,
    blobs: HashMap<[u8; 32], Vec<u8>>,
}

fn offer(version: &str, files: &[(&str, &[u8], bool)]) -> Offer {
    let mut entries: Vec<Entry> = files
        .iter()
        .map(|(path, bytes, executable)| Entry {
            path: (*path).into(),
            kind: EntryKind::File {
                digest: *blake3::hash(bytes).as_bytes(),
                size: bytes.len() as u64,
                executable: *executable,
            },
        })
        .collect();
    entries.push(Entry { path: "lib".into(), kind: EntryKind::Symlink { target: "usr/lib".into() } });
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    let manifest = Manifest {
        driver: "usr/bin/gcc".into(),
        arch: std::env::consts::ARCH.into(),
        search_path: vec!["usr/bin".into()],
        entries,
    };
    let toolchain = Toolchain {
        kind: ToolchainKind::Gnu,
        lang: Lang::C,
        compiler: "gcc".into(),
        target: "x86_64-linux-gnu".into(),
        version: version.into(),
        pic_default: true,
        pie_default: true,
        binary_hash: manifest.id(),
    };
    let blobs = files.iter().map(|(_, b, _)| (*blake3::hash(b).as_bytes(), b.to_vec())).collect();
    Offer { toolchain, manifest, blobs }
}

/// What the supplier saw.
#[derive(Default)]
struct Seen {
    toolchain_requests: AtomicUsize,
    blobs_asked: Mutex<Vec<[u8; 32]>>,
}

/// A supplier on a QUIC connection: answers fetch streams from `offers`,
/// corrupting the first sending of `corrupt_once`.
async fn supplier(
    offers: Vec<Offer>,
    corrupt_once: Option<[u8; 32]>,
) -> (quinn::Connection, Arc<Seen>, tempfile::TempDir) {
    let certs = tempfile::tempdir().unwrap();
    tls::init(certs.path(), false).unwrap();
    let opts = TransportOptions::default();
    let server_id = tls::load(certs.path(), CertRole::Scheduler).unwrap();
    let agent_id = tls::load(certs.path(), CertRole::Agent).unwrap();
    let server = net::server_endpoint(SocketAddr::from(([127, 0, 0, 1], 0)), &server_id, &opts).unwrap();
    let addr = server.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let corrupted = Arc::new(Mutex::new(corrupt_once));
    let seen2 = seen.clone();
    tokio::spawn(async move {
        let conn = net::accept(server.accept().await.unwrap()).await.unwrap();
        while let Ok((send, recv)) = conn.accept_bi().await {
            let (offers, seen, corrupted) = (offers.clone(), seen2.clone(), corrupted.clone());
            tokio::spawn(async move {
                let mut reader = FrameReader::new(recv, addr, Limits::DEFAULT);
                let writer = FrameWriter::spawn(send, addr, 4);
                let mut current: Option<Offer> = None;
                while let Ok(Some(frame)) = reader.next().await {
                    match frame.message {
                        Message::Fetch(Fetch::Toolchain(key)) => {
                            seen.toolchain_requests.fetch_add(1, Ordering::SeqCst);
                            current = offers.iter().find(|o| o.toolchain.key() == key).cloned();
                            let answer = match &current {
                                Some(o) => {
                                    Package::Found { toolchain: o.toolchain.clone(), manifest: o.manifest.clone() }
                                }
                                None => Package::Unavailable("not here".into()),
                            };
                            writer.send(Message::Package(Box::new(answer)), Bytes::new()).await.unwrap();
                        }
                        Message::Fetch(Fetch::Blobs(digests)) => {
                            let o = current.clone().unwrap();
                            for d in digests {
                                seen.blobs_asked.lock().unwrap().push(d);
                                let mut bytes = o.blobs[&d].clone();
                                if corrupted.lock().unwrap().take_if(|c| *c == d).is_some() {
                                    bytes[0] ^= 0xff;
                                }
                                let (packed, info) = compress(&bytes);
                                let header = BlobHeader { digest: d, payload: info, available: true };
                                writer.send(Message::Blob(header), Bytes::from(packed)).await.unwrap();
                            }
                        }
                        _ => break,
                    }
                }
                let _ = writer.finish().await;
            });
        }
    });
    let client = net::client_endpoint(&agent_id, &opts, addr).unwrap();
    let conn = net::connect(&client, addr).await.unwrap();
    (conn, seen, certs)
}

fn key_of(o: &Offer) -> ToolchainKey {
    o.toolchain.key()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blobs_are_checked_shared_and_evicted_and_the_store_survives_a_restart() {
    let libc = vec![7u8; 5000];
    let gcc12 = offer("12", &[("usr/bin/gcc", b"#!/bin/sh\necho gcc 12\n", true), ("usr/lib/libc.so.6", &libc, false)]);
    let gcc11 = offer("11", &[("usr/bin/gcc", b"#!/bin/sh\necho gcc 11\n", true), ("usr/lib/libc.so.6", &libc, false)]);
    let libc_digest = *blake3::hash(&libc).as_bytes();
    let (conn, seen, _certs) = supplier(vec![gcc12.clone(), gcc11.clone()], Some(libc_digest)).await;
    let dir = tempfile::tempdir().unwrap();
    // Room for one toolchain and a half: the second evicts the first.
    let store = Store::open(dir.path(), 5030).unwrap();

    // A corrupt blob is refused and asked for again; the tree is right.
    let lease = store.lease(key_of(&gcc12), &conn).await.unwrap();
    let asked = seen.blobs_asked.lock().unwrap().clone();
    assert_eq!(asked.iter().filter(|d| **d == libc_digest).count(), 2, "fetched again after the corrupt copy");
    let root = lease.ready.root.clone();
    assert_eq!(std::fs::read(root.join("usr/lib/libc.so.6")).unwrap(), libc);
    assert_eq!(std::fs::read_link(root.join("lib")).unwrap(), std::path::Path::new("usr/lib"));
    let mode = |p: &std::path::Path| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions()) & 0o777
    };
    assert_eq!(mode(&root.join("usr/bin/gcc")), 0o555);
    assert_eq!(mode(&root.join("usr/lib/libc.so.6")), 0o444);
    assert_eq!(mode(&root.join("usr/bin")), 0o555, "materialised read-only");
    assert_eq!(lease.ready.driver, std::path::Path::new("/usr/bin/gcc"));
    assert_eq!(lease.ready.path_env, "/usr/bin");
    drop(lease);

    // gcc 11 shares libc: only its driver travels. gcc 12, idle, is evicted.
    seen.blobs_asked.lock().unwrap().clear();
    let lease11 = store.lease(key_of(&gcc11), &conn).await.unwrap();
    assert_eq!(seen.blobs_asked.lock().unwrap().len(), 1, "shared blobs are not sent again");
    assert!(!store.has(key_of(&gcc12)), "the least recently used idle toolchain was evicted");
    assert!(store.has(key_of(&gcc11)));
    assert_eq!(std::fs::read(lease11.ready.root.join("usr/lib/libc.so.6")).unwrap(), libc, "its shared blob survived");
    drop(lease11);

    // A restart keeps what was whole and removes a crashed fetch's temporary file.
    drop(store);
    let leftover = dir.path().join("blobs").join("ab").join(".tmpXYZ");
    std::fs::create_dir_all(leftover.parent().unwrap()).unwrap();
    std::fs::write(&leftover, b"half a blob").unwrap();
    let reopened = Store::open(dir.path(), 5030).unwrap();
    assert!(!leftover.exists());
    assert!(reopened.has(key_of(&gcc11)));
    let before = seen.toolchain_requests.load(Ordering::SeqCst);
    let again = reopened.lease(key_of(&gcc11), &conn).await.unwrap();
    assert_eq!(seen.toolchain_requests.load(Ordering::SeqCst), before, "no fetch after a restart");
    drop(again);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_packages_are_refused_and_many_tasks_wait_on_one_fetch() {
    let good = offer("12", &[("usr/bin/gcc", b"driver", true), ("usr/lib/x", b"lib", false)]);
    // A manifest that would write outside the toolchain root.
    let mut escaping = offer("13", &[("usr/bin/gcc", b"driver 13", true)]);
    escaping.manifest.entries.push(Entry {
        path: "usr/../../etc/cron.d/x".into(),
        kind: EntryKind::File { digest: [1; 32], size: 1, executable: false },
    });
    escaping.manifest.entries.sort_by(|a, b| a.path.cmp(&b.path));
    escaping.toolchain.binary_hash = escaping.manifest.id();
    // A package whose identity does not name its manifest.
    let mut lying = offer("14", &[("usr/bin/gcc", b"driver 14", true)]);
    lying.manifest.entries[1] =
        Entry { path: "usr/bin/gcc".into(), kind: EntryKind::File { digest: [9; 32], size: 6, executable: true } };
    let (conn, seen, _certs) = supplier(vec![good.clone(), escaping.clone(), lying.clone()], None).await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), 1 << 30).unwrap();

    let e = store.lease(key_of(&escaping), &conn).await.unwrap_err();
    assert!(e.to_string().contains("not a relative path inside the toolchain root"), "{e}");
    let e = store.lease(key_of(&lying), &conn).await.unwrap_err();
    assert!(e.to_string().contains("not the one the toolchain's identity names"), "{e}");
    let e = store.lease(ToolchainKey(12345), &conn).await.unwrap_err();
    assert!(e.to_string().contains("no consumerd can supply it"), "{e}");
    assert!(!dir.path().join("etc").exists() && std::fs::read_dir(dir.path().join("toolchains")).unwrap().count() == 0);

    // A toolchain larger than the whole store is refused before any blob.
    let small = Store::open(&dir.path().join("small"), 8).unwrap();
    let asked = seen.blobs_asked.lock().unwrap().len();
    let e = small.lease(key_of(&good), &conn).await.unwrap_err();
    assert!(e.to_string().contains("more than the store's 8"), "{e}");
    assert_eq!(seen.blobs_asked.lock().unwrap().len(), asked);

    let before = seen.toolchain_requests.load(Ordering::SeqCst);
    let leases = futures_join_all((0..8).map(|_| {
        let (store, conn) = (store.clone(), conn.clone());
        let key = key_of(&good);
        tokio::spawn(async move { store.lease(key, &conn).await.map(|l| l.ready.root.clone()) })
    }))
    .await;
    assert!(leases.iter().all(|r| r.is_ok()));
    assert_eq!(seen.toolchain_requests.load(Ordering::SeqCst) - before, 1, "eight tasks, one fetch");
}

async fn futures_join_all<T: Send + 'static>(handles: impl Iterator<Item = tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}
