#!/usr/bin/env bash
# tcplab's TCP engine against iperf3 on one veth pair between two namespaces, in one
# run, repetitions interleaved so drift hits every variant alike. Prints a Markdown
# table of medians and the ratios the issue's bar names. Needs root and iperf3.
#
#   bash bench/engine.sh            # 3 repetitions of 5 s
#   REPS=5 DUR=10 bash bench/engine.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# SHORT=1: the smallest run, as CI makes it (bench/build.sh).
if [ "${SHORT:-0}" = 1 ]; then REPS=1; DUR=1; fi
REPS=${REPS:-3}
DUR=${DUR:-5}
command -v iperf3 >/dev/null || apt-get install -y -qq iperf3 >/dev/null
source bench/build.sh
A=tlbench-a B=tlbench-b ADDR=10.250.0.2

remove_lab() {
    ip netns pids "$B" 2>/dev/null | xargs -r kill 2>/dev/null || true
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
}
remove_lab
OUT=$(mktemp -d)
trap 'remove_lab; rm -rf "$OUT"' EXIT
ip netns add "$A"
ip netns add "$B"
ip link add veth-a netns "$A" type veth peer name veth-b netns "$B"
ip -n "$A" addr add 10.250.0.1/24 dev veth-a
ip -n "$B" addr add "$ADDR"/24 dev veth-b
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set veth-a up
ip -n "$B" link set veth-b up
ip netns exec "$B" iperf3 -s -p 5202 >/dev/null 2>&1 &
ip netns exec "$B" "$BIN" serve --listen "$ADDR:5201" 2>/dev/null &
sleep 0.5

# Runs "$@" while `tcplab watch` samples its connections every 1 ms on both ends (the
# client's namespace and the server's), as a user watching iperf3 would.
watched() {
    "$BIN" --netns "$A" watch --port 5202 -i 1ms >/dev/null 2>&1 &
    local client=$!
    "$BIN" --netns "$B" watch --port 5202 -i 1ms >/dev/null 2>&1 &
    local server=$!
    sleep 0.3
    "$@"
    kill -INT "$client" "$server"
    wait "$client" "$server" || true
}

# variant name → command printing one JSON document; the second word says how to read it.
declare -A CMD=(
    [iperf3_P1]="iperf3 ip netns exec $A iperf3 -c $ADDR -p 5202 -t $DUR -J"
    [iperf3_P1_watched]="iperf3 watched ip netns exec $A iperf3 -c $ADDR -p 5202 -t $DUR -J"
    [iperf3_P4]="iperf3 ip netns exec $A iperf3 -c $ADDR -p 5202 -t $DUR -P 4 -J"
    [tcplab_P1]="tcplab $BIN --netns $A run $ADDR -t $DUR --json"
    [tcplab_P4]="tcplab $BIN --netns $A run $ADDR -t $DUR -P 4 --json"
    [tcplab_P1_sendfile]="tcplab $BIN --netns $A run $ADDR -t $DUR --send-method sendfile --json"
    [tcplab_P1_sample_1ms]="tcplab $BIN --netns $A run $ADDR -t $DUR --sample-interval 1ms --json"
    [tcplab_P1_sample_off]="tcplab $BIN --netns $A run $ADDR -t $DUR --sample-interval 0 --json"
)
# VARIANTS="a b" runs only those (e.g. the sampling pair, alternated many times).
read -r -a ORDER <<<"${VARIANTS:-iperf3_P1 tcplab_P1 iperf3_P4 tcplab_P4 tcplab_P1_sendfile tcplab_P1_sample_1ms tcplab_P1_sample_off iperf3_P1_watched}"

for rep in $(seq "$REPS"); do
    for name in "${ORDER[@]}"; do
        read -r kind cmd <<<"${CMD[$name]}"
        # shellcheck disable=SC2086
        $cmd >"$OUT/$name.$rep.json"
        python3 - "$kind" "$OUT/$name.$rep.json" >>"$OUT/$name.gbps" <<'PY'
import json, sys
kind, path = sys.argv[1], sys.argv[2]
d = json.load(open(path))
bps = d["end"]["sum_received"]["bits_per_second"] if kind == "iperf3" else d["summary"]["received_bps"]
print(bps / 1e9)
PY
        sleep 0.5
    done
    echo "repetition $rep of $REPS done" >&2
done

python3 - "$OUT" "$REPS" "$DUR" "${ORDER[@]}" <<'PY'
import statistics, sys
out, reps, dur, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
med = {}
print(f"Receiver throughput, Gbit/s, median of {reps} × {dur} s (all values in run order):\n")
print("| variant | median | runs |\n|---|---|---|")
for n in names:
    vals = [float(x) for x in open(f"{out}/{n}.gbps")]
    med[n] = statistics.median(vals)
    print(f"| {n} | {med[n]:.2f} | {' '.join(f'{v:.2f}' for v in vals)} |")
print()
def ratio(label, a, b, fmt):
    if a in med and b in med:
        print(f"- {label}: " + fmt(med[a] / med[b]))
ratio("tcplab / iperf3, 1 stream", "tcplab_P1", "iperf3_P1", lambda r: f"{r:.3f}")
ratio("tcplab / iperf3, 4 streams", "tcplab_P4", "iperf3_P4", lambda r: f"{r:.3f}")
ratio("sendfile / write()", "tcplab_P1_sendfile", "tcplab_P1", lambda r: f"{r:.3f}")
ratio("cost to iperf3 of `tcplab watch -i 1ms` on both ends", "iperf3_P1_watched", "iperf3_P1", lambda r: f"{(1 - r) * 100:.1f} %")
ratio("cost of 1 ms sampling on both ends vs off", "tcplab_P1_sample_1ms", "tcplab_P1_sample_off", lambda r: f"{(1 - r) * 100:.1f} %")
PY
