//! Toolchain identity and its stable 128-bit key.
//!
//! A [`Toolchain`] says which compiler an agent runs and a consumerd asks for:
//! kind, language, compiler family, target triple, version, PIC/PIE defaults
//! and a hash of the compiler's binaries. Two toolchains with the same
//! [`ToolchainKey`] produce byte-identical objects from the same input, so the
//! key is what a route is keyed by.
//!
//! kubecc hashed the fields back to back with no separators, so that
//! `Lang=C, Version="XX10"` and `Lang=CXX, Version="10"` collided (its §3).
//! Here every field is length-prefixed and tagged with a domain string: the
//! encoding is unambiguous, and the key is stable across processes, hosts and
//! releases of this crate for as long as [`KEY_DOMAIN`] does not change.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Domain separation for toolchain keys; bump it to change the key derivation.
pub const KEY_DOMAIN: &str = "ccroute toolchain key v1";

/// Which compiler family a toolchain belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ToolchainKind {
    /// GNU gcc / g++.
    Gnu,
    /// LLVM clang / clang++.
    Clang,
    /// A compiler that does no work, to measure ccroute's own cost: it echoes a
    /// digest of its input as the object.
    Test,
}

impl ToolchainKind {
    fn tag(self) -> &'static str {
        match self {
            ToolchainKind::Gnu => "gnu",
            ToolchainKind::Clang => "clang",
            ToolchainKind::Test => "test",
        }
    }
}

/// The language a compiler driver compiles by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Lang {
    /// `gcc`, `cc`: C (and whatever `-x` says).
    C,
    /// `g++`, `c++`, `clang++`: C++.
    Cxx,
    /// `clang`: picks the language from the input's extension.
    Multi,
}

impl Lang {
    fn tag(self) -> &'static str {
        match self {
            Lang::C => "c",
            Lang::Cxx => "c++",
            Lang::Multi => "multi",
        }
    }
}

/// The identity of one compiler on one host.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Toolchain {
    /// Compiler family.
    pub kind: ToolchainKind,
    /// Default language of the driver.
    pub lang: Lang,
    /// Driver name without version or target prefix: `gcc`, `g++`, `clang`, `clang++`.
    pub compiler: String,
    /// Target triple as `-dumpmachine` prints it, e.g. `x86_64-linux-gnu`.
    pub target: String,
    /// Version as `-dumpversion` prints it, e.g. `12` or `16.0.6`.
    pub version: String,
    /// Whether the driver emits position-independent code by default.
    pub pic_default: bool,
    /// Whether the driver links position-independent executables by default.
    pub pie_default: bool,
    /// blake3 of the compiler's binaries (driver and, for gcc, `cc1`/`cc1plus`):
    /// two builds of "gcc 12" that differ in a byte are different toolchains.
    pub binary_hash: [u8; 32],
}

impl Toolchain {
    /// The route key: blake3 over a length-prefixed encoding of every field,
    /// truncated to 128 bits.
    pub fn key(&self) -> ToolchainKey {
        let mut h = blake3::Hasher::new();
        put_field(&mut h, KEY_DOMAIN.as_bytes());
        put_field(&mut h, self.kind.tag().as_bytes());
        put_field(&mut h, self.lang.tag().as_bytes());
        put_field(&mut h, self.compiler.as_bytes());
        put_field(&mut h, self.target.as_bytes());
        put_field(&mut h, self.version.as_bytes());
        put_field(&mut h, &[u8::from(self.pic_default), u8::from(self.pie_default)]);
        put_field(&mut h, &self.binary_hash);
        let digest = h.finalize();
        let mut k = [0u8; 16];
        k.copy_from_slice(&digest.as_bytes()[..16]);
        ToolchainKey(u128::from_le_bytes(k))
    }
}

/// What [`Toolchain::inputs_twin`] appends to the compiler's name.
pub const INPUTS_SUFFIX: &str = " (inputs)";

impl Toolchain {
    /// The route for units sent as their inputs ([`crate::inputs`]): the
    /// same toolchain under another key, served only by agents that can
    /// make the sandbox those units compile in.
    pub fn inputs_twin(&self) -> Toolchain {
        Toolchain { compiler: format!("{}{INPUTS_SUFFIX}", self.compiler), ..self.clone() }
    }

    /// Whether this is an inputs twin.
    pub fn is_inputs_twin(&self) -> bool {
        self.compiler.ends_with(INPUTS_SUFFIX)
    }
}

impl fmt::Display for Toolchain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} ({})", self.compiler, self.version, self.target)
    }
}

/// Appends one field as `u64 length (LE) ‖ bytes`.
pub(crate) fn put_field(h: &mut blake3::Hasher, bytes: &[u8]) {
    h.update(&(bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

/// The stable 128-bit key of a [`Toolchain`]: what routes are keyed by.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ToolchainKey(pub u128);

impl fmt::Debug for ToolchainKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ToolchainKey({self})")
    }
}

impl fmt::Display for ToolchainKey {
    /// The first 12 hex digits: enough to tell routes apart in a table.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.0.to_le_bytes();
        for b in &bytes[..6] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn tc(kind: ToolchainKind, lang: Lang, version: &str, target: &str) -> Toolchain {
        Toolchain {
            kind,
            lang,
            compiler: "cc".into(),
            target: target.into(),
            version: version.into(),
            pic_default: true,
            pie_default: true,
            binary_hash: [7; 32],
        }
    }

    /// kubecc's functions_test, extended: every combination hashes uniquely,
    /// including the `C`+`XX10` / `CXX`+`10` pair that collided there.
    #[test]
    fn keys_are_unique_across_every_combination() {
        let kinds = [ToolchainKind::Gnu, ToolchainKind::Clang, ToolchainKind::Test];
        let langs = [Lang::C, Lang::Cxx, Lang::Multi];
        let versions = ["7", "8", "9", "10", "10.1", "test", "XX10", "X10", ""];
        let targets = ["x86_64-linux-gnu", "aarch64-linux-gnu", "testarch", ""];
        let mut seen = HashSet::new();
        let mut n = 0;
        for k in kinds {
            for l in langs {
                for v in versions {
                    for t in targets {
                        assert!(seen.insert(tc(k, l, v, t).key()), "collision at {k:?} {l:?} {v} {t}");
                        n += 1;
                    }
                }
            }
        }
        assert_eq!(seen.len(), n);
    }

    #[test]
    fn an_inputs_twin_is_another_route_of_the_same_toolchain() {
        let t = tc(ToolchainKind::Gnu, Lang::C, "12", "x86_64-linux-gnu");
        let twin = t.inputs_twin();
        assert_ne!(twin.key(), t.key());
        assert!(twin.is_inputs_twin() && !t.is_inputs_twin());
        assert_eq!((twin.binary_hash, &twin.version), (t.binary_hash, &t.version));
        assert_eq!(twin.key(), t.inputs_twin().key(), "stable");
    }

    #[test]
    fn adjacent_fields_do_not_run_together() {
        let mut a = tc(ToolchainKind::Gnu, Lang::C, "10", "x86_64");
        let mut b = a.clone();
        a.compiler = "gcc1".into();
        a.target = "0".into();
        b.compiler = "gcc".into();
        b.target = "10".into();
        assert_ne!(a.key(), b.key());
    }

    #[test]
    fn every_field_is_part_of_the_key() {
        let base = tc(ToolchainKind::Gnu, Lang::C, "12", "x86_64-linux-gnu");
        let mut variants = vec![base.clone()];
        let mut v = base.clone();
        v.pic_default = false;
        variants.push(v);
        let mut v = base.clone();
        v.pie_default = false;
        variants.push(v);
        let mut v = base.clone();
        v.binary_hash[31] ^= 1;
        variants.push(v);
        let mut v = base.clone();
        v.compiler = "g++".into();
        variants.push(v);
        let keys: HashSet<_> = variants.iter().map(Toolchain::key).collect();
        assert_eq!(keys.len(), variants.len());
    }

    #[test]
    fn key_is_stable() {
        // The key is part of the protocol and of cache keys on disk: pin it.
        let k = tc(ToolchainKind::Gnu, Lang::C, "12", "x86_64-linux-gnu").key();
        assert_eq!(k, tc(ToolchainKind::Gnu, Lang::C, "12", "x86_64-linux-gnu").key());
        assert_eq!(format!("{k}").len(), 12);
    }
}
