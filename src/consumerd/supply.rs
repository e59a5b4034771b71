//! The consumerd's side of a fetch stream: an agent that lacks one of this
//! consumerd's toolchains asks for its manifest and the blobs it is missing;
//! the scheduler relays the stream here.
//!
//! Only files of a package this consumerd built are served, each read
//! again, checked against its digest (a file that changed since is
//! answered as unavailable: the agent's fetch fails and the task compiles
//! here), and zstd-compressed on the blocking pool. The first time a
//! toolchain is shipped, its size is logged.
//!
//! The inputs of a unit sent as its inputs are served the same way, asked
//! for by the task's id ([`Fetch::Inputs`]): only the files listed for a
//! task still in flight, each read again and checked.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use ccroute_wire::payload::compress;
use ccroute_wire::{BlobHeader, Fetch, Limits, Message, Package as WirePackage, PayloadInfo, Toolchain, ToolchainKey};

use crate::net::{FrameReader, FrameWriter};
use crate::toolchain::Package;

/// The packages this consumerd announced, by route key.
#[derive(Debug, Default)]
pub(crate) struct Supply {
    packages: Mutex<HashMap<ToolchainKey, (Toolchain, Arc<Package>)>>,
    shipped: Mutex<HashSet<ToolchainKey>>,
    /// The inputs of tasks in flight: digest → a path that has it.
    inputs: Mutex<HashMap<u64, Sources>>,
}

/// Where each digest of one task's inputs can be read.
pub(crate) type Sources = Arc<HashMap<[u8; 32], std::path::PathBuf>>;

/// What a fetch stream serves.
enum Serving {
    Nothing,
    Toolchain(Toolchain, Arc<Package>),
    Inputs(Sources),
}

impl Supply {
    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps `package` of `toolchain` for agents to fetch.
    pub(crate) fn offer(&self, toolchain: &Toolchain, package: Arc<Package>) {
        let mut packages = Self::lock(&self.packages);
        if packages.len() >= 256 {
            packages.clear();
        }
        packages.insert(toolchain.key(), (toolchain.clone(), package));
    }

    /// Serves the inputs of task `id` until [`Supply::forget`].
    pub(crate) fn register(&self, id: u64, sources: Sources) {
        Self::lock(&self.inputs).insert(id, sources);
    }

    /// Task `id` ended: its inputs are no longer served.
    pub(crate) fn forget(&self, id: u64) {
        Self::lock(&self.inputs).remove(&id);
    }

    /// Serves one fetch stream until the agent ends it.
    /// Inputs sent are counted in `inputs_sent` (bytes on the wire).
    pub(crate) async fn serve(
        &self,
        send: quinn::SendStream,
        recv: quinn::RecvStream,
        peer: SocketAddr,
        inputs_sent: &std::sync::atomic::AtomicU64,
    ) {
        let mut reader = FrameReader::new(recv, peer, Limits::DEFAULT);
        // Bulk data: below the control stream (see `net::send_on_new_stream`).
        let _ = send.set_priority(-1);
        // Two blobs in flight at most: a compiler's largest file is tens of MB.
        let writer = FrameWriter::spawn(send, peer, 2);
        let mut current = Serving::Nothing;
        let (mut blobs, mut raw, mut wire) = (0usize, 0u64, 0u64);
        loop {
            let frame = match reader.next().await {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "fetch stream from an agent failed");
                    return;
                }
            };
            match frame.message {
                Message::Fetch(Fetch::Toolchain(key)) => {
                    let found = Self::lock(&self.packages).get(&key).cloned();
                    let answer = match &found {
                        Some((toolchain, package)) => {
                            WirePackage::Found { toolchain: toolchain.clone(), manifest: package.manifest.clone() }
                        }
                        None => WirePackage::Unavailable("this consumerd has no package of that toolchain".into()),
                    };
                    current = found.map_or(Serving::Nothing, |(t, p)| Serving::Toolchain(t, p));
                    if writer.send(Message::Package(Box::new(answer)), Bytes::new()).await.is_err() {
                        return;
                    }
                }
                Message::Fetch(Fetch::Inputs(id)) => {
                    // A task that ended (or was never this consumerd's) serves nothing:
                    // every blob asked for is then unavailable.
                    let sources = Self::lock(&self.inputs).get(&id).cloned().unwrap_or_default();
                    current = Serving::Inputs(sources);
                }
                Message::Fetch(Fetch::Blobs(digests)) => {
                    let sources = match &current {
                        Serving::Toolchain(_, package) => &package.sources,
                        Serving::Inputs(sources) => &**sources,
                        Serving::Nothing => {
                            tracing::warn!(
                                "an agent asked for blobs before naming a toolchain or a task; stream closed"
                            );
                            return;
                        }
                    };
                    // Each of its files once: a request that repeats a large
                    // digest must not make this machine read it again and again.
                    let mut seen = HashSet::new();
                    let wanted: Vec<[u8; 32]> = digests.into_iter().filter(|d| seen.insert(*d)).collect();
                    if wanted.len() > sources.len().max(1) {
                        tracing::warn!("an agent asked for more blobs than it was offered; stream closed");
                        return;
                    }
                    for digest in wanted {
                        let path = sources.get(&digest).cloned();
                        let read = tokio::task::spawn_blocking(move || path.and_then(|p| read_blob(&p, &digest)));
                        let (header, payload) = match read.await.ok().flatten() {
                            Some((info, bytes)) => {
                                blobs += 1;
                                raw += info.raw_len;
                                wire += info.len;
                                if matches!(current, Serving::Inputs(_)) {
                                    // Relaxed: a display counter.
                                    inputs_sent.fetch_add(info.len, std::sync::atomic::Ordering::Relaxed);
                                }
                                (BlobHeader { digest, payload: info, available: true }, bytes)
                            }
                            None => {
                                (BlobHeader { digest, payload: PayloadInfo::EMPTY, available: false }, Bytes::new())
                            }
                        };
                        if writer.send(Message::Blob(header), payload).await.is_err() {
                            return;
                        }
                    }
                }
                other => {
                    tracing::warn!(message = other.name(), "unexpected message on a fetch stream; closed");
                    return;
                }
            }
        }
        let _ = writer.finish().await;
        if let Serving::Toolchain(toolchain, package) = current {
            let first = Self::lock(&self.shipped).insert(toolchain.key());
            let total = package.manifest.total_size();
            if first {
                tracing::info!(
                    %toolchain,
                    files = package.manifest.blobs().len(),
                    toolchain_bytes = total,
                    sent_blobs = blobs,
                    sent_bytes = raw,
                    wire_bytes = wire,
                    "shipped a toolchain to an agent for the first time"
                );
            } else {
                tracing::debug!(%toolchain, sent_blobs = blobs, sent_bytes = raw, wire_bytes = wire, "shipped a toolchain");
            }
        }
    }
}

/// The file's bytes, compressed, if they still have `digest`.
fn read_blob(path: &Path, digest: &[u8; 32]) -> Option<(PayloadInfo, Bytes)> {
    let bytes = std::fs::read(path).ok()?;
    if blake3::hash(&bytes).as_bytes() != digest {
        tracing::warn!(path = %path.display(), "a file changed since it was offered; not sent");
        return None;
    }
    let (packed, info) = compress(&bytes);
    Some((info, Bytes::from(packed)))
}
