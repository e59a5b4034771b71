//! Whether a compile that failed failed because of its source, or because
//! of the machine it ran on.
//!
//! A compile that fails on an agent for the agent's own reasons — its
//! scratch disk full, its memory exhausted, a program of the toolchain
//! missing or killed — must not reach the user as the unit's result: the
//! same command compiled locally would have succeeded (DESIGN.md, invariant
//! 1), and the scheduler's result cache would keep the failure for everyone
//! who compiles that unit after. [`suspect`] says when a failed compile
//! cannot be trusted as its source's own: an exit status other than the
//! compilers' "errors in the input" (1: gcc's and clang's errors, `#error`,
//! `-Werror`), or output that names a failure of the system rather than of
//! the source. The agent answers such a compile as an internal error, so
//! that the consumerd compiles it locally and nothing is cached; the
//! consumerd asks again of every failure that reaches it (a result from an
//! agent that did not ask, a failure cached before agents asked).
//!
//! A false alarm costs one local compile of a unit that would have failed
//! anyway (an internal compiler error the source itself triggers fails
//! again locally, and the user sees the local diagnostics); a miss fails a
//! build that should not have failed. The list leans to false alarms.
//!
//! Left out: compiler messages in another language than English (they
//! follow the user's locale; the agent's scratch filesystem nearly full is
//! caught whatever the output says, by the agent's own look at it).

/// The exit status of a compile whose input has errors, for gcc and clang.
pub const SOURCE_ERROR_STATUS: i32 = 1;

/// Output that names a failure of the machine, not of the source: the
/// system's messages for the errors a compiler meets writing its temporary
/// files and objects, running its programs, or allocating memory, and the
/// drivers' words for a program of theirs that crashed or was killed.
const MACHINE_FAILURES: &[&str] = &[
    "No space left on device",
    "Disk quota exceeded",
    "Input/output error",
    "Read-only file system",
    "Too many open files",
    "Cannot allocate memory",
    "Resource temporarily unavailable",
    "Stale file handle",
    "virtual memory exhausted",
    "out of memory",
    "signal terminated program",
    "cannot execute",
    "unable to execute command",
    "internal compiler error",
    "PLEASE submit a bug report",
];

/// Why a compile that exited with `exit_status` (not 0) and printed
/// `output` may have failed because of the machine it ran on, or `None`
/// when the failure is its source's own.
pub fn suspect(exit_status: i32, output: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(output);
    for line in text.lines() {
        if let Some(at) = MACHINE_FAILURES.iter().find_map(|m| line.find(m).map(|at| (at, at + m.len()))) {
            return Some(format!("exit status {exit_status}, and the compiler said {:?}", around(line, at)));
        }
    }
    (exit_status != SOURCE_ERROR_STATUS)
        .then(|| format!("exit status {exit_status}, where errors in a source exit {SOURCE_ERROR_STATUS}"))
}

/// The part of `line` around the bytes `at` (start, end): up to 120
/// bytes before and 80 after, cut at character boundaries.
fn around(line: &str, (start, end): (usize, usize)) -> &str {
    let mut from = start.saturating_sub(120);
    while !line.is_char_boundary(from) {
        from += 1;
    }
    let mut to = (end + 80).min(line.len());
    while !line.is_char_boundary(to) {
        to -= 1;
    }
    line[from..to].trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_in_the_source_are_its_own() {
        let gcc =
            b"a.c: In function 'f':\na.c:3:19: error: 'undeclared_thing' undeclared (first use in this function)\n";
        assert_eq!(suspect(1, gcc), None);
        assert_eq!(suspect(1, b"a.c:1:2: error: #error stop here\n"), None);
        assert_eq!(suspect(1, b"cc1: all warnings being treated as errors\n"), None);
        // A header the inputs lack is missing locally too.
        assert_eq!(suspect(1, b"a.c:1:10: fatal error: nope.h: No such file or directory\n"), None);
    }

    #[test]
    fn the_machines_failures_are_suspect_whatever_the_status() {
        let full = b"/s/task-1/tmp/cc0l.s: Assembler messages:\n/s/task-1/tmp/cc0l.s: Fatal error: can't fill 256 bytes in section .data of /s/task-1/out.o: 'No space left on device'\n";
        let why = suspect(1, full).unwrap();
        assert!(why.contains("No space left on device") && why.starts_with("exit status 1"), "{why}");
        assert!(
            suspect(1, b"gcc: fatal error: Killed signal terminated program cc1\ncompilation terminated.\n").is_some()
        );
        assert!(suspect(1, b"gcc: fatal error: cannot execute 'as': execvp: No such file or directory\n").is_some());
        assert!(suspect(1, b"cc1: out of memory allocating 65536 bytes after a total of 1 bytes\n").is_some());
        assert!(suspect(4, b"a.c:9:1: internal compiler error: Segmentation fault\n").is_some());
    }

    #[test]
    fn another_status_than_a_source_errors_is_suspect() {
        assert_eq!(suspect(4, b"").unwrap(), "exit status 4, where errors in a source exit 1");
        assert!(suspect(139, b"").is_some());
        assert!(suspect(-1, b"").is_some());
    }

    #[test]
    fn a_long_line_is_cut_around_what_names_the_failure() {
        let line = format!("{} No space left on device {}", "é".repeat(300), "ü".repeat(300));
        let why = suspect(1, line.as_bytes()).unwrap();
        assert!(why.contains("No space left on device") && why.len() < 300, "{why}");
    }
}
