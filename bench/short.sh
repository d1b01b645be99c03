#!/usr/bin/env bash
# Every bench in its short mode (SHORT=1: the debug build, the smallest parameters),
# as CI runs them so that none rots: each must run to its end and print its figures. No
# figure is asserted here; the figures are docs/performance.md's, from full runs.
#
#   bash bench/short.sh              # all of them
#   bash bench/short.sh udp aqm      # some
set -euo pipefail
cd "$(dirname "$0")/.."
BENCHES=("$@")
# The longest first, so that lanes (below) end together.
[ ${#BENCHES[@]} -gt 0 ] || BENCHES=(emulator iperf3_interop engine watch udp scale far sweep evidence aqm latency topology)
# LANES=N runs them in N lanes side by side, each taking the next bench when it is free,
# as CI does beside its tests; each bench's output is printed whole, in the list's
# order, at the end.
LANES=${LANES:-1}
run_one() {
    local bench=$1 start=$SECONDS out
    echo "=== bench/$bench.sh (short)"
    if out=$(SHORT=1 bash "bench/$bench.sh" 2>&1) && [ -n "$out" ]; then
        echo "$out"
        echo "=== bench/$bench.sh: ran in $((SECONDS - start)) s"
    else
        echo "$out"
        echo "=== bench/$bench.sh: FAILED (exit status, or nothing printed)"
        return 1
    fi
}
outputs=$(mktemp -d)
trap 'rm -rf "$outputs"' EXIT
export -f run_one
export outputs
printf '%s\n' "${BENCHES[@]}" | xargs -P "$LANES" -I {} bash -c \
    'run_one {} >"$outputs/{}.out" 2>&1 || echo {} >>"$outputs/failed"'
for bench in "${BENCHES[@]}"; do
    cat "$outputs/$bench.out"
done
if [ -s "$outputs/failed" ]; then
    echo "benches that failed: $(tr '\n' ' ' <"$outputs/failed")" >&2
    exit 1
fi
