//! Source languages by file name and by `-x`, and the probe inputs that build
//! systems compile to test the compiler.
//!
//! Main items: [`Language`], [`language_of_path`], [`language_of_x`],
//! [`is_probe_input`]. The extension table follows gcc's; it leaves out
//! Fortran, Ada, D and the other front ends, which never go remote.

use std::ffi::OsStr;
use std::path::Path;

/// What the compiler driver treats an input as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// C source (`.c`, `-x c`).
    C,
    /// C++ source (`.cc`, `.cpp`, `.C`, ..., `-x c++`).
    Cxx,
    /// Already preprocessed C (`.i`, `-x cpp-output`).
    PreprocessedC,
    /// Already preprocessed C++ (`.ii`, `-x c++-cpp-output`).
    PreprocessedCxx,
    /// Objective-C (`.m`, `.mi`).
    ObjC,
    /// Objective-C++ (`.mm`, `.mii`, `.M`).
    ObjCxx,
    /// Assembler, without (`.s`) or with (`.S`) preprocessing.
    Assembler,
    /// A C header compiled on its own (a precompiled header).
    CHeader,
    /// A C++ header compiled on its own (a precompiled header).
    CxxHeader,
    /// Anything else gcc knows by name (`go`, `f95`, ...).
    Other,
}

impl Language {
    /// Whether it is a C++ dialect (its system include directories are C++'s).
    pub fn is_cxx(self) -> bool {
        matches!(self, Language::Cxx | Language::PreprocessedCxx | Language::ObjCxx | Language::CxxHeader)
    }

    /// Whether a remote compile may handle this language.
    pub fn is_remote_capable(self) -> bool {
        matches!(self, Language::C | Language::Cxx)
    }
}

/// The language gcc infers from a file name's extension, or `None` when the
/// name is not a source (gcc would hand it to the linker).
pub fn language_of_path(path: &OsStr) -> Option<Language> {
    let name = Path::new(path).file_name()?.to_str()?;
    let dot = name.rfind('.')?;
    let ext = &name[dot + 1..];
    Some(match ext {
        "c" => Language::C,
        "cc" | "cp" | "cxx" | "cpp" | "CPP" | "c++" | "C" => Language::Cxx,
        "i" => Language::PreprocessedC,
        "ii" => Language::PreprocessedCxx,
        "m" | "mi" => Language::ObjC,
        "mm" | "mii" | "M" => Language::ObjCxx,
        "s" | "S" | "sx" => Language::Assembler,
        "h" => Language::CHeader,
        "H" | "hh" | "hp" | "hxx" | "hpp" | "HPP" | "h++" | "tcc" => Language::CxxHeader,
        "go" | "f" | "for" | "f90" | "f95" | "F" | "F90" | "d" | "adb" | "ads" => Language::Other,
        _ => return None,
    })
}

/// The language a `-x` value names; `Ok(None)` for `-x none` (back to
/// extensions), `Err(())` for a value gcc does not know.
#[allow(clippy::result_unit_err)]
pub fn language_of_x(value: &str) -> Result<Option<Language>, ()> {
    Ok(Some(match value {
        "none" => return Ok(None),
        "c" => Language::C,
        "c++" => Language::Cxx,
        "cpp-output" => Language::PreprocessedC,
        "c++-cpp-output" => Language::PreprocessedCxx,
        "objective-c" | "objc-cpp-output" | "objective-c-cpp-output" => Language::ObjC,
        "objective-c++" | "objc++-cpp-output" | "objective-c++-cpp-output" => Language::ObjCxx,
        "assembler" | "assembler-with-cpp" => Language::Assembler,
        "c-header" => Language::CHeader,
        "c++-header" | "c++-system-header" | "c++-user-header" => Language::CxxHeader,
        "go" | "f77" | "f95" | "ada" | "d" | "brig" | "objective-c-header" | "objective-c++-header" => Language::Other,
        _ => return Err(()),
    }))
}

/// CMake's compiler probes: they test the local compiler, so they must run on it.
const CMAKE_PROBES: &[&str] = &[
    "DummyCXXFile.cxx",
    "TestForAnsiForScope.cxx",
    "TestForANSIStreamHeaders.cxx",
    "TestForSSTREAM.cxx",
    "TestForSTDNamespace.cxx",
    "CMakeCXXCompilerABI.cpp",
    "CheckForPthreads.c",
    "CheckFunctionExists.c",
    "CheckVariableExists.c",
    "CMakeCCompilerABI.c",
    "CMakeTestGNU.c",
];

/// Whether an input is a configure or CMake probe (autoconf `conftest.*`,
/// `CMakeTmp/src.*`, CMake's ABI and feature checks): those ask what the local
/// compiler does, and are too small to be worth sending anyway.
pub fn is_probe_input(path: &OsStr) -> bool {
    let bytes = path.as_encoded_bytes();
    if bytes.windows(b"CMakeTmp/src.".len()).any(|w| w == b"CMakeTmp/src.") {
        return true;
    }
    let Some(name) = Path::new(path).file_name().and_then(OsStr::to_str) else {
        return false;
    };
    name.starts_with("conftest.") || name.starts_with("tmp.conftest.") || CMAKE_PROBES.contains(&name)
}

/// `name` with its last extension replaced by `ext` (which includes the dot);
/// a name without an extension gets `ext` appended.
pub fn replace_extension(name: &str, ext: &str) -> String {
    let base_start = name.rfind('/').map_or(0, |i| i + 1);
    match name[base_start..].rfind('.') {
        Some(dot) if dot > 0 => format!("{}{}", &name[..base_start + dot], ext),
        _ => format!("{name}{ext}"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn lang(s: &str) -> Option<Language> {
        language_of_path(OsStr::new(s))
    }

    #[test]
    fn extension_table_matches_gcc() {
        let table: &[(&str, Option<Language>)] = &[
            ("i", Some(Language::PreprocessedC)),
            ("ii", Some(Language::PreprocessedCxx)),
            ("c", Some(Language::C)),
            ("cc", Some(Language::Cxx)),
            ("cpp", Some(Language::Cxx)),
            ("CPP", Some(Language::Cxx)),
            ("cxx", Some(Language::Cxx)),
            ("cp", Some(Language::Cxx)),
            ("c++", Some(Language::Cxx)),
            ("C", Some(Language::Cxx)),
            ("m", Some(Language::ObjC)),
            ("mi", Some(Language::ObjC)),
            ("mm", Some(Language::ObjCxx)),
            ("mii", Some(Language::ObjCxx)),
            ("M", Some(Language::ObjCxx)),
            ("s", Some(Language::Assembler)),
            ("S", Some(Language::Assembler)),
            ("go", Some(Language::Other)),
            ("h", Some(Language::CHeader)),
            ("H", Some(Language::CxxHeader)),
            ("hpp", Some(Language::CxxHeader)),
            ("hp", Some(Language::CxxHeader)),
            ("hxx", Some(Language::CxxHeader)),
            ("h++", Some(Language::CxxHeader)),
            ("HPP", Some(Language::CxxHeader)),
            ("tcc", Some(Language::CxxHeader)),
            ("hh", Some(Language::CxxHeader)),
            ("CC", None),
            ("ccc", None),
            ("iii", None),
            ("a", None),
            ("o", None),
            ("so", None),
            ("so.0", None),
            ("c+++", None),
            ("cs", None),
            ("sh", None),
            ("ui", None),
            ("moc", None),
            ("js", None),
            ("c.", None),
            ("cpp.", None),
        ];
        for (ext, want) in table {
            assert_eq!(lang(&format!("test.{ext}")), *want, "test.{ext}");
            assert_eq!(lang(&format!("dir/sub/test.{ext}")), *want, "dir/sub/test.{ext}");
            assert_eq!(lang(&format!("/abs/x.y/test.{ext}")), *want, "/abs/x.y/test.{ext}");
        }
        assert_eq!(lang(""), None);
        assert_eq!(lang("Makefile"), None);
        assert_eq!(lang("dir.c/Makefile"), None);
        assert_eq!(lang("noext"), None);
    }

    #[test]
    fn remote_capable_only_c_and_cxx() {
        assert!(Language::C.is_remote_capable());
        assert!(Language::Cxx.is_remote_capable());
        for l in [Language::Assembler, Language::PreprocessedC, Language::ObjC, Language::CHeader, Language::Other] {
            assert!(!l.is_remote_capable(), "{l:?}");
        }
    }

    #[test]
    fn x_values() {
        assert_eq!(language_of_x("c"), Ok(Some(Language::C)));
        assert_eq!(language_of_x("c++"), Ok(Some(Language::Cxx)));
        assert_eq!(language_of_x("none"), Ok(None));
        assert_eq!(language_of_x("assembler-with-cpp"), Ok(Some(Language::Assembler)));
        assert_eq!(language_of_x("go"), Ok(Some(Language::Other)));
        assert_eq!(language_of_x("klingon"), Err(()));
        assert_eq!(language_of_x(""), Err(()));
    }

    #[test]
    fn probes() {
        for p in [
            "conftest.c",
            "dir/conftest.cpp",
            "tmp.conftest.c",
            "/b/CMakeFiles/CMakeTmp/src.c",
            "CMakeCCompilerABI.c",
            "/usr/share/cmake/Modules/CMakeCXXCompilerABI.cpp",
            "CheckFunctionExists.c",
        ] {
            assert!(is_probe_input(OsStr::new(p)), "{p}");
        }
        for p in ["src/main.c", "myconftest.c", "conftest", "CMakeTmp.c", ""] {
            assert!(!is_probe_input(OsStr::new(p)), "{p}");
        }
    }

    #[test]
    fn replace_extension_like_gcc() {
        assert_eq!(replace_extension("a.b.c.d", ".e"), "a.b.c.e");
        assert_eq!(replace_extension("src/a.c", ".o"), "src/a.o");
        assert_eq!(replace_extension("obj.d/ab", ".d"), "obj.d/ab.d");
        assert_eq!(replace_extension(".hidden", ".d"), ".hidden.d");
        assert_eq!(replace_extension("", ".o"), ".o");
    }
}
