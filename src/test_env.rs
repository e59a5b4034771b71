//! For tests that need something a machine may lack (cpu cgroups, which need
//! root and the cpu controller; clang): such a test fails where it cannot
//! run, saying what is missing, unless `CCROUTE_TEST_LACKS` names the missing
//! thing — then it ends early, and the variable is the record that it did.
//! CI runs as root with everything installed and never sets it.

/// The variable: a comma-separated list of what this machine lacks, e.g.
/// `CCROUTE_TEST_LACKS=cgroups,clang`.
pub const LACKS_ENV: &str = "CCROUTE_TEST_LACKS";

/// Called by a test that cannot run because `what` is missing (`why` says
/// how it failed). Returns only when [`LACKS_ENV`] names `what`: the test
/// then returns. Otherwise it panics, so that the test fails.
///
/// # Panics
/// Unless the environment says it lacks `what`.
pub fn lacking(what: &str, why: &str) {
    let declared = std::env::var(LACKS_ENV).unwrap_or_default();
    if declared.split(',').any(|w| w.trim() == what) {
        eprintln!("{what} missing, as {LACKS_ENV} declares: {why}");
        return;
    }
    panic!("this test needs {what}, which this machine lacks ({why}); provide it, or set {LACKS_ENV}={what} to end the test early");
}
