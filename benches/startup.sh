#!/usr/bin/env bash
# Starting up: how long an agent takes from launch to ready (finding this
# host's compilers, probing and digesting each, opening its executor), and
# how long the first compile through a consumerd that is not running yet
# takes (the wrapper starts it; it identifies the compiler before it can
# answer), for the working tree against a baseline revision, in turns.
#
#   benches/startup.sh [BASELINE_REV] [ROUNDS]   (default HEAD~1, 5 rounds)
#
# Both are release builds of this package's `ccroute`, the baseline's in a
# target directory of its own (target/startup-baseline, kept: the first run
# builds everything, later ones what changed). The agent is started
# with --no-speed-probe --no-shipping (the probe's two compiles and the
# sandbox's check are not what is measured) against a scheduler address
# nothing listens on (127.0.0.1:1); the clock stops at its "executor ready"
# line, before it dials. The consumerd gets a home, runtime and cache
# directory of its own each round, so it starts anew and knows no compiler;
# the compile is `gcc -c` of an empty main. Prints each round and the ratio
# of the medians, working tree ÷ baseline (below 1: faster); which of the
# two goes first alternates by round. A start or a compile that fails stops
# the bench with what it printed.
set -euo pipefail
BASE=${1:-HEAD~1}
ROUNDS=${2:-5}
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
# Resolved: the daemons' command lines name it so, and pkill matches them.
WORK=$(realpath "$(mktemp -d -t ccroute-startup-XXXXXX)")
cleanup() {
    pkill -f "^$WORK/[a-z-]+/ccroute " 2>/dev/null || true
    git worktree remove --force "$WORK/tree" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# Not this tree's target directory: cargo knows the workspace's crates by
# their relative paths, and would take one tree's build of them for the other's.
git worktree add -q --detach "$WORK/tree" "$BASE"
(cd "$WORK/tree" && CARGO_TARGET_DIR=$REPO/target/startup-baseline cargo build --release -q --bin ccroute)
mkdir -p "$WORK/base" "$WORK/tree-now"
cp target/startup-baseline/release/ccroute "$WORK/base/ccroute"
cargo build --release -q --bin ccroute
cp target/release/ccroute "$WORK/tree-now/ccroute"
"$WORK/base/ccroute" certs init "$WORK/tls" >/dev/null
printf 'int main(void) { return 0; }\n' > "$WORK/t.c"

now() { date +%s%N; }

# Stops the processes whose command line matches $1 and waits until they are gone.
stop_all() {
    pkill -f "$1" 2>/dev/null || true
    for _ in $(seq 100); do
        pgrep -f "$1" >/dev/null || return 0
        sleep 0.05
    done
    pkill -9 -f "$1" 2>/dev/null || true
}

# Milliseconds from launch to the agent's "executor ready"; nothing if it
# never said so (in 60 s).
agent_ms() {
    local bin=$1 start line
    start=$(now)
    while IFS= read -r line; do
        echo "$line" >> "$WORK/agent.log"
        if [[ $line == *"executor ready"* ]]; then
            echo $(( ($(now) - start) / 1000000 ))
            break
        fi
    done < <(RUST_LOG=info timeout 60 "$bin" agent --scheduler 127.0.0.1:1 --tls-dir "$WORK/tls" \
        --no-speed-probe --no-shipping --scratch-dir "$WORK" 2>&1)
    stop_all "^$bin agent"
}

# Milliseconds of the first compile through a consumerd started for it.
compile_ms() {
    local bin=$1 home=$WORK/home-$RANDOM start ms
    mkdir -p "$home"
    start=$(now)
    if ! (cd "$WORK" && HOME=$home XDG_RUNTIME_DIR=$home XDG_CACHE_HOME=$home/cache XDG_CONFIG_HOME=$home/config \
        "$bin" gcc -c t.c -o "$home/t.o") >> "$WORK/compile.log" 2>&1 || [[ ! -s $home/t.o ]]; then
        stop_all "^$bin consumerd"
        return
    fi
    ms=$(( ($(now) - start) / 1000000 ))
    stop_all "^$bin consumerd"
    rm -rf "$home"
    echo "$ms"
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "startup: working tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ', changed')) against $BASE ($(git rev-parse --short "$BASE")), $ROUNDS rounds in turns, on $(nproc) CPUs"
# One measure of each build, in the order the round gives; stops the bench
# when one failed.
pair() {
    local what=$1 first second a b
    if ((r % 2)); then first=base second=tree-now; else first=tree-now second=base; fi
    a=$("$what" "$WORK/$first/ccroute")
    b=$("$what" "$WORK/$second/ccroute")
    if [[ -z $a || -z $b ]]; then
        echo "startup: $what failed in round $r; its output:" >&2
        tail -n 20 "$WORK/agent.log" "$WORK/compile.log" 2>/dev/null >&2
        exit 1
    fi
    if ((r % 2)); then echo "$a $b"; else echo "$b $a"; fi
}

declare -a AB AT CB CT
for ((r = 1; r <= ROUNDS; r++)); do
    agents=$(pair agent_ms)
    compiles=$(pair compile_ms)
    AB+=("${agents% *}") AT+=("${agents#* }") CB+=("${compiles% *}") CT+=("${compiles#* }")
    echo "round $r: agent ready ${AB[-1]} ms -> ${AT[-1]} ms; first compile via a new consumerd ${CB[-1]} ms -> ${CT[-1]} ms"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
mab=$(printf '%s\n' "${AB[@]}" | median); mat=$(printf '%s\n' "${AT[@]}" | median)
mcb=$(printf '%s\n' "${CB[@]}" | median); mct=$(printf '%s\n' "${CT[@]}" | median)
echo "agent ready: median $mab ms -> $mat ms, $(ratio "$mat" "$mab")x"
echo "first compile via a new consumerd: median $mcb ms -> $mct ms, $(ratio "$mct" "$mcb")x"
