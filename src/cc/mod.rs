//! Compiler argument rules: what can go remote, how to preprocess it, what
//! an agent may run, and which compiler a wrapper invocation means.
//!
//! Every remote object must be byte-identical to the one a local compile
//! writes, debug info included. So the consumerd preprocesses with includes
//! expanded but macros kept (`gcc -E -fdirectives-only`, `clang -E
//! -frewrite-includes`), and the agent compiles that text as ordinary source,
//! under the input's own name, with prefix maps that turn its scratch paths
//! back into the original ones.
//!
//! - [`classify`] ([`plan`]): one invocation → [`Classification::Local`] with a
//!   [`LocalReason`], or [`Classification::Remote`] with a [`RemotePlan`]:
//!   preprocess arguments, the [`ccroute_wire::TaskSpec`], the output path.
//! - [`postprocess`] ([`preprocessed`]): the preprocessor's stdout → the text
//!   to send, plus what it tells ([`Preprocessed`]); [`find_unsafe_pragma`]
//!   for the pragmas the preprocessor consumes and the agent would miss.
//! - [`validate`] ([`allow`]): the agent's allow-list for a received spec.
//! - [`agent_command`] ([`layout`]): the agent's compiler command, scratch
//!   layout and diagnostics rewrite; [`prefix_map`] composes its prefix maps
//!   with the user's.
//! - [`resolve_compiler`] ([`resolve`]): `ccroute gcc`, `ccroute /usr/bin/cc`
//!   and masquerade symlinks → the real compiler.
//! - [`lang`]: languages by extension and `-x`, build-system probes.
//! - [`spec`]: the rules a compile spec must meet, which the consumerd's
//!   classification and the agent's allow-list both apply.
//! - [`failure::suspect`]: whether a failed compile failed because of its
//!   source or because of the machine it ran on.
//!
//! Left out: running any process (the consumerd and agent do), the toolchain
//! identity (`crate::toolchain`), Objective-C, assembler and every other language.

pub mod allow;
pub(crate) mod args;
pub mod depfile;
pub mod failure;
pub mod lang;
pub mod layout;
pub mod plan;
pub mod prefix_map;
pub mod preprocessed;
pub mod resolve;
pub mod spec;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod e2e_tests;

use std::ffi::OsStr;
use std::path::Path;

pub use allow::{validate, validate_inputs, RefusedArg};
pub use lang::Language;
pub use layout::{agent_command, AgentCommand, AgentSetupError};
pub use plan::{classify, Classification, DirectInputs, RemotePlan};
pub use preprocessed::{find_unsafe_pragma, postprocess, Preprocessed};
pub use resolve::{resolve_compiler, ResolveError};

/// Compiler family: decides the preprocessing mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// gcc, g++, cc, c++: `-E -fdirectives-only`.
    Gnu,
    /// clang, clang++: `-E -frewrite-includes`.
    Clang,
}

impl Family {
    /// The family a compiler's file name suggests (`clang*` is Clang, anything else Gnu).
    pub fn of_compiler(path: &Path) -> Family {
        let name = path.file_name().unwrap_or(OsStr::new("")).as_encoded_bytes();
        if name.windows(5).any(|w| w == b"clang") {
            Family::Clang
        } else {
            Family::Gnu
        }
    }
}

/// Why a compile runs locally; its `Display` is meant for a log line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocalReason {
    /// No `-c`: linking, or a driver query.
    #[error("no -c: not a compile to an object")]
    NoCompile,
    /// No source input.
    #[error("no input file")]
    NoInput,
    /// More than one source input.
    #[error("{0} input files")]
    SeveralInputs(usize),
    /// The input is stdin.
    #[error("input from stdin")]
    StdinInput,
    /// A bare argument that is not a C or C++ source (an object, a library, ...).
    #[error("non-source input {0:?}")]
    NotSource(String),
    /// A language other than C or C++, or an unknown `-x` value.
    #[error("language {0} is not compiled remotely")]
    Language(String),
    /// A `-x` after the input, which gcc applies to nothing.
    #[error("-x after the input")]
    XAfterInput,
    /// A configure or CMake probe.
    #[error("build-system probe {0:?}")]
    Probe(String),
    /// An input path the agent cannot recreate under the same name.
    #[error("input path {0:?}: {1}")]
    InputPath(String, &'static str),
    /// An option that cannot go remote.
    #[error("{arg}: {why}")]
    Option {
        /// The argument as given.
        arg: String,
        /// Why it keeps the compile local.
        why: &'static str,
    },
    /// An option ccroute does not know; unknown means local.
    #[error("unrecognized option {0:?}")]
    Unrecognized(String),
    /// An option whose value is missing.
    #[error("{0} without its value")]
    MissingValue(String),
    /// An argument (or the working directory) that is not UTF-8.
    #[error("argument is not UTF-8")]
    NotUtf8,
    /// An environment variable that changes the compile and would not reach the agent.
    #[error("environment variable {0} is set")]
    Env(&'static str),
    /// The output is not an object file name.
    #[error("output {0:?} is not an object file")]
    OutputExtension(String),
    /// A precompiled header would be used.
    #[error("precompiled header {0} exists")]
    PrecompiledHeader(String),
    /// A pragma the preprocessor consumes, which the agent would then miss.
    #[error("#pragma {pragma} in {file}")]
    UnsafePragma {
        /// The pragma's name.
        pragma: &'static str,
        /// The file that has it.
        file: String,
    },
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn family_from_name() {
        assert_eq!(Family::of_compiler(Path::new("/usr/bin/clang++-14")), Family::Clang);
        assert_eq!(Family::of_compiler(Path::new("clang")), Family::Clang);
        assert_eq!(Family::of_compiler(Path::new("/usr/bin/x86_64-linux-gnu-gcc-12")), Family::Gnu);
        assert_eq!(Family::of_compiler(Path::new("cc")), Family::Gnu);
        assert_eq!(Family::of_compiler(Path::new("")), Family::Gnu);
    }
}
