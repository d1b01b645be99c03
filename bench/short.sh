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
[ ${#BENCHES[@]} -gt 0 ] || BENCHES=(engine iperf3_interop udp emulator sweep latency evidence aqm scale far watch)
# LANES=N runs them in N lanes side by side (bench i in lane i mod N), as CI does beside
# its tests; each bench's output is printed whole, in the list's order, at the end.
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
for ((lane = 0; lane < LANES; lane++)); do
    (
        for ((i = lane; i < ${#BENCHES[@]}; i += LANES)); do
            bench=${BENCHES[i]}
            run_one "$bench" >"$outputs/$bench.out" 2>&1 || echo "$bench" >>"$outputs/failed"
        done
    ) &
done
wait
for bench in "${BENCHES[@]}"; do
    cat "$outputs/$bench.out"
done
if [ -s "$outputs/failed" ]; then
    echo "benches that failed: $(tr '\n' ' ' <"$outputs/failed")" >&2
    exit 1
fi
