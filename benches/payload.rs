//! Payload compression on real preprocessed C++ (gcc `-E -fdirectives-only`,
//! as the consumerd sends it): lz4 (what the wire uses) against zstd levels 1
//! and 3, in one process. Prints MB/s of raw input for compression and
//! decompression and the compressed size, and the ratio of each to lz4.
//!
//! `cargo bench --bench payload`. Under `cargo test` it checks that the
//! round trips are lossless on a small input.

#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Instant;

fn preprocessed() -> Vec<u8> {
    let src = "#include <vector>\n#include <map>\n#include <string>\n#include <algorithm>\n#include <iostream>\n#include <sstream>\n#include <memory>\n#include <stdio.h>\nint main() { std::vector<int> v; return (int)v.size(); }\n";
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("a.cpp");
    std::fs::write(&file, src).expect("write source");
    let out = Command::new("g++").args(["-E", "-fdirectives-only", "-O2"]).arg(&file).output().expect("run g++");
    assert!(out.status.success(), "g++ -E failed: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn time<T>(rounds: u32, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut last = f();
    let t0 = Instant::now();
    for _ in 0..rounds {
        last = f();
    }
    (t0.elapsed().as_secs_f64() / f64::from(rounds), last)
}

fn main() {
    let raw = preprocessed();
    let bench = std::env::args().any(|a| a == "--bench");
    let rounds = if bench { 50 } else { 1 };
    let mb = raw.len() as f64 / 1e6;

    let (lz_c, packed) = time(rounds, || lz4_flex::block::compress(&raw));
    let (lz_d, back) = time(rounds, || lz4_flex::block::decompress(&packed, raw.len()).expect("lz4 round trip"));
    assert_eq!(back, raw);
    let lz = (lz_c, lz_d, packed.len());

    let mut rows = vec![("lz4 (block)", lz)];
    for level in [1, 3] {
        let (c, packed) = time(rounds, || zstd::bulk::compress(&raw, level).expect("zstd compress"));
        let (d, back) = time(rounds, || zstd::bulk::decompress(&packed, raw.len()).expect("zstd round trip"));
        assert_eq!(back, raw);
        rows.push((if level == 1 { "zstd -1" } else { "zstd -3" }, (c, d, packed.len())));
    }
    if !bench {
        println!("payload: round trips ok on {} bytes", raw.len());
        return;
    }
    println!("input: {mb:.2} MB of g++ -E -fdirectives-only output (STL headers), {rounds} rounds each");
    for (name, (c, d, size)) in &rows {
        println!(
            "{name:<12} compress {:>7.0} MB/s ({:.2}x lz4)   decompress {:>7.0} MB/s ({:.2}x lz4)   size {:>6.1}% of raw ({:.2}x lz4)",
            mb / c,
            lz.0 / c,
            mb / d,
            lz.1 / d,
            100.0 * *size as f64 / raw.len() as f64,
            *size as f64 / lz.2 as f64
        );
    }
}
