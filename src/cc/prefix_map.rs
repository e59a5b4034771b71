//! Prefix maps for the agent that compose with the user's own.
//!
//! gcc keeps one list per kind (debug, macro), newest first, and rewrites a
//! path with the first map whose old prefix (a plain string prefix) matches;
//! `-ffile-prefix-map` adds to both lists. The agent compiles under scratch
//! paths and must map them back to what a local compile writes: the path
//! *after* the user's maps. [`compose`] derives maps for one scratch prefix
//! that, appended after the user's (so they win on scratch paths), give the
//! same result as the user's maps on the original path.
//!
//! Main items: [`UserMaps`], [`compose`], [`map_args`].

/// The user's maps from a compile's arguments, each kind in argument order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserMaps {
    /// `-fdebug-prefix-map` and `-ffile-prefix-map`, as `(old, new)`.
    pub debug: Vec<(String, String)>,
    /// `-fmacro-prefix-map` and `-ffile-prefix-map`, as `(old, new)`.
    pub macros: Vec<(String, String)>,
}

impl UserMaps {
    /// Collects the maps from compile arguments (malformed ones, which gcc
    /// itself rejects, are skipped).
    pub fn from_args(args: &[String]) -> UserMaps {
        let mut m = UserMaps::default();
        for a in args {
            let split = |v: &str| v.split_once('=').map(|(o, n)| (o.to_owned(), n.to_owned()));
            if let Some(v) = a.strip_prefix("-ffile-prefix-map=").and_then(split) {
                m.debug.push(v.clone());
                m.macros.push(v);
            } else if let Some(v) = a.strip_prefix("-fdebug-prefix-map=").and_then(split) {
                m.debug.push(v);
            } else if let Some(v) = a.strip_prefix("-fmacro-prefix-map=").and_then(split) {
                m.macros.push(v);
            }
        }
        m
    }
}

/// What the user's maps make of `path` (gcc's rule: newest matching map wins).
pub fn apply(user: &[(String, String)], path: &str) -> String {
    match user.iter().rev().find(|(old, _)| path.starts_with(old.as_str())) {
        Some((old, new)) => format!("{new}{}", &path[old.len()..]),
        None => path.to_owned(),
    }
}

/// Maps (oldest first) that send `scratch + x` to `apply(user, original + x)`
/// for every `x`, once appended after the user's maps.
pub fn compose(user: &[(String, String)], scratch: &str, original: &str) -> Vec<(String, String)> {
    let winner = user.iter().rposition(|(old, _)| original.starts_with(old.as_str()));
    let mut out = vec![(scratch.to_owned(), apply(user, original))];
    let later = winner.map_or(0, |w| w + 1);
    for (old, new) in &user[later..] {
        if old.len() > original.len() && old.starts_with(original) {
            out.push((format!("{scratch}{}", &old[original.len()..]), new.clone()));
        }
    }
    out
}

/// Compiler arguments for the maps of each `(scratch, original)` pair: one
/// `-ffile-prefix-map` per map where both kinds agree, else separate
/// `-fdebug-prefix-map` / `-fmacro-prefix-map` lists.
pub fn map_args(user: &UserMaps, pairs: &[(&str, &str)]) -> Vec<String> {
    let mut debug = Vec::new();
    let mut macros = Vec::new();
    for (scratch, original) in pairs {
        debug.extend(compose(&user.debug, scratch, original));
        macros.extend(compose(&user.macros, scratch, original));
    }
    if debug == macros {
        return debug.into_iter().map(|(o, n)| format!("-ffile-prefix-map={o}={n}")).collect();
    }
    let mut out: Vec<String> = debug.into_iter().map(|(o, n)| format!("-fdebug-prefix-map={o}={n}")).collect();
    out.extend(macros.into_iter().map(|(o, n)| format!("-fmacro-prefix-map={o}={n}")));
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn maps(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    /// The composed maps, applied after the user's, agree with the user's maps
    /// on the original path, for a spread of suffixes.
    fn check(user: &[(String, String)], scratch: &str, original: &str) {
        let mut all = user.to_vec();
        all.extend(compose(user, scratch, original));
        for x in ["", "/", "/src/a.c", "/sub", "/sub/deep/x.h", "x", "/other/y.c", "/subx/z.c"] {
            assert_eq!(apply(&all, &format!("{scratch}{x}")), apply(user, &format!("{original}{x}")), "suffix {x:?}");
        }
    }

    #[test]
    fn without_user_maps_scratch_maps_to_original() {
        assert_eq!(compose(&[], "/s/c", "/home/u/p"), maps(&[("/s/c", "/home/u/p")]));
        check(&[], "/s/c", "/home/u/p");
    }

    #[test]
    fn composes_with_user_maps() {
        let cases: &[&[(&str, &str)]] = &[
            &[("/home/u/p", ".")],
            &[("/home/u", "/u")],
            &[("/home/u/p/sub", "/S")],
            &[("/home/u/p/sub", "/S"), ("/home/u", "/H")],
            &[("/home/u", "/H"), ("/home/u/p/sub", "/S")],
            &[("/elsewhere", "/E"), ("/home/u/p/sub/deep", "D"), ("/home/u/p/subx", "X")],
            &[("", "/all")],
        ];
        for user in cases {
            check(&maps(user), "/s/c", "/home/u/p");
            check(&maps(user), "/s/r", "");
        }
    }

    #[test]
    fn parses_user_maps_and_emits_arguments() {
        let args: Vec<String> = [
            "-O2",
            "-ffile-prefix-map=/a=/b",
            "-fdebug-prefix-map=/c=/d",
            "-fmacro-prefix-map=/e=/f=g",
            "-fdebug-prefix-map=bad",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let u = UserMaps::from_args(&args);
        assert_eq!(u.debug, maps(&[("/a", "/b"), ("/c", "/d")]));
        assert_eq!(u.macros, maps(&[("/a", "/b"), ("/e", "/f=g")]));
        assert_eq!(
            map_args(&UserMaps::default(), &[("/s/r", ""), ("/s/c", "/p")]),
            ["-ffile-prefix-map=/s/r=", "-ffile-prefix-map=/s/c=/p"]
        );
        let split = map_args(&u, &[("/s/r", "")]);
        assert!(split.contains(&"-fdebug-prefix-map=/s/r/c=/d".to_owned()), "{split:?}");
        assert!(split.contains(&"-fmacro-prefix-map=/s/r/e=/f=g".to_owned()), "{split:?}");
    }
}
