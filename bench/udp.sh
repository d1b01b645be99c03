#!/usr/bin/env bash
# UDP against iperf3 -u on one veth pair, in one run, repetitions interleaved:
#   1. achieved rate against the target at 100 Mbit/s and 1 Gbit/s (bar: within 0.5 %,
#      self-inflicted loss ≤ 0.01 %), and loss seen by the receiver;
#   2. the most datagrams per second (-b 0) at 64- and 1472-byte payloads (bar: tcplab /
#      iperf3 ≥ 1.0).
# Prints a Markdown table of medians (every repetition listed in order).
#
#   bash bench/udp.sh                    # 3 repetitions of 5 s each
#   REPS=5 DUR=10 bash bench/udp.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# SHORT=1: the smallest run, as CI makes it (bench/build.sh).
if [ "${SHORT:-0}" = 1 ]; then REPS=1; DUR=1; fi
REPS=${REPS:-3}
DUR=${DUR:-5}
command -v iperf3 >/dev/null || apt-get install -y -qq iperf3 >/dev/null
source bench/build.sh
A=udpb-a B=udpb-b ADDR=10.97.0.2
OUT=$(mktemp -d)
SERVER=""
RMEM_MAX=$(sysctl -n net.core.rmem_max)
cleanup() {
    [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null || true
    sysctl -qw net.core.rmem_max="$RMEM_MAX"
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
    rm -rf "$OUT"
}
trap cleanup EXIT
ip netns add "$A"
ip netns add "$B"
ip link add udpb0 netns "$A" type veth peer name udpb1 netns "$B"
ip -n "$A" addr add 10.97.0.1/24 dev udpb0
ip -n "$B" addr add "$ADDR/24" dev udpb1
ip -n "$A" link set udpb0 up
ip -n "$B" link set udpb1 up
ip -n "$A" link set lo up
ip -n "$B" link set lo up
# Receive buffers as large as tcplab asks (8 MiB; restored on exit): bursts at the
# maximum rate overflow the default.
sysctl -qw net.core.rmem_max=8388608
"$BIN" --netns "$B" serve --listen "[::]:5201" 2>/dev/null &
SERVER=$!
sleep 0.5

# One measurement: prints "sent_bps received_bps sent_datagrams lost self_lost".
run_tcplab() { # rate size
    "$BIN" --netns "$A" run "$ADDR" -u -b "$1" -l "$2" -t "$DUR" -J | python3 -c '
import json, sys
d = json.load(sys.stdin); u = d["summary"]["udp"]; f = d["flows"][0]
print(f["sent_bps"], f["received_bps"], u["sent"], u["lost"], u["send_errors"] + u["socket_drops"])'
}
run_iperf3() { # rate size
    ip netns exec "$B" iperf3 -s -1 -D -p 5299
    sleep 0.2
    ip netns exec "$A" iperf3 -c "$ADDR" -p 5299 -u -b "$1" -l "$2" -t "$DUR" -J | python3 -c '
import json, sys
e = json.load(sys.stdin)["end"]; s, r = e["sum_sent"], e["sum_received"]
print(s["bits_per_second"], r["bits_per_second"], s["packets"], r["lost_packets"], 0)'
}

declare -A RESULTS
CASES=("100M 1448" "1G 1448" "0 1472" "0 64")
for rep in $(seq "$REPS"); do
    for case in "${CASES[@]}"; do
        read -r rate size <<<"$case"
        for tool in tcplab iperf3; do
            line=$("run_$tool" "$rate" "$size")
            RESULTS["$tool $case"]+="$line;"
        done
    done
done

python3 - "$DUR" <<PY
import statistics, sys
dur = float(sys.argv[1])
results = {$(for k in "${!RESULTS[@]}"; do printf '"%s": "%s",' "$k" "${RESULTS[$k]}"; done)}
def rows(key):
    return [list(map(float, r.split())) for r in results[key].split(";") if r]
def target(rate):
    return {"100M": 100e6, "1G": 1e9}.get(rate)
print("| tool | target | payload | sent rate (median) | vs target | received | datagrams/s | receiver loss | self-inflicted | runs (sent Mbit/s) |")
print("|---|---|---|---|---|---|---|---|---|---|")
pps = {}
for case in ["100M 1448", "1G 1448", "0 1472", "0 64"]:
    rate, size = case.split()
    for tool in ["tcplab", "iperf3"]:
        rs = rows(f"{tool} {case}")
        sent = statistics.median(r[0] for r in rs)
        recv = statistics.median(r[1] for r in rs)
        dgs = statistics.median(r[2] for r in rs) / dur
        loss = statistics.median(r[3] / max(r[2], 1) for r in rs)
        own = statistics.median(r[4] / max(r[2], 1) for r in rs)
        t = target(rate)
        vs = f"{(sent / t - 1) * 100:+.2f} %" if t else "-"
        pps[(tool, case)] = dgs
        runs = " ".join(f"{r[0] / 1e6:.1f}" for r in rs)
        print(f"| {tool} | {rate if t else 'max'} | {size} B | {sent / 1e6:.1f} Mbit/s | {vs} | {recv / 1e6:.1f} Mbit/s | {dgs:,.0f} | {loss * 100:.3f} % | {own * 100:.3f} % | {runs} |")
for size in ["1472", "64"]:
    ratio = pps[("tcplab", f"0 {size}")] / pps[("iperf3", f"0 {size}")]
    print(f"\nmax datagrams/s at {size} B: tcplab/iperf3 = {ratio:.2f} (bar >= 1.0)")
PY
