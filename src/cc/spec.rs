//! The rules a compile spec must meet on both sides: the consumerd's
//! classification ([`super::plan`]) sends only what the agent's allow-list
//! ([`super::allow`]) accepts, and both read them from here — the
//! environment a spec carries, what an input path may look like, and which
//! assembler options may travel.

/// The variables [`ccroute_wire::TaskSpec::env`] carries, when set: what the compiler's
/// messages depend on.
pub const DIAGNOSTIC_ENV: &[&str] = &["LANG", "LC_ALL", "LC_MESSAGES", "LC_CTYPE", "GCC_COLORS"];

/// An environment value the agent passes on: printable ASCII, at most 256 bytes.
pub fn env_value_ok(v: &str) -> bool {
    v.len() <= 256 && v.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// A clean input path: not empty, no NUL, `..` only at the start of a
/// relative path, `.` only as one leading `./`, ends in a file name. On the
/// string, not on `Path::components`, which silently drops inner `.`s.
pub fn input_path_problem(p: &str) -> Option<&'static str> {
    if p.is_empty() || p.contains('\0') {
        return Some("input path is empty or has a NUL");
    }
    let absolute = p.starts_with('/');
    let mut seen_normal = false;
    let mut last = "";
    for (i, seg) in p.split('/').enumerate() {
        last = seg;
        match seg {
            "" => {}
            "." if i > 0 => return Some("input path has `.` inside"),
            "." => {}
            ".." if seen_normal || absolute => return Some("input path has `..` after a directory name"),
            ".." => {}
            _ => seen_normal = true,
        }
    }
    if matches!(last, "" | "." | "..") {
        return Some("input path does not end in a file name");
    }
    None
}

/// Assembler options (`-Wa,a,b`) that may go remote: each changes only the
/// object the assembler writes, names no file, and reads nothing; the
/// consumerd's classification and the agent's allow-list both check this one
/// list. Anything else after `-Wa,` keeps a compile local (`-Wa,-adhln=x`
/// writes a listing file, `-Wa,@file` reads one).
const REMOTE_ASSEMBLER_OPTIONS: &[&str] = &[
    "--noexecstack",
    "--execstack",
    "--nocompress-debug-sections",
    "--compress-debug-sections",
    "--compress-debug-sections=none",
    "--compress-debug-sections=zlib",
    "--compress-debug-sections=zlib-gnu",
    "--compress-debug-sections=zlib-gabi",
    "--compress-debug-sections=zstd",
    "-mrelax-relocations=yes",
    "-mrelax-relocations=no",
    "--generate-missing-build-notes=yes",
    "--generate-missing-build-notes=no",
    "-mx86-used-note=yes",
    "-mx86-used-note=no",
];

/// Whether the options of one `-Wa,` argument (what follows the comma) may go remote.
pub fn assembler_options_remote(list: &str) -> bool {
    !list.is_empty() && list.split(',').all(|o| REMOTE_ASSEMBLER_OPTIONS.contains(&o))
}
