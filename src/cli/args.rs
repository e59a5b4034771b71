//! Raw flags (clap) and the settings they become.
//!
//! Each setting comes from its flag, else its `CCROUTE_*` environment
//! variable, else `~/.config/ccroute/config.toml` (or
//! `$XDG_CONFIG_HOME/ccroute/config.toml`), else a default:
//!
//! ```toml
//! scheduler = "10.0.0.5:7300"   # agents, consumerds, status
//! listen = "0.0.0.0:7300"       # the scheduler
//! tls_dir = "/etc/ccroute/tls"  # everyone
//! socket = "/run/user/1000/ccroute/consumerd.sock"
//! local_jobs = 8                # the consumerd
//! jobs = 32                     # an agent
//! speed = 2.5                   # an agent: pinned for placement (default: learnt)
//! cache_dir = "/var/cache/ccroute"
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use serde::Deserialize;

/// The scheduler's port when an address names none.
pub const DEFAULT_PORT: u16 = 7300;

/// ccroute: distributed C/C++ compiles. `ccroute <compiler> <args>…` runs
/// one compile through the local consumerd.
#[derive(Debug, Parser)]
#[command(name = "ccroute", version = crate::VERSION, disable_help_subcommand = true)]
pub struct Cli {
    /// Log lines as JSON.
    #[arg(long, global = true, env = "CCROUTE_LOG_JSON")]
    pub log_json: bool,
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Certificates: a cluster CA and one certificate per role.
    Certs {
        /// What to do with them.
        #[command(subcommand)]
        action: CertsAction,
    },
    /// Run the scheduler.
    Scheduler(SchedulerArgs),
    /// Run an agent.
    Agent(AgentArgs),
    /// Run the consumerd (normally started by the wrapper on demand).
    Consumerd(ConsumerdArgs),
    /// Ask the scheduler for routes, agents, consumerds and totals.
    Status(StatusArgs),
    /// The local consumerd's cache: direct hits, misses, refusals, sizes (like `ccache -s`).
    Stats(LocalCacheArgs),
    /// The local consumerd's cache.
    Cache {
        /// What to do with it.
        #[command(subcommand)]
        action: CacheAction,
    },
    /// Run make through ccroute with the consumerd's jobserver (local slots
    /// plus this machine's share of the farm): no -j to guess. Every argument
    /// goes to make.
    #[command(disable_help_flag = true)]
    Make(BuildArgs),
    /// Run ninja through ccroute: with the consumerd's jobserver (ninja 1.13
    /// and later), else -j its size when the build starts. Every argument
    /// goes to ninja.
    #[command(disable_help_flag = true)]
    Ninja(BuildArgs),
    /// Build the bundled sample project through a scheduler, two agents and a
    /// consumerd on 127.0.0.1, twice.
    Demo(DemoArgs),
    /// Print a completion script for a shell, e.g. `ccroute completions bash
    /// > /etc/bash_completion.d/ccroute`.
    Completions(CompletionsArgs),
    /// Print the man page (roff), or write one per command with --dir.
    Man(ManArgs),
}

/// `ccroute make …`, `ccroute ninja …`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The tool's arguments, as given.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<std::ffi::OsString>,
}

/// `ccroute certs …`.
#[derive(Debug, Subcommand)]
pub enum CertsAction {
    /// Write a CA and certificates for scheduler, agent, consumerd and admin.
    Init {
        /// Where to write them.
        dir: PathBuf,
        /// Replace an existing set.
        #[arg(long)]
        force: bool,
    },
}

/// TLS settings every daemon shares.
#[derive(Debug, Args)]
pub struct TlsArgs {
    /// The directory `ccroute certs init` wrote.
    #[arg(long, env = "CCROUTE_TLS_DIR")]
    pub tls_dir: Option<PathBuf>,
}

/// `ccroute scheduler`.
#[derive(Debug, Args)]
pub struct SchedulerArgs {
    /// Address to listen on.
    #[arg(long, env = "CCROUTE_LISTEN")]
    pub listen: Option<String>,
    /// TLS.
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Payload bytes held in memory at most.
    #[arg(long, env = "CCROUTE_PAYLOAD_BUDGET", default_value_t = 256 << 20)]
    pub payload_budget: u64,
    /// Keep every agent at its own limit instead of tuning it from CPU
    /// samples (consumerds' shares are still computed).
    #[arg(long)]
    pub no_optimizer: bool,
    /// Serve each consumerd's waiting units longest expected first (by the
    /// cost model) instead of first come, first served.
    #[arg(long)]
    pub longest_first: bool,
    /// Place without regard to agents' speeds (least loaded first, as
    /// before). By default each task goes to the agent expected to finish it
    /// first (speeds learnt from results, or pinned with an agent's --speed):
    /// a long unit may wait for a fast agent rather than start on a slow one.
    #[arg(long)]
    pub no_speed_aware: bool,
    /// Give each consumerd a remote window of this many times its fair
    /// share of the farm's tokens (at least 1). With more, its build runs
    /// ahead (`ccroute make` sizes its jobserver to the window) and the units
    /// beyond the tokens wait at the scheduler (up to lookahead × 4096 a
    /// route), where --longest-first starts the longest first (each
    /// consumerd sends the units it has waiting longest expected first too);
    /// each waiting unit's text is held in --payload-budget, which must hold
    /// about (lookahead - 1) × the farm's tokens × a unit's compressed text,
    /// or units beyond it go back to be compiled locally.
    #[arg(long, default_value_t = 1.0, value_parser = parse_lookahead)]
    pub lookahead: f64,
    /// Never copy a straggler. By default a task that runs past twice its
    /// expected time on its agent (and at least a second) is copied to an
    /// idle agent when no task waits for one; the first answer wins and the
    /// other compile is stopped (a copy's internal error never wins: the
    /// original runs on).
    #[arg(long)]
    pub no_hedging: bool,
    /// Seconds a silent peer has before it counts as lost.
    #[arg(long, env = "CCROUTE_IDLE_TIMEOUT", default_value_t = 5.0)]
    pub idle_timeout: f64,
    /// The result cache's disk tier (default: the user's cache dir, e.g.
    /// ~/.cache/ccroute).
    #[arg(long, env = "CCROUTE_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// The disk tier's size cap, bytes.
    #[arg(long, env = "CCROUTE_CACHE_SIZE", default_value_t = 10 << 30)]
    pub cache_size: u64,
    /// The memory tier's size cap, bytes.
    #[arg(long, env = "CCROUTE_CACHE_MEMORY", default_value_t = 256 << 20)]
    pub cache_memory: u64,
    /// A Redis shared by several schedulers, e.g. redis://10.0.0.7:6379.
    #[arg(long, env = "CCROUTE_CACHE_REDIS")]
    pub cache_redis: Option<String>,
    /// No result cache.
    #[arg(long)]
    pub no_cache: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics (off unless given),
    /// e.g. 0.0.0.0:9300.
    #[arg(long, env = "CCROUTE_METRICS")]
    pub metrics: Option<String>,
}

/// `ccroute agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The scheduler's address.
    #[arg(long, env = "CCROUTE_SCHEDULER")]
    pub scheduler: Option<String>,
    /// TLS.
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Compiles at once at most (default: online CPUs).
    #[arg(long, short = 'j', env = "CCROUTE_JOBS")]
    pub jobs: Option<u32>,
    /// This host's speed for the scheduler's placement, relative to a
    /// nominal host (2.5: compiles in 40 % of the time); default: measured
    /// at start (a fixed unit compiled twice, ~0.4 s of CPU), then learnt
    /// by the scheduler from this agent's results.
    #[arg(long, env = "CCROUTE_SPEED")]
    pub speed: Option<f64>,
    /// Do not measure this host's speed at start: the scheduler learns it
    /// from this agent's results alone.
    #[arg(long, conflicts_with = "speed")]
    pub no_speed_probe: bool,
    /// A compiler to offer besides those found in PATH (repeatable).
    #[arg(long = "compiler")]
    pub compilers: Vec<PathBuf>,
    /// Do not look for compilers in PATH.
    #[arg(long)]
    pub no_discover: bool,
    /// Also offer the no-op test toolchain (benches).
    #[arg(long, env = "CCROUTE_TEST_TOOLCHAIN")]
    pub test_toolchain: bool,
    /// The test toolchain's replayed units (the farm harness) take their
    /// recorded time divided by this: 1.0 as recorded, 0.4 a slower host.
    #[arg(long, default_value_t = 1.0, requires = "test_toolchain", value_parser = positive_f64)]
    pub replay_speed: f64,
    /// The name `ccroute status` shows (default: the host name).
    #[arg(long)]
    pub name: Option<String>,
    /// When the scheduler refuses this agent's certificate for good (another
    /// cluster's, or another role's), wait for new certificates in the TLS
    /// directory and try again with them, instead of exiting with an error.
    #[arg(long, env = "CCROUTE_WAIT_FOR_CERTIFICATES")]
    pub wait_for_certificates: bool,
    /// Where each compile's scratch directory is made (default:
    /// $XDG_RUNTIME_DIR or /dev/shm where that is a tmpfs, else the temp dir).
    #[arg(long, env = "CCROUTE_SCRATCH_DIR")]
    pub scratch_dir: Option<PathBuf>,
    /// Serve only the compilers installed here: no toolchains shipped by
    /// consumerds, no sandbox.
    #[arg(long)]
    pub no_shipping: bool,
    /// Where shipped toolchains are kept (default:
    /// ~/.cache/ccroute/agent-store).
    #[arg(long, env = "CCROUTE_STORE_DIR")]
    pub store_dir: Option<PathBuf>,
    /// The toolchain store's size cap, bytes (least recently used
    /// toolchains no task holds are removed past it).
    #[arg(long, default_value_t = crate::agent::shipped::DEFAULT_MAX_BYTES)]
    pub store_size: u64,
    /// Serve this agent's Prometheus metrics at http://ADDR/metrics (off
    /// unless given): compiles started, running, by outcome, their durations.
    #[arg(long, env = "CCROUTE_AGENT_METRICS")]
    pub metrics: Option<String>,
}

/// `ccroute consumerd`.
#[derive(Debug, Args)]
pub struct ConsumerdArgs {
    /// The scheduler's address (none: compile everything locally).
    #[arg(long, env = "CCROUTE_SCHEDULER")]
    pub scheduler: Option<String>,
    /// TLS.
    #[command(flatten)]
    pub tls: TlsArgs,
    /// The wrapper's socket.
    #[arg(long, env = "CCROUTE_SOCKET")]
    pub socket: Option<PathBuf>,
    /// Compiles run on this machine at once (default: CPUs).
    #[arg(long, env = "CCROUTE_LOCAL_JOBS")]
    pub local_jobs: Option<u32>,
    /// Wrappers that preprocess at once for remote compiles (default: twice
    /// the CPUs); the others wait their turn with their remote slot, so that
    /// a large window does not run hundreds of preprocessors here.
    #[arg(long, env = "CCROUTE_PREPROCESS_JOBS")]
    pub preprocess_jobs: Option<u32>,
    /// Exit after this many seconds without wrappers (0: never).
    #[arg(long)]
    pub idle_exit: Option<u64>,
    /// Send compiles remote while the scheduler's window has room, and run
    /// locally only past it (default: local slots first).
    #[arg(long, env = "CCROUTE_PREFER_REMOTE")]
    pub prefer_remote: bool,
    /// Send every compile that can go remote remote, waiting for the
    /// scheduler's window; locally only what cannot, what fails remotely,
    /// and everything while no scheduler is connected (for measuring).
    #[arg(long)]
    pub remote_only: bool,
    /// The most seconds any remote compile may take before the unit
    /// compiles here instead (each unit's deadline comes from its size).
    #[arg(long, value_name = "SECS")]
    pub remote_timeout: Option<f64>,
    /// The fewest seconds a remote compile is given before it is abandoned.
    #[arg(long, value_name = "SECS")]
    pub remote_deadline_floor: Option<f64>,
    /// Where the direct-mode cache and the local tier live (default:
    /// consumerd/ in the user's cache directory, e.g. ~/.cache/ccroute/consumerd).
    #[arg(long, env = "CCROUTE_LOCAL_CACHE_DIR")]
    pub local_cache_dir: Option<PathBuf>,
    /// The local tier's size cap, bytes.
    #[arg(long, env = "CCROUTE_LOCAL_CACHE_SIZE", default_value_t = crate::consumerd::direct::DEFAULT_MAX_BYTES)]
    pub local_cache_size: u64,
    /// No direct-mode cache and no local tier: every compile preprocesses
    /// (remote) or compiles (local); the scheduler's cache still answers remote ones.
    #[arg(long, env = "CCROUTE_NO_LOCAL_CACHE")]
    pub no_local_cache: bool,
    /// Serve this consumerd's Prometheus metrics at http://ADDR/metrics (off
    /// unless given): compiles by where they ran, slots, cache hits, bytes.
    #[arg(long, env = "CCROUTE_CONSUMERD_METRICS")]
    pub metrics: Option<String>,
    /// Send the units waiting to go remote in the order they came. By
    /// default the longest expected goes first, by a cost model of this
    /// consumerd's own (`consumerd-cost-model` in its cache directory),
    /// which matters when the build runs ahead of the farm (the scheduler's
    /// --lookahead).
    #[arg(long)]
    pub send_in_order: bool,
}

/// `ccroute stats` and `ccroute cache clear`: the consumerd's cache.
#[derive(Debug, Args)]
pub struct LocalCacheArgs {
    /// The consumerd's socket.
    #[arg(long, env = "CCROUTE_SOCKET")]
    pub socket: Option<PathBuf>,
    /// The cache's directory, for when no consumerd runs (as `consumerd --local-cache-dir`).
    #[arg(long, env = "CCROUTE_LOCAL_CACHE_DIR")]
    pub local_cache_dir: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `ccroute cache …`.
#[derive(Debug, Subcommand)]
pub enum CacheAction {
    /// Empty this user's tiers (results, manifests, digests); a running
    /// consumerd forgets them too.
    Clear(LocalCacheArgs),
}

/// `ccroute status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The scheduler's address.
    #[arg(long, env = "CCROUTE_SCHEDULER")]
    pub scheduler: Option<String>,
    /// TLS.
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Ask again every second: in place on a terminal until q or ctrl-c;
    /// one report after another into a pipe or file; one JSON document per
    /// line with --json.
    #[arg(long, short = 'w')]
    pub watch: bool,
}

/// `ccroute completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `ccroute man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write one page per command (ccroute.1, ccroute-status.1, ...) into
    /// this directory instead of printing ccroute(1) to stdout.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// `ccroute demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The project to build (default: the sample bundled with ccroute).
    #[arg(long)]
    pub sample: Option<PathBuf>,
    /// make's -j.
    #[arg(long, short = 'j', default_value_t = 8)]
    pub jobs: u32,
    /// Each agent's --jobs (default: online CPUs).
    #[arg(long)]
    pub agent_jobs: Option<u32>,
    /// The consumerd's local slots (default: 1, so that most compiles go remote).
    #[arg(long, default_value_t = 1)]
    pub local_jobs: u32,
}

/// What `config.toml` may say.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// See the module doc.
    pub scheduler: Option<String>,
    /// See the module doc.
    pub listen: Option<String>,
    /// See the module doc.
    pub tls_dir: Option<PathBuf>,
    /// See the module doc.
    pub socket: Option<PathBuf>,
    /// See the module doc.
    pub local_jobs: Option<u32>,
    /// See the module doc.
    pub jobs: Option<u32>,
    /// See the module doc.
    pub speed: Option<f64>,
    /// See the module doc.
    pub cache_dir: Option<PathBuf>,
}

/// Why settings are unusable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file exists but cannot be read or parsed.
    #[error("cannot read {path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// An address that is not `host:port` (or a bare host).
    #[error("invalid address {value:?}: {reason}")]
    Address {
        /// What was given.
        value: String,
        /// Why it does not parse.
        reason: String,
    },
    /// A setting that has no value anywhere.
    #[error("no {what}: pass {flag}, set {env}, or put `{key} = ...` in {file}")]
    Missing {
        /// The setting.
        what: &'static str,
        /// Its flag.
        flag: &'static str,
        /// Its environment variable.
        env: &'static str,
        /// Its config-file key.
        key: &'static str,
        /// The config file.
        file: String,
    },
}

/// The config file's path.
pub fn config_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("ccroute").join("config.toml"))
}

/// Reads the config file; a missing file is an empty config.
///
/// # Errors
/// [`ConfigError::File`] for an unreadable or malformed file.
pub fn load_file() -> Result<FileConfig, ConfigError> {
    let Some(path) = config_path() else { return Ok(FileConfig::default()) };
    match std::fs::read_to_string(&path) {
        Ok(text) => toml::from_str(&text).map_err(|e| ConfigError::File { path, reason: e.to_string() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(FileConfig::default()),
        Err(e) => Err(ConfigError::File { path, reason: e.to_string() }),
    }
}

/// A lookahead: a finite number of at least 1, at most 64.
fn parse_lookahead(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(f) if (1.0..=64.0).contains(&f) => Ok(f),
        Ok(_) => Err("a window of 1 to 64 times the share (1: the share itself)".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// `host:port`, `host` (port 7300), `[v6]:port`, resolved to one address.
///
/// # Errors
/// [`ConfigError::Address`] when it neither parses nor resolves.
pub fn parse_addr(value: &str) -> Result<SocketAddr, ConfigError> {
    use std::net::ToSocketAddrs;
    let bad = |reason: String| ConfigError::Address { value: value.to_owned(), reason };
    if let Ok(a) = value.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Ok(ip) = value.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, DEFAULT_PORT));
    }
    let with_port = if value.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
        value.to_owned()
    } else {
        format!("{value}:{DEFAULT_PORT}")
    };
    with_port.to_socket_addrs().map_err(|e| bad(e.to_string()))?.next().ok_or_else(|| bad("resolves to nothing".into()))
}

/// The TLS directory: flag or env, else the file, else `~/.config/ccroute/tls`.
pub fn tls_dir(args: &TlsArgs, file: &FileConfig) -> PathBuf {
    args.tls_dir
        .clone()
        .or_else(|| file.tls_dir.clone())
        .or_else(|| config_path().and_then(|p| p.parent().map(|d| d.join("tls"))))
        .unwrap_or_else(|| PathBuf::from("tls"))
}

/// The scheduler address for a client role, or the error that says where to set it.
///
/// # Errors
/// [`ConfigError`] when it is missing or malformed.
pub fn scheduler_addr(flag: Option<&String>, file: &FileConfig) -> Result<SocketAddr, ConfigError> {
    let value = flag.cloned().or_else(|| file.scheduler.clone()).ok_or_else(|| ConfigError::Missing {
        what: "scheduler address",
        flag: "--scheduler ADDR",
        env: "CCROUTE_SCHEDULER",
        key: "scheduler",
        file: config_path().map_or_else(|| "config.toml".into(), |p| p.display().to_string()),
    })?;
    parse_addr(&value)
}

/// A finite number above 0.
fn positive_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a number above 0")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_with_and_without_ports() {
        assert_eq!(parse_addr("127.0.0.1:9").unwrap().port(), 9);
        assert_eq!(parse_addr("127.0.0.1").unwrap().port(), DEFAULT_PORT);
        assert_eq!(parse_addr("[::1]:5").unwrap().port(), 5);
        assert_eq!(parse_addr("localhost").unwrap().port(), DEFAULT_PORT);
        let e = parse_addr("no such host.invalid:x").unwrap_err().to_string();
        assert!(e.starts_with("invalid address"), "{e}");
    }

    #[test]
    fn the_config_file_rejects_unknown_keys() {
        let good: FileConfig = toml::from_str("scheduler = \"a:1\"\njobs = 4\n").unwrap();
        assert_eq!(good.jobs, Some(4));
        assert!(toml::from_str::<FileConfig>("schedular = \"a\"").is_err());
    }

    #[test]
    fn a_missing_scheduler_says_where_to_set_it() {
        let e = scheduler_addr(None, &FileConfig::default()).unwrap_err().to_string();
        assert!(e.contains("--scheduler") && e.contains("CCROUTE_SCHEDULER"), "{e}");
    }
}
