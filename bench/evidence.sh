#!/usr/bin/env bash
# What recording evidence costs: a run's throughput through a path with and without
# --capture (EVIDENCE=capture, the default), --trace-events (EVIDENCE=events) or
# round-trip probes every millisecond (EVIDENCE=probes), the two interleaved so drift
# hits both alike. Every packet passes the link model (rate and queue), so a capture
# records each one; the events are every ACK's tcp_probe and more; the probes share the
# bottleneck with the load, and their send error (how late each left its schedule) is
# printed with them.
#
# Prints each repetition, then the medians, their ratio and what was recorded.
#
#   bash bench/evidence.sh
#   EVIDENCE=events CONGESTION=cubic REPS=7 DUR=5 bash bench/evidence.sh
#   EVIDENCE=probes bash bench/evidence.sh
#   PATH_SPEC="rtt 20ms rate 10gbit queue 1bdp" bash bench/evidence.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# SHORT=1: the smallest run, as CI makes it (bench/build.sh).
if [ "${SHORT:-0}" = 1 ]; then REPS=1; DUR=1; fi
PATH_SPEC=${PATH_SPEC:-"rtt 20ms rate 1gbit queue 1bdp"}
REPS=${REPS:-5}
DUR=${DUR:-4}
CONGESTION=${CONGESTION:-bbr}
EVIDENCE=${EVIDENCE:-capture}
source bench/build.sh
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT

case "$EVIDENCE" in
capture) FLAGS=(--capture "$DIR/run.pcapng") HELD="packets captured | lost to overflow" ;;
events) FLAGS=(--trace-events) HELD="kernel events | lost in the ring buffer" ;;
probes) FLAGS=(--probe 1ms --probe-idle 0) HELD="probes sent | send error p99 (µs)" ;;
*) echo "EVIDENCE is capture, events or probes, not '$EVIDENCE'" >&2 && exit 2 ;;
esac

# Received bit/s of one run, and what it recorded: how much, and how much was lost.
run() {
    "$BIN" run --path "$PATH_SPEC" -t "${DUR}s" -C "$CONGESTION" --json --db "$DIR/runs.db" "$@" |
        python3 -c '
import json, sys
v = json.load(sys.stdin)
caps = [v["path"][d].get("capture") or {} for d in ("up", "down")]
trace = v.get("trace") or {}
latency = v["summary"].get("latency")
if latency:
    held, lost = latency["sent"], latency["send_error_us"]["p99"]
elif trace:
    held, lost = trace["events"], trace["lost"]
else:
    held, lost = sum(c.get("packets", 0) for c in caps), sum(c.get("overflow", 0) for c in caps)
print(v["summary"]["received_bps"], held, lost)'
}

median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

: >"$DIR/off"
: >"$DIR/on"
echo "| rep | without $EVIDENCE (Mbit/s) | with $EVIDENCE (Mbit/s) | $HELD |"
echo "|---|---|---|---|---|"
for rep in $(seq "$REPS"); do
    # Each goes first every other time: a run's predecessor can leave it a warm or a
    # busy machine.
    if ((rep % 2)); then
        read -r off _ _ < <(run)
        read -r on held lost < <(run "${FLAGS[@]}")
    else
        read -r on held lost < <(run "${FLAGS[@]}")
        read -r off _ _ < <(run)
    fi
    echo "$off" >>"$DIR/off"
    echo "$on" >>"$DIR/on"
    awk -v r="$rep" -v a="$off" -v b="$on" -v h="$held" -v l="$lost" \
        'BEGIN { printf "| %d | %.1f | %.1f | %d | %d |\n", r, a / 1e6, b / 1e6, h, l }'
done
off=$(median <"$DIR/off")
on=$(median <"$DIR/on")
awk -v a="$off" -v b="$on" -v p="$PATH_SPEC" 'BEGIN {
    printf "\n%s, %s, %d s runs: median without %.1f Mbit/s, with '"$EVIDENCE"' %.1f; with / without = %.3f (cost %.1f %%)\n",
        p, "'"$CONGESTION"'", '"$DUR"', a / 1e6, b / 1e6, b / a, (1 - b / a) * 100 }'
