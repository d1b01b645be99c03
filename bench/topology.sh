#!/usr/bin/env bash
# Topology labs (`lab up --topology`, docs/topologies.md), repetitions interleaved:
#
#   1. The emulator's lateness (write time − due time, `lab show --json`) carrying one
#      iperf3 flow through a chain of 4 links at 100 Mbit/s (5 ms each way per link)
#      against a single link (20 ms, 100 Mbit/s) as a topology and as a dumbbell
#      (`--path`), in the same run. Bar: the chain's p99 at most the single link's +
#      50 µs.
#   2. Routers in the emulator against routers as namespaces: what a router namespace
#      forwarding between two veths adds to a round trip (ping through a — r — b
#      against a — b directly, idle and under an iperf3 flow through the router) —
#      the least a namespace router would cost, before the emulator's second read of
#      the packet; a router in the emulator adds no time by construction (a packet
#      enters the next link at its due time).
#
# Needs root, iperf3, ping and python3.
#
#   bash bench/topology.sh                  # 3 repetitions of 5 s
#   REPS=5 DUR=10 bash bench/topology.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# SHORT=1: the smallest run, as CI makes it (bench/build.sh).
if [ "${SHORT:-0}" = 1 ]; then REPS=1; DUR=1; PINGS=20; fi
REPS=${REPS:-3}
DUR=${DUR:-5}
PINGS=${PINGS:-500}
source bench/build.sh
OUT=$(mktemp -d)
LAB=bntp
NA=bntp-va NR=bntp-vr NB=bntp-vb   # the veth chain's namespaces
SRV=

cleanup() {
    [ -n "$SRV" ] && kill "$SRV" 2>/dev/null || true
    for ns in "$LAB-a" "$LAB-b" "$LAB-client" "$LAB-server"; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
    done
    "$BIN" lab down "$LAB" >/dev/null 2>&1 || true
    for ns in "$NA" "$NR" "$NB"; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -rf "$OUT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_listen() { # ns port
    for _ in $(seq 100); do
        [[ -n $(ip netns exec "$1" ss -Hltn "sport = :$2") ]] && return 0
        sleep 0.05
    done
    echo "nothing listens on port $2 in $1" >&2
    return 1
}

# A chain of N links from a to b through routers r1 … r(N-1), each with SPEC.
chain() { # n spec
    local n=$1 spec=$2 i prev=a next
    printf '[[host]]\nname = "a"\n[[host]]\nname = "b"\n'
    for i in $(seq 1 $((n - 1))); do printf '[[router]]\nname = "r%d"\n' "$i"; done
    for i in $(seq 1 "$n"); do
        next=$([ "$i" = "$n" ] && echo b || echo "r$i")
        printf '[[link]]\nname = "l%d"\nbetween = ["%s", "%s"]\npath = "%s"\n' "$i" "$prev" "$next" "$spec"
        prev=$next
    done
}
chain 1 "rtt 20ms rate 100mbit queue 1bdp" >"$OUT/single.toml"
chain 4 "rtt 5ms rate 100mbit queue 1bdp" >"$OUT/chain4.toml"

# One iperf3 flow of DUR seconds through the lab; the lateness quantiles it saw.
lateness() { # variant rep
    local v=$1 server client addr
    case $v in
        dumbbell)
            "$BIN" lab up "$LAB" --path "rtt 20ms rate 100mbit queue 1bdp" >/dev/null
            server=$LAB-server client=$LAB-client addr=10.77.0.1
            ;;
        *)
            "$BIN" lab up "$LAB" --topology "$OUT/$v.toml" >/dev/null
            server=$LAB-b client=$LAB-a addr=10.77.0.2
            ;;
    esac
    ip netns exec "$server" iperf3 -s -p 5201 >/dev/null 2>&1 &
    SRV=$!
    wait_listen "$server" 5201
    ip netns exec "$client" iperf3 -c "$addr" -p 5201 -t "$DUR" -J >"$OUT/$v.$2.iperf.json" 2>&1 || true
    kill "$SRV" 2>/dev/null || true
    wait "$SRV" 2>/dev/null || true
    SRV=
    "$BIN" lab show "$LAB" --json >"$OUT/$v.$2.show.json"
    "$BIN" lab down "$LAB" >/dev/null
}

# The veth chain a — r — b (r forwarding) and the direct pair a — b.
veth_up() { # with_router (1/0)
    ip netns add "$NA"
    ip netns add "$NB"
    if [ "$1" = 1 ]; then
        ip netns add "$NR"
        ip link add va netns "$NA" type veth peer name ra netns "$NR"
        ip link add vb netns "$NB" type veth peer name rb netns "$NR"
        ip -n "$NR" addr add 10.252.1.1/24 dev ra
        ip -n "$NR" addr add 10.252.2.1/24 dev rb
        ip -n "$NR" link set ra up
        ip -n "$NR" link set rb up
        ip -n "$NR" link set lo up
        ip netns exec "$NR" sysctl -qw net.ipv4.ip_forward=1
        ip -n "$NA" addr add 10.252.1.2/24 dev va
        ip -n "$NB" addr add 10.252.2.2/24 dev vb
        ip -n "$NA" link set va up
        ip -n "$NB" link set vb up
        ip -n "$NA" route add default via 10.252.1.1
        ip -n "$NB" route add default via 10.252.2.1
    else
        ip link add va netns "$NA" type veth peer name vb netns "$NB"
        ip -n "$NA" addr add 10.252.1.2/24 dev va
        ip -n "$NB" addr add 10.252.2.2/24 dev vb
        ip -n "$NA" link set va up
        ip -n "$NB" link set vb up
        ip -n "$NA" route add 10.252.2.0/24 dev va
        ip -n "$NB" route add 10.252.1.0/24 dev vb
    fi
    ip -n "$NA" link set lo up
    ip -n "$NB" link set lo up
}
veth_down() {
    for ns in "$NA" "$NR" "$NB"; do ip netns del "$ns" 2>/dev/null || true; done
}
# ping's round trips through the veths, idle or beside an iperf3 flow (-b 1G paced).
router_ping() { # variant rep
    local v=$1
    veth_up "$([[ $v == router* ]] && echo 1 || echo 0)"
    if [[ $v == *_loaded ]]; then
        ip netns exec "$NB" iperf3 -s -p 5201 >/dev/null 2>&1 &
        SRV=$!
        wait_listen "$NB" 5201
        ip netns exec "$NA" iperf3 -c 10.252.2.2 -p 5201 -t 30 -b 1G >/dev/null 2>&1 &
        sleep 0.5
    fi
    ip netns exec "$NA" ping -c "$PINGS" -i 0.002 -s 56 10.252.2.2 >"$OUT/$v.$2.ping" 2>&1 || true
    for p in $(ip netns pids "$NA" 2>/dev/null) $SRV; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    SRV=
    veth_down
}

for rep in $(seq "$REPS"); do
    for v in single chain4 dumbbell; do lateness "$v" "$rep"; done
    for v in direct router direct_loaded router_loaded; do router_ping "$v" "$rep"; done
done

python3 - "$OUT" "$REPS" <<'EOF'
import json, statistics, sys, re
out, reps = sys.argv[1], int(sys.argv[2])
def show(v, r):
    s = json.load(open(f"{out}/{v}.{r}.show.json"))
    # The emulator thread that carried the flow's data: the one with more packets
    # (a dumbbell's up; a topology's up carries the ways toward its first host).
    l = max((s[d]["lateness"] for d in ("up", "down")), key=lambda l: l["packets"])
    return l["p50_us"], l["p99_us"], l["packets"]
def gbps(v, r):
    try:
        j = json.load(open(f"{out}/{v}.{r}.iperf.json"))
        return j["end"]["sum_received"]["bits_per_second"] / 1e6
    except Exception:
        return float("nan")
print("| lab (one iperf3 flow, 100 Mbit/s) | lateness p50 µs | p99 µs | packets | goodput Mbit/s |")
print("|---|---|---|---|---|")
p99 = {}
for v in ["single", "chain4", "dumbbell"]:
    rows = [show(v, r) for r in range(1, reps + 1)]
    p99[v] = statistics.median(x[1] for x in rows)
    print(f"| {v} | {statistics.median(x[0] for x in rows):.1f} | {p99[v]:.1f} "
          f"({', '.join(f'{x[1]:.0f}' for x in rows)}) | {statistics.median(x[2] for x in rows):.0f} "
          f"| {statistics.median(gbps(v, r) for r in range(1, reps + 1)):.1f} |")
print()
def rtts(v, r):
    text = open(f"{out}/{v}.{r}.ping").read()
    return [float(x) for x in re.findall(r"time=([0-9.]+)", text)]
print("| veth path (ping) | RTT p50 µs | p99 µs | replies |")
print("|---|---|---|---|")
med = {}
for v in ["direct", "router", "direct_loaded", "router_loaded"]:
    all_ = sorted(t for r in range(1, reps + 1) for t in rtts(v, r))
    if not all_:
        print(f"| {v} | – | – | 0 |"); continue
    p50 = all_[len(all_) // 2] * 1000
    p99v = all_[min(len(all_) - 1, int(len(all_) * 0.99))] * 1000
    med[v] = (p50, p99v)
    print(f"| {v} | {p50:.0f} | {p99v:.0f} | {len(all_)} |")
print()
d = p99["chain4"] - p99["single"]
print(f"bar: 4-link chain lateness p99 {p99['chain4']:.1f} µs against one link's {p99['single']:.1f} µs: +{d:.1f} µs (bar ≤ +50) {'✓' if d <= 50 else '✗'}")
if "router" in med and "direct" in med:
    print(f"a namespace router adds to a round trip (two crossings): idle p50 {med['router'][0]-med['direct'][0]:+.0f} µs, p99 {med['router'][1]-med['direct'][1]:+.0f} µs", end="")
    if "router_loaded" in med and "direct_loaded" in med:
        print(f"; loaded p50 {med['router_loaded'][0]-med['direct_loaded'][0]:+.0f} µs, p99 {med['router_loaded'][1]-med['direct_loaded'][1]:+.0f} µs")
    else:
        print()
EOF
