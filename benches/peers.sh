#!/usr/bin/env bash
# ccroute side by side with plain gcc, distcc and icecream on one machine.
#
#   benches/peers.sh             the whole table (5 rounds); rewrites BENCHMARKS.md
#   benches/peers.sh --quick     2 rounds, no liblzma, no warm rows; prints the table only
#
# Options:
#   --rounds N        timed rounds per corpus (default 5; --quick: 2)
#   --jobs N          make -jN (default 8)
#   --corpora LIST    comma-separated, from: sample,zlib,lua,lzma,tiny (the
#                     default) and zstd (compile-heavy: ~30 s a build here)
#   --no-warm         skip the warm-cache rows
#   --out FILE        write the report there (default: BENCHMARKS.md for a
#                     full run, nothing for --quick)
#   --keep            keep the work directory (logs, corpora) and say where
#   --report DIR      only render the report again from a kept work directory
#                     (to BENCHMARKS.md, or --out FILE)
#
# What it does:
#   1. installs what is missing from Debian's packages (as root, apt-get):
#      gcc g++ make distcc icecc ccache jq iproute2;
#   2. builds ccroute (cargo build --release);
#   3. lays out the corpora in a temporary directory: the bundled sample,
#      three C libraries whose sources crates on crates.io bundle (fetched with
#      cargo, a Makefile generated for each), and 200 tiny translation units;
#   4. in a new network namespace that has only loopback, starts distccd,
#      icecc-scheduler with two iceccd (one that only submits, one that
#      compiles), and ccroute's scheduler, one agent and a consumerd, all on
#      127.0.0.1;
#   5. builds every corpus with every tool, round after round, rotating the
#      order in each round; each build's wall time, and the CPU time of all it
#      started (counted in a cgroup), are compared with the local gcc build of
#      its own round, and each daemon's counters show how many jobs it served;
#   6. prints the table (and writes the report);
#   7. stops what it started, by PID, and removes the temporary directory,
#      also on Ctrl-C or an error.
#
# Why a network namespace: icecc-scheduler announces itself by UDP broadcast
# on every interface it finds; inside the namespace the only one is loopback.
# Where namespaces are not allowed, icecream is left out and the rest runs
# bound to 127.0.0.1.

set -euo pipefail
export LC_ALL=C

SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
COMMAND_LINE="benches/peers.sh${*:+ $*}"
REPO=$(cd "$(dirname "$SELF")/.." && pwd)

ROUNDS=""
JOBS=8
CORPORA_ARG=""
WARM=1
OUT=""
OUT_SET=0
KEEP=0
QUICK=0
INSIDE=""
WORK=""
REPORT_ONLY=""

usage() {
    sed -n '2,/^$/p' "$SELF" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

die() {
    echo "peers: $*" >&2
    exit 2
}

say() {
    echo "peers: $*" >&2
}

while (($#)); do
    case $1 in
        --quick) QUICK=1 ;;
        --rounds) ROUNDS=${2:?--rounds needs a number}; shift ;;
        --jobs | -j) JOBS=${2:?--jobs needs a number}; shift ;;
        --corpora) CORPORA_ARG=${2:?--corpora needs a list}; shift ;;
        --no-warm) WARM=0 ;;
        --out) OUT=${2:?--out needs a file}; OUT_SET=1; shift ;;
        --keep) KEEP=1 ;;
        --inside) INSIDE=${2:?}; shift ;;
        --work) WORK=${2:?}; shift ;;
        --report) REPORT_ONLY=${2:?--report needs a directory}; shift ;;
        -h | --help) usage 0 ;;
        *) echo "peers: unknown option $1" >&2; usage 2 ;;
    esac
    shift
done

[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "--jobs wants a positive number, not '$JOBS'"
if [[ -z $ROUNDS ]]; then
    if ((QUICK)); then ROUNDS=2; else ROUNDS=5; fi
fi
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds wants a positive number, not '$ROUNDS'"
if [[ -z $CORPORA_ARG ]]; then
    if ((QUICK)); then CORPORA_ARG=sample,zlib,lua,tiny; else CORPORA_ARG=sample,zlib,lua,lzma,tiny; fi
fi
IFS=, read -r -a CORPORA <<<"$CORPORA_ARG"
for c in "${CORPORA[@]}"; do
    case $c in sample | zlib | lua | lzma | zstd | tiny) ;; *) die "unknown corpus '$c' (sample, zlib, lua, lzma, zstd, tiny)" ;; esac
done
if ((QUICK)); then WARM=0; fi
if ((!OUT_SET && !QUICK)); then OUT=$REPO/BENCHMARKS.md; fi

NCPU=$(nproc)
CCROUTE=$REPO/target/release/ccroute
# What builds run for each compile: the wrapper alone (it starts faster).
WRAP=$REPO/target/release/ccroute-cc

# The crates whose bundled C sources make the real corpora, pinned so that
# figures from different days compare the same code.
declare -A CRATE=([zlib]=libz-sys [lua]=lua-src [lzma]=lzma-sys [zstd]=zstd-sys)
declare -A CRATE_VERSION=([zlib]=1.1.33 [lua]=551.1.0 [lzma]=0.1.20 [zstd]=2.1.3)
TINY_JOBS=200

# ---------------------------------------------------------------------------
# Outside the namespace: packages, ccroute, corpora.
# ---------------------------------------------------------------------------

install_packages() {
    local -A pkg_of=([gcc]=gcc [g++]=g++ [make]=make [distcc]=distcc [distccd]=distcc
        [icecc]=icecc [iceccd]=icecc [icecc-scheduler]=icecc [icecc-create-env]=icecc
        [ccache]=ccache [jq]=jq [ip]=iproute2 [unshare]=util-linux [setsid]=util-linux [ar]=binutils
        [bwrap]=bubblewrap)
    local missing=() cmd
    for cmd in "${!pkg_of[@]}"; do
        command -v "$cmd" >/dev/null 2>&1 || missing+=("${pkg_of[$cmd]}")
    done
    ((${#missing[@]})) || return 0
    mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
    if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
        die "missing ${missing[*]}; install them (Debian: apt-get install ${missing[*]}) or run as root"
    fi
    say "installing ${missing[*]}"
    apt-get update -qq >/dev/null
    # Debian starts packaged daemons on install where it can; this script
    # never touches those and runs its own on other ports and sockets.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

build_ccroute() {
    say "building ccroute (cargo build --release)"
    (cd "$REPO" && cargo build --release --quiet --bin ccroute --bin ccroute-cc) || die "cargo build --release failed"
    [[ -x $CCROUTE ]] || die "no binary at $CCROUTE after the build"
}

# Writes a Makefile that builds the listed C sources of one corpus into BUILD
# and archives them, with the flags the crate's build.rs uses.
# shellcheck disable=SC2016 # make's own $(...) and $@, written as they are
write_makefile() {
    local dir=$1 name=$2 cppflags=$3 cflags=$4
    shift 4
    {
        echo "# Generated by benches/peers.sh: $name's C sources, built into BUILD."
        echo "BUILD ?= build"
        echo 'override BUILD := $(patsubst %/,%,$(BUILD))'
        echo "CFLAGS ?= -O2 -g"
        echo "CORPUS_CPPFLAGS := $cppflags"
        echo "CORPUS_CFLAGS := $cflags"
        echo "SOURCES := \\"
        printf '\t%s \\\n' "$@"
        echo ""
        echo 'OBJECTS := $(SOURCES:%.c=$(BUILD)/%.o)'
        echo 'DIRS := $(patsubst %/,%,$(sort $(dir $(OBJECTS))))'
        echo ".PHONY: all"
        echo "all: \$(BUILD)/lib$name.a"
        echo "\$(BUILD)/lib$name.a: \$(OBJECTS)"
        printf '\tar rcs $@ $(OBJECTS)\n'
        echo '$(BUILD)/%.o: %.c | $(DIRS)'
        printf '\t$(CC) $(CORPUS_CPPFLAGS) $(CPPFLAGS) $(CORPUS_CFLAGS) $(CFLAGS) -c $< -o $@\n'
        echo '$(DIRS):'
        printf '\tmkdir -p $@\n'
    } >"$dir/Makefile"
}

fetch_crates() {
    local want=() c
    for c in "${CORPORA[@]}"; do [[ -n ${CRATE[$c]:-} ]] && want+=("$c"); done
    ((${#want[@]})) || return 0
    local proj=$WORK/fetch
    mkdir -p "$proj/src"
    echo 'fn main() {}' >"$proj/src/main.rs"
    {
        printf '[package]\nname = "peers-corpora"\nversion = "0.0.0"\nedition = "2021"\npublish = false\n\n'
        printf '[workspace]\n\n[dependencies]\n'
        for c in "${want[@]}"; do printf '%s = "=%s"\n' "${CRATE[$c]}" "${CRATE_VERSION[$c]}"; done
    } >"$proj/Cargo.toml"
    say "fetching ${want[*]} sources from crates.io (cargo fetch)"
    (cd "$proj" && cargo fetch --quiet) || die "cargo fetch failed (is crates.io reachable?)"
    local meta
    meta=$(cd "$proj" && cargo metadata --format-version 1 --offline) || die "cargo metadata failed"
    for c in "${want[@]}"; do
        local manifest
        manifest=$(jq -r --arg n "${CRATE[$c]}" '.packages[] | select(.name == $n) | .manifest_path' <<<"$meta")
        [[ -f $manifest ]] || die "no manifest for ${CRATE[$c]} after cargo fetch"
        CRATE_DIR[$c]=$(dirname "$manifest")
    done
}

declare -A CRATE_DIR=()
declare -A CORPUS_JOBS=()
declare -A CORPUS_DESC=()

prepare_zlib() {
    local src=${CRATE_DIR[zlib]}/src/zlib dst=$WORK/corpora/zlib
    mkdir -p "$dst"
    cp "$src"/*.c "$src"/*.h "$dst"/
    local files=(adler32 compress crc32 deflate gzclose gzlib gzread gzwrite infback inffast inflate inftrees trees uncompr zutil)
    local f srcs=()
    for f in "${files[@]}"; do
        [[ -f $dst/$f.c ]] || die "zlib: $f.c missing from ${CRATE[zlib]}"
        srcs+=("$f.c")
    done
    write_makefile "$dst" zlib "-I. -DSTDC -D_LARGEFILE64_SOURCE" "-fvisibility=hidden" "${srcs[@]}"
    CORPUS_JOBS[zlib]=${#srcs[@]}
    CORPUS_DESC[zlib]="zlib $(sed -n 's/^#define ZLIB_VERSION "\(.*\)"/\1/p' "$dst/zlib.h") (crate ${CRATE[zlib]} ${CRATE_VERSION[zlib]})"
}

prepare_lua() {
    local src=${CRATE_DIR[lua]}/lua-5.4.9 dst=$WORK/corpora/lua
    mkdir -p "$dst"
    cp "$src"/*.c "$src"/*.h "$dst"/
    local srcs=() f
    for f in "$dst"/*.c; do
        # The crate builds the library only, not the interpreter and compiler.
        case $(basename "$f") in lua.c | luac.c) continue ;; esac
        srcs+=("$(basename "$f")")
    done
    write_makefile "$dst" lua "-I. -DLUA_USE_LINUX -DLUA_COMPAT_5_3" "-fno-common" "${srcs[@]}"
    CORPUS_JOBS[lua]=${#srcs[@]}
    CORPUS_DESC[lua]="Lua $(basename "$src" | sed 's/^lua-//') (crate ${CRATE[lua]} ${CRATE_VERSION[lua]})"
}

prepare_zstd() {
    local src=${CRATE_DIR[zstd]}/zstd/lib dst=$WORK/corpora/zstd
    mkdir -p "$dst"
    cp -r "$src" "$dst/lib"
    local srcs=() f
    # As the crate's build.rs with its default features (legacy, zdict_builder),
    # without the one assembly file (ZSTD_DISABLE_ASM), which would not be a C job.
    for f in "$dst"/lib/{common,compress,decompress,dictBuilder,legacy}/*.c; do
        [[ $(basename "$f") == xxhash* ]] && continue
        srcs+=("${f#"$dst/"}")
    done
    write_makefile "$dst" zstd "-Ilib -Ilib/common -Ilib/legacy -DZSTD_LEGACY_SUPPORT=1 -DZSTD_LIB_DEPRECATED=0 -DXXH_PRIVATE_API -DZSTDLIB_VISIBILITY= -DZDICTLIB_VISIBILITY= -DZSTDERRORLIB_VISIBILITY= -DZSTD_DISABLE_ASM" \
        "-fvisibility=hidden" "${srcs[@]}"
    CORPUS_JOBS[zstd]=${#srcs[@]}
    local v
    v=$(awk '/^#define ZSTD_VERSION_(MAJOR|MINOR|RELEASE)/ {printf "%s%s", sep, $3; sep="."}' "$dst/lib/zstd.h")
    CORPUS_DESC[zstd]="zstd $v (crate ${CRATE[zstd]} ${CRATE_VERSION[zstd]})"
}

prepare_lzma() {
    local src=${CRATE_DIR[lzma]} dst=$WORK/corpora/lzma
    mkdir -p "$dst"
    cp -r "$src/xz-5.2/src" "$dst/src"
    cp "$src/config.h" "$dst/"
    local srcs=() f d
    for d in common lzma lz check delta rangecoder simple; do
        for f in "$dst/src/liblzma/$d"/*.c; do
            case $(basename "$f") in *_small.c | *tablegen*) continue ;; esac
            srcs+=("${f#"$dst/"}")
        done
    done
    srcs+=(src/common/tuklib_cpucores.c src/common/tuklib_physmem.c)
    local inc="-I. -Isrc/common" d2
    for d2 in api lzma lz check simple delta common rangecoder; do inc+=" -Isrc/liblzma/$d2"; done
    write_makefile "$dst" lzma "$inc -DHAVE_CONFIG_H=1" "-std=c99 -pthread" "${srcs[@]}"
    CORPUS_JOBS[lzma]=${#srcs[@]}
    local v
    v=$(awk '/^#define LZMA_VERSION_(MAJOR|MINOR|PATCH) / {printf "%s%s", sep, $3; sep="."}' "$dst/src/liblzma/api/lzma/version.h")
    CORPUS_DESC[lzma]="liblzma (xz ${v//U/}) (crate ${CRATE[lzma]} ${CRATE_VERSION[lzma]})"
}

prepare_sample() {
    local dst=$WORK/corpora/sample
    cp -r "$REPO/sample" "$dst"
    rm -rf "$dst/build"
    CORPUS_JOBS[sample]=$(awk '/^(C|CXX)_SOURCES :=/ {on=1; next} on && /^\t/ {n++; next} {on=0} END {print n}' "$dst/Makefile")
    CORPUS_DESC[sample]="ccroute's bundled sample (C and C++)"
}

prepare_tiny() {
    local dst=$WORK/corpora/tiny i srcs=()
    mkdir -p "$dst"
    for ((i = 0; i < TINY_JOBS; i++)); do
        printf '/* tiny translation unit %03d */\n#include <stdio.h>\n\nint tiny_%03d(int x)\n{\n    return printf("%%d\\n", x * %d);\n}\n' \
            "$i" "$i" "$((i + 1))" >"$dst/t$(printf %03d "$i").c"
        srcs+=("t$(printf %03d "$i").c")
    done
    write_makefile "$dst" tiny "" "" "${srcs[@]}"
    CORPUS_JOBS[tiny]=$TINY_JOBS
    CORPUS_DESC[tiny]="$TINY_JOBS tiny translation units (one function, <stdio.h>)"
}

prepare_corpora() {
    mkdir -p "$WORK/corpora"
    fetch_crates
    local c
    for c in "${CORPORA[@]}"; do "prepare_$c"; done
    # Read back by the measuring half of the script.
    for c in "${CORPORA[@]}"; do
        printf '%s\t%s\t%s\n' "$c" "${CORPUS_JOBS[$c]}" "${CORPUS_DESC[$c]}"
    done >"$WORK/corpora.tsv"
    local make_check
    for c in "${CORPORA[@]}"; do
        make_check=$(make -s -C "$WORK/corpora/$c" -n BUILD="$WORK/probe-$c" CC=gcc CXX=g++ | grep -c -- ' -c ' || true)
        ((make_check == CORPUS_JOBS[$c])) || die "$c: make would run $make_check compiles, expected ${CORPUS_JOBS[$c]}"
    done
}

outer_cleanup() {
    local status=$?
    if [[ -n $WORK && -d $WORK ]]; then
        if ((KEEP)); then
            say "kept $WORK"
        else
            rm -rf "$WORK"
        fi
    fi
    exit "$status"
}

outer() {
    local started=$EPOCHREALTIME
    install_packages
    build_ccroute
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/ccroute-peers.XXXXXX")
    # icecc and distccd drop root for their compiles; they need to reach
    # their own directories under here.
    chmod 755 "$WORK"
    trap outer_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    prepare_corpora
    # --keep and --out change nothing in the figures.
    echo "$COMMAND_LINE" | sed -e 's/ --keep//g' -e 's/ --out [^ ]*//g' >"$WORK/command"
    local args=(--rounds "$ROUNDS" --jobs "$JOBS" --corpora "$CORPORA_ARG" --work "$WORK")
    ((WARM)) || args+=(--no-warm)
    ((QUICK)) && args+=(--quick)
    [[ -n $OUT ]] && args+=(--out "$OUT")
    echo "$started" >"$WORK/started"
    if unshare --net true 2>/dev/null; then
        unshare --net -- bash "$SELF" --inside netns "${args[@]}"
    else
        say "cannot make a network namespace here: icecream is left out (its scheduler broadcasts beyond loopback)"
        bash "$SELF" --inside host "${args[@]}"
    fi
}

# ---------------------------------------------------------------------------
# Inside the namespace: daemons, builds, report.
# ---------------------------------------------------------------------------

PIDS=()
TOOLS=()
CGROUP=""
CGROUP_KIND=""

# CPU time of everything this half of the script starts (daemons, make,
# compilers): it and all its children live in a cgroup of their own, whose
# usage counter is read before and after each build. Wall time on a shared
# machine moves with other load; this moves only with the work done.
cpu_meter_start() {
    local base
    for base in /sys/fs/cgroup /sys/fs/cgroup/unified /sys/fs/cgroup/cpuacct; do
        if [[ $base == */cpuacct && -f $base/cpuacct.usage ]]; then
            CGROUP_KIND=v1
        elif [[ -f $base/cgroup.controllers ]]; then
            CGROUP_KIND=v2
        else
            continue
        fi
        CGROUP=$base/ccroute-peers-$$
        if mkdir "$CGROUP" 2>/dev/null && echo "$BASHPID" >"$CGROUP/cgroup.procs" 2>/dev/null && [[ -n $(cpu_now) ]]; then
            return 0
        fi
        rmdir "$CGROUP" 2>/dev/null || true
        CGROUP=""
    done
    CGROUP_KIND=""
    say "no cgroup to count CPU time in (not root, or no cpuacct/cgroup2): the CPU columns stay empty"
}

# CPU seconds used so far in the cgroup, or nothing.
cpu_now() {
    case $CGROUP_KIND in
        v1) awk '{printf "%.3f", $1 / 1e9}' "$CGROUP/cpuacct.usage" ;;
        v2) awk '$1 == "usage_usec" {printf "%.3f", $2 / 1e6}' "$CGROUP/cpu.stat" ;;
    esac
}

cpu_meter_stop() {
    [[ -n $CGROUP ]] || return 0
    echo "$BASHPID" >"$(dirname "$CGROUP")/cgroup.procs" 2>/dev/null || true
    rmdir "$CGROUP" 2>/dev/null || say "could not remove $CGROUP (a process is still in it)"
}

inner_cleanup() {
    local status=$? pid i n
    trap - EXIT INT TERM
    ((status == 0)) || say "stopping the ${#PIDS[@]} daemons this run started, by PID"
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        pid=${PIDS[i]}
        kill -0 "$pid" 2>/dev/null && kill -TERM "$pid" 2>/dev/null
    done
    for ((n = 0; n < 50; n++)); do
        local alive=0
        for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        ((alive)) || break
        sleep 0.2
    done
    for pid in "${PIDS[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then
            say "process $pid did not stop on TERM; killing it"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    wait 2>/dev/null || true
    cpu_meter_stop
    exit "$status"
}

# A free TCP port on 127.0.0.1 (and, for icecream, the one after it).
free_port() {
    local p
    for ((n = 0; n < 200; n++)); do
        p=$((20000 + RANDOM % 30000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && ! (exec 3<>"/dev/tcp/127.0.0.1/$((p + 1))") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    die "no free port found on 127.0.0.1"
}

wait_for() {
    local what=$1 seconds=$2
    shift 2
    local n
    for ((n = 0; n < seconds * 10; n++)); do
        if "$@" 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    die "$what: not ready after ${seconds}s (logs in $WORK/logs; rerun with --keep to look)"
}

start_distcc() {
    local port
    port=$(free_port)
    mkdir -p "$WORK/distcc/state"
    chmod 1777 "$WORK/distcc"
    # setsid: distccd signals its whole process group when it stops, which
    # must not be this script's.
    setsid distccd --daemon --no-detach --listen 127.0.0.1 --port "$port" --allow 127.0.0.1 \
        --jobs "$NCPU" --log-file "$WORK/distcc/distccd.log" --log-level info \
        >"$WORK/logs/distccd.out" 2>&1 &
    PIDS+=($!)
    export DISTCC_HOSTS="127.0.0.1:$port/$JOBS" DISTCC_DIR=$WORK/distcc/state
    wait_for distccd 10 grep -q "listening on 127.0.0.1:$port" "$WORK/distcc/distccd.log"
    TOOLS+=(distcc)
}

start_icecc() {
    local dir=$WORK/icecc port
    mkdir -p "$dir"
    chmod 1777 "$dir"
    port=$(free_port)
    (cd "$dir" && icecc-create-env --gcc "$(command -v gcc)" "$(command -v g++)" >"$WORK/logs/icecc-create-env.out" 2>&1) ||
        die "icecc-create-env failed (see $WORK/logs/icecc-create-env.out)"
    local env tarballs=("$dir"/*.tar.gz)
    env=${tarballs[0]}
    [[ -f $env ]] || die "icecc-create-env made no environment"
    local net=ccroute-peers-$$
    icecc-scheduler -p "$port" -n "$net" -l "$dir/scheduler.log" -v >"$WORK/logs/icecc-scheduler.out" 2>&1 &
    PIDS+=($!)
    # The submitting daemon takes no jobs from others; the compiling one
    # plays the remote machine. ICECC_TEST_SOCKET keeps both off the system
    # daemon's socket; ICECC_TEST_REMOTEBUILD makes the client ship a job
    # to a daemon on 127.0.0.1 instead of compiling it itself.
    ICECC_TEST_SOCKET=$dir/submit.sock iceccd -s "127.0.0.1:$port" -n "$net" -p "$(free_port)" -N submit \
        --no-remote -m 1 -b "$dir/env-submit" -l "$dir/submit.log" -vv >"$WORK/logs/iceccd-submit.out" 2>&1 &
    PIDS+=($!)
    ICECC_TEST_SOCKET=$dir/worker.sock iceccd -s "127.0.0.1:$port" -n "$net" -p "$(free_port)" -N worker \
        -m "$NCPU" -b "$dir/env-worker" -l "$dir/worker.log" -vv >"$WORK/logs/iceccd-worker.out" 2>&1 &
    PIDS+=($!)
    export ICECC_TEST_SOCKET=$dir/submit.sock ICECC_TEST_REMOTEBUILD=1 ICECC_PREFERRED_HOST=worker ICECC_VERSION=$env
    wait_for "iceccd (submit)" 30 grep -q "Connected to scheduler" "$dir/submit.log"
    wait_for "iceccd (worker)" 30 grep -q "Connected to scheduler" "$dir/worker.log"
    TOOLS+=(icecc)
}

ccroute_status() {
    "$CCROUTE" status --scheduler "$CCROUTE_SCHEDULER_ADDR" --tls-dir "$WORK/ccroute/tls" --json
}

ccroute_ready() {
    local s
    s=$(ccroute_status) || return 1
    jq -e '(.agents | length) >= 1 and (.consumerds | length) >= 1' <<<"$s" >/dev/null
}

start_ccroute() {
    local dir=$WORK/ccroute
    mkdir -p "$dir"
    "$CCROUTE" certs init "$dir/tls" >"$WORK/logs/ccroute-certs.out" 2>&1 || die "ccroute certs init failed"
    local sched_args=(--listen 127.0.0.1:0 --tls-dir "$dir/tls")
    # A result cache, when this ccroute's scheduler offers one on disk.
    if "$CCROUTE" scheduler --help 2>/dev/null | grep -q -- '--cache-dir'; then
        sched_args+=(--cache-dir "$dir/cache")
    fi
    "$CCROUTE" scheduler "${sched_args[@]}" >"$dir/scheduler.out" 2>"$dir/scheduler.log" &
    PIDS+=($!)
    wait_for "ccroute scheduler" 20 grep -q "listening on" "$dir/scheduler.out"
    CCROUTE_SCHEDULER_ADDR=$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$dir/scheduler.out" | head -n 1)
    [[ -n $CCROUTE_SCHEDULER_ADDR ]] || die "cannot read the scheduler's address from $dir/scheduler.out"
    # The agent has this host's compilers: nothing to ship. Its store (in the
    # work directory, never $HOME) holds the units' inputs, which compile in
    # its sandbox at their real paths.
    local agent_args=(--scheduler "$CCROUTE_SCHEDULER_ADDR" --tls-dir "$dir/tls" --name peers-agent)
    if "$CCROUTE" agent --help 2>/dev/null | grep -q -- '--store-dir'; then
        agent_args+=(--store-dir "$dir/agent-store")
    fi
    "$CCROUTE" agent "${agent_args[@]}" >"$dir/agent.out" 2>"$dir/agent.log" &
    PIDS+=($!)
    # Default mode: local slots = CPUs, the rest remote; its direct-mode
    # cache and local tier in the work directory (each cold round includes a
    # header of its own, so no cold build can hit them).
    "$CCROUTE" consumerd --scheduler "$CCROUTE_SCHEDULER_ADDR" --tls-dir "$dir/tls" \
        --socket "$dir/consumerd.sock" --local-cache-dir "$dir/consumerd-cache" --idle-exit 0 \
        >"$dir/consumerd.out" 2>"$dir/consumerd.log" &
    PIDS+=($!)
    export CCROUTE_SOCKET=$dir/consumerd.sock
    wait_for "ccroute agent and consumerd" 20 ccroute_ready
    TOOLS+=(ccroute)
    # For the tiny jobs only: a consumerd that sends every job remote.
    if "$CCROUTE" consumerd --help 2>/dev/null | grep -q -- '--remote-only'; then
        "$CCROUTE" consumerd --scheduler "$CCROUTE_SCHEDULER_ADDR" --tls-dir "$dir/tls" \
            --socket "$dir/consumerd-remote.sock" --local-cache-dir "$dir/consumerd-remote-cache" --idle-exit 0 \
            --remote-only >"$dir/consumerd-remote.out" 2>"$dir/consumerd-remote.log" &
        PIDS+=($!)
        wait_for "the remote-only consumerd" 20 test -S "$dir/consumerd-remote.sock"
        CCROUTE_REMOTE=1
    fi
}
CCROUTE_REMOTE=0

# `ccroute stats --json` of the remote-only consumerd.
ccroute_remote_stats() {
    CCROUTE_SOCKET=$WORK/ccroute/consumerd-remote.sock "$CCROUTE" stats --json 2>/dev/null
}

# The counters of the daemon behind a tool, as "served hits": jobs the daemon
# compiled (or answered) and jobs answered from a cache.
counters() {
    case $1 in
        distcc) echo "$(grep -c 'COMPILE_OK' "$WORK/distcc/distccd.log" || true) 0" ;;
        icecc) echo "$(grep -c 'Remote compilation completed' "$WORK/icecc/worker.log" || true) 0" ;;
        ccroute)
            # Served: compiled by the agent or answered by the scheduler's
            # cache or the consumerd's; hits: answered by either cache.
            local s d
            s=$(ccroute_status) || { echo "0 0"; return; }
            d=$("$CCROUTE" stats --json 2>/dev/null | jq -r '.counters.direct_hit // 0') || d=0
            jq -r --argjson d "${d:-0}" '"\(.totals.completed + .totals.intercepted + $d) \(.totals.intercepted + $d)"' <<<"$s"
            ;;
        ccroute-remote)
            # Served: compiled remotely, from inputs or text.
            ccroute_remote_stats | jq -r '"\((.counters.remote_inputs // 0) + (.counters.remote_text // 0)) 0"' || echo "0 0"
            ;;
        ccache)
            ccache --print-stats | awk '$1 ~ /_cache_hit$/ {h += $2} END {print 0, h + 0}'
            ;;
        *) echo "0 0" ;;
    esac
}

compilers_of() {
    case $1 in
        local) echo "gcc|g++" ;;
        cpp) echo "gcc -E|g++ -E" ;;
        distcc) echo "distcc gcc|distcc g++" ;;
        icecc) echo "icecc gcc|icecc g++" ;;
        ccroute) echo "$WRAP gcc|$WRAP g++" ;;
        ccroute-remote)
            local s=$WORK/ccroute/consumerd-remote.sock
            echo "env CCROUTE_SOCKET=$s $WRAP gcc|env CCROUTE_SOCKET=$s $WRAP g++"
            ;;
        ccache) echo "ccache gcc|ccache g++" ;;
    esac
}

# One build of one corpus with one tool; appends a line to results.tsv:
# section corpus tool round seconds jobs served hits objects-digest cpu-seconds
measure() {
    local section=$1 corpus=$2 tool=$3 round=$4 header=$5
    local dir=$WORK/corpora/$corpus build=$WORK/build/$corpus
    local log=$WORK/logs/build-$section-$corpus-$tool-$round.log
    local cc cxx pair
    pair=$(compilers_of "$tool")
    cc=${pair%|*}
    cxx=${pair#*|}
    rm -rf "$build"
    local before after
    before=$(counters "$tool")
    local t0 t1 c0 c1
    c0=$(cpu_now)
    t0=$EPOCHREALTIME
    if ! make -C "$dir" -j"$JOBS" BUILD="$build" CC="$cc" CXX="$cxx" CPPFLAGS="-include $header" >"$log" 2>&1; then
        die "$tool failed to build $corpus (round $round); see $log (rerun with --keep)"
    fi
    t1=$EPOCHREALTIME
    c1=$(cpu_now)
    after=$(counters "$tool")
    local digest
    digest=$(cd "$build" && find . -name '*.o' -print0 | sort -z | xargs -0 -r md5sum | md5sum | cut -c1-12)
    local served hits
    read -r served hits < <(awk -v b="$before" -v a="$after" 'BEGIN {split(b, x, " "); split(a, y, " "); print y[1] - x[1], y[2] - x[2]}')
    local cpu=-
    [[ -n $c0 && -n $c1 ]] && cpu=$(awk -v a="$c0" -v b="$c1" 'BEGIN {printf "%.3f", b - a}')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$section" "$corpus" "$tool" "$round" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')" "${CORPUS_JOBS[$corpus]}" "$served" "$hits" "$digest" "$cpu" \
        >>"$WORK/results.tsv"
    printf '  %-7s %-8s round %s: %7.2f s wall, %s s CPU' "$corpus" "$tool" "$round" "$(tail -n 1 "$WORK/results.tsv" | cut -f5)" "$cpu" >&2
    [[ $tool == local || $tool == cpp ]] || printf '  (%s of %s jobs through the daemon, %s cache hits)' "$served" "${CORPUS_JOBS[$corpus]}" "$hits" >&2
    echo >&2
}

# Every tool compiles a C and a C++ file once, untimed: icecream installs its
# environment on the worker, every path is warm, and a tool that does not
# reach its daemon stops the run here rather than in a table.
smoke() {
    local dir=$WORK/smoke tool
    mkdir -p "$dir"
    printf '#include <stdio.h>\nint smoke_c(int x) { return printf("%%d", x); }\n' >"$dir/s.c"
    printf '#include <string>\nstd::string smoke_cxx(int x) { return std::to_string(x); }\n' >"$dir/s.cpp"
    for tool in "${TOOLS[@]}"; do
        local before after pair cc cxx
        pair=$(compilers_of "$tool")
        cc=${pair%|*}
        cxx=${pair#*|}
        before=$(counters "$tool")
        # shellcheck disable=SC2086 # the compiler may be a launcher and a compiler
        if ! { $cc -O2 -c "$dir/s.c" -o "$dir/$tool-c.o" && $cxx -O2 -c "$dir/s.cpp" -o "$dir/$tool-cxx.o"; } \
            >"$WORK/logs/smoke-$tool.log" 2>&1; then
            die "$tool cannot compile the smoke test; see $WORK/logs/smoke-$tool.log"
        fi
        after=$(counters "$tool")
        if [[ $tool == distcc || $tool == icecc ]] && ((${after%% *} - ${before%% *} < 2)); then
            die "$tool compiled the smoke test without its daemon; see $WORK/logs/smoke-$tool.log and $WORK/$tool/"
        fi
    done
}

# One round of one corpus as ratios to local gcc (ms per job for tiny jobs).
round_line() {
    local section=$1 corpus=$2 round=$3
    awk -F'\t' -v s="$section" -v c="$corpus" -v r="$round" '
        $1 == s && $2 == c && $4 == r { t[$3] = $5; jobs = $6; order[++n] = $3 }
        END {
            line = sprintf("  %-7s round %s:", c, r)
            for (i = 1; i <= n; i++) {
                k = order[i]
                if (k == "local") continue
                if (k == "cpp") line = line sprintf("  gcc -E alone %.1f ms/job", t[k] * 1000 / jobs)
                else if (c == "tiny") line = line sprintf("  %s %+.1f ms/job", k, (t[k] - t["local"]) * 1000 / jobs)
                else line = line sprintf("  %s %.2fx", k, t[k] / t["local"])
            }
            print line
        }' "$WORK/results.tsv" >&2
}

rotated() {
    local r=$1
    shift
    local list=("$@") n=$# i
    for ((i = 0; i < n; i++)); do echo "${list[(i + r) % n]}"; done
}

load_corpora() {
    local c jobs desc
    while IFS=$'\t' read -r c jobs desc; do
        CORPUS_JOBS[$c]=$jobs
        CORPUS_DESC[$c]=$desc
    done <"$WORK/corpora.tsv"
}

inner() {
    mkdir -p "$WORK/logs" "$WORK/build" "$WORK/round"
    PIDS=()
    trap inner_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    load_corpora
    printf 'JOBS=%s\nROUNDS=%s\nNCPU=%s\n' "$JOBS" "$ROUNDS" "$NCPU" >"$WORK/settings"
    cpu_meter_start
    if [[ $INSIDE == netns ]]; then
        ip link set lo up || die "cannot bring up loopback in the new network namespace"
    fi
    uptime >"$WORK/load-start"
    TOOLS=(local)
    start_distcc
    if [[ $INSIDE == netns ]]; then start_icecc; fi
    start_ccroute
    say "daemons up: ${TOOLS[*]:1} (ccroute scheduler on $CCROUTE_SCHEDULER_ADDR)"
    smoke
    : >"$WORK/results.tsv"

    local r c tool tools
    for ((r = 1; r <= ROUNDS; r++)); do
        # A per-round header: every tool compiles different text each round,
        # so these rows never measure a result cache (the warm rows do).
        printf '/* round %d */\ntypedef int peers_round_%d;\n' "$r" "$r" >"$WORK/round/$r.h"
        say "round $r of $ROUNDS"
        for c in "${CORPORA[@]}"; do
            tools=("${TOOLS[@]}")
            [[ $c == tiny ]] && tools+=(cpp)
            [[ $c == tiny ]] && ((CCROUTE_REMOTE)) && tools+=(ccroute-remote)
            for tool in $(rotated "$r" "${tools[@]}"); do
                measure cold "$c" "$tool" "$r" "$WORK/round/$r.h"
            done
            round_line cold "$c" "$r"
        done
    done

    if ((WARM)); then
        warm_rows
    fi
    if ((CCROUTE_REMOTE)); then
        ccroute_remote_stats | jq '.counters' >"$WORK/ccroute-remote-counters" || true
    fi
    uptime >"$WORK/load-end"
    echo "$EPOCHREALTIME" >"$WORK/finished"
    render
}

# The corpora with warm rows, those of the run that are among them.
WARM_LIST=(lzma lua sample)
WARM_CORPORA=()

# Every warm corpus built once (untimed) by ccache and by ccroute in its
# default mode — make -jJOBS, local slots first, so most compiles run on this
# machine and land in the consumerd's local tier — then, round after round,
# again from a clean build directory by local gcc, ccache and ccroute.
warm_rows() {
    export CCACHE_DIR=$WORK/ccache
    mkdir -p "$CCACHE_DIR"
    ccache --zero-stats >/dev/null
    local header=$WORK/round/warm.h c r tool
    printf '/* warm */\ntypedef int peers_round_warm;\n' >"$header"
    WARM_CORPORA=()
    for c in "${WARM_LIST[@]}"; do
        [[ " ${CORPORA[*]} " == *" $c "* ]] && WARM_CORPORA+=("$c")
    done
    ((${#WARM_CORPORA[@]})) || WARM_CORPORA=("${CORPORA[0]}")
    # The first builds' files must be older than the compiles that record
    # them (a file changed just before a compile is not trusted).
    sleep 1
    for c in "${WARM_CORPORA[@]}"; do
        say "warm cache: first builds of $c (untimed in the table)"
        measure prime "$c" ccache 0 "$header"
        measure prime "$c" ccroute 0 "$header"
    done
    local tools=(local ccache ccroute)
    for ((r = 1; r <= ROUNDS; r++)); do
        for c in "${WARM_CORPORA[@]}"; do
            for tool in $(rotated "$r" "${tools[@]}"); do
                measure warm "$c" "$tool" "$r" "$header"
            done
        done
    done
}

# ccroute's warm build over ccache's, paired by round: "median min max".
paired() {
    local corpus=$1
    awk -F'\t' -v c="$corpus" -v f="$STAT_FIELD" '
        $1 == "warm" && $2 == c && $3 == "ccache" { a[$4] = $f }
        $1 == "warm" && $2 == c && $3 == "ccroute" { b[$4] = $f }
        END {
            n = 0
            for (r in b) if ((r in a) && a[r] > 0) x[++n] = b[r] / a[r]
            if (n == 0) { print "- - -"; exit }
            for (i = 2; i <= n; i++) { v = x[i]; j = i - 1; while (j > 0 && x[j] > v) { x[j + 1] = x[j]; j-- } x[j + 1] = v }
            med = (n % 2) ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2
            print med, x[1], x[n]
        }' "$WORK/results.tsv"
}

# ---------------------------------------------------------------------------
# The report.
# ---------------------------------------------------------------------------

# Per-round values of one tool against local gcc in the same round:
#   ratio:    seconds / local seconds
#   overhead: (seconds - local seconds) * 1000 / jobs   (ms per job)
#   perjob:   seconds * 1000 / jobs                     (ms per job)
# then "median min max" of them.
# STAT_FIELD picks the measure: 5 wall seconds (default), 10 CPU seconds.
STAT_FIELD=5

stat() {
    local kind=$1 section=$2 corpus=$3 tool=$4
    awk -F'\t' -v kind="$kind" -v s="$section" -v c="$corpus" -v t="$tool" -v f="$STAT_FIELD" '
        $1 == s && $2 == c && $3 == "local" && $f != "-" { base[$4] = $f }
        $1 == s && $2 == c && $3 == t && $f != "-" { v[$4] = $f; jobs = $6 }
        END {
            n = 0
            for (r in v) {
                if (!(r in base)) continue
                if (kind == "ratio") x = v[r] / base[r]
                else if (kind == "overhead") x = (v[r] - base[r]) * 1000 / jobs
                else x = v[r] * 1000 / jobs
                a[++n] = x
            }
            if (n == 0) { print "- - -"; exit }
            for (i = 2; i <= n; i++) { x = a[i]; j = i - 1; while (j > 0 && a[j] > x) { a[j + 1] = a[j]; j-- } a[j + 1] = x }
            med = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
            print med, a[1], a[n]
        }' "$WORK/results.tsv"
}

# "served/jobs" summed over the timed rounds, and how many builds' objects
# differ from the local build of the same round.
served() {
    local section=$1 corpus=$2 tool=$3
    awk -F'\t' -v s="$section" -v c="$corpus" -v t="$tool" '
        $1 == s && $2 == c && $3 == "local" { d[$4] = $9 }
        $1 == s && $2 == c && $3 == t { served += $7; hits += $8; jobs += $6; rows[$4] = $9 }
        END {
            differ = 0
            for (r in rows) if ((r in d) && rows[r] != d[r]) differ++
            print served + 0, jobs + 0, hits + 0, differ
        }' "$WORK/results.tsv"
}

fmt_ratio() {
    # median min max -> "1.07× (1.03–1.12)"
    awk -v m="$1" -v lo="$2" -v hi="$3" 'BEGIN { if (m == "-") print "–"; else printf "%.2f× (%.2f–%.2f)", m, lo, hi }'
}

fmt_ms() {
    awk -v m="$1" -v lo="$2" -v hi="$3" -v sign="${4:-}" 'BEGIN {
        if (m == "-") { print "–"; exit }
        if (sign == "+") printf "%+.1f ms (%+.1f to %+.1f)", m, lo, hi
        else printf "%.1f ms (%.1f–%.1f)", m, lo, hi }'
}

tool_name() {
    case $1 in
        local) echo "local gcc" ;;
        cpp) echo "gcc -E alone" ;;
        distcc) echo "distcc" ;;
        icecc) echo "icecream" ;;
        ccroute) echo "ccroute" ;;
        ccroute-remote) echo "ccroute, every job remote (\`--remote-only\`)" ;;
        ccache) echo "ccache" ;;
    esac
}

render() {
    local report=$WORK/report.md
    local now elapsed started
    now=$(cat "$WORK/finished" 2>/dev/null || echo "$EPOCHREALTIME")
    started=$(cat "$WORK/started")
    elapsed=$(awk -v a="$started" -v b="$now" 'BEGIN {printf "%d min %02d s", (b - a) / 60, (b - a) % 60}')
    local tools=("${TOOLS[@]:1}") c tool
    {
        echo "# Benchmarks: ccroute beside distcc and icecream"
        echo
        echo "Generated by \`benches/peers.sh\` on $(date -u -d "@${now%.*}" '+%Y-%m-%d %H:%M UTC'), a run of $elapsed; do not edit by hand."
        echo
        echo "## How to reproduce"
        echo
        echo '```sh'
        echo "benches/peers.sh            # this page: 5 rounds, rewrites BENCHMARKS.md (15-30 min on 2 cores, by other load)"
        echo "benches/peers.sh --quick    # 2 rounds, no liblzma, no warm rows; prints the table only (5-10 min)"
        echo "benches/peers.sh --report DIR   # the page again from a work directory kept with --keep"
        echo '```'
        echo
        echo "These figures: \`$(cat "$WORK/command" 2>/dev/null || echo benches/peers.sh)\`."
        echo
        echo "On a fresh Debian machine with Rust and root: the script installs gcc, g++, make, distcc, icecc,"
        echo "ccache, jq and iproute2 from Debian's packages when missing, builds ccroute, fetches the C corpora"
        echo "from crates.io (cargo fetch; they stay in cargo's download cache) into a temporary directory, and"
        echo "when it ends stops what it started, by PID, and removes that directory."
        echo
        echo "## The machine"
        echo
        machine
        echo
        echo "## Setup"
        echo
        echo "- Everything runs in a network namespace that has only loopback; every daemon listens on 127.0.0.1."
        echo "- make -j$JOBS; compiler flags as each corpus's own build (\`-O2 -g\` plus the crate's defines)."
        echo "- **local gcc**: \`CC=gcc CXX=g++\`."
        echo "- **distcc**: \`CC='distcc gcc'\`, \`DISTCC_HOSTS=127.0.0.1:PORT/$JOBS\` (an address, so distcc does not run it"
        echo "  locally as it does for \`localhost\`), distccd \`--jobs $NCPU\`. Preprocesses locally, compiles on distccd."
        echo "- **icecream**: \`CC='icecc gcc'\`, icecc-scheduler and two iceccd: one that submits (\`--no-remote\`) and one"
        echo "  that compiles (\`-m $NCPU\`), \`ICECC_PREFERRED_HOST\` set to it and \`ICECC_TEST_REMOTEBUILD=1\`, without which"
        echo "  icecc compiles a job in its own process when the chosen daemon is on 127.0.0.1."
        echo "- **ccroute**: \`CC='ccroute-cc gcc'\` (the wrapper alone), a scheduler, one agent (\`--jobs\` default: $NCPU) and a consumerd in its"
        echo "  **default mode**: local slots = CPUs ($NCPU), compiles beyond them go remote while the scheduler's"
        echo "  remote window has room — as their inputs (preprocessed here once to learn which files they read;"
        echo "  the digests sent; the agent fetches what its store lacks and compiles the unmodified command in its"
        echo "  bubblewrap sandbox at the real paths). On one machine \"remote\" shares the same cores, so this"
        echo "  measures overhead, not speed-up. For the tiny jobs a second consumerd with \`--remote-only\`"
        echo "  sends every job to the agent."
        echo "- distccd and iceccd compile at their default nice level (5); ccroute's agent at 0. icecream's"
        echo "  scheduler counts only un-niced CPU as a host's load: at nice 0 its own compiles make its only worker"
        echo "  look busy and it holds jobs back."
        echo "- Rounds: in each round every tool builds every corpus from clean, in an order that rotates by round."
        echo "  A ratio is a tool's time over local gcc's time in the same round; the table gives the median and the"
        echo "  range over $ROUNDS rounds. Each round force-includes a header of its own (\`typedef int peers_round_N;\`)"
        echo "  into every compile, so no result cache can answer in these rows; the warm rows below measure caches."
        echo "- \"Through the daemon\" counts jobs the daemon's own log or status reports as compiled by it (distccd's"
        echo "  \`COMPILE_OK\`, the compiling iceccd's \`Remote compilation completed\`, ccroute's \`status\` totals)."
        echo
        echo "## Real code: build time as a ratio to local gcc"
        echo
        local header="| corpus | jobs | local gcc |" rule="|---|---:|---:|" row
        for tool in "${tools[@]}"; do header+=" $(tool_name "$tool") |"; rule+="---:|"; done
        echo "$header"
        echo "$rule"
        for c in "${CORPORA[@]}"; do
            [[ $c == tiny ]] && continue
            row="| ${CORPUS_DESC[$c]} | ${CORPUS_JOBS[$c]} | $(stat perjob cold "$c" local | awk -v n="${CORPUS_JOBS[$c]}" '{printf "%.2f s", $1 * n / 1000}') |"
            for tool in "${tools[@]}"; do
                # shellcheck disable=SC2046
                row+=" $(fmt_ratio $(stat ratio cold "$c" "$tool")) |"
            done
            echo "$row"
        done
        echo
        echo "CPU time of the same builds (every process the benchmark started: make, compilers, daemons, all in"
        echo "one cgroup), as a ratio to local gcc's: the work each tool adds. Other load on the machine moves wall"
        echo "time much more than it moves this."
        echo
        echo "$header"
        echo "$rule"
        for c in "${CORPORA[@]}"; do
            [[ $c == tiny ]] && continue
            row="| $c | ${CORPUS_JOBS[$c]} | $(STAT_FIELD=10 stat perjob cold "$c" local | awk -v n="${CORPUS_JOBS[$c]}" '{ if ($1 == "-") print "–"; else printf "%.2f s", $1 * n / 1000}') |"
            for tool in "${tools[@]}"; do
                # shellcheck disable=SC2046
                row+=" $(fmt_ratio $(STAT_FIELD=10 stat ratio cold "$c" "$tool")) |"
            done
            echo "$row"
        done
        echo
        echo "Jobs through each tool's daemon, over all rounds, and builds whose objects differ from local gcc's:"
        echo
        header="| corpus |" rule="|---|"
        for tool in "${tools[@]}"; do header+=" $(tool_name "$tool") |"; rule+="---:|"; done
        echo "$header"
        echo "$rule"
        for c in "${CORPORA[@]}"; do
            row="| $c |"
            for tool in "${tools[@]}"; do
                row+=" $(served cold "$c" "$tool" | awk '{printf "%d/%d remote, %d differ", $1, $2, $4}') |"
            done
            echo "$row"
        done
        if [[ " ${CORPORA[*]} " == *" tiny "* ]]; then
            echo
            echo "## Per-job overhead: ${CORPUS_DESC[tiny]}"
            echo
            echo "Milliseconds of wall time per job, make -j$JOBS on $NCPU CPUs; tools as time above local gcc's per job."
            echo
            echo "| | wall, ms per job | CPU, ms per job |"
            echo "|---|---:|---:|"
            # shellcheck disable=SC2046
            echo "| local gcc | $(fmt_ms $(stat perjob cold tiny local)) | $(fmt_ms $(STAT_FIELD=10 stat perjob cold tiny local)) |"
            # shellcheck disable=SC2046
            echo "| gcc -E alone (the floor: one extra preprocessing per job) | $(fmt_ms $(stat perjob cold tiny cpp)) | $(fmt_ms $(STAT_FIELD=10 stat perjob cold tiny cpp)) |"
            local tiny_tools=("${tools[@]}")
            grep -q "^cold"$'\t'"tiny"$'\t'"ccroute-remote"$'\t' "$WORK/results.tsv" && tiny_tools+=(ccroute-remote)
            for tool in "${tiny_tools[@]}"; do
                # shellcheck disable=SC2046
                echo "| $(tool_name "$tool"), above local gcc | $(fmt_ms $(stat overhead cold tiny "$tool") +) | $(fmt_ms $(STAT_FIELD=10 stat overhead cold tiny "$tool") +) |"
            done
            if [[ " ${tiny_tools[*]} " == *" ccroute-remote "* ]]; then
                local rs
                rs=$(cat "$WORK/ccroute-remote-counters" 2>/dev/null || echo "{}")
                echo
                echo "The remote-only consumerd: $(served cold tiny ccroute-remote | awk '{printf "%d of %d jobs compiled remotely", $1, $2}'),"
                echo "$(jq -r '"\(.remote_inputs // 0) from their inputs (\(((.inputs_task_bytes // 0) / ((.remote_inputs // 1) | if . == 0 then 1 else . end) / 1000 * 10 | floor) / 10) KB of list a job, \((.inputs_blob_bytes // 0) / 1000 | floor) KB of files in all), \(.remote_text // 0) from text"' <<<"$rs") over all rounds."
                echo "Each round's jobs read a round header of their own, so every job misses the direct-mode cache:"
                echo "the consumerd runs the preprocessor once per job to learn its inputs (the floor), then sends"
                echo "the digests; the agent compiles in its sandbox."
            fi
        fi
        if ((WARM)) && grep -q "^warm" "$WORK/results.tsv"; then
            echo
            echo "## Warm cache: second builds"
            echo
            echo "Each corpus built once before (untimed, make -j$JOBS), then again from a clean build directory,"
            echo "round after round: ccache (direct mode, its default) with a cache directory of its own; ccroute"
            echo "in its default mode (no \`--prefer-remote\`: local slots first, the rest through the agent),"
            echo "answered by the consumerd's direct-mode cache and local tier — a manifest per unit in the"
            echo "daemon's memory, file digests remembered by inode and stamp, no preprocessor run and no slot"
            echo "taken on a hit. Ratios are wall (and CPU) time over the local gcc build of the same round;"
            echo "*ccroute ÷ ccache* pairs the two warm builds of each round."
            echo
            echo "| corpus | tool | wall, ratio to local gcc | CPU, ratio to local gcc | cache hits |"
            echo "|---|---|---:|---:|---:|"
            local c
            for c in $(awk -F'\t' '$1 == "warm" && !seen[$2]++ {print $2}' "$WORK/results.tsv"); do
                for tool in ccache ccroute; do
                    # shellcheck disable=SC2046
                    echo "| ${c} | $(tool_name "$tool") | $(fmt_ratio $(stat ratio warm "$c" "$tool")) | $(fmt_ratio $(STAT_FIELD=10 stat ratio warm "$c" "$tool")) | $(served warm "$c" "$tool" | awk '{printf "%d/%d", $3, $2}') |"
                done
                # shellcheck disable=SC2046
                echo "| ${c} | **ccroute ÷ ccache**, paired | $(fmt_ratio $(paired "$c")) | $(fmt_ratio $(STAT_FIELD=10 paired "$c")) | |"
            done
        fi
        echo
        echo "## What the figures mean"
        echo
        echo "The goals: ccroute at most 1.05× local gcc on real code, and at most 1 ms per tiny job above the"
        echo "floor that any design preprocessing locally and compiling elsewhere pays (one extra gcc -E per job);"
        echo "clearly ahead of distcc and icecream on both. For reference, the same kind of machine measured"
        echo "distcc at 1.07–1.13× and icecream at 1.07–1.12× on real C projects, and both at about +12 ms per"
        echo "tiny job, before ccroute existed."
        echo
        verdicts
    } >"$report"
    cat "$report"
    if [[ -n $OUT ]]; then
        cp "$report" "$OUT"
        say "wrote $OUT"
    fi
}

machine() {
    local cpu mem os kernel commit
    cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
    mem=$(awk '/^MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)
    # shellcheck disable=SC1091
    os=$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}")
    kernel=$(uname -r)
    commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
    if [[ -n $(git -C "$REPO" status --porcelain -- src wire Cargo.toml Cargo.lock 2>/dev/null) ]]; then commit+=" (with local changes)"; fi
    echo "| | |"
    echo "|---|---|"
    echo "| CPUs | $NCPU × ${cpu:-unknown} |"
    echo "| memory | $mem |"
    echo "| system | $os, Linux $kernel |"
    echo "| compilers | $(gcc --version | head -n 1), GNU make $(make --version | awk 'NR == 1 {print $3}') |"
    echo "| tools | $(distcc --version | head -n 1 | awk '{print $1, $2}'), icecream $(icecc --version 2>&1 | awk 'NR == 1 {print $2}'), ccache $(ccache --version | awk 'NR == 1 {print $3}') |"
    echo "| ccroute | commit $commit, release build |"
    echo "| load average | at start: $(sed 's/.*load average: //' "$WORK/load-start"); at end: $(sed 's/.*load average: //' "$WORK/load-end" 2>/dev/null || echo '?') |"
}

verdicts() {
    local c worst="" worst_c="" m
    for c in "${CORPORA[@]}"; do
        [[ $c == tiny || $c == sample ]] && continue
        m=$(stat ratio cold "$c" ccroute | awk '{print $1}')
        [[ $m == - ]] && continue
        if [[ -z $worst ]] || awk -v a="$m" -v b="$worst" 'BEGIN {exit !(a > b)}'; then worst=$m; worst_c=$c; fi
    done
    if [[ -n $worst ]]; then
        local verdict
        verdict=$(awk -v m="$worst" 'BEGIN {print (m <= 1.05) ? "met" : "not met"}')
        local cpu_worst
        cpu_worst=$(for c in "${CORPORA[@]}"; do
            [[ $c == tiny || $c == sample ]] && continue
            STAT_FIELD=10 stat ratio cold "$c" ccroute | awk '{print $1}'
        done | awk '$1 != "-" && $1 > m {m = $1} END {printf "%.2f", m}')
        printf -- "- **Real code, goal at most 1.05× local**: ccroute's worst median on the crates' C libraries is %.2f× wall (%s): %s; its worst CPU ratio there is %s×.\n" \
            "$worst" "$worst_c" "$verdict" "$cpu_worst"
        for c in "${CORPORA[@]}"; do
            [[ $c == tiny ]] && continue
            local w p
            w=$(for tool in ccroute distcc icecc; do stat ratio cold "$c" "$tool" | awk '{print $1}'; done | paste -sd' ')
            p=$(for tool in ccroute distcc icecc; do STAT_FIELD=10 stat ratio cold "$c" "$tool" | awk '{print $1}'; done | paste -sd' ')
            awk -v c="$c" -v w="$w" -v p="$p" '
                function line(kind, v,    x, s, ahead) {
                    split(v, x, " ")
                    if (x[1] == "-") return ""
                    s = sprintf("%s ccroute %.2f×", kind, x[1])
                    if (x[2] != "-") s = s sprintf(", distcc %.2f×", x[2])
                    if (x[3] != "-") s = s sprintf(", icecream %.2f×", x[3])
                    ahead = (x[2] == "-" || x[1] < x[2]) && (x[3] == "-" || x[1] < x[3])
                    return s (ahead ? " (ccroute ahead of both)" : " (ccroute not ahead of both)")
                }
                BEGIN {
                    a = line("wall", w); b = line("CPU", p)
                    if (a != "") printf "  - %s: %s; %s.\n", c, a, b
                }'
        done
    fi
    if [[ " ${CORPORA[*]} " == *" tiny "* ]]; then
        local floor oc od oi
        floor=$(stat perjob cold tiny cpp | awk '{print $1}')
        oc=$(stat overhead cold tiny ccroute | awk '{print $1}')
        od=$(stat overhead cold tiny distcc | awk '{print $1}')
        oi=$(stat overhead cold tiny icecc | awk '{print $1}')
        awk -v f="$floor" -v oc="$oc" -v od="$od" -v oi="$oi" -v l="$(stat perjob cold tiny local | awk '{print $1}')" 'BEGIN {
            if (oc == "-" || f == "-") exit
            printf "- **Tiny jobs, goal at most 1 ms above the floor**: local gcc takes %.1f ms a job; one extra gcc -E costs %.1f ms a job, so the floor is +%.1f ms. ccroute adds %+.1f ms a job: %s.", l, f, f, oc, (oc <= f + 1) ? "met" : "not met"
            if (od != "-") printf " distcc adds %+.1f ms", od
            if (oi != "-") printf ", icecream %+.1f ms", oi
            print "."
        }'
        local orr
        orr=$(stat overhead cold tiny ccroute-remote | awk '{print $1}')
        awk -v f="$floor" -v o="$orr" 'BEGIN {
            if (o == "-" || o == "" || f == "-") exit
            printf "- **Tiny jobs, every one remote, goal below the floor**: ccroute with `--remote-only` adds %+.1f ms a job against the floor of +%.1f ms: %s.\n", o, f, (o < f) ? "met" : "not met (each job misses the direct-mode cache, so its inputs are learnt by one preprocessing here)"
        }'
        local cl cf cc cd ci
        cl=$(STAT_FIELD=10 stat perjob cold tiny local | awk '{print $1}')
        cf=$(STAT_FIELD=10 stat perjob cold tiny cpp | awk '{print $1}')
        cc=$(STAT_FIELD=10 stat overhead cold tiny ccroute | awk '{print $1}')
        cd=$(STAT_FIELD=10 stat overhead cold tiny distcc | awk '{print $1}')
        ci=$(STAT_FIELD=10 stat overhead cold tiny icecc | awk '{print $1}')
        awk -v l="$cl" -v f="$cf" -v c="$cc" -v d="$cd" -v i="$ci" 'BEGIN {
            if (c == "-" || f == "-") exit
            printf "  In CPU time: local gcc %.1f ms a job, gcc -E %.1f ms; ccroute %+.1f ms (%s)", l, f, c, (c <= f + 1) ? "within the floor + 1 ms" : "above the floor + 1 ms"
            if (d != "-") printf ", distcc %+.1f ms", d
            if (i != "-") printf ", icecream %+.1f ms", i
            print ". In default mode most tiny jobs take a local slot and skip the extra preprocessing, so ccroute can land below the floor."
        }'
    fi
    if grep -q "^warm" "$WORK/results.tsv"; then
        local c m all hits
        for c in $(awk -F'\t' '$1 == "warm" && !seen[$2]++ {print $2}' "$WORK/results.tsv"); do
            m=$(paired "$c" | awk '{print $1}')
            [[ $m == - ]] && continue
            read -r _ all hits _ < <(served warm "$c" ccroute)
            awk -v c="$c" -v m="$m" -v a="$all" -v h="$hits" 'BEGIN {
                printf "- **Warm rebuild of %s, goal every unit a hit and at most 0.8× ccache**: ccroute took %.2f× ccache'"'"'s wall time (median of the paired rounds), %d of %d units answered by a cache: %s.\n", c, m, h, a, (m <= 0.8 && h == a) ? "met" : "not met"
            }'
        done
    fi
    local tool line="" d
    for tool in "${TOOLS[@]:1}"; do
        d=$(for c in "${CORPORA[@]}"; do served cold "$c" "$tool"; done | awk '{b += $4} END {print b + 0}')
        line+="${line:+; }$(tool_name "$tool") $d"
    done
    echo "- **Objects**: builds whose objects differ from local gcc's, over all corpora and rounds: $line. ccroute"
    echo "  promises byte-identical objects. distcc and icecream compile the preprocessed text, and with \`-g\`"
    echo "  their debug information can differ (in the builds checked by hand: DWARF column numbers,"
    echo "  \`DW_AT_decl_column\`)."
    echo "- The machine is shared and noisy (see the load average above): read the ranges, not only the"
    echo "  medians; a wall ratio below 1.00 means the tool's build landed in a quieter moment than local gcc's"
    echo "  in the same round. Two effects of other load are the tools' own behaviour, not noise to average"
    echo "  away: icecream's scheduler holds jobs while its only worker looks busy (rounds with a wall ratio of"
    echo "  several × at a normal CPU ratio), and ccroute runs at most its local slots plus the scheduler's remote"
    echo "  window at once (here ${NCPU} + 1 or 2, where plain make -j$JOBS runs $JOBS compilers), so on a CPU shared"
    echo "  with other work it gets a smaller share of it than local gcc does: compare its CPU ratio."
    echo "- A CPU ratio below 1.00 (distcc and icecream on the C++ sample) is likely real rather than noise: their"
    echo "  daemons run $NCPU compiles at a time where make -j$JOBS with plain gcc runs $JOBS on $NCPU cores, and"
    echo "  oversubscribed compilers spend more CPU each (caches, switching)."
    echo "- On one machine every \"remote\" compile shares the same $NCPU cores: a distributed build can only add"
    echo "  work here (preprocessing apart from compiling, copies, protocol), so these rows measure each tool's"
    echo "  overhead, the price it charges on every build before any other machine can help."
}

# Renders the report of a kept work directory again.
report_only() {
    WORK=$REPORT_ONLY
    [[ -f $WORK/results.tsv && -f $WORK/settings ]] || die "$WORK has no results.tsv and settings"
    # shellcheck disable=SC1091
    . "$WORK/settings"
    load_corpora
    CORPORA=()
    local c _
    while IFS=$'\t' read -r c _; do CORPORA+=("$c"); done <"$WORK/corpora.tsv"
    TOOLS=(local)
    local tool
    for tool in distcc icecc ccroute; do
        grep -q "^cold"$'\t'"[a-z]*"$'\t'"$tool"$'\t' "$WORK/results.tsv" && TOOLS+=("$tool")
    done
    WARM=0
    if grep -q "^warm" "$WORK/results.tsv"; then
        WARM=1
    fi
    render
}

if [[ -n $REPORT_ONLY ]]; then
    report_only
elif [[ -n $INSIDE ]]; then
    [[ -n $WORK && -d $WORK ]] || die "--inside needs --work DIR"
    inner
else
    outer
fi
