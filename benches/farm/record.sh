#!/usr/bin/env bash
# Records build traces for the farm harness: builds each project once with
# plain gcc, each compile run through `farm record-cc`, which appends its
# CPU time and its preprocessed and object sizes to a raw file.
#
#   cargo bench --bench farm -- record [sample] [lua] [lzma] [libgit2]
#
# runs this script with FARM_BIN set to the harness and writes
# benches/farm/traces/<project>.trace. The sources are the pinned crates
# benches/peers.sh and scripts/identity build (from the crate registry).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
: "${FARM_BIN:?run through: cargo bench --bench farm -- record}"
: "${FARM_RAW_DIR:?}"
jobs=${FARM_RECORD_JOBS:-2}
work=$(mktemp -d -t ccroute-farm-record-XXXXXX)
trap 'rm -rf "$work"' EXIT

crate_dir() { # crate version -> its unpacked source directory
    local crate=$1 version=$2 dir=$work/fetch-$1
    mkdir -p "$dir/src"
    echo 'fn main() {}' >"$dir/src/main.rs"
    printf '[package]\nname = "farm-%s"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\n%s = "%s"\n' \
        "$crate" "$crate" "$version" >"$dir/Cargo.toml"
    (cd "$dir" && cargo fetch -q)
    (cd "$dir" && cargo metadata --format-version 1 -q) |
        python3 -c "import json,sys; m=json.load(sys.stdin); print(next(p['manifest_path'] for p in m['packages'] if p['name']=='$crate').rsplit('/',1)[0])"
}

# A Makefile compiling every source to an object (the link does not matter here).
write_makefile() { # dir cppflags cflags sources...
    local dir=$1 cppflags=$2 cflags=$3
    shift 3
    {
        printf 'OBJS :='
        for s in "$@"; do printf ' %s' "${s%.c}.o"; done
        printf '\nall: $(OBJS)\n%%.o: %%.c\n\t$(CC) %s -O2 %s -c $< -o $@\n' "$cppflags" "$cflags"
    } >"$dir/Makefile"
}

record() { # project about build-command...
    local project=$1 about=$2
    shift 2
    local raw=$FARM_RAW_DIR/$project.raw
    rm -f "$raw"
    echo "record: $project" >&2
    FARM_RECORD_ROOT=${ROOT:-$work/$project} "$@" >"$work/$project.log" 2>&1 || {
        echo "record: $project's build failed; its log:" >&2
        tail -n 30 "$work/$project.log" >&2
        exit 1
    }
    printf '%s | %s | make or ninja -j%s\n' "$about" "$(gcc --version | head -n 1)" "$jobs" >"$FARM_RAW_DIR/$project.about"
}

rec="$FARM_BIN record-cc"
for project in "${@:-sample lua lzma libgit2}"; do
    for p in $project; do
        raw=$FARM_RAW_DIR/$p.raw
        case $p in
            sample)
                cp -r "$repo/sample" "$work/sample"
                rm -rf "$work/sample/build"
                record sample "ccroute's bundled sample (C and C++), its Makefile" \
                    make -C "$work/sample" -j"$jobs" CC="$rec $raw gcc" CXX="$rec $raw g++"
                ;;
            lua)
                src=$(crate_dir lua-src =551.1.0)/lua-5.4.9
                mkdir -p "$work/lua" && cp "$src"/*.c "$src"/*.h "$work/lua/"
                srcs=()
                for f in "$work"/lua/*.c; do
                    case $(basename "$f") in lua.c | luac.c) continue ;; esac
                    srcs+=("$(basename "$f")")
                done
                write_makefile "$work/lua" "-I. -DLUA_USE_LINUX -DLUA_COMPAT_5_3" "-fno-common" "${srcs[@]}"
                record lua "Lua 5.4.9 (crate lua-src 551.1.0), the library" make -C "$work/lua" -j"$jobs" CC="$rec $raw gcc"
                ;;
            lzma)
                src=$(crate_dir lzma-sys =0.1.20)
                mkdir -p "$work/lzma" && cp -r "$src/xz-5.2/src" "$work/lzma/src" && cp "$src/config.h" "$work/lzma/"
                srcs=()
                for d in common lzma lz check delta rangecoder simple; do
                    for f in "$work/lzma/src/liblzma/$d"/*.c; do
                        case $(basename "$f") in *_small.c | *tablegen*) continue ;; esac
                        srcs+=("${f#"$work/lzma/"}")
                    done
                done
                srcs+=(src/common/tuklib_cpucores.c src/common/tuklib_physmem.c)
                inc="-I. -Isrc/common"
                for d in api lzma lz check simple delta common rangecoder; do inc+=" -Isrc/liblzma/$d"; done
                write_makefile "$work/lzma" "$inc -DHAVE_CONFIG_H=1" "-std=c99 -pthread" "${srcs[@]}"
                record lzma "liblzma of xz 5.2 (crate lzma-sys 0.1.20)" make -C "$work/lzma" -j"$jobs" CC="$rec $raw gcc"
                ;;
            libgit2)
                command -v cmake >/dev/null && command -v ninja >/dev/null ||
                    { echo "record: libgit2 needs cmake and ninja (Debian: apt-get install cmake ninja-build)" >&2; exit 2; }
                src=$(crate_dir libgit2-sys 0.18)/libgit2
                build=$work/libgit2
                mkdir -p "$build"
                ROOT=$src record libgit2 "libgit2 (crate libgit2-sys 0.18), CMake RelWithDebInfo, no CLI, SSH or HTTPS" \
                    bash -c "cmake -S '$src' -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTS=OFF \
                        -DBUILD_CLI=OFF -DUSE_SSH=OFF -DUSE_HTTPS=OFF '-DCMAKE_C_COMPILER_LAUNCHER=$FARM_BIN;record-cc;$raw' \
                        && ninja -C '$build' -j$jobs"
                ;;
            *)
                echo "record: unknown project '$p' (sample, lua, lzma, libgit2)" >&2
                exit 2
                ;;
        esac
    done
done
