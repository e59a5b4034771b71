//! The agent's side of a fetch stream: a toolchain's manifest, then the
//! blobs it lacks, each checked against its digest before it is kept.
//!
//! One bidirectional stream to the scheduler, which relays it to a
//! consumerd that supplies the toolchain: [`Fetch::Toolchain`] is answered
//! by a [`Package`], checked (its key is the one asked for, its
//! `binary_hash` the manifest's id, the manifest sound and for this
//! architecture); [`Fetch::Blobs`] by one [`BlobHeader`] per digest, in
//! order. A blob whose bytes do not hash to its digest is refused and asked
//! for again, up to [`ATTEMPTS`] times; each is written to a temporary file
//! and renamed into place, read-only.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use bytes::{Bytes, BytesMut};
use ccroute_wire::payload::decompress;
use ccroute_wire::{encode_header, BlobHeader, Fetch, Limits, Manifest, Message, Package, Toolchain, ToolchainKey};

use super::store::{blob_path, FETCH_IDLE};
use crate::net::FrameReader;

/// How many times one blob is asked for before the fetch fails.
pub const ATTEMPTS: usize = 3;

/// Largest blob on the wire (compressed): a compiler's largest library.
pub const MAX_BLOB_WIRE: u64 = 512 << 20;

/// Largest blob once decompressed (libLLVM is ~100 MB): a manifest may
/// declare any size, and decompressing allocates it.
pub const MAX_BLOB_RAW: u64 = 1 << 30;

/// Every fetch may take this long, plus a second per MB of its blobs.
const FETCH_BASE: std::time::Duration = std::time::Duration::from_secs(60);

/// What a fetch brought.
#[derive(Debug)]
pub(super) struct Fetched {
    pub(super) toolchain: Toolchain,
    pub(super) manifest: Manifest,
    /// Blobs received and kept.
    pub(super) blobs: usize,
    /// Their bytes.
    pub(super) raw_bytes: u64,
    /// Their bytes on the wire.
    pub(super) wire_bytes: u64,
}

/// Fetches `key` over `conn`, writing the blobs `have` says are missing
/// into `blobs_dir`. `on_manifest` sees the checked manifest before any
/// blob is written, and may refuse it; `on_blob` is told the size of each
/// blob file this fetch created.
pub(super) async fn fetch(
    conn: &quinn::Connection,
    key: ToolchainKey,
    blobs_dir: &Path,
    have: impl Fn(&[u8; 32]) -> bool,
    on_manifest: impl FnOnce(&Manifest) -> Result<(), String>,
    on_blob: impl Fn(u64),
) -> Result<Fetched, String> {
    let mut deadline = tokio::time::Instant::now() + FETCH_BASE;
    let (mut send, recv) = conn.open_bi().await.map_err(|e| format!("cannot open a fetch stream: {e}"))?;
    let limits = Limits { max_payload: MAX_BLOB_WIRE, ..Limits::DEFAULT };
    let mut reader = FrameReader::new(recv, conn.remote_address(), limits);
    write(&mut send, &Message::Fetch(Fetch::Toolchain(key))).await?;
    let (toolchain, manifest) = match next(&mut reader, deadline).await? {
        (Message::Package(p), _) => match *p {
            Package::Found { toolchain, manifest } => (toolchain, manifest),
            Package::Unavailable(why) => return Err(format!("no consumerd can supply it: {why}")),
        },
        (other, _) => return Err(format!("expected the package, got a {}", other.name())),
    };
    check(key, &toolchain, &manifest)?;
    if let Some((_, size)) = manifest.blobs().into_iter().find(|(_, size)| *size > MAX_BLOB_RAW) {
        return Err(format!("refused: a file of {size} bytes, more than {MAX_BLOB_RAW}"));
    }
    on_manifest(&manifest)?;
    deadline += std::time::Duration::from_secs(manifest.total_size() >> 20);
    let sizes: Sizes = manifest
        .entries
        .iter()
        .filter_map(|e| match e.kind {
            ccroute_wire::EntryKind::File { digest, size, executable } => Some((digest, (size, executable))),
            ccroute_wire::EntryKind::Symlink { .. } => None,
        })
        .collect();
    let missing: Vec<[u8; 32]> = manifest.blobs().into_iter().map(|(d, _)| d).filter(|d| !have(d)).collect();
    let mut fetched = Fetched { toolchain, manifest, blobs: 0, raw_bytes: 0, wire_bytes: 0 };
    let got = blobs(&mut send, &mut reader, missing, &sizes, blobs_dir, deadline, true, on_blob).await?;
    (fetched.blobs, fetched.raw_bytes, fetched.wire_bytes) = got;
    let _ = send.finish();
    Ok(fetched)
}

/// Size and executable bit of each blob a fetch may ask for.
type Sizes = std::collections::HashMap<[u8; 32], (u64, bool)>;

/// Fetches the inputs `missing` (digest, size) of the agent's task `task`
/// over `conn` into `blobs_dir`, within `limit`. Returns the bytes of blob
/// files it created.
pub(super) async fn fetch_inputs(
    conn: &quinn::Connection,
    task: u64,
    missing: &[([u8; 32], u64)],
    blobs_dir: &Path,
    limit: std::time::Duration,
) -> Result<u64, String> {
    let deadline = tokio::time::Instant::now() + limit;
    let (mut send, recv) = conn.open_bi().await.map_err(|e| format!("cannot open a fetch stream: {e}"))?;
    let limits = Limits { max_payload: MAX_BLOB_WIRE, ..Limits::DEFAULT };
    let mut reader = FrameReader::new(recv, conn.remote_address(), limits);
    write(&mut send, &Message::Fetch(Fetch::Inputs(task))).await?;
    let sizes: Sizes = missing.iter().map(|(d, size)| (*d, (*size, false))).collect();
    let written = std::sync::atomic::AtomicU64::new(0);
    let on_blob = |size: u64| {
        written.fetch_add(size, std::sync::atomic::Ordering::Relaxed);
    };
    let wanted = missing.iter().map(|(d, _)| *d).collect();
    blobs(&mut send, &mut reader, wanted, &sizes, blobs_dir, deadline, false, on_blob).await?;
    let _ = send.finish();
    Ok(written.into_inner())
}

/// Asks for `missing` and stores each blob that matches its digest, asking
/// again for those that do not, up to [`ATTEMPTS`] times. Returns blobs,
/// bytes and wire bytes received; `on_blob` is told the size of each blob
/// file created.
#[allow(clippy::too_many_arguments)]
async fn blobs(
    send: &mut quinn::SendStream,
    reader: &mut FrameReader,
    mut missing: Vec<[u8; 32]>,
    sizes: &Sizes,
    blobs_dir: &Path,
    deadline: tokio::time::Instant,
    sync: bool,
    on_blob: impl Fn(u64),
) -> Result<(usize, u64, u64), String> {
    let mut fetched = (0usize, 0u64, 0u64);
    for attempt in 1..=ATTEMPTS {
        if missing.is_empty() {
            break;
        }
        write(send, &Message::Fetch(Fetch::Blobs(missing.clone()))).await?;
        let mut refused = Vec::new();
        for digest in &missing {
            let (header, payload) = match next(reader, deadline).await? {
                (Message::Blob(h), p) => (h, p),
                (other, _) => return Err(format!("expected a blob, got a {}", other.name())),
            };
            let BlobHeader { digest: got, payload: info, available } = header;
            if got != *digest {
                return Err("blobs out of order".into());
            }
            if !available {
                return Err(format!("the consumerd cannot read blob {}", hex(digest)));
            }
            let Some(&(size, executable)) = sizes.get(digest) else {
                return Err("a blob nobody asked for".into());
            };
            let dir = blobs_dir.to_owned();
            let d = *digest;
            // Decompressing and hashing tens of MB: off the runtime's threads.
            let stored = tokio::task::spawn_blocking(move || {
                let raw = match decompress(&info, &payload, size) {
                    Ok(raw) if raw.len() as u64 == size && blake3::hash(&raw).as_bytes() == &d => raw,
                    Ok(_) | Err(_) => return Ok(None),
                };
                store_blob(&dir, &d, executable, &raw, sync).map(Some)
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot store blob {}: {e}", hex(digest)))?;
            match stored {
                None => {
                    tracing::warn!(blob = %hex(digest), attempt, "a blob does not match its digest; refused, asking again");
                    refused.push(*digest);
                    continue;
                }
                Some(created) => {
                    if created {
                        on_blob(size);
                    }
                }
            }
            fetched.0 += 1;
            fetched.1 += size;
            fetched.2 += info.len;
        }
        missing = refused;
    }
    if !missing.is_empty() {
        return Err(format!("{} blob(s) did not match their digest after {ATTEMPTS} attempts", missing.len()));
    }
    Ok(fetched)
}

/// What the agent checks of a package before it writes anything.
pub(super) fn check(key: ToolchainKey, toolchain: &Toolchain, manifest: &Manifest) -> Result<(), String> {
    if toolchain.key() != key {
        return Err(format!("the package is toolchain {}, not the {key} asked for", toolchain.key()));
    }
    if manifest.id() != toolchain.binary_hash {
        return Err("the manifest is not the one the toolchain's identity names".into());
    }
    manifest.validate().map_err(|e| format!("refused: {e}"))?;
    if manifest.arch != std::env::consts::ARCH {
        return Err(format!("its binaries are for {}, this agent runs {}", manifest.arch, std::env::consts::ARCH));
    }
    Ok(())
}

async fn write(send: &mut quinn::SendStream, message: &Message) -> Result<(), String> {
    let mut buf = BytesMut::new();
    encode_header(message, &mut buf);
    send.write_all(&buf).await.map_err(|e| format!("fetch stream: {e}"))
}

/// The next frame, within [`FETCH_IDLE`] and the fetch's deadline.
async fn next(reader: &mut FrameReader, deadline: tokio::time::Instant) -> Result<(Message, Bytes), String> {
    let idle = tokio::time::Instant::now() + FETCH_IDLE;
    match tokio::time::timeout_at(idle.min(deadline), reader.next()).await {
        Err(_) if deadline <= idle => Err("the fetch ran past its deadline".into()),
        Err(_) => Err(format!("nothing received for {} s", FETCH_IDLE.as_secs())),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(None)) => Err("the fetch stream ended early".into()),
        Ok(Ok(Some(f))) => Ok((f.message, f.payload)),
    }
}

/// Writes a checked blob into place; `false` when it was there already (a
/// concurrent fetch of another toolchain wrote it first). `sync`: flushed to
/// disk before it is named (a toolchain's files; a unit's inputs are
/// checked again against their digest when a tree links them, so a torn
/// one after a crash is refused, not compiled).
pub(super) fn store_blob(
    blobs: &Path,
    digest: &[u8; 32],
    executable: bool,
    raw: &[u8],
    sync: bool,
) -> std::io::Result<bool> {
    let dest = blob_path(blobs, digest, executable);
    if dest.exists() {
        return Ok(false);
    }
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent)?;
    }
    let parent = dest.parent().unwrap_or(blobs);
    let mut tmp = tempfile::NamedTempFile::new_in(parent)?;
    tmp.write_all(raw)?;
    if sync {
        tmp.as_file().sync_data()?;
    }
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(if executable { 0o555 } else { 0o444 }))?;
    match tmp.persist_noclobber(&dest) {
        Ok(_) => Ok(true),
        Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e.error),
    }
}

pub(crate) fn hex(digest: &[u8; 32]) -> String {
    blake3::Hash::from_bytes(*digest).to_hex()[..16].to_owned()
}
