//! The command line: which of ccroute's faces this process is, and the
//! daemons' entry points.
//!
//! `main.rs` calls [`main`] with the raw arguments. `ccroute <subcommand>`
//! parses flags (clap) into settings ([`args`]), installs logging, builds the
//! runtime and runs the daemon with SIGINT/SIGTERM as its shutdown.
//! Anything else is a compile for the wrapper: `ccroute gcc -c a.c`,
//! `ccroute /usr/bin/cc ...` (CMake's launcher), or a masquerade symlink
//! named like a compiler. The wrapper path starts no runtime and parses no
//! flags: it runs once per compile.
//!
//! Errors are printed once, with their chain, as `ccroute: error: …`, and
//! exit with status 2.

pub mod args;
pub mod build;
pub mod demo;
pub mod docs;
pub mod local_cache;
pub mod progress;
pub mod status;
pub mod watch;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tokio_util::sync::CancellationToken;

use self::args::{AgentArgs, CertsAction, Cli, Command, ConsumerdArgs, SchedulerArgs};
use crate::net::{tls, CertRole, TransportOptions};

/// Subcommand names: an argument list starting with one of these is ours,
/// anything else is a compiler.
const SUBCOMMANDS: &[&str] = &[
    "certs",
    "scheduler",
    "agent",
    "consumerd",
    "status",
    "stats",
    "cache",
    "make",
    "ninja",
    "demo",
    "completions",
    "man",
];

/// The process entry point; returns the exit code.
pub fn main(argv: Vec<OsString>) -> i32 {
    let invoked_as = argv.first().map(|a| Path::new(a).file_name().unwrap_or(a.as_os_str()).to_owned());
    let is_us = invoked_as.as_deref().is_some_and(|n| n.to_string_lossy().starts_with("ccroute"));
    if !is_us {
        // A masquerade symlink: argv[0] names the compiler.
        return crate::wrapper::main(argv);
    }
    match argv.get(1).map(|a| a.to_string_lossy()) {
        Some(first) if SUBCOMMANDS.contains(&first.as_ref()) || first.starts_with('-') => {}
        Some(_) => return crate::wrapper::main(argv[1..].to_vec()),
        None => {}
    }
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    match run(cli) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ccroute: error: {}", describe(&*e));
            2
        }
    }
}

/// An error and its chain of causes on one line, each cause once: most of
/// our errors already print their cause.
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let cause = s.to_string();
        if !msg.contains(&cause) {
            msg.push_str(": ");
            msg.push_str(&cause);
        }
        source = s.source();
    }
    msg
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn run(cli: Cli) -> Result<(), BoxError> {
    // The demo prints its own report; its daemons only speak up about trouble.
    let quiet = matches!(
        cli.command,
        Command::Demo(_)
            | Command::Status(_)
            | Command::Certs { .. }
            | Command::Stats(_)
            | Command::Cache { .. }
            | Command::Make(_)
            | Command::Ninja(_)
            | Command::Completions(_)
            | Command::Man(_)
    );
    init_logs(
        cli.log_json,
        if quiet {
            tracing_subscriber::filter::LevelFilter::WARN
        } else {
            tracing_subscriber::filter::LevelFilter::INFO
        },
    );
    match cli.command {
        Command::Certs { action: CertsAction::Init { dir, force } } => {
            tls::init(&dir, force)?;
            println!(
                "ccroute: wrote a cluster CA and scheduler, agent, consumerd and admin certificates to {}",
                dir.display()
            );
            Ok(())
        }
        Command::Scheduler(a) => {
            crate::memory::bound_retained_memory(crate::memory::Retention::SCHEDULER);
            runtime(None)?.block_on(scheduler(a))
        }
        Command::Agent(a) => {
            crate::memory::bound_retained_memory(crate::memory::Retention::WORKER);
            let file = args::load_file()?;
            let jobs = a.jobs.or(file.jobs).unwrap_or_else(crate::host::online_cpus);
            // Each running compile holds a blocking thread while it waits.
            runtime(Some(jobs as usize + 16))?.block_on(agent(a, file, jobs))
        }
        Command::Consumerd(a) => {
            crate::memory::bound_retained_memory(crate::memory::Retention::CONSUMERD);
            runtime(None)?.block_on(consumerd(a))
        }
        Command::Status(a) => runtime(None)?.block_on(status::run(a)),
        Command::Stats(a) => local_cache::run(&a, ccroute_wire::local::Query::Stats),
        Command::Cache { action: args::CacheAction::Clear(a) } => {
            use std::io::IsTerminal;
            let stderr = std::io::stderr();
            progress::while_running("clearing the cache", stderr.is_terminal(), stderr, || {
                local_cache::run(&a, ccroute_wire::local::Query::Clear)
            })
        }
        Command::Make(a) => build::run(build::Tool::Make, &a.args),
        Command::Ninja(a) => build::run(build::Tool::Ninja, &a.args),
        Command::Demo(a) => runtime(None)?.block_on(demo::run(a)),
        Command::Completions(a) => docs::completions(a.shell, &mut std::io::stdout().lock()),
        Command::Man(a) => docs::man(a.dir.as_deref()),
    }
}

fn init_logs(json: bool, level: tracing_subscriber::filter::LevelFilter) {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter: Targets = std::env::var("RUST_LOG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| Targets::new().with_default(level).with_target("quinn", LevelFilter::WARN));
    let registry = tracing_subscriber::registry().with(filter);
    let _ = if json {
        registry.with(tracing_subscriber::fmt::layer().json().with_writer(std::io::stderr)).try_init()
    } else {
        registry.with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr)).try_init()
    };
}

fn runtime(blocking: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.enable_all();
    if let Some(n) = blocking {
        b.max_blocking_threads(n.max(64));
    }
    b.build()
}

/// A token cancelled on SIGINT or SIGTERM: the shutdown every daemon takes.
pub fn signals() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = term => {}
        }
        tracing::info!("shutting down (signal)");
        cancel.cancel();
    });
    token
}

fn load_identity(dir: &Path, role: CertRole) -> Result<crate::net::Identity, BoxError> {
    tls::load(dir, role).map_err(|e| match e {
        tls::TlsError::Missing { .. } => e.into(),
        e => format!("{e} (the certificates come from `ccroute certs init DIR`)").into(),
    })
}

async fn scheduler(a: SchedulerArgs) -> Result<(), BoxError> {
    let file = args::load_file()?;
    let listen = args::parse_addr(
        &a.listen.clone().or(file.listen.clone()).unwrap_or_else(|| format!("0.0.0.0:{}", args::DEFAULT_PORT)),
    )?;
    let identity = load_identity(&args::tls_dir(&a.tls, &file), CertRole::Scheduler)?;
    let mut config = crate::scheduler::ServerConfig::new(listen, identity);
    config.payload_budget = a.payload_budget;
    config.metrics = a.metrics.as_deref().map(args::parse_addr).transpose()?;
    config.transport = TransportOptions {
        idle_timeout: Duration::from_secs_f64(a.idle_timeout.max(0.5)),
        ..TransportOptions::default()
    };
    config.core.longest_first = a.longest_first;
    config.core.speed_aware = !a.no_speed_aware;
    config.hedging = !a.no_hedging;
    config.lookahead = a.lookahead;
    if a.no_optimizer {
        if let Some(o) = config.optimizer.as_mut() {
            o.tune_agents = false;
        }
    }
    let dir = a.cache_dir.clone().or(file.cache_dir.clone()).or_else(crate::cache::default_dir);
    // The cost model is kept in the cache's directory, cache or not.
    config.costs_dir.clone_from(&dir);
    if !a.no_cache {
        let mut storage =
            crate::cache::StorageConfig::default().with_memory_bytes(a.cache_memory).with_disk_bytes(a.cache_size);
        match dir {
            Some(dir) => storage = storage.with_disk(dir),
            None => tracing::warn!("no cache directory (set --cache-dir, XDG_CACHE_HOME or HOME): memory cache only"),
        }
        if let Some(url) = &a.cache_redis {
            storage = storage.with_redis(crate::cache::RedisConfig::new(url.clone()));
        }
        config.cache = Some(storage);
    }
    let server = crate::scheduler::Server::bind(config).await?;
    // Scripts and tests read the bound address (port 0 resolved) from here.
    println!("ccroute scheduler listening on {}", server.local_addr()?);
    if let Some(addr) = server.metrics_addr() {
        tracing::info!("metrics on http://{addr}/metrics");
    }
    server.serve(signals()).await;
    Ok(())
}

async fn agent(a: AgentArgs, file: args::FileConfig, jobs: u32) -> Result<(), BoxError> {
    let tls_dir = args::tls_dir(&a.tls, &file);
    let mut config = crate::agent::daemon::AgentConfig::new(
        args::scheduler_addr(a.scheduler.as_ref(), &file)?,
        Arc::new(load_identity(&tls_dir, CertRole::Agent)?),
    );
    config.wait_for_certificates = a.wait_for_certificates.then_some(tls_dir);
    config.jobs = jobs;
    config.speed_milli = match a.speed.or(file.speed) {
        None => 0,
        Some(x) if x.is_finite() && (0.05..=20.0).contains(&x) => (x * 1000.0).round() as u32,
        Some(x) => return Err(format!("--speed {x}: give a speed from 0.05 to 20 (1 is a nominal host)").into()),
    };
    config.speed_probe = !a.no_speed_probe;
    config.compilers = a.compilers;
    config.discover = !a.no_discover;
    config.test_toolchain = a.test_toolchain;
    config.replay_speed = a.replay_speed;
    if let Some(dir) = a.scratch_dir {
        config.scratch_parent = dir;
    }
    if let Some(name) = a.name {
        config.host_name = name;
    }
    config.shipping = (!a.no_shipping).then(|| crate::agent::daemon::StoreConfig {
        dir: a.store_dir.unwrap_or_else(crate::agent::shipped::default_store_dir),
        max_bytes: a.store_size,
    });
    config.metrics = a.metrics.as_deref().map(args::parse_addr).transpose()?;
    crate::agent::daemon::run(config, signals()).await?;
    Ok(())
}

async fn consumerd(a: ConsumerdArgs) -> Result<(), BoxError> {
    use crate::consumerd::{Config, Consumerd, NoRemote, Remote};
    use crate::local_socket::SocketPath;
    let file = args::load_file()?;
    let socket = match a.socket.clone().or(file.socket.clone()) {
        Some(p) => SocketPath::explicit(p),
        None => SocketPath::from_env(),
    };
    let mut config = Config::new(socket);
    if let Some(n) = a.local_jobs.or(file.local_jobs) {
        config.local_slots = n.max(1);
    }
    if let Some(n) = a.preprocess_jobs {
        config.preprocess_slots = n.max(1);
    }
    config.prefer_remote = a.prefer_remote || a.remote_only;
    config.remote_only = a.remote_only;
    let seconds = |v: f64, flag: &str| {
        Duration::try_from_secs_f64(v).map_err(|_| format!("--{flag} takes a number of seconds, not {v}"))
    };
    if let Some(v) = a.remote_timeout {
        config.remote_timeout = seconds(v, "remote-timeout")?;
    }
    if let Some(v) = a.remote_deadline_floor {
        config.remote_deadline_floor = seconds(v, "remote-deadline-floor")?;
    }
    if a.no_local_cache {
        config.cache_dir = None;
    } else if let Some(d) = &a.local_cache_dir {
        config.cache_dir = Some(d.clone());
    }
    config.cache_max_bytes = a.local_cache_size;
    if let Some(s) = a.idle_exit {
        config.idle_exit = Duration::from_secs(s);
    } else if std::env::var_os(crate::local_socket::SPAWNED_ENV).is_some() {
        config.idle_exit = crate::consumerd::SPAWNED_IDLE_EXIT;
    }
    let local_slots = config.local_slots;
    let metrics = match a.metrics.as_deref().map(args::parse_addr).transpose()? {
        Some(addr) => Some((addr, crate::net::exposition::bind(addr).await?)),
        None => None,
    };
    let costs_file = config.cache_dir.as_ref().map(|d| d.join(crate::consumerd::link::COSTS_FILE));
    let daemon = Consumerd::bind(config)?;
    let shutdown = signals();
    let tasks = tokio_util::task::TaskTracker::new();
    let remote: Arc<dyn Remote> = match a.scheduler.as_ref().or(file.scheduler.as_ref()) {
        None => {
            tracing::info!("no scheduler configured: every compile runs locally");
            Arc::new(NoRemote::new())
        }
        Some(addr) => {
            let addr = args::parse_addr(addr)?;
            match tls::load(&args::tls_dir(&a.tls, &file), CertRole::Consumerd) {
                Ok(identity) => Arc::new(crate::consumerd::link::Link::start(
                    crate::consumerd::link::LinkConfig {
                        costs_file,
                        longest_first: !a.send_in_order,
                        ..crate::consumerd::link::LinkConfig::new(addr, identity)
                    },
                    daemon.stats(),
                    shutdown.clone(),
                    &tasks,
                )),
                Err(e) => {
                    tracing::warn!(error = %e, "no consumerd certificate: every compile runs locally");
                    Arc::new(NoRemote::new())
                }
            }
        }
    };
    if let Some((addr, listener)) = metrics {
        // Port 0 resolved: the address a scraper is to be given.
        let addr = listener.local_addr().unwrap_or(addr);
        tracing::info!("metrics on http://{addr}/metrics");
        let source = crate::consumerd::metrics::source(daemon.stats(), remote.window(), local_slots);
        tasks.spawn(crate::net::exposition::serve(listener, source, shutdown.clone()));
    }
    tracing::info!(socket = %daemon.socket_path().display(), "consumerd ready");
    let ended = daemon.serve(remote, shutdown.clone()).await;
    // Idle or its socket gone: the link stops too, and is waited for.
    shutdown.cancel();
    tasks.close();
    tasks.wait().await;
    tracing::info!(?ended, "consumerd stopped");
    Ok(())
}

/// The sample project shipped with ccroute, when this binary was built from
/// a checkout that still has it.
pub fn bundled_sample() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample");
    dir.join("Makefile").is_file().then_some(dir)
}

#[cfg(test)]
mod subcommand_tests {
    use clap::CommandFactory;

    use super::{args::Cli, SUBCOMMANDS};

    /// The wrapper's fast path tells subcommands from compilers by this list,
    /// without building clap's parser: it must name every subcommand.
    #[test]
    fn the_list_names_every_subcommand() {
        let mut clap: Vec<String> = Cli::command().get_subcommands().map(|c| c.get_name().to_owned()).collect();
        let mut ours: Vec<String> = SUBCOMMANDS.iter().map(|s| (*s).to_owned()).collect();
        clap.sort();
        ours.sort();
        assert_eq!(ours, clap);
    }
}

#[cfg(test)]
mod describe_tests {
    use std::io;

    use super::describe;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot open x: {source}")]
    struct Prints {
        #[source]
        source: io::Error,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("cannot open x")]
    struct Hides {
        #[source]
        source: io::Error,
    }

    #[test]
    fn each_cause_is_said_once() {
        let io = || io::Error::new(io::ErrorKind::NotFound, "no such file");
        assert_eq!(describe(&Prints { source: io() }), "cannot open x: no such file");
        assert_eq!(describe(&Hides { source: io() }), "cannot open x: no such file");
    }
}
