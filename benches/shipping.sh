#!/usr/bin/env bash
# Toolchains that travel: what an agent without the client's compiler is
# sent, and how long the first remote object takes with a cold store and a
# warm one.
#
#   benches/shipping.sh [ROUNDS]     (default 3 rounds; needs bwrap, gcc-12, gcc-11)
#
# A scheduler, an agent that offers no compiler of its own (--no-discover,
# so every toolchain is shipped to it) and a consumerd on 127.0.0.1. Per
# round: an empty store, then gcc 12's first remote object (the clock runs
# from the first compile until the scheduler counts a completed remote
# task: announce, placement, fetch, compile), then gcc 11's on the same
# store (shared files not sent again), then the agent restarted on the same
# store and gcc 12's first remote object again (warm). Prints bytes from the
# agent's log and the cold ÷ warm ratio per round.
set -euo pipefail
ROUNDS=${1:-3}
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
cargo build --release -q
B=$REPO/target/release/ccroute
WORK=$(mktemp -d -t ccroute-shipping-XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
export CCROUTE_TLS_DIR=$WORK/tls RUST_LOG=info XDG_CONFIG_HOME=$WORK/config
"$B" certs init "$WORK/tls" >/dev/null

"$B" scheduler --listen 127.0.0.1:0 --no-cache >"$WORK/sched.out" 2>"$WORK/sched.log" &
PIDS+=($!)
for _ in $(seq 100); do grep -q listening "$WORK/sched.out" && break; sleep 0.05; done
ADDR=$(awk '{print $NF}' "$WORK/sched.out")

completed() { "$B" status --json --scheduler "$ADDR" | python3 -c 'import json,sys; print(json.load(sys.stdin)["totals"]["completed"])'; }
now_ms() { date +%s%3N; }

start_agent() {
    "$B" agent --scheduler "$ADDR" --no-discover -j 2 --store-dir "$WORK/store" --scratch-dir "$WORK" \
        2>>"$WORK/agent.log" &
    AGENT=$!
    PIDS+=("$AGENT")
    for _ in $(seq 200); do
        "$B" status --json --scheduler "$ADDR" | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["agents"] else 1)' && return
        sleep 0.05
    done
    echo "agent never joined" >&2
    exit 1
}

start_consumerd() {
    rm -f "$WORK/cd.sock"
    CCROUTE_SOCKET=$WORK/cd.sock XDG_CACHE_HOME=$WORK/cd-cache "$B" consumerd --scheduler "$ADDR" \
        --local-jobs 1 --prefer-remote --no-local-cache --idle-exit 0 2>>"$WORK/cd.log" &
    CD=$!
    PIDS+=("$CD")
    for _ in $(seq 200); do [ -S "$WORK/cd.sock" ] && return; sleep 0.05; done
    echo "consumerd never made its socket" >&2
    exit 1
}

UNIT=0
# Milliseconds from the first compile with $1 until a remote task completed.
first_remote() {
    local cc=$1 before t0
    before=$(completed)
    t0=$(now_ms)
    while (($(completed) == before)); do
        UNIT=$((UNIT + 1))
        printf 'int f%d(int x) { return x * %d; }\n' "$UNIT" "$UNIT" >"$WORK/u$UNIT.c"
        CCROUTE_SOCKET=$WORK/cd.sock "$B" "$cc" -O2 -c "$WORK/u$UNIT.c" -o "$WORK/u$UNIT.o"
        if (($(now_ms) - t0 > 60000)); then
            echo "no remote object within 60 s" >&2
            exit 1
        fi
    done
    echo $(($(now_ms) - t0))
}

shipped() { grep "shipped toolchain ready" "$WORK/agent.log" | sed 's/\x1b\[[0-9;]*m//g' | grep "$1" | tail -1 |
    sed -n 's/.*files=\([0-9]*\) bytes=\([0-9]*\) fetched_blobs=\([0-9]*\) fetched_bytes=\([0-9]*\) wire_bytes=\([0-9]*\) ms=\([0-9]*\).*/\1 files, \2 bytes; sent \3 blobs, \4 bytes, \5 on the wire, fetched in \6 ms/p'; }

echo "ccroute $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet || echo ' with local changes'), $ROUNDS rounds"
for r in $(seq "$ROUNDS"); do
    rm -rf "$WORK/store"
    : >"$WORK/agent.log"
    start_agent
    start_consumerd
    cold=$(first_remote gcc-12)
    g11=$(first_remote gcc-11)
    kill "$AGENT" "$CD"
    wait "$AGENT" "$CD" 2>/dev/null || true
    start_agent
    start_consumerd
    warm=$(first_remote gcc-12)
    kill "$AGENT" "$CD"
    wait "$AGENT" "$CD" 2>/dev/null || true
    echo "round $r: gcc 12 $(shipped 'gcc 12')"
    echo "round $r: gcc 11 $(shipped 'gcc 11')"
    awk -v c="$cold" -v w="$warm" -v e="$g11" -v r="$r" 'BEGIN { printf "round %d: first remote object: cold store %d ms, warm store %d ms (cold / warm %.2f); gcc 11 after gcc 12 %d ms\n", r, c, w, c / w, e }'
done
