//! The `ccroute` binary: the wrapper, the daemons and the admin commands in
//! one executable. Everything is in the library; see `ccroute::cli`.

fn main() {
    std::process::exit(ccroute::cli::main(std::env::args_os().collect()));
}
