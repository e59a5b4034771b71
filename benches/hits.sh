#!/usr/bin/env bash
# A direct-mode hit, the whole of a warm rebuild's compile: how long one
# takes through `ccroute gcc`, through `ccroute-cc gcc` (the wrapper alone,
# without the daemons linked in) and through `ccache gcc`, each the same
# compile of a small C file with three system headers, answered from its
# cache, run N times in a row; R rounds, which tool goes first turning
# round by round. Prints each round's milliseconds per hit and the ratios
# of the medians.
#
#   benches/hits.sh [N] [R] [UNIT]   (default 200 hits, 5 rounds, UNIT small)
#
# UNIT `large`: the bundled sample's src/cxx/text/json.cpp instead
# (C++17, -O2 -g, its project and standard headers): an object of ~2.8 MB,
# where moving the bytes weighs more than the lookup.
#
# Release builds of this tree's binaries. The consumerd (started here, with
# a cache directory of its own, no scheduler) and ccache (CCACHE_DIR of its
# own) are primed first, and each tool's hits are counted after: a round
# where a compile was not a hit stops the bench. Every compile writes the
# same object (ccroute keys a unit on its arguments, -o included), over the
# last one, for all three alike.
set -euo pipefail

N=${1:-200}
ROUNDS=${2:-5}
UNIT=${3:-small}
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
cargo build --release --bins -q
B=$REPO/target/release
command -v ccache >/dev/null || { echo "hits: ccache is not installed (Debian: apt-get install ccache)" >&2; exit 1; }

WORK=$(mktemp -d -t ccroute-hits-XXXXXX)
CONSUMERD=
cleanup() {
    [[ -n $CONSUMERD ]] && kill "$CONSUMERD" 2>/dev/null && wait "$CONSUMERD" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

export CCROUTE_SOCKET=$WORK/consumerd.sock CCACHE_DIR=$WORK/ccache
"$B/ccroute" consumerd --socket "$CCROUTE_SOCKET" --local-cache-dir "$WORK/cache" --idle-exit 0 \
    >"$WORK/consumerd.out" 2>"$WORK/consumerd.log" &
CONSUMERD=$!
for _ in $(seq 100); do [[ -S $CCROUTE_SOCKET ]] && break; sleep 0.05; done
[[ -S $CCROUTE_SOCKET ]] || { echo "hits: the consumerd did not start:" >&2; cat "$WORK/consumerd.log" >&2; exit 1; }

cd "$WORK"
case $UNIT in
    small)
        printf '#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\nint f(const char *s) { return (int)strlen(s) + atoi(s); }\n' >a.c
        COMPILE=(gcc -O2 -c a.c -o a.o)
        ;;
    large)
        cp "$REPO/sample/src/cxx/text/json.cpp" a.cpp
        COMPILE=(g++ -std=c++17 -O2 -g "-I$REPO/sample/include" -c a.cpp -o a.o)
        ;;
    *) echo "hits: UNIT is small or large, not $UNIT" >&2; exit 2 ;;
esac
# Older than any compile: a source written this second is not cached.
touch -d '-1 min' a.c*

direct_hits() { "$B/ccroute" stats --json | sed -n 's/.*"direct_hit":\([0-9]*\).*/\1/p'; }
ccache_hits() { ccache --print-stats | awk '$1 == "direct_cache_hit" {print $2}'; }
# Waits until the consumerd has recorded a compile (it does so after the wrapper exits).
recorded() { "$B/ccroute" stats --json | sed -n 's/.*"recorded":\([0-9]*\).*/\1/p'; }

run() { # tool: N compiles
    local i tool
    case $1 in ccache) tool=ccache ;; *) tool=$B/$1 ;; esac
    for ((i = 0; i < N; i++)); do "$tool" "${COMPILE[@]}"; done
}
hits_of() { case $1 in ccache) ccache_hits ;; *) direct_hits ;; esac; }

# Primed: a miss that records, then a hit for each.
"$B/ccroute-cc" "${COMPILE[@]}"
for _ in $(seq 200); do [[ $(recorded) -ge 1 ]] && break; sleep 0.05; done
ccache "${COMPILE[@]}"
for t in ccroute ccroute-cc ccache; do run "$t" >/dev/null; done

now() { date +%s%N; }
declare -A MS
TOOLS=(ccroute ccroute-cc ccache)
echo "hits: $N direct-mode hits of the $UNIT unit ($(stat -c %s a.o) bytes of object) per tool and round, $ROUNDS rounds, on $(nproc) CPUs ($(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD || echo ', changed'))"
for ((r = 1; r <= ROUNDS; r++)); do
    line="round $r:"
    for ((k = 0; k < 3; k++)); do
        t=${TOOLS[$(((r + k) % 3))]}
        before=$(hits_of "$t")
        start=$(now)
        run "$t"
        ms=$(awk -v ns=$(($(now) - start)) -v n="$N" 'BEGIN { printf "%.3f", ns / n / 1e6 }')
        got=$(($(hits_of "$t") - before))
        if ((got != N)); then
            echo "hits: $t answered $got of $N compiles from its cache in round $r" >&2
            exit 1
        fi
        MS[$t]+="$ms "
        line+=" $t $ms ms"
    done
    echo "$line"
done

median() { tr ' ' '\n' | grep . | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
a=$(median <<<"${MS[ccroute]}")
l=$(median <<<"${MS[ccroute-cc]}")
c=$(median <<<"${MS[ccache]}")
echo "median ms per hit: ccroute $a, ccroute-cc $l, ccache $c"
awk -v a="$a" -v l="$l" -v c="$c" 'BEGIN {
    printf "ccroute-cc ÷ ccroute %.2f; ccroute-cc ÷ ccache %.2f; ccroute ÷ ccache %.2f\n", l / a, l / c, a / c
}'
