//! `ccroute-cc`: the wrapper alone, for builds (`CC="ccroute-cc gcc"`, a
//! compiler launcher, or masquerade symlinks to it). It runs for every
//! compile, and without the daemons linked in it starts in less time (see
//! `ccroute::wrapper::lean_main`); the daemons and commands are `ccroute`'s,
//! which it expects beside it to start a consumerd.

fn main() {
    std::process::exit(ccroute::wrapper::lean_main(std::env::args_os().collect()));
}
