//! The sandbox a shipped toolchain runs in: bubblewrap, without root.
//!
//! Every namespace unshared (user, mount, pid, network, IPC, UTS, cgroup),
//! all capabilities dropped, the child killed with its parent. The root is an
//! empty tmpfs on which the toolchain's materialised tree is bound read-only
//! (each top-level directory bound, each top-level link recreated), `/proc`
//! and a minimal `/dev`, the task's directory bound read-write at its own
//! path — the only writable place — and the root remounted read-only. So the
//! compiler sees its own files at the paths its host had them, and the
//! task's scratch files at the paths the agent's layout gave them: the object
//! comes out as it would natively.
//!
//! [`Sandbox::probe`] runs `bwrap` once at start-up with the same options: an
//! agent where it fails (no bubblewrap, user namespaces disabled) says why
//! and serves only the compilers it has installed.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A working bubblewrap.
#[derive(Debug, Clone)]
pub struct Sandbox {
    bwrap: PathBuf,
    version: String,
}

/// A top-level entry of a materialised toolchain root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Top {
    /// A directory, bound read-only.
    Dir(String),
    /// A link (`lib` → `usr/lib`), recreated.
    Link(String, String),
}

/// How long the start-up probe may take.
const PROBE_LIMIT: Duration = Duration::from_secs(10);

impl Sandbox {
    /// Finds `bwrap` in `PATH` and checks that it can make the sandbox here.
    ///
    /// # Errors
    /// What is missing or what failed, in words for the log and `status`.
    pub fn probe() -> Result<Sandbox, String> {
        let dirs = std::env::var_os("PATH").unwrap_or_default();
        let bwrap = std::env::split_paths(&dirs)
            .map(|d| d.join("bwrap"))
            .find(|p| p.is_file())
            .ok_or("bubblewrap (bwrap) is not installed; install it (Debian: apt-get install bubblewrap)")?;
        let out = run_limited(Command::new(&bwrap).arg("--version"))
            .map_err(|e| format!("cannot run {}: {e}", bwrap.display()))?;
        let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let sandbox = Sandbox { bwrap, version };
        let mut check = Command::new(&sandbox.bwrap);
        // The options a task's sandbox gets, /proc and /dev included: a host
        // that covers part of /proc (a container's masks, systemd's
        // ProtectKernelTunables=) refuses `--proc`, and should be found out here.
        check.args(base_args()).args([
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--",
            "/bin/sh",
            "-c",
            "exit 0",
        ]);
        let out = run_limited(&mut check).map_err(|e| format!("cannot run bwrap: {e}"))?;
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            return Err(format!(
                "bwrap cannot create a sandbox here ({why}); are unprivileged user namespaces disabled \
                 (sysctl kernel.unprivileged_userns_clone, user.max_user_namespaces)?"
            ));
        }
        Ok(sandbox)
    }

    /// `bubblewrap 0.8.0`.
    pub fn describe(&self) -> String {
        if self.version.is_empty() {
            "bubblewrap".to_owned()
        } else {
            self.version.clone()
        }
    }

    /// The program to run and its arguments up to the compiler's own: the
    /// toolchain at `root` (with its top-level entries `top`), `task_dir`
    /// writable, started in `cwd`.
    ///
    /// # Errors
    /// When a top-level entry of the toolchain would lie on a path bwrap
    /// sets up itself (`/proc`, `/dev`, the task directory's first
    /// component): bwrap resolves those while the host is still reachable,
    /// so a link there could make it create directories outside.
    pub fn command(
        &self,
        root: &Path,
        top: &[Top],
        task_dir: &Path,
        cwd: &Path,
    ) -> Result<(PathBuf, Vec<OsString>), String> {
        self.command_with(root, top, task_dir, cwd, false)
    }

    /// As [`Sandbox::command`], for a unit's tree ([`super::inputs`]): the
    /// task directory's first component may be a directory of the tree,
    /// which then holds the directory the task's is bound over.
    ///
    /// # Errors
    /// As [`Sandbox::command`], but for the task directory's first component.
    pub fn command_tree(
        &self,
        root: &Path,
        top: &[Top],
        task_dir: &Path,
        cwd: &Path,
    ) -> Result<(PathBuf, Vec<OsString>), String> {
        self.command_with(root, top, task_dir, cwd, true)
    }

    fn command_with(
        &self,
        root: &Path,
        top: &[Top],
        task_dir: &Path,
        cwd: &Path,
        task_under_tree: bool,
    ) -> Result<(PathBuf, Vec<OsString>), String> {
        let first = task_dir.components().find_map(|c| match c {
            std::path::Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        });
        for t in top {
            let clash = match t {
                Top::Dir(name) => first.as_deref() == Some(name.as_str()) && !task_under_tree,
                Top::Link(name, _) => first.as_deref() == Some(name.as_str()),
            };
            let (Top::Dir(name) | Top::Link(name, _)) = t;
            if name == "proc" || name == "dev" || clash {
                return Err(format!("the toolchain has a top-level /{name}, where the sandbox mounts its own"));
            }
        }
        let mut args: Vec<OsString> = base_args().iter().map(OsString::from).collect();
        for t in top {
            match t {
                Top::Dir(name) => {
                    args.push("--ro-bind".into());
                    args.push(root.join(name).into_os_string());
                    args.push(format!("/{name}").into());
                }
                Top::Link(name, target) => {
                    args.push("--symlink".into());
                    args.push(target.into());
                    args.push(format!("/{name}").into());
                }
            }
        }
        args.extend(["--proc", "/proc", "--dev", "/dev"].map(OsString::from));
        args.push("--bind".into());
        args.push(task_dir.as_os_str().to_owned());
        args.push(task_dir.as_os_str().to_owned());
        args.extend(["--remount-ro", "/", "--chdir"].map(OsString::from));
        args.push(cwd.as_os_str().to_owned());
        args.push("--".into());
        Ok((self.bwrap.clone(), args))
    }
}

/// Options every sandbox gets: every namespace, killed with its parent, no
/// capabilities, and a session of its own (no controlling terminal to
/// inject input into).
fn base_args() -> [&'static str; 5] {
    ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
}

fn run_limited(cmd: &mut Command) -> std::io::Result<std::process::Output> {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let deadline = std::time::Instant::now() + PROBE_LIMIT;
    loop {
        if child.try_wait()?.is_some() {
            return child.wait_with_output();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::other("did not finish within 10 s"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_sees_only_its_tree_and_writes_only_its_task_dir() {
        let sandbox = match Sandbox::probe() {
            Ok(s) => s,
            Err(e) => panic!("this host cannot make the sandbox: {e}"),
        };
        assert!(sandbox.describe().contains("bubblewrap"), "{}", sandbox.describe());
        // The host's own /usr and /lib stand in for a materialised tree.
        let top: Vec<Top> = ["usr", "lib", "lib64", "bin"]
            .iter()
            .filter_map(|n| {
                let p = Path::new("/").join(n);
                let meta = std::fs::symlink_metadata(&p).ok()?;
                Some(if meta.file_type().is_symlink() {
                    Top::Link((*n).into(), std::fs::read_link(&p).ok()?.to_string_lossy().into_owned())
                } else {
                    Top::Dir((*n).into())
                })
            })
            .collect();
        let task = tempfile::tempdir().unwrap();
        let (program, mut args) = sandbox.command(Path::new("/"), &top, task.path(), task.path()).unwrap();
        // Only loopback in its network namespace.
        let script = "echo ok > out; touch /usr/x 2>/dev/null && echo usr-writable; \
                      touch /x 2>/dev/null && echo root-writable; \
                      test -e /etc/passwd && echo etc-visible; echo ifaces $(grep -c : /proc/net/dev)";
        args.extend(["/bin/sh", "-c", script].map(OsString::from));
        let out = Command::new(program).args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "ifaces 1\n",
            "nothing but the task dir is visible or writable"
        );
        assert_eq!(std::fs::read_to_string(task.path().join("out")).unwrap(), "ok\n");
        // A toolchain may not put anything where the sandbox mounts its own.
        for name in ["proc", "dev", "tmp"] {
            let bad = [Top::Link(name.into(), "/oldroot/home".into())];
            let task_in_tmp = Path::new("/tmp/ccroute-agent-1/task");
            let e = sandbox.command(Path::new("/"), &bad, task_in_tmp, task_in_tmp).unwrap_err();
            assert!(e.contains(&format!("/{name}")), "{e}");
        }
    }
}
