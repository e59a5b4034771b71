//! A task sent as its inputs ([`ccroute_wire::inputs`]): the command as the
//! client ran it, in a sandbox whose root is the unit's tree
//! ([`crate::agent::shipped::inputs`]): the toolchain's files and the unit's
//! inputs at their original absolute paths, the client's working directory.
//!
//! In order: check the spec ([`cc::validate_inputs`]: the allow-list, the
//! preprocessor's own options, the list of inputs); lease the toolchain
//! from the store (an installed one is imported into it once, a shipped one
//! fetched); check that its inputs twin is the task's route; make the task
//! directory (the only writable place: the object and `TMPDIR`); fetch the
//! inputs the store lacks and build the tree; run `<driver> <args> -c
//! <input> -o <task dir>/out.o` with the client's working directory. The
//! compiler's output is returned as it printed it (its paths are the
//! client's own), but for its temporary files' directory, which reads
//! `/tmp/` as in a local compile.

use std::ffi::OsString;
use std::path::PathBuf;

use bytes::Bytes;
use ccroute_wire::TaskSpec;

use super::{finish, process, scratch, ExecResult, ExecTask, Executor, Stop, TaskError};
use crate::agent::shipped::{inputs, Origin, StoreError};
use crate::cc::{self, AgentSetupError};

impl Executor {
    /// Runs a task that carries its inputs. See the module doc.
    pub(super) async fn run_inputs(
        &self,
        spec: TaskSpec,
        task: &ExecTask,
        stop: &Stop<'_>,
    ) -> Result<ExecResult, TaskError> {
        let started = std::time::Instant::now();
        cc::validate_inputs(&spec).map_err(TaskError::Refused)?;
        let Some(listed) = &spec.inputs else { return Err(TaskError::UnknownToolchain(task.toolchain)) };
        let (Some(shipping), Some(conn)) = (&self.shipping, &task.fetch) else {
            return Err(TaskError::Sandbox("this agent cannot make the sandbox units sent as inputs need".into()));
        };
        let plain = listed.toolchain;
        let origin = match self.packages.get(&plain) {
            Some((toolchain, package)) => Origin::Installed(toolchain, package),
            None => Origin::Fetched(conn),
        };
        let lease = tokio::select! {
            biased;
            e = stop.fired() => return Err(e),
            lease = shipping.store.lease_from(plain, origin) => lease.map_err(TaskError::Shipped)?,
        };
        let leased = started.elapsed();
        if lease.ready.toolchain.inputs_twin().key() != task.toolchain {
            let why = format!("the task's route is not the inputs route of toolchain {plain}");
            return Err(TaskError::Shipped(StoreError::Fetch { key: plain, why }));
        }
        let root = self.root.path.clone();
        let dir = tokio::task::spawn_blocking(move || {
            let dir = scratch::task_dir(&root).map_err(|source| TaskError::TaskDir { root: root.clone(), source })?;
            let tmp = dir.path().join("tmp");
            std::fs::create_dir(&tmp)
                .map_err(|source| TaskError::Setup(AgentSetupError::Write { path: tmp.clone(), source }))?;
            Ok::<_, TaskError>(dir)
        })
        .await
        .map_err(TaskError::Join)??;
        let tree = tokio::select! {
            biased;
            e = stop.fired() => return Err(e),
            tree = inputs::prepare(&shipping.store, &lease.ready, listed, conn, task.task_id, dir.path()) => {
                tree.map_err(TaskError::Sandbox)?
            }
        };
        let prepared = started.elapsed();
        let object = dir.path().join("out.o");
        // Validated: the working directory is absolute.
        let cwd = PathBuf::from(spec.cwd.as_deref().unwrap_or("/"));
        let (bwrap, mut args) =
            shipping.sandbox.command_tree(&tree.root, &tree.top, dir.path(), &cwd).map_err(TaskError::Sandbox)?;
        args.push(OsString::from(&listed.driver));
        args.extend(spec.args.iter().map(OsString::from));
        args.extend(["-c".into(), OsString::from(&spec.input_path), "-o".into(), object.clone().into_os_string()]);
        let mut env = vec![
            (OsString::from("TMPDIR"), dir.path().join("tmp").into_os_string()),
            (OsString::from("PATH"), OsString::from(&lease.ready.path_env)),
        ];
        // Validated: the locale, GCC_COLORS and the include-path variables.
        env.extend(spec.env.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))));
        let launch = process::Launch {
            program: &bwrap,
            args: &args,
            cwd: dir.path(),
            env: &env,
            max_output: self.limits.max_output_bytes,
        };
        let finished = match stop.check() {
            Ok(()) => process::run(&launch, stop.fired()).await,
            Err(e) => Err(e),
        }
        .and_then(super::sandbox_set_up);
        let ran = started.elapsed();
        let max_object = self.limits.max_object_bytes;
        let (fetched, reused) = (tree.fetched, tree.reused);
        let result = tokio::task::spawn_blocking(move || {
            // The output as the compiler printed it: its paths are the client's own
            // (`finish` names the temporary files' directory as a local compile would).
            let result = finished.and_then(|f| finish(f, &object, dir.path(), max_object, Bytes::copy_from_slice));
            drop(tree);
            if let Err(e) = dir.close() {
                tracing::warn!(error = %e, "cannot remove a task directory");
            }
            result
        })
        .await
        .map_err(TaskError::Join)?;
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
        tracing::debug!(
            inputs = listed.files.len(),
            fetched_blobs = fetched.0,
            fetched_bytes = fetched.1,
            tree_reused = ?reused,
            lease_ms = ms(leased),
            tree_ms = ms(prepared - leased),
            compile_ms = ms(ran - prepared),
            cleanup_ms = ms(started.elapsed() - ran),
            "unit compiled from its inputs"
        );
        result
    }
}
