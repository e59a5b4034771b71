//! The preprocessor's output, cleaned into the text an agent compiles.
//!
//! gcc's `-E -fdirectives-only` output carries what a remote compile must not
//! see twice: the compiler's built-in macros (each a `# 0 "<built-in>"` line
//! followed by a `#define`), the `-D`/`-U` flags as `#define`/`#undef` lines
//! under `# 0 "<command-line>"` (the agent gets the flags themselves, in
//! order), and, with `-g`, the working-directory marker `# 1 "/dir//"`.
//! [`postprocess`] drops those in one linear pass over bytes that need not be
//! UTF-8. clang's `-frewrite-includes` output needs no cleaning.
//!
//! Main items: [`postprocess`], [`Preprocessed`], [`find_unsafe_pragma`],
//! [`Linemarker`], [`shadow_files`] (the agent's copies of the original
//! sources for diagnostics). Left out: running the preprocessor.

use std::collections::HashSet;

use super::Family;

/// The cleaned text and what it tells.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Preprocessed {
    /// The text to send.
    pub text: Vec<u8>,
    /// Every source file the text came from (main input and headers), as the
    /// line markers name them, first appearance first. A consumerd checks
    /// these with [`find_unsafe_pragma`] before going remote.
    pub files: Vec<Vec<u8>>,
    /// The text uses `__DATE__`, `__TIME__` or `__TIMESTAMP__`: its object
    /// depends on when (and, for `__TIMESTAMP__`, on which file's mtime) it was
    /// compiled, so it must not be cached, and `__TIMESTAMP__` must not go remote.
    pub time_macros: bool,
    /// The text uses `__TIMESTAMP__` (the source's mtime, which an agent's copy
    /// does not have).
    pub timestamp_macro: bool,
    /// A `#line` directive renamed the current file (a marker without flags
    /// naming a file other than the one it stands in): gcc then shows lines
    /// of that file, as the client has it, under its diagnostics.
    pub renamed_files: bool,
}

/// A parsed line marker: `# <line> "<file>" <flags>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Linemarker {
    /// The line number the next line has.
    pub line: u64,
    /// The file name, unescaped.
    pub file: Vec<u8>,
    /// Where the quoted name (quotes included) sits in the marker line.
    pub name_span: std::ops::Range<usize>,
    /// Flag 1: entering a file.
    pub enter: bool,
    /// Flag 2: returning to a file.
    pub leave: bool,
}

/// Whether a line may be a directive: its first byte that is not a blank is
/// `#`. gcc's `-fdirectives-only` output indents a line marker as the
/// directive it stands for was indented (an `#ifdef` inside a function body
/// comes back as `      # 2655 "x.c"`), so a marker need not start a line.
pub fn is_directive(line: &[u8]) -> bool {
    line.iter().find(|b| !matches!(b, b' ' | b'\t')) == Some(&b'#')
}

impl Linemarker {
    /// Parses a line (without its newline); `None` if it is not a line
    /// marker. Blanks may stand before the `#` (see [`is_directive`]).
    pub fn parse(line: &[u8]) -> Option<Linemarker> {
        let indent = line.iter().take_while(|b| matches!(b, b' ' | b'\t')).count();
        let rest = line[indent..].strip_prefix(b"# ")?;
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || digits > 19 {
            return None;
        }
        let number = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
        let after = &rest[digits..];
        let after = after.strip_prefix(b" \"")?;
        let quote = indent + 2 + digits + 1;
        let mut file = Vec::new();
        let mut i = 0;
        loop {
            match *after.get(i)? {
                b'"' => break,
                b'\\' => {
                    let next = *after.get(i + 1)?;
                    if next.is_ascii_digit() && next < b'8' {
                        let mut v: u32 = 0;
                        let mut n = 0;
                        while n < 3 && after.get(i + 1 + n).is_some_and(|d| (b'0'..b'8').contains(d)) {
                            v = v * 8 + u32::from(after[i + 1 + n] - b'0');
                            n += 1;
                        }
                        file.push(v as u8);
                        i += 1 + n;
                    } else {
                        file.push(next);
                        i += 2;
                    }
                }
                b => {
                    file.push(b);
                    i += 1;
                }
            }
        }
        let end = quote + 1 + i + 1;
        let flags = &line[end..];
        let enter = flags.split(|b| *b == b' ').any(|f| f == b"1");
        let leave = flags.split(|b| *b == b' ').any(|f| f == b"2");
        Some(Linemarker { line: number, file, name_span: quote..end, enter, leave })
    }
}

/// Escapes a file name for a line marker, as gcc writes them.
pub fn escape_marker_name(name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + 2);
    out.push(b'"');
    for &b in name {
        match b {
            b'"' | b'\\' => out.extend_from_slice(&[b'\\', b]),
            0x20..=0x7e | 0x80..=0xff => out.push(b),
            _ => out.extend_from_slice(format!("\\{b:03o}").as_bytes()),
        }
    }
    out.push(b'"');
    out
}

fn is_macro_line(line: &[u8]) -> bool {
    line.starts_with(b"#define ") || line.starts_with(b"#undef ")
}

/// Cleans a preprocess run's stdout (see the module docs). Linear in the input.
pub fn postprocess(family: Family, raw: &[u8]) -> Preprocessed {
    let mut out = Preprocessed { text: Vec::with_capacity(raw.len()), ..Preprocessed::default() };
    let mut seen: HashSet<&[u8]> = HashSet::new();
    // The file the text stands in, as the last marker named it.
    let mut current: Option<Vec<u8>> = None;
    let mut lines = raw.split_inclusive(|b| *b == b'\n').enumerate().peekable();
    while let Some((index, with_nl)) = lines.next() {
        let line = with_nl.strip_suffix(b"\n").unwrap_or(with_nl);
        if is_directive(line) {
            if let Some(m) = Linemarker::parse(line) {
                let synthetic = m.file.first() == Some(&b'<');
                if family == Family::Gnu && synthetic && m.line == 0 {
                    if let Some((_, next)) = lines.peek() {
                        if is_macro_line(next) {
                            lines.next();
                            current = Some(m.file);
                            continue;
                        }
                    }
                }
                // The working-directory marker names no file the text stands in.
                if family == Family::Gnu && index < 3 && m.file.ends_with(b"//") {
                    continue;
                }
                let plain = !m.enter && !m.leave;
                let from_synthetic = current.as_ref().is_none_or(|c| c.first() == Some(&b'<'));
                if plain && !synthetic && !from_synthetic && current.as_deref() != Some(&m.file[..]) {
                    out.renamed_files = true;
                }
                if !synthetic && !m.file.is_empty() {
                    let name = &line[m.name_span.start + 1..m.name_span.end - 1];
                    if seen.insert(name) {
                        out.files.push(m.file.clone());
                    }
                }
                current = Some(m.file);
            }
        }
        out.text.extend_from_slice(with_nl);
    }
    out.timestamp_macro = contains(&out.text, b"__TIMESTAMP__");
    out.time_macros = out.timestamp_macro || contains(&out.text, b"__DATE__") || contains(&out.text, b"__TIME__");
    out
}

/// Whether `needle` (which starts with `__`) occurs in `hay`. Linear: it
/// only looks closer at the rare `_` bytes.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        match hay[i..].iter().position(|b| *b == b'_') {
            Some(p) => i += p,
            None => return false,
        }
        if hay[i..].starts_with(needle) {
            return true;
        }
        i += 1;
    }
    false
}

/// Pragmas gcc's `-fdirectives-only` run carries out (or drops) instead of
/// passing them on, so that the agent's compile would not see them: macro
/// stacks, poisoned identifiers, `message` (dropped along with its line,
/// which shifts every later line) and `redefine_extname`.
const UNSAFE_PRAGMAS: &[&str] = &["push_macro", "pop_macro", "poison", "message", "redefine_extname"];

/// Finds, in a source file's bytes, a pragma that `-fdirectives-only` would
/// not pass on (see [`UNSAFE_PRAGMAS`]); a hit keeps the compile local. It
/// errs towards finding one: a match inside a comment counts too. Only gcc
/// needs this check; clang's `-frewrite-includes` keeps every directive.
pub fn find_unsafe_pragma(source: &[u8]) -> Option<&'static str> {
    // memmem: the wrapper runs this over every header a compile includes
    // (2 MB for a C++ file with the STL), where a naive search cost ms.
    for p in memchr::memmem::find_iter(source, b"pragma") {
        let before = &source[..p];
        let after = &source[p + 6..];
        let directive = before.iter().rev().find(|b| !matches!(b, b' ' | b'\t')) == Some(&b'#');
        if !directive {
            continue;
        }
        let mut words = after.split(|b| matches!(b, b' ' | b'\t' | b'(' | b'\n' | b'\r')).filter(|w| !w.is_empty());
        let mut word = words.next();
        if word == Some(b"GCC") {
            word = words.next();
        }
        if let Some(w) = word {
            if let Some(hit) = UNSAFE_PRAGMAS.iter().find(|u| u.as_bytes() == w) {
                return Some(hit);
            }
        }
    }
    None
}

/// Rebuilds, from a `-fdirectives-only` text, each source file's lines at
/// their original line numbers: the compiler prints the source line under a
/// diagnostic by reading the file its location names, and on the agent that
/// must be the original text, not the preprocessed one. Lines the text does
/// not carry (directives) come back empty; diagnostics of the compile proper
/// never point at them. Returns `(file as named, contents)`.
pub fn shadow_files(text: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut files: Vec<(Vec<u8>, Vec<Vec<u8>>)> = Vec::new();
    let mut index: std::collections::HashMap<Vec<u8>, usize> = std::collections::HashMap::new();
    let mut current: Option<usize> = None;
    let mut line_no: u64 = 1;
    for with_nl in text.split_inclusive(|b| *b == b'\n') {
        let line = with_nl.strip_suffix(b"\n").unwrap_or(with_nl);
        if is_directive(line) {
            if let Some(m) = Linemarker::parse(line) {
                line_no = m.line;
                current = if m.file.first() == Some(&b'<') || m.file.is_empty() {
                    None
                } else {
                    let next = files.len();
                    let i = *index.entry(m.file.clone()).or_insert(next);
                    if i == next {
                        files.push((m.file, Vec::new()));
                    }
                    Some(i)
                };
                continue;
            }
        }
        if let Some(i) = current {
            // A marker's line number is the next line's; a hostile text can
            // claim any number, so cap how far a file may grow.
            let slot = usize::try_from(line_no).unwrap_or(usize::MAX).saturating_sub(1);
            let lines = &mut files[i].1;
            if slot < lines.len() + 1_000_000 {
                if lines.len() <= slot {
                    lines.resize(slot + 1, Vec::new());
                }
                lines[slot] = line.to_vec();
            }
        }
        line_no = line_no.saturating_add(1);
    }
    files
        .into_iter()
        .map(|(name, lines)| {
            let mut body = Vec::new();
            for l in lines {
                body.extend_from_slice(&l);
                body.push(b'\n');
            }
            (name, body)
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const RAW: &[u8] = b"# 0 \"src/a.c\"\n# 1 \"/home/u/p//\"\n# 0 \"<built-in>\"\n#define __STDC__ 1\n# 0 \"<built-in>\"\n#define __GNUC__ 12\n# 0 \"<command-line>\"\n#define X 1\n# 0 \"<command-line>\"\n#undef Y\n# 0 \"<command-line>\"\n# 1 \"/usr/include/stdc-predef.h\" 1 3 4\n#define _STDC_PREDEF_H 1\n# 0 \"<command-line>\" 2\n# 1 \"./src/a.h\" 1\n#define SQ(x) x\n# 0 \"<command-line>\" 2\n# 1 \"src/a.c\"\nint \xff v = SQ(__DATE__);\n";

    #[test]
    fn strips_builtins_command_line_macros_and_cwd() {
        let p = postprocess(Family::Gnu, RAW);
        let want: &[u8] = b"# 0 \"src/a.c\"\n# 0 \"<command-line>\"\n# 1 \"/usr/include/stdc-predef.h\" 1 3 4\n#define _STDC_PREDEF_H 1\n# 0 \"<command-line>\" 2\n# 1 \"./src/a.h\" 1\n#define SQ(x) x\n# 0 \"<command-line>\" 2\n# 1 \"src/a.c\"\nint \xff v = SQ(__DATE__);\n";
        assert_eq!(String::from_utf8_lossy(&p.text), String::from_utf8_lossy(want));
        let files: Vec<&[u8]> = p.files.iter().map(Vec::as_slice).collect();
        assert_eq!(files, [&b"src/a.c"[..], b"/usr/include/stdc-predef.h", b"./src/a.h"]);
        assert!(p.time_macros && !p.timestamp_macro);
    }

    #[test]
    fn clang_text_passes_unchanged() {
        let p = postprocess(Family::Clang, RAW);
        assert_eq!(p.text, RAW);
    }

    #[test]
    fn no_trailing_newline_and_empty_input() {
        assert_eq!(postprocess(Family::Gnu, b"").text, b"");
        assert_eq!(postprocess(Family::Gnu, b"int x;").text, b"int x;");
        assert_eq!(postprocess(Family::Gnu, b"# 0 \"<built-in>\"").text, b"# 0 \"<built-in>\"");
        assert!(!postprocess(Family::Gnu, b"__TIME_").time_macros);
        assert!(postprocess(Family::Gnu, b"x __TIMESTAMP__").timestamp_macro);
    }

    #[test]
    fn linemarkers() {
        let m = Linemarker::parse(b"# 12 \"a \\\"b\\\\c\\001\" 1 3 4").unwrap();
        assert_eq!(m.line, 12);
        assert_eq!(m.file, b"a \"b\\c\x01");
        assert!(m.enter);
        assert_eq!(escape_marker_name(&m.file), b"\"a \\\"b\\\\c\\001\"");
        assert!(!Linemarker::parse(b"# 3 \"x\" 2").unwrap().enter);
        // Indented, as -fdirectives-only writes one after an indented #ifdef.
        let line = b"  \t # 2655 \"/p/llhttp.c\"";
        let m = Linemarker::parse(line).unwrap();
        assert_eq!((m.line, &m.file[..]), (2655, &b"/p/llhttp.c"[..]));
        assert_eq!(&line[m.name_span.clone()], b"\"/p/llhttp.c\"");
        assert!(is_directive(line) && !is_directive(b"x # 1 \"y\""));
        for bad in
            [&b"#define X"[..], b"# define X", b"# 1", b"# 1 \"open", b"#", b"# \"x\"", b"# 99999999999999999999 \"x\""]
        {
            assert_eq!(Linemarker::parse(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn unsafe_pragmas_found() {
        assert_eq!(find_unsafe_pragma(b"#pragma push_macro(\"X\")\n"), Some("push_macro"));
        assert_eq!(find_unsafe_pragma(b"  #  pragma pop_macro(\"X\")\n"), Some("pop_macro"));
        assert_eq!(find_unsafe_pragma(b"#pragma GCC poison a b\n"), Some("poison"));
        assert_eq!(find_unsafe_pragma(b"#pragma message \"hi\"\n"), Some("message"));
        assert_eq!(find_unsafe_pragma(b"#pragma redefine_extname a b\n"), Some("redefine_extname"));
        assert_eq!(find_unsafe_pragma(b"#pragma once\n#pragma GCC diagnostic push\n#pragma pack(1)\n"), None);
        assert_eq!(find_unsafe_pragma(b"_Pragma(\"message x\")\nint pragma;\n"), None);
        assert_eq!(find_unsafe_pragma(b""), None);
    }

    #[test]
    fn shadows_rebuild_original_lines() {
        let text = b"# 0 \"src/a.c\"\n# 1 \"src/a.c\"\n\n# 1 \"./a.h\" 1\nint h;\n# 3 \"src/a.c\" 2\nint main(void) {\n  return 0;\n}\n";
        let shadows = shadow_files(text);
        assert_eq!(shadows.len(), 2);
        assert_eq!(shadows[0].0, b"src/a.c");
        assert_eq!(String::from_utf8_lossy(&shadows[0].1), "\n\nint main(void) {\n  return 0;\n}\n");
        assert_eq!(shadows[1], (b"./a.h".to_vec(), b"int h;\n".to_vec()));
        // A hostile line number does not allocate without bound.
        let hostile = b"# 0 \"x.c\"\n# 18446744073709551615 \"x.c\"\nint a;\n";
        assert!(shadow_files(hostile).iter().all(|(_, body)| body.len() < 10));
    }
}
