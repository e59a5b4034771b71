//! The trace recorder: `farm record-cc TRACE.raw COMPILER ARGS…` stands in
//! for the compiler in a real build (as `CC`, or CMake's compiler
//! launcher), runs the compile as asked, and appends what it measured to
//! `TRACE.raw`; `farm record-finish` turns the raw lines into a trace
//! ([`crate::trace`]). `benches/farm/record.sh` builds each project so.
//!
//! Per compile: its user + system CPU time (`getrusage` of the children,
//! microseconds), the object's size raw and compressed as ccroute's wire
//! compresses it, and the preprocessed text's (the same command with `-E`,
//! run after the compile and not timed). Anything that is not a compile to
//! an object (links, `-E`, probes) runs untouched and is not recorded.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use crate::trace::{Trace, Unit};

/// `record-cc`: runs the compile and records it. Returns the compiler's exit status.
pub fn record_cc(args: &[OsString]) -> ExitCode {
    let (Some(raw), Some(compiler)) = (args.first(), args.get(1)) else {
        eprintln!("farm record-cc: usage: record-cc TRACE.raw COMPILER ARGS...");
        return ExitCode::from(2);
    };
    let rest: Vec<String> = args[2..].iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let is_compile = rest.iter().any(|a| a == "-c") && !rest.iter().any(|a| a == "-E" || a == "-M" || a == "-MM");
    let source = rest.iter().find(|a| !a.starts_with('-') && is_source(a)).cloned();
    let started = ccroute::host::monotonic_ns();
    let before = children_cpu_us();
    let status = match Command::new(compiler).args(&rest).status() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("farm record-cc: cannot run {}: {e}", compiler.to_string_lossy());
            return ExitCode::from(127);
        }
    };
    let cpu_us = children_cpu_us().saturating_sub(before);
    let code = status.code().unwrap_or(1);
    let (true, true, Some(source)) = (is_compile, status.success(), source) else {
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    };
    let object = output_of(&rest, &source);
    let Ok(obj) = std::fs::read(&object) else {
        eprintln!("farm record-cc: no object at {} for {source}", object.display());
        return ExitCode::from(1);
    };
    let mut pp_args: Vec<String> = Vec::with_capacity(rest.len());
    let mut skip = false;
    for a in &rest {
        if std::mem::take(&mut skip) {
            continue;
        }
        match a.as_str() {
            "-c" => pp_args.push("-E".into()),
            "-o" | "-MF" | "-MT" | "-MQ" => skip = true,
            "-MD" | "-MMD" | "-MP" => {}
            s if s.starts_with("-o") || s.starts_with("-MF") => {}
            _ => pp_args.push(a.clone()),
        }
    }
    let pp = match Command::new(compiler).args(&pp_args).stderr(Stdio::null()).output() {
        Ok(o) if o.status.success() => o.stdout,
        _ => {
            eprintln!("farm record-cc: preprocessing {source} failed; not recorded");
            return ExitCode::from(u8::try_from(code).unwrap_or(1));
        }
    };
    let wire = |b: &[u8]| ccroute_wire::payload::compress(b).0.len();
    let root = std::env::var("FARM_RECORD_ROOT").unwrap_or_default();
    let cwd = std::env::current_dir().unwrap_or_default();
    let full = cwd.join(&source);
    let name = full.strip_prefix(&root).unwrap_or(&full).to_string_lossy().trim_start_matches('/').to_owned();
    let line = format!("{started}\t{name}\t{}\t{}\t{}\t{}\t{cpu_us}\n", pp.len(), wire(&pp), obj.len(), wire(&obj));
    // One write of a short line to a file opened for appending: lines of
    // parallel compiles do not interleave.
    let written =
        std::fs::OpenOptions::new().create(true).append(true).open(raw).and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        eprintln!("farm record-cc: cannot append to {}: {e}", Path::new(raw).display());
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// `record-finish RAW OUT ABOUT`: the raw lines in the order the compiles
/// started, as a trace.
pub fn finish(raw: &Path, out: &Path, about: &str) -> Result<Trace, String> {
    let text = std::fs::read_to_string(raw).map_err(|e| format!("cannot read {}: {e}", raw.display()))?;
    let mut rows: Vec<(u64, Unit)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split('\t').collect();
        let num =
            |k: usize| f.get(k).and_then(|s| s.parse::<u64>().ok()).ok_or(format!("raw line {}: bad field {k}", i + 1));
        rows.push((
            num(0)?,
            Unit {
                seq: 0,
                name: f.get(1).copied().unwrap_or("?").to_owned(),
                pp_bytes: num(2)?,
                pp_wire: num(3)?,
                obj_bytes: num(4)?,
                obj_wire: num(5)?,
                cpu_us: num(6)?,
                after: Vec::new(),
            },
        ));
    }
    rows.sort_by_key(|(t, _)| *t);
    let units: Vec<Unit> = rows.into_iter().enumerate().map(|(i, (_, u))| Unit { seq: i as u32, ..u }).collect();
    if units.is_empty() {
        return Err(format!("{} recorded no compile", raw.display()));
    }
    let name = out.file_stem().and_then(|s| s.to_str()).unwrap_or("trace").to_owned();
    let trace = Trace { name, about: about.to_owned(), units };
    std::fs::write(out, trace.render()).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    Ok(trace)
}

fn is_source(a: &str) -> bool {
    let ext = a.rsplit('.').next().unwrap_or("");
    a.contains('.') && ["c", "cc", "cpp", "cxx", "C", "c++", "m", "mm"].contains(&ext)
}

/// The object a compile writes: `-o X`, or the source's stem `.o` here.
fn output_of(args: &[String], source: &str) -> PathBuf {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "-o" {
            if let Some(o) = it.next() {
                return PathBuf::from(o);
            }
        } else if let Some(o) = a.strip_prefix("-o") {
            return PathBuf::from(o);
        }
    }
    let stem = Path::new(source).file_stem().unwrap_or_default();
    PathBuf::from(stem).with_extension("o")
}

/// User + system CPU of the children waited for so far, microseconds.
#[allow(unsafe_code)]
fn children_cpu_us() -> u64 {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is valid and writable for the duration of the call.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return 0;
    }
    let us =
        |t: libc::timeval| u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000 + u64::try_from(t.tv_usec).unwrap_or(0);
    us(ru.ru_utime) + us(ru.ru_stime)
}
