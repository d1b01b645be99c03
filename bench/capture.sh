#!/usr/bin/env bash
# What a capture at the emulator costs: a run's throughput through a path with and
# without --capture, the two interleaved so drift hits both alike. Every packet passes
# the link model (rate and queue), so the capture records each one.
#
# Prints each repetition, then the medians, their ratio and what the captures held.
#
#   bash bench/capture.sh
#   PATH_SPEC="rtt 20ms rate 10gbit queue 1bdp" CC=cubic REPS=7 DUR=5 bash bench/capture.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PATH_SPEC=${PATH_SPEC:-"rtt 20ms rate 1gbit queue 1bdp"}
REPS=${REPS:-5}
DUR=${DUR:-4}
CC=${CC:-bbr}
cargo build --release -q
BIN=$PWD/target/release/tcplab
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT

# Received bit/s of one run, and what its capture held ("packets overflow" per direction).
run() {
    "$BIN" run --path "$PATH_SPEC" -t "${DUR}s" -C "$CC" --json --db "$DIR/runs.db" "$@" |
        python3 -c '
import json, sys
v = json.load(sys.stdin)
caps = [v["path"][d].get("capture") or {} for d in ("up", "down")]
print(v["summary"]["received_bps"], sum(c.get("packets", 0) for c in caps), sum(c.get("overflow", 0) for c in caps))'
}

median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

: >"$DIR/off"
: >"$DIR/on"
echo "| rep | without capture (Mbit/s) | with capture (Mbit/s) | packets captured | overflow |"
echo "|---|---|---|---|---|"
for rep in $(seq "$REPS"); do
    # Each goes first every other time: a run's predecessor can leave it a warm or a
    # busy machine.
    if ((rep % 2)); then
        read -r off _ _ < <(run)
        read -r on packets overflow < <(run --capture "$DIR/run.pcapng")
    else
        read -r on packets overflow < <(run --capture "$DIR/run.pcapng")
        read -r off _ _ < <(run)
    fi
    echo "$off" >>"$DIR/off"
    echo "$on" >>"$DIR/on"
    awk -v r="$rep" -v a="$off" -v b="$on" -v p="$packets" -v o="$overflow" \
        'BEGIN { printf "| %d | %.1f | %.1f | %d | %d |\n", r, a / 1e6, b / 1e6, p, o }'
done
off=$(median <"$DIR/off")
on=$(median <"$DIR/on")
awk -v a="$off" -v b="$on" -v p="$PATH_SPEC" 'BEGIN {
    printf "\n%s, %s, %d s runs: median without %.1f Mbit/s, with %.1f; with / without = %.3f (cost %.1f %%)\n",
        p, "'"$CC"'", '"$DUR"', a / 1e6, b / 1e6, b / a, (1 - b / a) * 100 }'
