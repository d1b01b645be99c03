#!/usr/bin/env bash
# How close a lab's round trip is to the configured one (the lab takes its own
# latency, measured when it starts, off its delay lines): ping through an idle lab at
# each RTT, at several spacings, against the configured RTT.
#
# Prints a Markdown table: per RTT and ping spacing, ping's min and mean minus the
# configured RTT (µs), and the lab's calibration (intrinsic mean, credit).
#
#   bash bench/latency.sh
#   RTTS="0.2ms 2ms" SPACINGS="0.01" COUNT=300 bash bench/latency.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# SHORT=1: the smallest run, as CI makes it (bench/build.sh).
if [ "${SHORT:-0}" = 1 ]; then RTTS=2ms; SPACINGS=0.01; COUNT=20; fi
RTTS=${RTTS:-"0.2ms 0.5ms 2ms 20ms 100ms"}
SPACINGS=${SPACINGS:-"0.002 0.01 0.05"}
COUNT=${COUNT:-200}
source bench/build.sh
LAB=lat$$
trap '"$BIN" lab down $LAB >/dev/null 2>&1 || true' EXIT

us() { awk -v ms="$1" -v rtt="$2" 'BEGIN { printf "%+.0f", ms * 1000 - rtt }'; }
echo "| rtt | ping spacing | min − rtt (µs) | mean − rtt (µs) | lab's own latency (µs) | taken off (µs) |"
echo "|---|---|---|---|---|---|"
for rtt in $RTTS; do
    "$BIN" lab up "$LAB" --path "rtt $rtt" >/dev/null
    read -r conf intrinsic credit < <("$BIN" lab show "$LAB" --json | python3 -c '
import json, sys
c = json.load(sys.stdin)["calibration"]
print(c["up_delay_us"] + c["down_delay_us"], round(c["intrinsic"]["mean_us"]), c["up_credit_us"] + c["down_credit_us"])')
    for i in $SPACINGS; do
        stats=$(ip netns exec "$LAB-client" ping -q -c "$COUNT" -i "$i" 10.77.0.1 | tail -1 | cut -d= -f2)
        IFS=/ read -r min mean _ <<<"${stats// /}"
        echo "| $rtt | ${i}s | $(us "$min" "$conf") | $(us "$mean" "$conf") | $intrinsic | $credit |"
    done
    "$BIN" lab down "$LAB" >/dev/null
done
