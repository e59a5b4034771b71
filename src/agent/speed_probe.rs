//! An agent's speed, measured when it starts: it compiles a fixed unit
//! ([`PROBE_SOURCE`], at `-O2`) through its own executor, as a remote unit
//! is compiled, and tells the scheduler nominal time ÷ its time in its
//! hello. The scheduler places by that until the agent's results tell it
//! better, so that on a farm nobody has seen before the long units go to
//! the fast hosts from the first one (learnt from results alone, a cold
//! farm of half slow hosts gave its first long units to whichever host was
//! free, and moved them only when the queue drained).
//!
//! The unit is compiled [`RUNS`] times, and the least CPU time (user +
//! system of the compiler) is taken: CPU time does not count the time the
//! compiler waited for a core, so agents started together on one host
//! measure about the same. The test toolchain, when offered (the farm
//! harness's hosts), is measured instead, by replaying a unit of
//! [`NOMINAL_REPLAY`]: it is what such an agent runs, at its replay speed.
//!
//! The scale is free, as learnt speeds' is: 1.0 is [`NOMINAL_COMPILE`], what
//! gcc 12 took on the machine this was written on (one AMD EPYC core). A speed kept from an earlier
//! build, or pinned (`--speed`, which skips the probe), comes first.
//!
//! Left out: one probe per toolchain (the first installed compiler in key
//! order speaks for the host; gcc 11 reads ~1.25x gcc 12 on the same core),
//! and probing again later (load changes are the results' to tell).

use std::time::{Duration, Instant};

use ccroute_wire::codec::encode_spec;
use ccroute_wire::payload::compress;
use ccroute_wire::{Outcome, TaskSpec, Toolchain, ToolchainKey};
use tokio_util::sync::CancellationToken;

use super::executor::replay::ReplayArg;
use super::executor::{ExecTask, Executor};
use crate::toolchain::test_toolchain;

/// The unit compiled.
pub const PROBE_SOURCE: &str = include_str!("speed_probe.c");
/// Its CPU time at `-O2` on a host of speed 1.0.
pub const NOMINAL_COMPILE: Duration = Duration::from_millis(180);
/// The test toolchain's replayed unit: its recorded time.
pub const NOMINAL_REPLAY: Duration = Duration::from_millis(100);
/// Compiles of the unit; the least time counts.
pub const RUNS: usize = 2;
/// Longest the probe may take in all before the agent joins without it.
const PROBE_LIMIT: Duration = Duration::from_secs(20);

/// This host's speed in thousandths of the nominal, measured on the test
/// toolchain if `toolchains` has it, else on the first installed compiler
/// (in key order); `None` when nothing could be measured (no compiler, a
/// failed compile, or over [`PROBE_LIMIT`]), said in a log line.
pub async fn measure(executor: &Executor, toolchains: &[Toolchain]) -> Option<u32> {
    let test = test_toolchain().key();
    let mut keys: Vec<ToolchainKey> = toolchains.iter().map(Toolchain::key).collect();
    keys.sort_unstable();
    let key = if keys.contains(&test) { test } else { *keys.first()? };
    let (nominal, spec, text) = if key == test {
        let arg = ReplayArg { micros: NOMINAL_REPLAY.as_micros() as u64, object_bytes: 64, wire_bytes: 64 };
        (NOMINAL_REPLAY, probe_spec(vec![arg.to_arg()]), "int probe;\n")
    } else {
        (NOMINAL_COMPILE, probe_spec(vec!["-O2".into()]), PROBE_SOURCE)
    };
    let (wire, payload) = compress(text.as_bytes());
    let task =
        ExecTask { toolchain: key, task_id: 0, fetch: None, spec: encode_spec(&spec), payload, source: wire.into() };
    let measured = tokio::time::timeout(PROBE_LIMIT, async {
        let mut least: Option<Duration> = None;
        for _ in 0..RUNS {
            let started = Instant::now();
            let result = executor.run_uncounted(task.clone(), &CancellationToken::new()).await;
            if result.header.outcome != Outcome::Success {
                return Err(format!("{:?}", result.header.outcome));
            }
            // The compiler's CPU time; the replay's hold has none.
            let took = match result.header.cpu_time_us {
                0 => started.elapsed(),
                us => Duration::from_micros(us),
            };
            least = Some(least.map_or(took, |l| l.min(took)));
        }
        Ok(least)
    })
    .await;
    match measured {
        Ok(Ok(Some(took))) => {
            let milli = speed_milli(nominal, took);
            tracing::info!(toolchain = %key, took_ms = took.as_millis() as u64, speed = milli, "speed probed");
            Some(milli)
        }
        Ok(Ok(None)) => None,
        Ok(Err(why)) => {
            tracing::warn!(toolchain = %key, outcome = %why, "the speed probe did not compile; the scheduler will learn this agent's speed from its results");
            None
        }
        Err(_) => {
            tracing::warn!(toolchain = %key, limit = ?PROBE_LIMIT, "the speed probe took too long; the scheduler will learn this agent's speed from its results");
            None
        }
    }
}

fn probe_spec(args: Vec<String>) -> TaskSpec {
    TaskSpec { args, input_path: "ccroute-speed-probe.c".into(), cwd: None, env: vec![], inputs: None }
}

/// `nominal` ÷ `took` in thousandths, within the speeds the scheduler takes.
fn speed_milli(nominal: Duration, took: Duration) -> u32 {
    let ratio = nominal.as_secs_f64() / took.as_secs_f64().max(1e-6);
    ((ratio * 1000.0).round() as u32).clamp(ccroute_core::MIN_SPEED, ccroute_core::MAX_SPEED)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::agent::executor::ExecutorConfig;

    #[test]
    fn speeds_are_nominal_over_measured_within_bounds() {
        assert_eq!(speed_milli(NOMINAL_COMPILE, NOMINAL_COMPILE), 1000);
        assert_eq!(speed_milli(NOMINAL_COMPILE, NOMINAL_COMPILE * 2), 500);
        assert_eq!(speed_milli(Duration::from_millis(100), Duration::ZERO), ccroute_core::MAX_SPEED);
        assert_eq!(speed_milli(Duration::from_millis(1), Duration::from_secs(3600)), ccroute_core::MIN_SPEED);
    }

    /// The replayed probe holds its token for the nominal time ÷ the
    /// agent's replay speed, so it reads that speed back, less the task's
    /// own path (a few milliseconds; a loaded machine's stalls only lower
    /// the reading, hence the wide floor).
    #[tokio::test]
    async fn the_test_toolchain_reads_the_replay_speed() {
        let parent = tempfile::tempdir().unwrap();
        for (replay_speed, around) in [(0.4, 400), (1.0, 1000)] {
            let exec = Executor::new(ExecutorConfig {
                scratch_parent: parent.path().to_owned(),
                replay_speed,
                ..ExecutorConfig::default()
            })
            .unwrap();
            let milli = measure(&exec, &[test_toolchain()]).await.unwrap();
            assert!((around * 6 / 10..=around).contains(&milli), "replay speed {replay_speed}: probed {milli}");
            // Not a compile of the farm's: left out of the agent's counts.
            assert_eq!((exec.started(), exec.ended()), (0, [0; 3]));
        }
    }

    /// A real compiler compiles the probe; gcc takes some tens of
    /// milliseconds of CPU or more on any host, so the speed is bounded
    /// away from the clamp.
    #[tokio::test]
    async fn gcc_compiles_the_probe() {
        let parent = tempfile::tempdir().unwrap();
        let found = crate::toolchain::discover(Some(std::ffi::OsStr::new("/usr/bin")), &[]);
        let gcc = found.iter().find(|d| d.path.ends_with("gcc")).expect("gcc in /usr/bin");
        let exec = Executor::new(
            ExecutorConfig { scratch_parent: parent.path().to_owned(), ..ExecutorConfig::default() }
                .with_toolchain(gcc.toolchain.key(), gcc.path.clone()),
        )
        .unwrap();
        let milli = measure(&exec, std::slice::from_ref(&gcc.toolchain)).await.unwrap();
        assert!((50..=20_000).contains(&milli), "probed {milli}");
        // A compiler that fails is no speed.
        let parent = tempfile::tempdir().unwrap();
        let exec = Executor::new(
            ExecutorConfig { scratch_parent: parent.path().to_owned(), ..ExecutorConfig::default() }
                .with_toolchain(gcc.toolchain.key(), "/bin/false"),
        )
        .unwrap();
        assert_eq!(measure(&exec, std::slice::from_ref(&gcc.toolchain)).await, None);
    }
}
