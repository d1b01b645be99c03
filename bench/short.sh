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
failed=()
for bench in "${BENCHES[@]}"; do
    echo "=== bench/$bench.sh (short)"
    start=$SECONDS
    if out=$(SHORT=1 bash "bench/$bench.sh" 2>&1) && [ -n "$out" ]; then
        echo "$out"
        echo "=== bench/$bench.sh: ran in $((SECONDS - start)) s"
    else
        echo "$out"
        echo "=== bench/$bench.sh: FAILED (exit status, or nothing printed)"
        failed+=("$bench")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "benches that failed: ${failed[*]}" >&2
    exit 1
fi
