#!/usr/bin/env bash
# tcplab ↔ iperf3 on loopback, in one run, repetitions interleaved: for each direction
# (default and -R), iperf3's own client against `iperf3 -s`; `tcplab run --iperf3`
# against a fresh `iperf3 -s -J`, tcplab's throughput next to the server's report; and
# `iperf3 -c -J` against `tcplab serve --iperf3`, one side of its sums measured by each.
# Then UDP at $UDP_RATE (default 1G), 1400-byte datagrams, both directions: iperf3's
# client against `iperf3 -s` and against `tcplab serve --iperf3`, each row the sender's
# and the receiver's rate and the loss as the client printed it.
#
#   bash bench/iperf3_interop.sh            # 2 repetitions of 5 s
#   REPS=3 DUR=10 TCPLAB=target/release/tcplab bash bench/iperf3_interop.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# SHORT=1: the smallest run, as CI makes it (bench/build.sh).
if [ "${SHORT:-0}" = 1 ]; then REPS=1; DUR=1; fi
REPS=${REPS:-2}
DUR=${DUR:-5}
TCPLAB=${TCPLAB:-target/debug/tcplab}
PORT=${PORT:-5310}
UDP_RATE=${UDP_RATE:-1G}
OUT=$(mktemp -d)
"$TCPLAB" serve --iperf3 --listen "127.0.0.1:$((PORT + 1))" 2>/dev/null &
TCPLAB_SERVER=$!
trap 'kill $TCPLAB_SERVER; rm -rf "$OUT"' EXIT
sleep 0.3

server() {
    iperf3 -s -1 -J -B 127.0.0.1 -p "$PORT" >"$OUT/server.json" 2>/dev/null &
    IPERF3_SERVER=$!
    sleep 0.3
}

for _ in $(seq "$REPS"); do
    for dir in "" "-R"; do
        server
        iperf3 -c 127.0.0.1 -p "$PORT" -t "$DUR" $dir -J >"$OUT/client.json"
        wait $IPERF3_SERVER
        python3 - "$OUT" "$dir" <<'PY'
import json, sys
c = json.load(open(sys.argv[1] + "/client.json"))["end"]
print("iperf3 -c %-3s           sender %6.2f  receiver %6.2f Gbit/s" % (
    sys.argv[2], c["sum_sent"]["bits_per_second"] / 1e9, c["sum_received"]["bits_per_second"] / 1e9))
PY
        server
        "$TCPLAB" run --iperf3 "127.0.0.1:$PORT" -t "$DUR" $dir --json >"$OUT/tcplab.json"
        wait $IPERF3_SERVER
        python3 - "$OUT" "$dir" <<'PY'
import json, sys
out, reverse = sys.argv[1], sys.argv[2] == "-R"
ours = json.load(open(out + "/tcplab.json"))["summary"]
theirs = json.load(open(out + "/server.json"))["end"]
own = ours["received_bps" if reverse else "sent_bps"]
rep = theirs["sum_sent" if reverse else "sum_received"]["bits_per_second"]
print("tcplab run --iperf3 %-3s tcplab %6.2f  iperf3 -s %6.2f Gbit/s  (%+.2f %%)" % (
    sys.argv[2], own / 1e9, rep / 1e9, (own - rep) / rep * 100))
PY
        iperf3 -c 127.0.0.1 -p "$((PORT + 1))" -t "$DUR" $dir -J >"$OUT/client.json"
        python3 - "$OUT" "$dir" <<'PY'
import json, sys
reverse = sys.argv[2] == "-R"
c = json.load(open(sys.argv[1] + "/client.json"))["end"]
sent, received = c["sum_sent"]["bits_per_second"], c["sum_received"]["bits_per_second"]
ours, theirs = (sent, received) if reverse else (received, sent)
print("iperf3 -c → tcplab %-3s tcplab %6.2f  iperf3 -c %6.2f Gbit/s  (%+.2f %%)" % (
    sys.argv[2], ours / 1e9, theirs / 1e9, (ours - theirs) / theirs * 100))
PY
    done
done

udp_row() {
    python3 - "$OUT" "$1" <<'PY'
import json, sys
c = json.load(open(sys.argv[1] + "/client.json"))["end"]
s, r = c["sum_sent"], c["sum_received"]
print("%-30s sender %7.1f  receiver %7.1f Mbit/s  lost %d/%d (%.3f %%)" % (
    sys.argv[2], s["bits_per_second"] / 1e6, r["bits_per_second"] / 1e6,
    r["lost_packets"], r["packets"], r["lost_percent"]))
PY
}

for _ in $(seq "$REPS"); do
    for dir in "" "-R"; do
        server
        iperf3 -c 127.0.0.1 -p "$PORT" -u -b "$UDP_RATE" -l 1400 -t "$DUR" $dir -J >"$OUT/client.json"
        wait $IPERF3_SERVER
        udp_row "iperf3 -u $dir → iperf3 -s"
        iperf3 -c 127.0.0.1 -p "$((PORT + 1))" -u -b "$UDP_RATE" -l 1400 -t "$DUR" $dir -J >"$OUT/client.json"
        udp_row "iperf3 -u $dir → tcplab serve"
    done
done
