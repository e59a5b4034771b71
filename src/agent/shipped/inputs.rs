//! Units sent as their inputs ([`ccroute_wire::inputs`]), on the agent:
//! their files in the store, and the tree each one compiles in.
//!
//! [`prepare`] makes sure every input is a blob in the store — asking the
//! task's consumerd, through the scheduler, for the ones missing, each
//! checked against its digest as it arrives (and one stored by an earlier
//! run checked once before this process first links it) — then builds the
//! unit's tree under the store's `tasks/`: the toolchain's files and links
//! and the unit's inputs, all hard links to blobs at their original
//! absolute paths (relative to the tree), the directories the client had
//! (its working directory, its include directories), nothing else. The
//! sandbox binds that tree as its root. A path where the toolchain and the
//! inputs disagree (an input below one of the toolchain's links, a file
//! where the other has a directory) refuses the unit, which then compiles
//! as text. When the [`UnitTree`] drops, the tree goes back to a pool of
//! its toolchain ([`TreePool`]): the next unit's tree is that one changed
//! into it — the files and directories it does not list removed, the ones
//! it lacks linked in — since units of one build share most of their
//! headers and all of their toolchain, and making a tree of ~100 entries
//! from nothing costs more than compiling a small unit.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ccroute_wire::{EntryKind, Inputs, Manifest};

use super::sandbox::Top;
use super::store::{blob_path, Pins, Ready, Store};

/// Every input fetch may take this long, plus a second per MB.
const FETCH_BASE: Duration = Duration::from_secs(30);

/// Trees kept per toolchain (by manifest id) for the next units.
const POOLED_PER_TOOLCHAIN: usize = 16;

/// A unit's tree; back to its pool on drop (or removed).
#[derive(Debug)]
pub struct UnitTree {
    /// The tree, to bind as the sandbox's root.
    pub root: PathBuf,
    /// Its top-level entries.
    pub top: Vec<Top>,
    /// Inputs fetched for it: blobs and bytes.
    pub fetched: (usize, u64),
    /// Its entries when built from a pooled tree: changed, and kept.
    pub reused: Option<(usize, usize)>,
    nodes: BTreeMap<String, Node>,
    toolchain: [u8; 32],
    store: Arc<Store>,
    _pins: Pins,
}

impl Drop for UnitTree {
    fn drop(&mut self) {
        let nodes = std::mem::take(&mut self.nodes);
        if let Some(back) = self.store.trees.put(self.toolchain, Pooled { root: self.root.clone(), nodes }) {
            remove(&back.root);
        }
    }
}

/// Unit trees no unit uses now, by toolchain.
#[derive(Debug, Default)]
pub struct TreePool(std::sync::Mutex<std::collections::HashMap<[u8; 32], Vec<Pooled>>>);

/// A tree in the pool and what it holds.
#[derive(Debug)]
pub struct Pooled {
    root: PathBuf,
    nodes: BTreeMap<String, Node>,
}

impl TreePool {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<[u8; 32], Vec<Pooled>>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn take(&self, toolchain: [u8; 32]) -> Option<Pooled> {
        self.lock().get_mut(&toolchain)?.pop()
    }

    /// Keeps `tree`, or hands it back when the pool is full.
    fn put(&self, toolchain: [u8; 32], tree: Pooled) -> Option<Pooled> {
        let mut pool = self.lock();
        let list = pool.entry(toolchain).or_default();
        if list.len() >= POOLED_PER_TOOLCHAIN {
            return Some(tree);
        }
        list.push(tree);
        None
    }
}

fn remove(root: &Path) {
    match fs::remove_dir_all(root) {
        // Gone already (with the store, say): nothing to give back.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(path = %root.display(), error = %e, "cannot remove a unit's tree"),
        Ok(()) => {}
    }
}

/// Why a unit's tree could not be made, in words for its consumerd; when
/// the store's own directories are gone (removed while the agent ran: a
/// cleaner of old files, a hand), says so in the log, at most once a minute
/// (every unit sent as its inputs fails the same way): the agent knows its
/// blobs and toolchains from memory and cannot serve such units again until
/// it restarts.
fn tree_failure(store: &Store, e: &std::io::Error) -> String {
    let tasks = store.tasks_dir();
    if tasks.is_dir() {
        return format!("cannot build the unit's tree: {e}");
    }
    static SAID: crate::said::Every = crate::said::Every::new(crate::said::A_MINUTE);
    if SAID.due().is_some() {
        tracing::error!(
            dir = %tasks.parent().unwrap_or(&tasks).display(),
            "the toolchain store is gone (removed while the agent ran?): units sent as their inputs or with a \
             shipped toolchain go back to their consumerds until this agent is restarted, which makes it anew \
             (said at most once a minute)"
        );
    }
    format!("the agent's toolchain store is gone: {e}")
}

/// One node of a tree being planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir,
    File { src: PathBuf, digest: [u8; 32] },
    Link(String),
}

/// Fetches what the store lacks of `inputs` (the agent's task `task`, over
/// `conn`) and builds the unit's tree with `ready`'s files; `task_dir` is
/// where the sandbox binds the task's writable directory.
///
/// # Errors
/// What went wrong, for the task's internal error (the consumerd then sends
/// the unit as text).
pub async fn prepare(
    store: &Arc<Store>,
    ready: &Arc<Ready>,
    inputs: &Inputs,
    conn: &quinn::Connection,
    task: u64,
    task_dir: &Path,
) -> Result<UnitTree, String> {
    if inputs.total_size() > store.max_bytes() {
        return Err(format!("{} bytes of inputs, more than the store's {}", inputs.total_size(), store.max_bytes()));
    }
    let pins = store.pin(inputs.files.iter().map(|f| f.digest));
    let blobs = store.blobs_dir();
    let missing: Vec<([u8; 32], u64)> = {
        let blobs = blobs.clone();
        let files: Vec<([u8; 32], u64)> = inputs.files.iter().map(|f| (f.digest, f.size)).collect();
        tokio::task::spawn_blocking(move || {
            let mut seen = HashSet::new();
            files.into_iter().filter(|(d, _)| seen.insert(*d) && !blob_path(&blobs, d, false).exists()).collect()
        })
        .await
        .map_err(|e| e.to_string())?
    };
    let mut fetched = (0, 0);
    if !missing.is_empty() {
        let bytes: u64 = missing.iter().map(|(_, s)| s).sum();
        let limit = FETCH_BASE + Duration::from_secs(bytes >> 20);
        let written = super::fetch::fetch_inputs(conn, task, &missing, &blobs, limit)
            .await
            .map_err(|e| format!("fetching the unit's inputs: {e}"))?;
        store.written(written);
        fetched = (missing.len(), bytes);
        // Room for the next unit; what this one links is pinned.
        let s = store.clone();
        drop(tokio::task::spawn_blocking(move || s.evict(None)));
    }
    let toolchain = ready.toolchain.binary_hash;
    let (store2, ready, inputs, task_dir) = (store.clone(), ready.clone(), inputs.clone(), task_dir.to_owned());
    let (root, top, nodes, reused) = tokio::task::spawn_blocking(move || build(&store2, &ready, &inputs, &task_dir))
        .await
        .map_err(|e| e.to_string())??;
    Ok(UnitTree { root, top, fetched, reused, nodes, toolchain, store: store.clone(), _pins: pins })
}

/// Where the tree's nodes go: planned in memory first, so that a conflict
/// is found before anything is written.
/// `toolchain` is the toolchain's manifest, `root` its tree and `driver` its
/// driver as the sandbox sees it.
fn plan(
    toolchain: &Manifest,
    root: &Path,
    driver_target: &Path,
    inputs: &Inputs,
    task_dir: &Path,
    blobs: &Path,
) -> Result<BTreeMap<String, Node>, String> {
    let mut nodes: BTreeMap<String, Node> = BTreeMap::new();
    fn dirs_to(nodes: &mut BTreeMap<String, Node>, rel: &str, and_self: bool) -> Result<(), String> {
        let mut end = 0;
        let mut ancestors: Vec<&str> = Vec::new();
        while let Some(i) = rel[end..].find('/') {
            end += i;
            ancestors.push(&rel[..end]);
            end += 1;
        }
        if and_self {
            ancestors.push(rel);
        }
        for a in ancestors {
            match nodes.get(a) {
                None => {
                    nodes.insert(a.to_owned(), Node::Dir);
                }
                Some(Node::Dir) => {}
                Some(_) => return Err(format!("/{a} is a file or link of the toolchain and a directory of the unit")),
            }
        }
        Ok(())
    }
    for e in &toolchain.entries {
        dirs_to(&mut nodes, &e.path, false)?;
        let node = match &e.kind {
            EntryKind::File { digest, .. } => Node::File { src: root.join(&e.path), digest: *digest },
            EntryKind::Symlink { target } => Node::Link(target.clone()),
        };
        nodes.insert(e.path.clone(), node);
    }
    for f in &inputs.files {
        // Validated: absolute and normalised.
        let rel = &f.path[1..];
        dirs_to(&mut nodes, rel, false)?;
        match nodes.get(rel) {
            None => {
                let src = blob_path(blobs, &f.digest, false);
                nodes.insert(rel.to_owned(), Node::File { src, digest: f.digest });
            }
            // A header the toolchain carries too (clang's own): the same file.
            Some(Node::File { digest, .. }) if *digest == f.digest => {}
            Some(_) => return Err(format!("{} differs from the toolchain's file or link there", f.path)),
        }
    }
    for d in &inputs.dirs {
        dirs_to(&mut nodes, &d[1..], true)?;
    }
    // The compiler by the path the client ran it by.
    let driver = &inputs.driver[1..];
    dirs_to(&mut nodes, driver, false)?;
    if let Some(Node::Dir) | None = nodes.get(driver) {
        if nodes.contains_key(driver) {
            return Err(format!("the compiler's path {} is a directory of the unit", inputs.driver));
        }
        nodes.insert(driver.to_owned(), Node::Link(driver_target.to_string_lossy().into_owned()));
    }
    // The task's directory is bound over a directory of the tree when its
    // first component is one; elsewhere bwrap makes its own on the root.
    let task = task_dir.to_str().ok_or("the task directory is not UTF-8")?.trim_start_matches('/').to_owned();
    let first = task.split('/').next().unwrap_or_default();
    if matches!(nodes.get(first), Some(Node::Dir)) {
        dirs_to(&mut nodes, &task, true)?;
    }
    Ok(nodes)
}

/// A built tree: its root, top-level entries, entries, and (when changed
/// from a pooled one) how many entries changed and how many stayed.
type Built = (PathBuf, Vec<Top>, BTreeMap<String, Node>, Option<(usize, usize)>);

fn build(store: &Store, ready: &Ready, inputs: &Inputs, task_dir: &Path) -> Result<Built, String> {
    let blobs = store.blobs_dir();
    let nodes = plan(&ready.manifest, &ready.root, &ready.driver, inputs, task_dir, &blobs)?;
    // An input stored by an earlier run is checked once before it is used.
    for f in &inputs.files {
        if store.checked(&f.digest) {
            continue;
        }
        let path = blob_path(&blobs, &f.digest, false);
        let ok = fs::read(&path).is_ok_and(|b| b.len() as u64 == f.size && blake3::hash(&b).as_bytes() == &f.digest);
        if !ok {
            let _ = fs::remove_file(&path);
            return Err(format!("the stored input {} did not match its digest; removed", f.path));
        }
        store.mark_checked(f.digest);
    }
    let mut reused = None;
    let mut root = None;
    if let Some(pooled) = store.trees.take(ready.toolchain.binary_hash) {
        match change(&pooled.root, &pooled.nodes, &nodes) {
            Ok(changed) => {
                reused = Some((changed, nodes.len() - changed.min(nodes.len())));
                root = Some(pooled.root);
            }
            Err(e) => {
                tracing::warn!(path = %pooled.root.display(), error = %e, "a pooled unit tree could not be changed; made anew");
                remove(&pooled.root);
            }
        }
    }
    let root = match root {
        Some(r) => r,
        None => {
            static NEXT: AtomicU64 = AtomicU64::new(0);
            let root =
                store.tasks_dir().join(format!("{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
            let made = fs::create_dir(&root).and_then(|()| change(&root, &BTreeMap::new(), &nodes));
            if let Err(e) = made {
                remove(&root);
                return Err(tree_failure(store, &e));
            }
            root
        }
    };
    let top = nodes
        .iter()
        .filter(|(rel, _)| !rel.contains('/'))
        .filter_map(|(rel, node)| match node {
            Node::Dir => Some(Top::Dir(rel.clone())),
            Node::Link(target) => Some(Top::Link(rel.clone(), target.clone())),
            // A lone file at the top cannot be bound as a directory is; no
            // compile reads one.
            Node::File { .. } => None,
        })
        .collect();
    Ok((root, top, nodes, reused))
}

/// Changes the tree at `root`, which holds `old`, into one that holds
/// `new`: what differs removed deepest first, then what is missing made
/// parents first (a path sorts after its parent). Returns the entries changed.
fn change(root: &Path, old: &BTreeMap<String, Node>, new: &BTreeMap<String, Node>) -> io::Result<usize> {
    let mut changed = 0;
    for (rel, node) in old.iter().rev() {
        if new.get(rel) != Some(node) {
            let path = root.join(rel);
            match node {
                Node::Dir => fs::remove_dir(&path)?,
                Node::File { .. } | Node::Link(_) => fs::remove_file(&path)?,
            }
            changed += 1;
        }
    }
    for (rel, node) in new {
        if old.get(rel) != Some(node) {
            let dest = root.join(rel);
            match node {
                Node::Dir => fs::create_dir(&dest)?,
                Node::File { src, .. } => fs::hard_link(src, &dest)?,
                Node::Link(target) => std::os::unix::fs::symlink(target, &dest)?,
            }
            changed += 1;
        }
    }
    Ok(changed)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use ccroute_wire::{Entry, InputFile, ToolchainKey};

    use super::*;

    fn toolchain() -> Manifest {
        let file = |path: &str, d: u8| Entry {
            path: path.into(),
            kind: EntryKind::File { digest: [d; 32], size: 1, executable: true },
        };
        Manifest {
            driver: "usr/bin/x86_64-linux-gnu-gcc-12".into(),
            arch: "x86_64".into(),
            search_path: vec![],
            entries: vec![
                Entry { path: "lib64".into(), kind: EntryKind::Symlink { target: "usr/lib64".into() } },
                file("usr/bin/x86_64-linux-gnu-gcc-12", 1),
                file("usr/lib/gcc/x86_64-linux-gnu/12/include/stddef.h", 2),
            ],
        }
    }

    fn inputs(files: &[(&str, u8)], dirs: &[&str], driver: &str) -> Inputs {
        Inputs {
            toolchain: ToolchainKey(1),
            driver: driver.into(),
            files: files.iter().map(|(p, d)| InputFile { path: (*p).into(), digest: [*d; 32], size: 1 }).collect(),
            dirs: dirs.iter().map(|d| (*d).to_owned()).collect(),
        }
    }

    fn planned(i: &Inputs, task_dir: &str) -> Result<BTreeMap<String, Node>, String> {
        let driver = Path::new("/usr/bin/x86_64-linux-gnu-gcc-12");
        plan(&toolchain(), Path::new("/store/root"), driver, i, Path::new(task_dir), Path::new("/store/blobs"))
    }

    #[test]
    fn the_tree_holds_the_toolchain_the_inputs_the_dirs_and_the_driver_by_the_clients_name() {
        let i = inputs(
            &[
                ("/home/u/p/a.c", 7),
                ("/usr/include/stdio.h", 8),
                ("/usr/lib/gcc/x86_64-linux-gnu/12/include/stddef.h", 2),
            ],
            &["/home/u/p", "/home/u/p/empty"],
            "/usr/bin/gcc",
        );
        let nodes = planned(&i, "/dev/shm/agent/task-1").unwrap();
        assert!(
            matches!(&nodes["home/u/p/a.c"], Node::File { src, .. } if src.ends_with(blob_path(Path::new(""), &[7; 32], false)))
        );
        assert_eq!(nodes["home/u/p/empty"], Node::Dir);
        assert_eq!(nodes["usr/bin/gcc"], Node::Link("/usr/bin/x86_64-linux-gnu-gcc-12".into()));
        // The toolchain's own header, listed as an input with its digest: one file.
        assert!(
            matches!(&nodes["usr/lib/gcc/x86_64-linux-gnu/12/include/stddef.h"], Node::File { src, .. } if src.starts_with("/store/root"))
        );
        assert!(!nodes.contains_key("dev"), "the task directory outside the tree is bwrap's to make");
        // A task directory under a directory of the tree gets its mount point.
        let i = inputs(&[("/tmp/p/a.c", 7)], &["/tmp/p"], "/usr/bin/x86_64-linux-gnu-gcc-12");
        let nodes = planned(&i, "/tmp/agent/task-1").unwrap();
        assert_eq!(nodes["tmp/agent/task-1"], Node::Dir);
        assert!(matches!(nodes["usr/bin/x86_64-linux-gnu-gcc-12"], Node::File { .. }), "the driver itself");
    }

    #[test]
    fn inputs_that_disagree_with_the_toolchain_are_refused() {
        for (files, dirs, driver) in [
            (&[("/lib64/x.h", 7)][..], &[][..], "/usr/bin/gcc"),
            (&[("/usr/bin/x86_64-linux-gnu-gcc-12", 9)], &[], "/usr/bin/gcc"),
            (&[("/usr/lib/gcc/x86_64-linux-gnu/12/include/stddef.h", 3)], &[], "/usr/bin/gcc"),
            (&[("/usr/bin/x86_64-linux-gnu-gcc-12/x.h", 7)], &[], "/usr/bin/gcc"),
            (&[], &["/lib64/inc"], "/usr/bin/gcc"),
            (&[("/p/a.c", 7)], &["/p"], "/p"),
            (&[], &[], "/lib64/gcc"),
        ] {
            let i = inputs(files, dirs, driver);
            assert!(planned(&i, "/dev/shm/t").is_err(), "{files:?} {dirs:?} {driver}");
        }
    }

    /// Every path under `root`, with what it is.
    fn walk(root: &Path) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut stack = vec![root.to_owned()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap().flatten() {
                let rel = e.path().strip_prefix(root).unwrap().to_str().unwrap().to_owned();
                let t = e.file_type().unwrap();
                let what = if t.is_symlink() {
                    format!("-> {}", fs::read_link(e.path()).unwrap().display())
                } else if t.is_dir() {
                    stack.push(e.path());
                    "dir".into()
                } else {
                    fs::read_to_string(e.path()).unwrap()
                };
                out.insert(rel, what);
            }
        }
        out
    }

    #[test]
    fn a_pooled_tree_changed_into_the_next_units_holds_exactly_its_entries() {
        let tmp = tempfile::tempdir().unwrap();
        let blob = |name: &str| {
            let p = tmp.path().join(name);
            fs::write(&p, name).unwrap();
            p
        };
        let (a, b, c) = (blob("a"), blob("b"), blob("c"));
        let file = |src: &Path| Node::File { src: src.to_owned(), digest: [0; 32] };
        let first: BTreeMap<String, Node> = [
            ("usr", Node::Dir),
            ("usr/include", Node::Dir),
            ("usr/include/x.h", file(&a)),
            ("usr/include/gone", Node::Dir),
            ("usr/include/gone/y.h", file(&b)),
            ("lib", Node::Link("usr/lib".into())),
            ("p", Node::Dir),
            ("p/src.c", file(&a)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let second: BTreeMap<String, Node> = [
            ("usr", Node::Dir),
            ("usr/include", Node::Dir),
            ("usr/include/x.h", file(&a)),
            ("usr/include/gone", file(&c)),
            ("lib", Node::Link("usr/lib64".into())),
            ("p", Node::Dir),
            ("p/src.c", file(&b)),
            ("p/new", Node::Dir),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let root = tmp.path().join("tree");
        fs::create_dir(&root).unwrap();
        assert_eq!(change(&root, &BTreeMap::new(), &first).unwrap(), first.len());
        assert_eq!(walk(&root)["usr/include/gone/y.h"], "b");
        change(&root, &first, &second).unwrap();
        let expected: BTreeMap<String, String> = [
            ("usr", "dir"),
            ("usr/include", "dir"),
            ("usr/include/x.h", "a"),
            ("usr/include/gone", "c"),
            ("lib", "-> usr/lib64"),
            ("p", "dir"),
            ("p/src.c", "b"),
            ("p/new", "dir"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(walk(&root), expected, "nothing of the first unit is left but what the second lists");
    }
}
