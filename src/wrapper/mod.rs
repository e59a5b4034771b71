//! The wrapper: the short process a build runs for every compile
//! (`ccroute gcc -c a.c -o a.o`, a compiler launcher, or a masquerade
//! symlink named like the compiler).
//!
//! It does all the local file work itself — the local compile, the
//! preprocess run with its dependency files, writing the remote object — so
//! ownership, umask, working directory and environment are those of a plain
//! local compile; the consumerd only arbitrates slots and talks to the
//! scheduler. Anything going wrong with the consumerd means a local compile:
//! a build never fails because of ccroute.
//!
//! ```text
//! resolve compiler → classify ── Local ──▶ exec the compiler
//!                        └─ Remote ─▶ connect (start a consumerd if none) ─▶ Job
//!                              Hit ─▶ write object and dependency file, print, exit
//!                              RunLocally ─▶ compile here, holding the slot (and Record what it made)
//!                              Preprocess ─▶ preprocess ─▶ Source ─▶ Compiled ─▶ write object, print, exit
//!                                                └─▶ Abandon ─▶ RunLocally ─▶ compile here
//! ```
//!
//! Main items: [`main`] (entry from the command line), [`run`], [`Config`];
//! [`connect`] (reaching or starting a consumerd; the socket itself is [`crate::local_socket`]),
//! [`session`] (the framed connection), [`process`] (running and writing).
//! Std only and synchronous: it starts for every compile. Left out: the
//! consumerd (`crate::consumerd`).

pub mod connect;
pub mod process;
pub mod record;
pub mod session;

use std::ffi::{OsStr, OsString};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use ccroute_wire::local::{split_four, ConsumerdMsg, Job, SourceHeader, WrapperMsg, LOCAL_PROTOCOL_VERSION};

use crate::cc::{classify, resolve_compiler, Classification, Family, RemotePlan, ResolveError};
use crate::local_socket::SocketPath;
use connect::Starter;
use process::{exec_compiler, preprocess, run_compiler, write_object, NOT_FOUND};
use session::Session;

/// Set to print, on stderr, why each compile ran where it did.
pub const VERBOSE_ENV: &str = "CCROUTE_VERBOSE";

/// The executable that is the wrapper alone (`src/bin/ccroute-cc.rs`).
pub const LEAN_NAME: &str = "ccroute-cc";

/// Entry point of [`LEAN_NAME`]: `argv` as the process got it. Named as
/// itself, its first argument is the compiler (`ccroute-cc gcc -c a.c`);
/// under any other name (a masquerade symlink) that name is. The same
/// wrapper as `ccroute gcc ...`: only the executable differs. `ccroute` links
/// the daemons (QUIC, TLS, the runtime), and its start costs in proportion:
/// many times the relocations for the dynamic loader to apply, and twice
/// the page faults (`benches/hits.sh` times a direct-mode hit through each;
/// the README has the figures).
pub fn lean_main(argv: Vec<OsString>) -> i32 {
    let invoked_as = argv.first().and_then(|a| Path::new(a).file_name()).map(OsStr::to_os_string);
    if invoked_as.as_deref() != Some(OsStr::new(LEAN_NAME)) {
        return main(argv);
    }
    match argv.get(1).map(|a| a.to_string_lossy()) {
        Some(first) if !first.starts_with('-') => main(argv[1..].to_vec()),
        Some(first) if first == "--version" || first == "-V" => {
            println!("{LEAN_NAME} {}", crate::VERSION);
            0
        }
        _ => {
            eprintln!(
                "usage: {LEAN_NAME} COMPILER ARGS... (or a symlink to it named as the compiler)\n\
                 Compiles through this user's consumerd, as `ccroute COMPILER ARGS...` does; the \
                 daemons and the other commands are `ccroute`'s, which {LEAN_NAME} runs from its \
                 own directory to start a consumerd."
            );
            2
        }
    }
}

/// What a wrapper needs besides its arguments.
#[derive(Debug, Clone)]
pub struct Config {
    /// The consumerd's socket.
    pub socket: SocketPath,
    /// How to start a consumerd when none answers; `None`: never start one.
    pub starter: Option<Starter>,
    /// The running executable, which compiler resolution must skip.
    pub self_exe: PathBuf,
    /// `PATH`, to look compilers up in.
    pub path_var: Option<OsString>,
    /// Print why each compile ran where it did.
    pub verbose: bool,
}

impl Config {
    /// The configuration from this process's environment.
    pub fn from_env() -> Config {
        let self_exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("ccroute"));
        Config {
            socket: SocketPath::from_env(),
            starter: Starter::this_executable(),
            self_exe,
            path_var: std::env::var_os("PATH"),
            verbose: std::env::var_os(VERBOSE_ENV).is_some_and(|v| !v.is_empty()),
        }
    }
}

/// The agent's compiler writes to a pipe, where gcc's default
/// `-fdiagnostics-color=auto` means none: when ours is a terminal, ask for
/// the colors a local compile would print (the flag is not recorded in the
/// object, so the bytes stay the same).
fn with_terminal_colors(mut spec: ccroute_wire::TaskSpec, terminal: bool) -> ccroute_wire::TaskSpec {
    let chosen = spec.args.iter().any(|a| a.starts_with("-fdiagnostics-color") || a == "-fno-diagnostics-color");
    if terminal && !chosen {
        spec.args.push("-fdiagnostics-color=always".into());
    }
    spec
}

/// Entry point: `args[0]` is the compiler as named (`gcc`, `/usr/bin/cc`, or
/// the name a masquerade symlink was run as), the rest its arguments.
/// Returns the exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    run(&Config::from_env(), &args)
}

/// Runs one compiler invocation (see [`main`]) with `config`.
pub fn run(config: &Config, args: &[OsString]) -> i32 {
    let Some((name, args)) = args.split_first() else {
        eprintln!("ccroute: no compiler given");
        return 2;
    };
    let compiler = match resolve(config, name) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ccroute: {e}");
            return NOT_FOUND;
        }
    };
    let argv0 = argv0_for(config, name, &compiler);
    let Ok(cwd) = std::env::current_dir() else {
        return exec_compiler(&compiler, &argv0, args);
    };
    match classify(Family::of_compiler(&compiler), args, &cwd, |k| std::env::var_os(k)) {
        Classification::Local(reason) => {
            config.note(format_args!("local ({reason})"));
            exec_compiler(&compiler, &argv0, args)
        }
        Classification::Remote(plan) => {
            Wrapper { config, compiler: &compiler, argv0: &argv0, args, plan: &plan, cwd: &cwd }.go()
        }
    }
}

/// The argv\[0\] a local compile runs with: the name as the build gave it
/// when the compiler would have found itself by that name (gcc prints it as
/// `COLLECT_GCC` and finds its parts from it), else the resolved path (a
/// masquerade name would lead the compiler back to ccroute).
fn argv0_for(config: &Config, name: &OsStr, compiler: &Path) -> OsString {
    let same = if name.as_encoded_bytes().contains(&b'/') {
        Path::new(name) == compiler
    } else {
        crate::cc::resolve::path_candidates(name, config.path_var.as_deref()).next().as_deref() == Some(compiler)
    };
    if same {
        name.to_owned()
    } else {
        compiler.as_os_str().to_owned()
    }
}

/// Resolves the compiler. A path that turns out to be ccroute is a
/// masquerade symlink run by its path: the compiler is its name, further down `PATH`.
fn resolve(config: &Config, name: &OsStr) -> Result<PathBuf, ResolveError> {
    match resolve_compiler(name, config.path_var.as_deref(), &config.self_exe) {
        Err(ResolveError::IsSelf { path }) => match path.file_name() {
            Some(base) => resolve_compiler(base, config.path_var.as_deref(), &config.self_exe),
            None => Err(ResolveError::IsSelf { path }),
        },
        r => r,
    }
}

impl Config {
    fn note(&self, what: std::fmt::Arguments<'_>) {
        if self.verbose {
            eprintln!("ccroute: {what}");
        }
    }
}

/// One remote-capable compile.
struct Wrapper<'a> {
    config: &'a Config,
    compiler: &'a Path,
    argv0: &'a OsStr,
    args: &'a [OsString],
    plan: &'a RemotePlan,
    cwd: &'a Path,
}

/// What the conversation with the consumerd decided.
enum Decision {
    /// Compile here. With a session, it holds a local slot until the compile ends.
    Local(Option<Session>, String),
    /// Compile here holding the session's slot, and record what it made.
    Record(Session, String),
    /// The remote compile is done; exit with this code.
    Done(i32),
}

impl Wrapper<'_> {
    fn go(&self) -> i32 {
        match self.converse() {
            Decision::Done(code) => code,
            Decision::Local(slot, why) => {
                self.config.note(format_args!("local ({why})"));
                let code = run_compiler(self.compiler, self.argv0, self.args);
                drop(slot);
                code
            }
            Decision::Record(session, why) => {
                self.config.note(format_args!("local ({why}), recorded for the cache"));
                let colors = record::colors(self.args);
                record::compile_recording(self.compiler, self.argv0, self.args, self.plan, colors, session)
            }
        }
    }

    fn converse(&self) -> Decision {
        let stream = match connect::connect(&self.config.socket, self.config.starter.as_ref()) {
            Ok(s) => s,
            Err(e) => return Decision::Local(None, e.to_string()),
        };
        let mut session = Session::new(stream);
        let terminal = std::io::stderr().is_terminal();
        let job = Job {
            version: LOCAL_PROTOCOL_VERSION,
            compiler: self.compiler.as_os_str().as_encoded_bytes().to_vec(),
            spec: with_terminal_colors(self.plan.spec.clone(), terminal),
            pid: std::process::id(),
            direct: record::direct_job(self.plan, self.args, self.cwd, record::colors(self.args)),
            inputs_args: self.plan.inputs_args.clone(),
            text_refused: self.plan.text_refused.as_ref().map(ToString::to_string),
        };
        if let Err(e) = session.send(&WrapperMsg::Job(job), b"") {
            return Decision::Local(None, e.to_string());
        }
        // Set once the text is sent: whether the agent's diagnostics may be shown.
        let mut sent: Option<bool> = None;
        loop {
            let frame = match session.recv() {
                Ok(f) => f,
                Err(e) => return Decision::Local(None, e.to_string()),
            };
            match (frame.message, sent) {
                (ConsumerdMsg::RunLocally { reason, record }, _) => {
                    return if record {
                        Decision::Record(session, reason)
                    } else {
                        Decision::Local(Some(session), reason)
                    };
                }
                (ConsumerdMsg::Hit { lens }, None) => {
                    let Some([stdout, stderr, object, deps]) = split_four(&lens, frame.payload) else {
                        return Decision::Local(None, "cached payload does not match its header".to_owned());
                    };
                    if let Err(e) = record::write_hit(self.plan, &object, &deps) {
                        return Decision::Local(None, format!("cannot write {}: {e}", self.plan.output.display()));
                    }
                    self.config.note(format_args!("cached (direct mode)"));
                    print(&stdout, &stderr);
                    return Decision::Done(0);
                }
                (ConsumerdMsg::Preprocess, None) => match preprocess(self.compiler, self.plan, self.cwd) {
                    Ok(ready) => {
                        let header = SourceHeader {
                            cacheable: ready.cacheable,
                            len: ready.text.len() as u64,
                            files: ready.files,
                            text_refused: ready.text_refused,
                        };
                        if let Err(e) = session.send(&WrapperMsg::Source(header), &ready.text) {
                            return Decision::Local(None, e.to_string());
                        }
                        sent = Some(ready.trusted_diagnostics);
                    }
                    Err(reason) => {
                        // Wait for a local slot, as any other local compile does.
                        if let Err(e) = session.send(&WrapperMsg::Abandon { reason }, b"") {
                            return Decision::Local(None, e.to_string());
                        }
                    }
                },
                (ConsumerdMsg::Compiled(header), Some(trusted)) => {
                    let Some(parts) = header.split(frame.payload) else {
                        return Decision::Local(None, "compiled payload does not match its header".to_owned());
                    };
                    let ok = header.exit_status == 0;
                    if !(0..=255).contains(&header.exit_status) || (ok && parts.object.is_empty()) {
                        return Decision::Local(None, format!("remote exit status {}", header.exit_status));
                    }
                    let silent = parts.stderr.is_empty() && parts.stdout.is_empty();
                    if !(trusted || header.from_inputs || silent) {
                        return Decision::Local(None, "the agent's diagnostics would not read as here".to_owned());
                    }
                    if ok {
                        if let Err(e) = write_object(&self.plan.output, &parts.object) {
                            // The local compile reports the problem in the compiler's own words.
                            return Decision::Local(None, format!("cannot write {}: {e}", self.plan.output.display()));
                        }
                    }
                    print(&parts.stdout, &parts.stderr);
                    return Decision::Done(header.exit_status);
                }
                (other, _) => return Decision::Local(None, format!("unexpected {other:?} from the consumerd")),
            }
        }
    }
}

fn print(stdout: &[u8], stderr: &[u8]) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(stdout).and_then(|()| out.flush());
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(stderr).and_then(|()| err.flush());
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests;
