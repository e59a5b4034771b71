//! Make-syntax dependency files, as gcc and clang write them: reading the
//! files one lists, and the arguments of a run that only writes one.
//!
//! Main items: [`dep_files`], [`deps_only_args`].

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// The prerequisites of the first rule of a make-syntax dependency file
/// (as gcc and clang write them: `\`-newline continues a line, `\ ` is a
/// space, `$$` a dollar, `\#` a hash).
pub fn dep_files(text: &[u8]) -> Vec<Vec<u8>> {
    let mut files = Vec::new();
    let mut word = Vec::new();
    let mut in_targets = true;
    let mut i = 0;
    let flush = |word: &mut Vec<u8>, files: &mut Vec<Vec<u8>>, in_targets: bool| {
        if !word.is_empty() && !in_targets {
            files.push(std::mem::take(word));
        }
        word.clear();
    };
    while i < text.len() {
        let c = text[i];
        match c {
            b'\\' if text.get(i + 1) == Some(&b'\n') => {
                flush(&mut word, &mut files, in_targets);
                i += 2;
                continue;
            }
            b'\\' if matches!(text.get(i + 1), Some(b' ' | b'#' | b'\\')) => {
                word.push(text[i + 1]);
                i += 2;
                continue;
            }
            b'$' if text.get(i + 1) == Some(&b'$') => {
                word.push(b'$');
                i += 2;
                continue;
            }
            b':' if in_targets && matches!(text.get(i + 1), None | Some(b' ' | b'\t' | b'\n' | b'\\')) => {
                word.clear();
                in_targets = false;
            }
            b' ' | b'\t' => flush(&mut word, &mut files, in_targets),
            b'\n' => {
                flush(&mut word, &mut files, in_targets);
                if !in_targets {
                    break;
                }
            }
            _ => word.push(c),
        }
        i += 1;
    }
    flush(&mut word, &mut files, in_targets);
    files
}

/// The arguments (without argv\[0\]) of a run that writes only a full
/// dependency list (system headers too) of the compile `args` to `out`:
/// the compile's own dependency options, `-c` and `-o` removed, `-M -MF out`
/// added.
pub fn deps_only_args(args: &[Vec<u8>], out: &std::path::Path) -> Vec<OsString> {
    let mut v = Vec::with_capacity(args.len() + 3);
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        let a = a.as_slice();
        match a {
            b"-c" | b"-MD" | b"-MMD" | b"-MP" | b"-MG" => continue,
            b"-o" | b"-MF" | b"-MT" | b"-MQ" => {
                rest.next();
                continue;
            }
            _ => {}
        }
        if [&b"-o"[..], b"-MF", b"-MT", b"-MQ"].iter().any(|p| a.starts_with(p)) {
            continue;
        }
        if let Some(list) = a.strip_prefix(b"-Wp,") {
            let mut kept: Vec<&[u8]> = Vec::new();
            let mut items = list.split(|b| *b == b',');
            while let Some(item) = items.next() {
                match item {
                    b"-MD" | b"-MMD" => {
                        items.next();
                    }
                    b"-MP" => {}
                    _ => kept.push(item),
                }
            }
            if !kept.is_empty() {
                v.push(OsString::from_vec([&b"-Wp,"[..], &kept.join(&b',')].concat()));
            }
            continue;
        }
        v.push(std::ffi::OsStr::from_bytes(a).to_owned());
    }
    v.push("-M".into());
    v.push("-MF".into());
    v.push(out.as_os_str().to_owned());
    v
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn dependency_files_read_as_make_reads_them() {
        let text = b"a.o: a.c /usr/include/stdio.h \\\n sub\\ dir/x.h $$HOME/y.h \\\n  b.h\n\nb.h:\nx.h:\n";
        let files: Vec<String> = dep_files(text).into_iter().map(|f| String::from_utf8(f).unwrap()).collect();
        assert_eq!(files, ["a.c", "/usr/include/stdio.h", "sub dir/x.h", "$HOME/y.h", "b.h"]);
        // Several targets, and a target named like a path with a colon inside.
        let files = dep_files(b"a.o a.d: a.c\n");
        assert_eq!(files, [b"a.c".to_vec()]);
        assert_eq!(
            dep_files(b"m.o: /usr/include/stdc-predef.h a.h"),
            [b"/usr/include/stdc-predef.h".to_vec(), b"a.h".to_vec()]
        );
    }

    #[test]
    fn a_deps_only_run_drops_the_compile_and_its_dependency_options() {
        let args: Vec<Vec<u8>> = [
            "-Iinc",
            "-MMD",
            "-MP",
            "-MF",
            "d/x.d",
            "-MTt",
            "-O2",
            "-c",
            "x.c",
            "-o",
            "x.o",
            "-Wp,-MMD,w.d,-DA=1",
            "-Wp,-MD,v.d",
        ]
        .iter()
        .map(|a| a.as_bytes().to_vec())
        .collect();
        let got = deps_only_args(&args, std::path::Path::new("/tmp/out.d"));
        let got: Vec<&str> = got.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(got, ["-Iinc", "-O2", "x.c", "-Wp,-DA=1", "-M", "-MF", "/tmp/out.d"]);
    }
}
