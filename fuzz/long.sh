#!/usr/bin/env bash
# Long fuzzing: every target (or those named) for RUNS executions (10 million
# by default) from the corpus kept in fuzz/corpus/<target>, then the corpus
# minimised back into place. Prints, per target, the executions, the time,
# and whether a crash was found (its input is left in fuzz/artifacts/).
#
#   fuzz/long.sh                       # every target, 10 M runs each
#   RUNS=1000000 fuzz/long.sh session  # one target, fewer runs
set -euo pipefail
cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1
RUNS="${RUNS:-10000000}"
all="frame_decode round_trip handshake session compiler_args local_frames cache_entry"
targets="${*:-$all}"
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
cargo fuzz build >/dev/null 2>&1 || cargo fuzz build
printf '%-15s %12s %9s %10s %s\n' target executions seconds corpus result
status=0
for t in $targets; do
    mkdir -p "corpus/$t"
    start=$(date +%s)
    if cargo fuzz run "$t" "corpus/$t" -- -runs="$RUNS" -rss_limit_mb=2048 -print_final_stats=1 \
        >"$logs/$t" 2>&1; then
        result=ok
    else
        result="CRASH (see fuzz/artifacts/$t)"
        status=1
    fi
    secs=$(( $(date +%s) - start ))
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$logs/$t" | grep -o '[0-9]*$' || echo "?")
    # Keep only the inputs that add coverage.
    cargo fuzz cmin "$t" "corpus/$t" >/dev/null 2>&1 || true
    printf '%-15s %12s %9s %10s %s\n' "$t" "$execs" "$secs" "$(ls "corpus/$t" | wc -l)" "$result"
    if [ "$result" != ok ]; then tail -n 30 "$logs/$t"; fi
done
exit $status
