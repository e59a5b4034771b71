//! Completing the records of `-MMD` compiles: their dependency output left
//! system headers out, so once the build has moved on, one thread asks the
//! compiler for the whole list with a dependency-only run (`-M -MF`, the
//! command's own flags otherwise), at idle CPU priority and one unit at a
//! time, and makes the unit's manifest entry from it
//! ([`super::DirectCache::record_later`]). A lookup of a unit still waiting
//! (a rebuild soon after a build, while that build's compiles kept the CPU
//! from the idle thread) runs its dependency-only run at once, at the
//! lookup's priority: it costs a fraction of the compile a miss would.
//!
//! The list comes after the compile, so it is trusted only if it agrees
//! with the compile: every file the compile's own list named is in it, no
//! file in it changed after the compile started, and no directory holding
//! one changed either (a header deleted or moved shows there).
//!
//! Main items: [`Task`], [`start`]. Left out: the entry itself (`super`).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use ccroute_wire::local::DirectJob;
use tracing::warn;

use super::{os, DirectCache, Probe};
use crate::cc::depfile::{dep_files, deps_only_args};

/// Units that may wait at once; past it a unit is not recorded.
pub const QUEUE: usize = 100_000;

/// Who asks for a unit's whole list, and so how its run is scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// The index thread, when the CPU has nothing else to do.
    Idle,
    /// A lookup, which waits for it.
    Asked,
}

/// The longest a dependency-only run may take.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// One unit waiting for its whole list of files.
#[derive(Debug)]
pub struct Task {
    /// The compiler the wrapper ran.
    pub compiler: PathBuf,
    /// The manifest key and input digest of its lookup.
    pub probe: Probe,
    /// The compile.
    pub job: Arc<DirectJob>,
    /// What its own dependency output listed.
    pub listed: Vec<Vec<u8>>,
    /// Where its result is stored.
    pub stored: [u8; 32],
}

/// Starts the thread that works through the units waiting, by manifest
/// key, in the order they came; it ends when the cache does.
pub fn start(cache: Weak<DirectCache>) -> flume::Sender<[u8; 32]> {
    let (tx, rx) = flume::bounded::<[u8; 32]>(QUEUE);
    let spawned = std::thread::Builder::new().name("ccroute-index".into()).spawn(move || {
        for key in rx.iter() {
            let Some(cache) = cache.upgrade() else { break };
            // Nothing waits under a key a lookup indexed first.
            cache.index_awaiting(&key, Priority::Idle);
        }
    });
    if let Err(e) = spawned {
        warn!(error = %e, "cannot start the indexing thread: -MMD compiles that run here are not cached");
    }
    tx
}

/// The files the compile reads, from a dependency-only run of its command.
pub(super) fn whole_list(task: &Task, priority: Priority) -> Result<Vec<Vec<u8>>, &'static str> {
    let out = tempfile::Builder::new()
        .prefix("ccroute-index-")
        .tempfile()
        .map_err(|_| "no temporary file for the dependency list")?
        .into_temp_path();
    let job = &task.job;
    let mut cmd = Command::new(&task.compiler);
    cmd.args(deps_only_args(&job.args, &out))
        .current_dir(os(&job.cwd))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // The compile's own include environment, not the consumerd's.
    for k in crate::cc::plan::INCLUDE_ENV {
        cmd.env_remove(k);
    }
    for (k, v) in &job.env {
        cmd.env(k, os(v));
    }
    if priority == Priority::Idle {
        #[allow(unsafe_code)]
        // SAFETY: between fork and exec only async-signal-safe calls are made
        // (sched_setscheduler, setpriority), on the child itself, touching no
        // memory of the parent; their failure leaves the priority as it was.
        unsafe {
            cmd.pre_exec(|| {
                let param = libc::sched_param { sched_priority: 0 };
                libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
                libc::setpriority(libc::PRIO_PROCESS, 0, 19);
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().map_err(|_| "the compiler cannot be run for its dependency list")?;
    let deadline = Instant::now() + RUN_LIMIT;
    // A lookup waits on the run: look at it more often.
    let poll = if priority == Priority::Idle { Duration::from_millis(5) } else { Duration::from_millis(1) };
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(poll),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("the dependency-only run took too long");
            }
        }
    };
    if !status.success() {
        return Err("the dependency-only run failed");
    }
    let text = std::fs::read(Path::new(&out)).map_err(|_| "the dependency-only run wrote nothing")?;
    Ok(dep_files(&text))
}
