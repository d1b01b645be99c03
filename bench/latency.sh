#!/usr/bin/env bash
# How a lab's round trip compares with the configured one: the lab holds every packet
# for its delays and takes nothing off, so no echo may come back sooner than the
# configured round trip (the floor the lab says), and its own time comes on top.
# Ping through an idle lab at each RTT, at several spacings (the emulator asleep
# between sparse echoes, awake between close ones), and a flood of 8 in flight.
#
# Prints a Markdown table: per RTT and ping spacing, ping's min and mean minus the
# configured RTT (µs), and whether the minimum held the floor.
#
#   bash bench/latency.sh
#   RTTS="0.2ms 2ms" SPACINGS="0.01 flood" COUNT=300 bash bench/latency.sh
#   PEER=/path/to/other/tcplab bash bench/latency.sh   # each row by both, interleaved
set -euo pipefail
cd "$(dirname "$0")/.."
# SHORT=1: the smallest run, as CI makes it (bench/build.sh).
if [ "${SHORT:-0}" = 1 ]; then RTTS=2ms; SPACINGS=0.01; COUNT=20; fi
RTTS=${RTTS:-"0.2ms 0.5ms 2ms 20ms 100ms"}
SPACINGS=${SPACINGS:-"0.002 0.01 0.05 flood"}
COUNT=${COUNT:-200}
source bench/build.sh
LAB=lat$$
trap '"$BIN" lab down $LAB >/dev/null 2>&1 || true' EXIT

us() { awk -v ms="$1" -v rtt="$2" 'BEGIN { printf "%+.0f", ms * 1000 - rtt }'; }
BINS=("$BIN" ${PEER:+"$PEER"})
echo "| rtt | ping spacing | tcplab | min − rtt (µs) | mean − rtt (µs) | floor held |"
echo "|---|---|---|---|---|---|"
for rtt in $RTTS; do
  for bin in "${BINS[@]}"; do
    name=$([ "$bin" = "$BIN" ] && echo this || echo peer)
    out=$("$bin" lab up "$LAB" --path "rtt $rtt")
    # "every round trip takes at least the path's 200 µs: …"
    floor=$(sed -n "s/.*at least the path's \([0-9.]*\) \(µs\|ms\|s\):.*/\1 \2/p" <<<"$out")
    conf=$(awk -v v="${floor% *}" -v u="${floor#* }" 'BEGIN { print v * (u == "ms" ? 1000 : u == "s" ? 1e6 : 1) }')
    for i in $SPACINGS; do
        case $i in
        flood) args=(-f -l 8 -c $((COUNT * 10))) ;;
        *) args=(-c "$COUNT" -i "$i") ;;
        esac
        stats=$(ip netns exec "$LAB-client" ping -q "${args[@]}" 10.77.0.1 | grep '^rtt' | cut -d= -f2)
        IFS=/ read -r min mean _ <<<"${stats// /}"
        held=$(awk -v ms="$min" -v rtt="$conf" 'BEGIN { print (ms * 1000 >= rtt) ? "yes" : "NO" }')
        echo "| $rtt | $i | $name | $(us "$min" "$conf") | $(us "$mean" "$conf") | $held |"
    done
    "$bin" lab down "$LAB" >/dev/null
  done
done
