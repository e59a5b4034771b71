//! `ccroute completions SHELL` and `ccroute man`: shell completion scripts
//! and man pages, generated from the same clap definitions that parse the
//! command line ([`super::args::Cli`]), so they cannot drift from it.
//!
//! The root page, ccroute(1), adds what clap does not know: the wrapper's
//! way of being called (`ccroute gcc -c a.c`, masquerade links), the config
//! file and the environment. Completion covers the subcommands and their
//! flags; a compile's arguments are the compiler's business.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

use super::args::Cli;
use super::BoxError;

/// The binary's name, as the shell sees it.
const BIN: &str = "ccroute";

/// Writes the completion script for `shell` to `out`.
///
/// # Errors
/// When `out` cannot be written (a closed pipe is not an error).
pub fn completions(shell: clap_complete::Shell, out: &mut dyn Write) -> Result<(), BoxError> {
    // clap_complete panics on a failed write: generate into memory first.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), BIN, &mut script);
    write_quietly(out, &script)?;
    Ok(())
}

/// `ccroute man`: ccroute(1) to stdout, or with `dir` every page written
/// there (created if missing) and their count said.
///
/// # Errors
/// When a page cannot be written.
pub fn man(dir: Option<&Path>) -> Result<(), BoxError> {
    match dir {
        None => {
            let page = root_page()?;
            write_quietly(&mut std::io::stdout().lock(), &page)?;
        }
        Some(dir) => {
            let written = write_pages(dir)?;
            println!("ccroute: wrote {} man pages to {}", written.len(), dir.display());
        }
    }
    Ok(())
}

/// Writes ccroute.1 and one page per subcommand, at every depth
/// (ccroute-certs-init.1), into `dir`; returns their paths.
///
/// # Errors
/// When `dir` cannot be made or a page cannot be written.
pub fn write_pages(dir: &Path) -> Result<Vec<PathBuf>, BoxError> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut cmd = Cli::command();
    // Gives each subcommand its display name, "ccroute-status", which
    // names its page.
    cmd.build();
    let mut written = vec![];
    let root = dir.join(format!("{BIN}.1"));
    std::fs::write(&root, root_page()?).map_err(|e| format!("cannot write {}: {e}", root.display()))?;
    written.push(root);
    let mut stack: Vec<clap::Command> = cmd.get_subcommands().cloned().collect();
    while let Some(sub) = stack.pop() {
        stack.extend(sub.get_subcommands().cloned());
        let man = clap_mangen::Man::new(sub).manual("ccroute manual");
        let path = dir.join(man.get_filename());
        let mut page = Vec::new();
        man.render(&mut page)?;
        std::fs::write(&path, page).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// ccroute(1): clap's sections, then the wrapper, the files and the
/// environment, then the version.
fn root_page() -> std::io::Result<Vec<u8>> {
    // The NAME line wants a phrase, not the help's first sentence (which
    // names the wrapper; COMPILING below says more).
    let cmd = Cli::command().about("distributed C/C++ compiles for bare-metal build farms").long_about(
        "ccroute runs a build's compiles on a farm: a scheduler routes each one to an agent that has the \
         compiler and a free slot, or answers it from its result cache; the consumerd on each developer \
         machine takes the compiles of its builds and sends them on. Each role is a subcommand below; anything else on \
         the command line is a compile.",
    );
    let man = clap_mangen::Man::new(cmd).manual("ccroute manual");
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    man.render_options_section(&mut page)?;
    man.render_subcommands_section(&mut page)?;
    page.extend_from_slice(ROOT_EXTRA.as_bytes());
    man.render_version_section(&mut page)?;
    Ok(page)
}

/// What ccroute(1) says besides clap's sections, in roff.
const ROOT_EXTRA: &str = r#".SH COMPILING
Any first argument that is not a subcommand or a flag names a compiler, and
the rest of the line is its arguments:
.PP
.RS
.nf
make \-j64 CC="ccroute gcc" CXX="ccroute g++"
cmake \-DCMAKE_C_COMPILER_LAUNCHER=ccroute \-DCMAKE_CXX_COMPILER_LAUNCHER=ccroute ...
.fi
.RE
.PP
A link named like a compiler (gcc, g++, cc, c++) that points to
ccroute works the same way. The compile goes to the local consumerd, which
is started on first use; whatever fails on the way, the compile runs locally.
.SH FILES
.TP
.I $XDG_CONFIG_HOME/ccroute/config.toml
(default
.IR ~/.config/ccroute/config.toml )
settings used when neither a flag nor a CCROUTE_* variable gives them:
.BR scheduler ,
.BR listen ,
.BR tls_dir ,
.BR socket ,
.BR local_jobs ,
.BR jobs ,
.BR cache_dir .
.TP
.I ~/.config/ccroute/tls
the TLS directory when none is set; written by
.BR "ccroute certs init" .
.TP
.I ~/.cache/ccroute
the scheduler's result cache, the consumerd's local cache
.RI ( consumerd/ )
and an agent's toolchain store
.RI ( agent\-store/ ).
.SH ENVIRONMENT
Each flag's variable is listed with it above and in the subcommands' pages
(ccroute\-scheduler(1), ccroute\-agent(1), ...). Also:
.TP
.B RUST_LOG
the log filter (default: info for the daemons, warn for the commands).
.TP
.B CCROUTE_VERBOSE
set to 1, the wrapper says per compile why it ran locally.
"#;

/// Writes `bytes` to `out`; a reader that went away (`| head`) is no error.
fn write_quietly(out: &mut dyn Write, bytes: &[u8]) -> std::io::Result<()> {
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn every_command_gets_a_page() {
        let dir = tempfile::tempdir().unwrap();
        let written = write_pages(dir.path()).unwrap();
        let names: Vec<String> =
            written.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        for name in
            ["ccroute.1", "ccroute-status.1", "ccroute-certs.1", "ccroute-certs-init.1", "ccroute-cache-clear.1"]
        {
            assert!(names.iter().any(|n| n == name), "{name} missing from {names:?}");
        }
        let status = std::fs::read_to_string(dir.path().join("ccroute-status.1")).unwrap();
        assert!(status.contains("watch"), "{status}");
    }
}
