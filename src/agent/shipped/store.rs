//! The agent's toolchain store: blobs by digest, toolchains materialised
//! from them, bounded, least recently used first out, kept across restarts.
//!
//! ```text
//! <dir>/blobs/<2 hex>/<64 hex>.r     contents, mode 0444
//! <dir>/blobs/<2 hex>/<64 hex>.x     the same contents for executable entries, 0555
//! <dir>/toolchains/<32 hex key>/package   the Package (toolchain + manifest); its mtime is the last use
//! <dir>/toolchains/<32 hex key>/root/...  the tree: hard links to blobs, links as listed, dirs 0555
//! <dir>/tasks/<name>/...               a unit's sandbox tree while it compiles (see [`super::inputs`])
//! ```
//!
//! The inputs of units sent as their inputs are blobs too (`.r`), shared by
//! every unit and client, kept while a unit's tree links them and after it,
//! until the bound needs the room: then the blobs no tree links, longest
//! unused first (a hard link made or removed stamps the file's ctime), go
//! before any toolchain does. An installed compiler that compiles such units
//! is imported into the store once, from its own files, so that its tree can
//! be linked into theirs.
//!
//! Blobs are shared by every toolchain (gcc 11 and gcc 12 share their libc
//! and binutils files): a fetch asks only for the ones missing. A tree is
//! built under a temporary name and renamed into place, so a crash leaves
//! either a whole toolchain or a leftover that the next start removes.
//! Size is the sum of the blob files; past the bound, toolchains no task
//! holds are removed oldest use first, then every blob no tree links to.
//!
//! [`Store::lease`] is what a task calls: a ready toolchain at once;
//! otherwise one fetch per toolchain, which every task for it waits on (the
//! fetch runs in a task of its own, so a waiter that gives up does not stop
//! it), while tasks for other toolchains go on.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use ccroute_wire::codec::{decode_package, encode_package};
use ccroute_wire::{EntryKind, Manifest, Package, Toolchain, ToolchainKey};
use tokio::sync::watch;

use super::fetch::{self, Fetched};
use super::sandbox::Top;

/// The default bound: several compilers with their libraries.
pub const DEFAULT_MAX_BYTES: u64 = 8 << 30;

/// A toolchain ready to run.
#[derive(Debug)]
pub struct Ready {
    /// Its identity (`binary_hash` is its manifest's id).
    pub toolchain: Toolchain,
    /// The driver, as the sandbox sees it (`/usr/bin/x86_64-linux-gnu-gcc-12`).
    pub driver: PathBuf,
    /// `PATH` inside the sandbox.
    pub path_env: String,
    /// The materialised tree.
    pub root: PathBuf,
    /// Its top-level entries, for the sandbox.
    pub top: Vec<Top>,
    /// Bytes of its distinct files.
    pub bytes: u64,
    /// Its files.
    pub manifest: Arc<Manifest>,
    key: ToolchainKey,
}

/// Where a toolchain that is not in the store comes from.
#[derive(Debug, Clone, Copy)]
pub enum Origin<'a> {
    /// Fetched over this connection, through the scheduler.
    Fetched(&'a quinn::Connection),
    /// Installed here: imported from its own files.
    Installed(&'a Toolchain, &'a Arc<crate::toolchain::Package>),
}

/// A toolchain a task holds: not evicted while any lease lives.
#[derive(Debug)]
pub struct Lease {
    /// The toolchain.
    pub ready: Arc<Ready>,
    store: Arc<Store>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut state = self.store.lock();
        if let Some(slot) = state.toolchains.get_mut(&self.ready.key) {
            slot.in_use = slot.in_use.saturating_sub(1);
            slot.last_used = Instant::now();
        }
    }
}

/// Why a toolchain could not be made ready.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Fetching it failed.
    #[error("fetching toolchain {key}: {why}")]
    Fetch {
        /// The route key.
        key: ToolchainKey,
        /// What went wrong.
        why: String,
    },
    /// Writing it failed.
    #[error("storing toolchain {key}: {why}")]
    Io {
        /// The route key.
        key: ToolchainKey,
        /// What went wrong.
        why: String,
    },
}

#[derive(Debug)]
struct Slot {
    ready: Arc<Ready>,
    in_use: u32,
    last_used: Instant,
}

#[derive(Debug, Default)]
struct State {
    toolchains: HashMap<ToolchainKey, Slot>,
    /// Fetches under way, each with the channel its result comes on.
    fetching: HashMap<ToolchainKey, watch::Receiver<Option<Result<(), StoreError>>>>,
    /// Blobs a fetch under way wrote or needs: never collected.
    pinned: HashMap<[u8; 32], u32>,
    /// Input blobs whose bytes this process has checked against their digest.
    verified: HashSet<[u8; 32]>,
    bytes: u64,
}

/// The store. See the module doc.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    max_bytes: u64,
    state: Mutex<State>,
    /// Unit trees between units ([`super::inputs`]).
    pub(super) trees: super::inputs::TreePool,
}

impl Store {
    /// Opens (creating) the store in `dir`, bounded to `max_bytes`: keeps the
    /// whole toolchains it finds, removes leftovers of interrupted ones.
    ///
    /// # Errors
    /// When the directory cannot be made or read.
    pub fn open(dir: &Path, max_bytes: u64) -> io::Result<Arc<Store>> {
        fs::create_dir_all(dir.join("blobs"))?;
        fs::create_dir_all(dir.join("toolchains"))?;
        // Trees of units that were compiling when the agent stopped.
        remove_tree(&dir.join("tasks"));
        fs::create_dir_all(dir.join("tasks"))?;
        let mut state = State::default();
        for entry in fs::read_dir(dir.join("toolchains"))?.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let loaded = u128::from_str_radix(&name, 16).ok().and_then(|k| {
                let key = ToolchainKey(k);
                let bytes = fs::read(path.join("package")).ok()?;
                let Package::Found { toolchain, manifest } = decode_package(&bytes).ok()? else { return None };
                (toolchain.key() == key && manifest.id() == toolchain.binary_hash).then(|| {
                    let used = fs::metadata(path.join("package")).and_then(|m| m.modified()).ok();
                    (key, ready(key, toolchain, &manifest, path.join("root")), used)
                })
            });
            match loaded {
                Some((key, ready, used)) => {
                    let age = used.and_then(|u| SystemTime::now().duration_since(u).ok()).unwrap_or_default();
                    let last_used = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
                    state.toolchains.insert(key, Slot { ready: Arc::new(ready), in_use: 0, last_used });
                }
                None => {
                    tracing::info!(path = %path.display(), "removing an incomplete toolchain from the store");
                    remove_tree(&path);
                }
            }
        }
        // A fetch's temporary files, left by a crash.
        for (path, _) in blob_files(&dir.join("blobs")) {
            if blob_digest(&path).is_none() {
                let _ = fs::remove_file(&path);
            }
        }
        state.bytes = blob_bytes(&dir.join("blobs"));
        tracing::info!(
            dir = %dir.display(),
            toolchains = state.toolchains.len(),
            bytes = state.bytes,
            max_bytes,
            "toolchain store open"
        );
        Ok(Arc::new(Store { dir: dir.to_owned(), max_bytes, state: Mutex::new(state), trees: Default::default() }))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update is a whole insert or counter change.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes of blobs stored now.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// Whether the toolchain is ready without a fetch.
    pub fn has(&self, key: ToolchainKey) -> bool {
        self.lock().toolchains.contains_key(&key)
    }

    /// The toolchain `key`, fetched over `conn` (through the scheduler) if
    /// it is not here.
    ///
    /// # Errors
    /// When the fetch or the write fails; the next task fetches again.
    pub async fn lease(self: &Arc<Self>, key: ToolchainKey, conn: &quinn::Connection) -> Result<Lease, StoreError> {
        self.lease_from(key, Origin::Fetched(conn)).await
    }

    /// The toolchain `key`, made ready from `origin` if it is not here.
    ///
    /// # Errors
    /// When the fetch, the import or the write fails; the next task tries again.
    pub async fn lease_from(self: &Arc<Self>, key: ToolchainKey, origin: Origin<'_>) -> Result<Lease, StoreError> {
        loop {
            let mut waiting = {
                let mut state = self.lock();
                if let Some(slot) = state.toolchains.get_mut(&key) {
                    slot.in_use += 1;
                    slot.last_used = Instant::now();
                    let ready = slot.ready.clone();
                    drop(state);
                    touch(&self.dir.join("toolchains").join(key_name(key)).join("package"));
                    return Ok(Lease { ready, store: self.clone() });
                }
                match state.fetching.get(&key) {
                    Some(rx) => rx.clone(),
                    None => {
                        let (tx, rx) = watch::channel(None);
                        state.fetching.insert(key, rx.clone());
                        let store = self.clone();
                        let origin = match origin {
                            Origin::Fetched(conn) => Owned::Fetched(conn.clone()),
                            Origin::Installed(t, p) => Owned::Installed(t.clone(), p.clone()),
                        };
                        tokio::spawn(async move {
                            let result = match origin {
                                Owned::Fetched(conn) => store.fetch(key, &conn).await,
                                Owned::Installed(t, p) => store.import(key, t, p).await,
                            };
                            store.lock().fetching.remove(&key);
                            let _ = tx.send(Some(result));
                        });
                        rx
                    }
                }
            };
            let outcome = match waiting.wait_for(Option::is_some).await {
                Ok(v) => v.clone().unwrap_or(Ok(())),
                Err(_) => Err(StoreError::Fetch { key, why: "the fetch ended without an answer".into() }),
            };
            outcome?;
        }
    }

    async fn fetch(self: &Arc<Self>, key: ToolchainKey, conn: &quinn::Connection) -> Result<(), StoreError> {
        let started = Instant::now();
        let blobs_dir = self.dir.join("blobs");
        let have = {
            let dir = blobs_dir.clone();
            move |d: &[u8; 32]| blob_path(&dir, d, false).exists() || blob_path(&dir, d, true).exists()
        };
        let pins = Pins { store: self.clone(), digests: Mutex::new(Vec::new()) };
        let max = self.max_bytes;
        let on_manifest = |m: &Manifest| {
            if m.total_size() > max {
                return Err(format!("refused: {} bytes of files, more than the store's {max}", m.total_size()));
            }
            pins.pin(m.blobs().iter().map(|(d, _)| *d));
            Ok(())
        };
        // Counted as written, so that a fetch that fails half-way is counted
        // (and collected) too.
        let on_blob = |size: u64| self.lock().bytes += size;
        let fetched: Result<Fetched, String> = fetch::fetch(conn, key, &blobs_dir, have, on_manifest, on_blob).await;
        let fetched = match fetched {
            Ok(f) => f,
            Err(why) => {
                drop(pins);
                self.evict(None);
                return Err(StoreError::Fetch { key, why });
            }
        };
        let io_err = |e: io::Error| StoreError::Io { key, why: e.to_string() };
        let dir = self.dir.clone();
        let (toolchain, manifest) = (fetched.toolchain.clone(), fetched.manifest.clone());
        let (ready, copied) = tokio::task::spawn_blocking(move || materialize(&dir, key, toolchain, &manifest))
            .await
            .map_err(|e| StoreError::Io { key, why: e.to_string() })?
            .map_err(io_err)?;
        tracing::info!(
            toolchain = %ready.toolchain,
            %key,
            files = fetched.manifest.blobs().len(),
            bytes = ready.bytes,
            fetched_blobs = fetched.blobs,
            fetched_bytes = fetched.raw_bytes,
            wire_bytes = fetched.wire_bytes,
            ms = started.elapsed().as_millis() as u64,
            "shipped toolchain ready"
        );
        {
            let mut state = self.lock();
            state.bytes += copied;
            state.toolchains.insert(key, Slot { ready: Arc::new(ready), in_use: 0, last_used: Instant::now() });
        }
        drop(pins);
        // Not the one just made: its waiters are about to lease it.
        self.evict(Some(key));
        Ok(())
    }

    /// Imports an installed toolchain: its files copied into blobs (each
    /// checked against its digest), its tree made from them.
    async fn import(
        self: &Arc<Self>,
        key: ToolchainKey,
        toolchain: Toolchain,
        package: Arc<crate::toolchain::Package>,
    ) -> Result<(), StoreError> {
        let started = Instant::now();
        if toolchain.key() != key || package.manifest.id() != toolchain.binary_hash {
            return Err(StoreError::Io { key, why: "the installed toolchain changed since it was found".into() });
        }
        if package.manifest.total_size() > self.max_bytes {
            let why =
                format!("{} bytes of files, more than the store's {}", package.manifest.total_size(), self.max_bytes);
            return Err(StoreError::Io { key, why });
        }
        let pins = Pins { store: self.clone(), digests: Mutex::new(Vec::new()) };
        pins.pin(package.manifest.blobs().iter().map(|(d, _)| *d));
        let dir = self.dir.clone();
        let store = self.clone();
        let io_err = |e: io::Error| StoreError::Io { key, why: e.to_string() };
        let (ready, bytes) = tokio::task::spawn_blocking(move || -> io::Result<(Ready, u64)> {
            let blobs = dir.join("blobs");
            let mut written = 0;
            for e in &package.manifest.entries {
                let EntryKind::File { digest, size, executable } = e.kind else { continue };
                if blob_path(&blobs, &digest, false).exists() || blob_path(&blobs, &digest, true).exists() {
                    continue;
                }
                let src = package.sources.get(&digest).ok_or_else(|| io::Error::other("a file without a source"))?;
                let bytes = fs::read(src)?;
                if bytes.len() as u64 != size || blake3::hash(&bytes).as_bytes() != &digest {
                    return Err(io::Error::other(format!("{} changed since it was found", src.display())));
                }
                if fetch::store_blob(&blobs, &digest, executable, &bytes, false)? {
                    written += size;
                    store.lock().bytes += size;
                }
            }
            let (ready, copied) = materialize(&dir, key, toolchain, &package.manifest)?;
            store.lock().bytes += copied;
            Ok((ready, written + copied))
        })
        .await
        .map_err(|e| StoreError::Io { key, why: e.to_string() })?
        .map_err(io_err)?;
        tracing::info!(
            toolchain = %ready.toolchain,
            %key,
            files = ready.manifest.blobs().len(),
            imported_bytes = bytes,
            ms = started.elapsed().as_millis() as u64,
            "installed toolchain imported into the store (for units compiled from their inputs)"
        );
        self.lock().toolchains.insert(key, Slot { ready: Arc::new(ready), in_use: 0, last_used: Instant::now() });
        drop(pins);
        self.evict(Some(key));
        Ok(())
    }

    /// Pins `digests` against collection until the guard drops.
    pub(super) fn pin(self: &Arc<Self>, digests: impl Iterator<Item = [u8; 32]>) -> Pins {
        let pins = Pins { store: self.clone(), digests: Mutex::new(Vec::new()) };
        pins.pin(digests);
        pins
    }

    /// Whether this process checked the blob `digest` already.
    pub(super) fn checked(&self, digest: &[u8; 32]) -> bool {
        self.lock().verified.contains(digest)
    }

    /// The blob `digest` was checked.
    pub(super) fn mark_checked(&self, digest: [u8; 32]) {
        let mut state = self.lock();
        if state.verified.len() >= 1 << 20 {
            state.verified.clear();
        }
        state.verified.insert(digest);
    }

    /// Counts bytes of blob files written outside a toolchain fetch.
    pub(super) fn written(&self, bytes: u64) {
        self.lock().bytes += bytes;
    }

    /// The blobs directory.
    pub(super) fn blobs_dir(&self) -> PathBuf {
        self.dir.join("blobs")
    }

    /// Where unit trees are made.
    pub(super) fn tasks_dir(&self) -> PathBuf {
        self.dir.join("tasks")
    }

    /// The bound.
    pub(super) fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Within the bound again: first blobs no tree links, longest unused
    /// first; then least recently used toolchains no task holds (but `keep`).
    pub(super) fn evict(&self, keep: Option<ToolchainKey>) {
        if self.lock().bytes <= self.max_bytes {
            return;
        }
        let pinned: HashSet<[u8; 32]> = self.lock().pinned.keys().copied().collect();
        let over = self.lock().bytes.saturating_sub(self.max_bytes);
        let freed = collect_blobs(&self.dir.join("blobs"), &pinned, over);
        let victims: Vec<(ToolchainKey, PathBuf)> = {
            let mut state = self.lock();
            state.bytes = state.bytes.saturating_sub(freed);
            if state.bytes <= self.max_bytes {
                return;
            }
            let mut idle: Vec<(&ToolchainKey, &Slot)> =
                state.toolchains.iter().filter(|(k, s)| s.in_use == 0 && Some(**k) != keep).collect();
            idle.sort_by_key(|(_, s)| s.last_used);
            let mut over = state.bytes - self.max_bytes;
            let mut out = Vec::new();
            for (k, s) in idle {
                if over == 0 {
                    break;
                }
                over = over.saturating_sub(s.ready.bytes);
                out.push((*k, self.dir.join("toolchains").join(key_name(*k))));
            }
            out
        };
        for (key, path) in &victims {
            let removed = {
                let mut state = self.lock();
                match state.toolchains.get(key) {
                    Some(s) if s.in_use == 0 => state.toolchains.remove(key).is_some(),
                    _ => false,
                }
            };
            if removed {
                tracing::info!(%key, "evicting a shipped toolchain from the store");
                // Out of the way in one step: a crash half-way through the
                // removal leaves a leftover, never a half toolchain.
                let doomed = path.with_file_name(format!(".evicted.{}", key_name(*key)));
                match fs::rename(path, &doomed) {
                    Ok(()) => remove_tree(&doomed),
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "cannot evict from the toolchain store")
                    }
                }
            }
        }
        let pinned: HashSet<[u8; 32]> = self.lock().pinned.keys().copied().collect();
        let freed = collect_blobs(&self.dir.join("blobs"), &pinned, u64::MAX);
        let mut state = self.lock();
        state.bytes = state.bytes.saturating_sub(freed);
    }
}

/// An [`Origin`] a spawned task can own.
enum Owned {
    Fetched(quinn::Connection),
    Installed(Toolchain, Arc<crate::toolchain::Package>),
}

/// Blobs pinned against collection while a fetch or a unit runs.
#[derive(Debug)]
pub(super) struct Pins {
    store: Arc<Store>,
    digests: Mutex<Vec<[u8; 32]>>,
}

impl Pins {
    fn pin(&self, digests: impl Iterator<Item = [u8; 32]>) {
        let mut mine = self.digests.lock().unwrap_or_else(|p| p.into_inner());
        let mut state = self.store.lock();
        for d in digests {
            *state.pinned.entry(d).or_default() += 1;
            mine.push(d);
        }
    }
}

impl Drop for Pins {
    fn drop(&mut self) {
        let mine = std::mem::take(&mut *self.digests.lock().unwrap_or_else(|p| p.into_inner()));
        let mut state = self.store.lock();
        for d in mine {
            if let Some(n) = state.pinned.get_mut(&d) {
                *n -= 1;
                if *n == 0 {
                    state.pinned.remove(&d);
                }
            }
        }
    }
}

pub(super) fn key_name(key: ToolchainKey) -> String {
    format!("{:032x}", key.0)
}

/// Where a blob lives: `.x` for the executable copy, `.r` for the other.
pub(super) fn blob_path(blobs: &Path, digest: &[u8; 32], executable: bool) -> PathBuf {
    let hex = blake3::Hash::from_bytes(*digest).to_hex();
    blobs.join(&hex[..2]).join(format!("{hex}.{}", if executable { 'x' } else { 'r' }))
}

fn ready(key: ToolchainKey, toolchain: Toolchain, manifest: &Manifest, root: PathBuf) -> Ready {
    let mut top = Vec::new();
    let mut seen = HashSet::new();
    for e in &manifest.entries {
        let (first, rest) = e.path.split_once('/').map_or((e.path.as_str(), false), |(f, _)| (f, true));
        if !seen.insert(first.to_owned()) {
            continue;
        }
        match (&e.kind, rest) {
            (EntryKind::Symlink { target }, false) => top.push(Top::Link(first.to_owned(), target.clone())),
            (_, true) => top.push(Top::Dir(first.to_owned())),
            // A lone file at the top: bound as a directory would not work; skip it.
            (EntryKind::File { .. }, false) => {}
        }
    }
    let mut path_env: Vec<String> = manifest.search_path.iter().map(|d| format!("/{d}")).collect();
    if let Some((dir, _)) = manifest.driver.rsplit_once('/') {
        let dir = format!("/{dir}");
        if !path_env.contains(&dir) {
            path_env.push(dir);
        }
    }
    Ready {
        driver: PathBuf::from(format!("/{}", manifest.driver)),
        path_env: path_env.join(":"),
        root,
        top,
        bytes: manifest.total_size(),
        manifest: Arc::new(manifest.clone()),
        toolchain,
        key,
    }
}

/// Builds the tree of `manifest` from the blobs (all present), under a
/// temporary name, then renames it into place. Also returns the bytes of
/// blob copies it made (a content used both executable and not).
fn materialize(dir: &Path, key: ToolchainKey, toolchain: Toolchain, manifest: &Manifest) -> io::Result<(Ready, u64)> {
    let blobs = dir.join("blobs");
    let final_dir = dir.join("toolchains").join(key_name(key));
    let tmp = dir.join("toolchains").join(format!(".{}.{}", key_name(key), std::process::id()));
    remove_tree(&tmp);
    let root = tmp.join("root");
    fs::create_dir_all(&root)?;
    let mut dirs = vec![root.clone()];
    let mut copied = 0;
    for e in &manifest.entries {
        // Validated: relative, normalised, nothing below a link or a file.
        let dest = root.join(&e.path);
        if let Some(parent) = dest.parent() {
            if !parent.exists() {
                fs::create_dir_all(parent)?;
                let mut p = parent.to_owned();
                while p != root && !dirs.contains(&p) {
                    dirs.push(p.clone());
                    if !p.pop() {
                        break;
                    }
                }
            }
        }
        match &e.kind {
            EntryKind::File { digest, executable, size } => {
                let (src, made) = ensure_variant(&blobs, digest, *executable)?;
                if made {
                    copied += size;
                }
                fs::hard_link(&src, &dest)?;
            }
            EntryKind::Symlink { target } => std::os::unix::fs::symlink(target, &dest)?,
        }
    }
    fs::write(
        tmp.join("package"),
        encode_package(&Package::Found { toolchain: toolchain.clone(), manifest: manifest.clone() }),
    )?;
    for d in &dirs {
        fs::set_permissions(d, fs::Permissions::from_mode(0o555))?;
    }
    remove_tree(&final_dir);
    fs::rename(&tmp, &final_dir)?;
    Ok((ready(key, toolchain, manifest, final_dir.join("root")), copied))
}

/// The blob with the mode asked for, copying the other variant if need be
/// (then `true`).
fn ensure_variant(blobs: &Path, digest: &[u8; 32], executable: bool) -> io::Result<(PathBuf, bool)> {
    let want = blob_path(blobs, digest, executable);
    if want.exists() {
        return Ok((want, false));
    }
    let other = blob_path(blobs, digest, !executable);
    // A name of its own: two toolchains may be materialised at once.
    let tmp = tempfile::NamedTempFile::new_in(want.parent().unwrap_or(blobs))?;
    fs::copy(&other, tmp.path())?;
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(if executable { 0o555 } else { 0o444 }))?;
    tmp.persist(&want).map_err(|e| e.error)?;
    Ok((want, true))
}

/// Sets a file's modification time to now (the toolchain's last use).
fn touch(path: &Path) {
    if let Ok(f) = fs::File::options().append(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// Removes a tree whose directories may be read-only.
fn remove_tree(path: &Path) {
    if fs::symlink_metadata(path).is_err() {
        return;
    }
    let mut stack = vec![path.to_owned()];
    while let Some(d) = stack.pop() {
        if let Ok(meta) = fs::symlink_metadata(&d) {
            if meta.is_dir() {
                let _ = fs::set_permissions(&d, fs::Permissions::from_mode(0o755));
                if let Ok(read) = fs::read_dir(&d) {
                    stack.extend(read.flatten().map(|e| e.path()));
                }
            }
        }
    }
    if let Err(e) = fs::remove_dir_all(path) {
        tracing::warn!(path = %path.display(), error = %e, "cannot remove from the toolchain store");
    }
}

fn blob_files(blobs: &Path) -> Vec<(PathBuf, fs::Metadata)> {
    let mut out = Vec::new();
    for shard in fs::read_dir(blobs).into_iter().flatten().flatten() {
        for f in fs::read_dir(shard.path()).into_iter().flatten().flatten() {
            if let Ok(meta) = f.metadata() {
                out.push((f.path(), meta));
            }
        }
    }
    out
}

fn blob_bytes(blobs: &Path) -> u64 {
    blob_files(blobs).iter().map(|(_, m)| m.len()).sum()
}

/// Removes blob files no tree links to (link count 1) and not pinned,
/// longest unused first (ctime: a link made or removed stamps it), until
/// `enough` bytes are freed; returns the bytes freed. Files not named like a
/// blob (a fetch's temporary file being written) are left alone.
fn collect_blobs(blobs: &Path, pinned: &HashSet<[u8; 32]>, enough: u64) -> u64 {
    let mut idle: Vec<(i64, PathBuf, u64)> = blob_files(blobs)
        .into_iter()
        .filter(|(path, meta)| meta.nlink() <= 1 && blob_digest(path).is_some_and(|d| !pinned.contains(&d)))
        .map(|(path, meta)| {
            (meta.ctime().saturating_mul(1_000_000_000).saturating_add(meta.ctime_nsec()), path, meta.len())
        })
        .collect();
    idle.sort_unstable();
    let mut freed = 0;
    for (_, path, len) in idle {
        if freed >= enough {
            break;
        }
        if fs::remove_file(&path).is_ok() {
            freed += len;
        }
    }
    freed
}

/// The digest a blob file is named by (`<hex>.r` or `<hex>.x`).
fn blob_digest(path: &Path) -> Option<[u8; 32]> {
    let ext = path.extension().and_then(|e| e.to_str())?;
    if ext != "r" && ext != "x" {
        return None;
    }
    let stem = path.file_stem().and_then(|s| s.to_str())?;
    blake3::Hash::from_hex(stem).ok().map(|h| *h.as_bytes())
}

/// How long a fetch may go without a frame before it is abandoned.
pub(super) const FETCH_IDLE: Duration = Duration::from_secs(30);
