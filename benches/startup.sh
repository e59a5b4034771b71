#!/usr/bin/env bash
# Starting up: how long an agent takes from launch to ready (finding this
# host's compilers, probing and digesting each, opening its executor), and
# how long the first compile through a consumerd that is not running yet
# takes (the wrapper starts it; it identifies the compiler before it can
# answer), for the working tree against a baseline revision, in turns.
#
#   benches/startup.sh [BASELINE_REV] [ROUNDS]   (default HEAD~1, 5 rounds)
#
# Both are release builds of this package's `ccroute`. The agent is started
# with --no-speed-probe --no-shipping (the probe's two compiles and the
# sandbox's check are not what is measured) against a scheduler address
# nothing listens on (127.0.0.1:1); the clock stops at its "executor ready"
# line, before it dials. The consumerd gets a home, runtime and cache
# directory of its own each round, so it starts anew and knows no compiler;
# the compile is `gcc -c` of an empty main. Prints each round and the ratio
# of the medians, working tree ÷ baseline (below 1: faster).
set -euo pipefail
BASE=${1:-HEAD~1}
ROUNDS=${2:-5}
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
WORK=$(mktemp -d -t ccroute-startup-XXXXXX)
cleanup() {
    pkill -f "^$WORK/[a-z-]+/ccroute " 2>/dev/null || true
    git worktree remove --force "$WORK/tree" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# The baseline is built in a worktree on this tree's target directory (only
# this package is rebuilt), then the working tree.
git worktree add -q --detach "$WORK/tree" "$BASE"
(cd "$WORK/tree" && CARGO_TARGET_DIR=$REPO/target cargo build --release -q --bin ccroute)
mkdir -p "$WORK/base" "$WORK/tree-now"
cp target/release/ccroute "$WORK/base/ccroute"
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

# Milliseconds from launch to the agent's "executor ready".
agent_ms() {
    local bin=$1 start line
    start=$(now)
    while IFS= read -r line; do
        if [[ $line == *"executor ready"* ]]; then
            echo $(( ($(now) - start) / 1000000 ))
            break
        fi
    done < <(RUST_LOG=info "$bin" agent --scheduler 127.0.0.1:1 --tls-dir "$WORK/tls" \
        --no-speed-probe --no-shipping --scratch-dir "$WORK" 2>&1)
    stop_all "^$bin agent"
}

# Milliseconds of the first compile through a consumerd started for it.
compile_ms() {
    local bin=$1 home=$WORK/home-$RANDOM start ms
    mkdir -p "$home"
    start=$(now)
    (cd "$WORK" && HOME=$home XDG_RUNTIME_DIR=$home XDG_CACHE_HOME=$home/cache XDG_CONFIG_HOME=$home/config \
        "$bin" gcc -c t.c -o "$home/t.o")
    ms=$(( ($(now) - start) / 1000000 ))
    stop_all "^$bin consumerd"
    rm -rf "$home"
    echo "$ms"
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "startup: working tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ', changed')) against $BASE ($(git rev-parse --short "$BASE")), $ROUNDS rounds in turns, on $(nproc) CPUs"
declare -a AB AT CB CT
for ((r = 1; r <= ROUNDS; r++)); do
    AB+=("$(agent_ms "$WORK/base/ccroute")")
    AT+=("$(agent_ms "$WORK/tree-now/ccroute")")
    CB+=("$(compile_ms "$WORK/base/ccroute")")
    CT+=("$(compile_ms "$WORK/tree-now/ccroute")")
    echo "round $r: agent ready ${AB[-1]} ms -> ${AT[-1]} ms; first compile via a new consumerd ${CB[-1]} ms -> ${CT[-1]} ms"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
mab=$(printf '%s\n' "${AB[@]}" | median); mat=$(printf '%s\n' "${AT[@]}" | median)
mcb=$(printf '%s\n' "${CB[@]}" | median); mct=$(printf '%s\n' "${CT[@]}" | median)
echo "agent ready: median $mab ms -> $mat ms, $(ratio "$mat" "$mab")x"
echo "first compile via a new consumerd: median $mcb ms -> $mct ms, $(ratio "$mct" "$mcb")x"
