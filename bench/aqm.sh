#!/usr/bin/env bash
# The emulator's rate with an AQM at the bottleneck: each run's throughput against the
# link's goodput (what 1 Gbit/s carries of TCP payload at the run's MSS), drop-tail and
# fq_codel (1024 queues, every flow hashed into its own) interleaved, and how much work
# the AQM adds per packet (the emulator's lateness).
#
#   bash bench/aqm.sh
#   AQMS="droptail codel fq_codel pie" STREAMS=16 REPS=5 bash bench/aqm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# SHORT=1: the smallest run, as CI makes it (bench/build.sh).
if [ "${SHORT:-0}" = 1 ]; then REPS=1; DUR=1; STREAMS=2; fi
RATE=${RATE:-1gbit}
AQMS=${AQMS:-"droptail fq_codel"}
STREAMS=${STREAMS:-8}
REPS=${REPS:-3}
DUR=${DUR:-4}
CONGESTION=${CONGESTION:-cubic}
source bench/build.sh

echo "| rep | aqm | received (Mbit/s) | / link goodput | dropped aqm | dropped queue | lateness p99 (µs) |"
echo "|---|---|---|---|---|---|---|"
for rep in $(seq "$REPS"); do
    for aqm in $AQMS; do
        "$BIN" run --path "rtt 10ms rate $RATE queue 1bdp aqm $aqm" -P "$STREAMS" \
            -C "$CONGESTION" -t "${DUR}s" --json |
            python3 -c '
import json, sys
v = json.load(sys.stdin)
mss = v["flows"][0]["mss"]
link = [l for l in v["path"]["up"]["links"] if l["name"] == "bottleneck"][0]
rate = float(sys.argv[3])
# A full segment on the wire: MSS + TCP with timestamps (32) + IPv4 (20).
goodput = rate * mss / (mss + 52)
got = v["summary"]["received_bps"]
print("| %s | %s | %.1f | %.3f | %d | %d | %.0f |" % (sys.argv[1], sys.argv[2], got / 1e6,
      got / goodput, link["dropped_aqm"], link["dropped_queue"], v["path"]["up"]["lateness"]["p99_us"]))
' "$rep" "$aqm" "$(python3 -c "
s = '$RATE'
for u, m in (('gbit', 1e9), ('mbit', 1e6), ('kbit', 1e3)):
    if s.endswith(u):
        print(float(s[:-len(u)]) * m)
        break
")"
    done
done
