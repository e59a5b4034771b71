#!/usr/bin/env bash
# Long fuzzing: every target (or those named) for RUNS executions (10 million
# by default) from the corpus kept in fuzz/corpus/<target>, then the corpus
# minimised back into place. Prints, per target, the executions, the time,
# and whether a crash was found (its input is left in fuzz/artifacts/).
#
#   fuzz/long.sh                       # every target, 10 M runs each
#   RUNS=1000000 fuzz/long.sh session  # one target, fewer runs
#
# JOBS=N splits a target's runs among N fuzzer processes sharing its corpus
# (each picks up what the others find); the executions printed are their sum.
# SANITIZER=none drops AddressSanitizer (2-3x faster; it only finds
# something where unsafe code runs — the scheduler core has none).
set -euo pipefail
cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1
RUNS="${RUNS:-10000000}"
JOBS="${JOBS:-1}"
SANITIZER="${SANITIZER:-address}"
all="frame_decode round_trip handshake session compiler_args local_frames cache_entry"
targets="${*:-$all}"
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
cargo fuzz build -s "$SANITIZER" >/dev/null 2>&1 || cargo fuzz build -s "$SANITIZER"
printf '%-15s %12s %9s %10s %s\n' target executions seconds corpus result
status=0
for t in $targets; do
    mkdir -p "corpus/$t"
    start=$(date +%s)
    pids=()
    for j in $(seq 1 "$JOBS"); do
        cargo fuzz run -s "$SANITIZER" "$t" "corpus/$t" -- -runs=$(( RUNS / JOBS )) -rss_limit_mb=2048 \
            -print_final_stats=1 >"$logs/$t.$j" 2>&1 &
        pids+=($!)
    done
    result=ok
    for j in "${!pids[@]}"; do
        if ! wait "${pids[$j]}"; then
            result="CRASH (see fuzz/artifacts/$t; log of job $((j + 1)) below)"
            crashed="$logs/$t.$((j + 1))"
            status=1
        fi
    done
    secs=$(( $(date +%s) - start ))
    execs=$(cat "$logs/$t".* | grep -o 'stat::number_of_executed_units: *[0-9]*' | grep -o '[0-9]*$' \
        | awk '{ n += $1 } END { print n ? n : "?" }')
    # Keep only the inputs that add coverage.
    cargo fuzz cmin -s "$SANITIZER" "$t" "corpus/$t" >/dev/null 2>&1 || true
    printf '%-15s %12s %9s %10s %s\n' "$t" "$execs" "$secs" "$(ls "corpus/$t" | wc -l)" "$result"
    if [ "$result" != ok ]; then tail -n 30 "$crashed"; fi
done
exit $status
