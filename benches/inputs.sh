#!/usr/bin/env bash
# Inputs that travel: bytes on the wire per unit and build time, units sent
# as their inputs against units sent as preprocessed text, in one run.
#
#   benches/inputs.sh [ROUNDS]     (default 3 rounds; needs bwrap, gcc, g++, make)
#
# A scheduler (no result cache), an agent and a consumerd that sends every
# unit remote (--remote-only), on 127.0.0.1, build the bundled sample
# project (C and C++, -O2 -g) with make -j4:
#
#   inputs, first  the agent's store empty: each unit's list of digests,
#                  and every file the agent lacks (a build's headers once);
#   inputs, again  the same store, the consumerd's own cache cleared (so
#                  every unit goes remote again): lists only;
#   text           an agent that cannot take inputs (--no-shipping): each
#                  unit's compressed preprocessed text, as before.
#
# Bytes come from the consumerd's counters (`ccroute stats --json`): task
# frames sent (header, spec or list, payload) and inputs fetched from it
# (compressed, as sent). Per round it prints bytes per unit and wall time
# of each build as a ratio to the text build of the same round.
#
# Then 200 tiny units (one function, <stdio.h>; a header of the round's
# own, so that no cache answers), make -j8, every unit remote: milliseconds
# a unit above plain gcc, as inputs and as text, and `gcc -E` alone (the
# preprocessing each unit pays here to learn its inputs).
set -euo pipefail
ROUNDS=${1:-3}
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
cargo build --release -q
B=$REPO/target/release/ccroute
WORK=$(mktemp -d -t ccroute-inputs-XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
export CCROUTE_TLS_DIR=$WORK/tls RUST_LOG=info XDG_CONFIG_HOME=$WORK/config
export CCROUTE_SOCKET=$WORK/cd.sock XDG_CACHE_HOME=$WORK/cache
"$B" certs init "$WORK/tls" >/dev/null

"$B" scheduler --listen 127.0.0.1:0 --no-cache >"$WORK/sched.out" 2>"$WORK/sched.log" &
PIDS+=($!)
for _ in $(seq 100); do grep -q listening "$WORK/sched.out" && break; sleep 0.05; done
ADDR=$(awk '{print $NF}' "$WORK/sched.out")

agents() { "$B" status --json --scheduler "$ADDR" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["agents"]))'; }
counter() { "$B" stats --json | python3 -c "import json,sys; print(json.load(sys.stdin)['counters'].get('$1', 0))"; }

AGENT=
start_agent() {
    [[ -n $AGENT ]] && { kill "$AGENT"; wait "$AGENT" 2>/dev/null || true; }
    for _ in $(seq 100); do [[ $(agents) == 0 ]] && break; sleep 0.05; done
    "$B" agent --scheduler "$ADDR" -j 2 --store-dir "$WORK/store" "$@" 2>>"$WORK/agent.log" &
    AGENT=$!
    PIDS+=("$AGENT")
    for _ in $(seq 200); do [[ $(agents) == 1 ]] && return; sleep 0.05; done
    echo "agent never joined" >&2
    exit 1
}

"$B" consumerd --scheduler "$ADDR" --local-jobs 1 --remote-only --idle-exit 0 2>>"$WORK/cd.log" &
PIDS+=($!)
for _ in $(seq 200); do [ -S "$WORK/cd.sock" ] && break; sleep 0.05; done

cp -r sample "$WORK/sample"
UNITS=$(cd "$WORK/sample" && make -s -n CC=gcc CXX=g++ 2>/dev/null | grep -c -- ' -c ' || true)

# One build; prints "seconds units task-bytes blob-bytes" for the units sent the way asked.
build() {
    local way=$1 t0 t1 n0 n1 k0 k1 b0 b1
    "$B" cache clear >/dev/null
    make -s -C "$WORK/sample" clean >/dev/null 2>&1 || true
    n0=$(counter "remote_$way") k0=$(counter "${way}_task_bytes") b0=$(counter inputs_blob_bytes)
    t0=$EPOCHREALTIME
    make -s -C "$WORK/sample" -j4 CC="$B gcc" CXX="$B g++" CFLAGS="-O2 -g" CXXFLAGS="-O2 -g" >"$WORK/build.log" 2>&1 ||
        { cat "$WORK/build.log" >&2; exit 1; }
    t1=$EPOCHREALTIME
    n1=$(counter "remote_$way") k1=$(counter "${way}_task_bytes") b1=$(counter inputs_blob_bytes)
    awk -v a="$t0" -v b="$t1" -v n=$((n1 - n0)) -v k=$((k1 - k0)) -v bl=$((b1 - b0)) 'BEGIN {printf "%.3f %d %d %d\n", b - a, n, k, bl}'
}

echo "benches/inputs.sh at $(git -C "$REPO" rev-parse --short HEAD): the bundled sample ($UNITS units), -O2 -g, make -j4, every unit remote"
for r in $(seq "$ROUNDS"); do
    rm -rf "$WORK/store"
    start_agent
    read -r t_first n_first k_first b_first < <(build inputs)
    read -r t_again n_again k_again b_again < <(build inputs)
    start_agent --no-shipping
    read -r t_text n_text k_text _ < <(build text)
    awk -v r="$r" -v tf="$t_first" -v nf="$n_first" -v kf="$k_first" -v bf="$b_first" \
        -v ta="$t_again" -v na="$n_again" -v ka="$k_again" -v ba="$b_again" \
        -v tt="$t_text" -v nt="$n_text" -v kt="$k_text" 'BEGIN {
        printf "round %d:\n", r
        printf "  inputs, first: %d units remote as inputs, %.1f KB a unit on the wire (list %.1f KB + files %.1f KB), %.2fx the text build'"'"'s time\n", nf, (kf + bf) / (nf ? nf : 1) / 1000, kf / (nf ? nf : 1) / 1000, bf / (nf ? nf : 1) / 1000, tf / tt
        printf "  inputs, again: %d units remote as inputs, %.1f KB a unit on the wire (list %.1f KB + files %.1f KB), %.2fx the text build'"'"'s time\n", na, (ka + ba) / (na ? na : 1) / 1000, ka / (na ? na : 1) / 1000, ba / (na ? na : 1) / 1000, ta / tt
        printf "  text:          %d units remote as text, %.1f KB a unit on the wire (compressed text), %.2f s\n", nt, kt / (nt ? nt : 1) / 1000, tt
    }'
done

TINY=$WORK/tiny
mkdir -p "$TINY"
for i in $(seq -w 0 199); do
    printf '#include <stdio.h>\nint tiny_%s(int x) { return printf("%%d\\n", x * %d); }\n' "$i" "$((10#$i))" >"$TINY/t$i.c"
done
printf 'OBJS := $(patsubst %%.c,%%.o,$(wildcard t*.c))\nall: $(OBJS)\n%%.o: %%.c\n\t$(CC) -O2 $(EXTRA) -c $< -o $@\n' >"$TINY/Makefile"
# Milliseconds a tiny unit, make -j8, with CC and the round's header.
tiny() {
    local cc=$1 header=$2 t0 t1
    rm -f "$TINY"/*.o
    t0=$EPOCHREALTIME
    make -s -C "$TINY" -j8 CC="$cc" EXTRA="-include $header" >"$WORK/tiny.log" 2>&1 || { cat "$WORK/tiny.log" >&2; exit 1; }
    t1=$EPOCHREALTIME
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", (b - a) * 1000 / 200}'
}
echo "tiny units (200, make -j8), every one remote; ms a unit above plain gcc in the same round:"
for r in $(seq "$ROUNDS"); do
    "$B" cache clear >/dev/null
    start_agent
    printf '/* %s */ typedef int tiny_round_%s_a;\n' "$r" "$r" >"$WORK/ra$r.h"
    printf '/* %s */ typedef int tiny_round_%s_b;\n' "$r" "$r" >"$WORK/rb$r.h"
    printf '/* %s */ typedef int tiny_round_%s_c;\n' "$r" "$r" >"$WORK/rc$r.h"
    l=$(tiny gcc "$WORK/ra$r.h")
    e=$(tiny "gcc -E" "$WORK/ra$r.h")
    i=$(tiny "$B gcc" "$WORK/rb$r.h")
    start_agent --no-shipping
    t=$(tiny "$B gcc" "$WORK/rc$r.h")
    awk -v r="$r" -v l="$l" -v e="$e" -v i="$i" -v t="$t" 'BEGIN {
        printf "  round %d: plain gcc %.1f ms; gcc -E alone %.1f ms (the floor); as inputs %+.1f ms; as text %+.1f ms\n", r, l, e, i - l, t - l
    }'
done
echo "consumerd: $("$B" stats --json | python3 -c 'import json,sys; c=json.load(sys.stdin)["counters"]; print(", ".join("%s %s" % (k, c.get(k, 0)) for k in ("remote_inputs", "remote_text", "local", "fallback")))')"
