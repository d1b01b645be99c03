#!/usr/bin/env bash
# What sampling any socket costs: CPU time per sampled socket of tcplab's sock_diag
# sampler (a filtered dump, and a lookup of the known sockets by 4-tuple) against
# `ss -tin` polling with the same filter (its start included, as a polling script pays
# it), at CONNS established loopback connections held in a namespace of the bench's own
# (each connection's client end is sampled: `dport = :5201`), the three interleaved,
# REPS times; then the share of one CPU that sampling 1 000 connections every 10 ms
# takes; then, for the engine's own few sockets, getsockopt (TCP_INFO + SO_MEMINFO, as
# the engine reads them) against one lookup, idle and carrying data; then what `watch
# --db` holds in memory: its peak resident size against the same watch printing JSON
# lines (which keeps nothing), interleaved, while iperf3 -P MEM_STREAMS moves data on
# loopback in the namespace for MEM_S seconds, sampled every millisecond.
#
# m-lab/tcp-info is not measured: the Go module proxy refuses the module here (403).
#
#   bash bench/watch.sh
#   CONNS="100 1000" REPS=5 bash bench/watch.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# SHORT=1: the smallest run, as CI makes it (bench/build.sh).
if [ "${SHORT:-0}" = 1 ]; then CONNS=100; REPS=1; TICKS=20; SS_RUNS=5; SHARE_S=1; OWN_TICKS=1000; MEM_S=2; fi
CONNS=${CONNS:-"100 1000 10000"}
REPS=${REPS:-3}
TICKS=${TICKS:-200}
SS_RUNS=${SS_RUNS:-20}
SHARE_S=${SHARE_S:-10}
OWN_TICKS=${OWN_TICKS:-100000}
MEM_S=${MEM_S:-8}
MEM_STREAMS=${MEM_STREAMS:-9}
PORT=5201
source bench/build.sh -p tcplab
source bench/build.sh -p tcplab-sys --example sockdiag_cost
COST=$PWD/target/$PROFILE/examples/sockdiag_cost
NS=tlbench-watch-$$
DIR=$(mktemp -d)
IPERF3_SERVER=
cleanup() {
    [ -z "$IPERF3_SERVER" ] || kill "$IPERF3_SERVER" 2>/dev/null || true
    exec 3>&- 2>/dev/null || true
    wait 2>/dev/null || true
    ip netns delete "$NS" 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT
ip netns add "$NS"
ip -n "$NS" link set lo up
in_ns() { ip netns exec "$NS" "$@"; }
field() { tr ' ' '\n' | sed -n "s/^$1=//p"; }
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# Holds N connections until fd 3 closes: the server and the client each in a process
# of its own, so each needs only N descriptors.
hold() {
    exec 3>&- 2>/dev/null || true
    wait 2>/dev/null || true
    rm -f "$DIR/hold" "$DIR"/*.log && mkfifo "$DIR/hold"
    # Read-write: opens without waiting for a reader; the holders' EOF is its close.
    exec 3<>"$DIR/hold"
    in_ns "$COST" hold server "$1" "$PORT" <"$DIR/hold" >"$DIR/server.log" 3>&- &
    until grep -q listening "$DIR/server.log" 2>/dev/null; do sleep 0.05; done
    in_ns "$COST" hold client "$1" "$PORT" <"$DIR/hold" >"$DIR/client.log" 3>&- &
    until grep -qs ready "$DIR/server.log" && grep -qs ready "$DIR/client.log"; do sleep 0.1; done
}

echo "CPU time per sampled socket (µs), medians of $REPS interleaved repetitions"
echo
echo "| connections | ss -tin | tcplab dump | tcplab lookup | dump a family at a time | ss / dump | ss / lookup |"
echo "|---|---|---|---|---|---|---|"
for n in $CONNS; do
    hold "$n"
    : >"$DIR/ss" && : >"$DIR/dump" && : >"$DIR/lookup" && : >"$DIR/per-family"
    for _ in $(seq "$REPS"); do
        in_ns "$COST" command "$SS_RUNS" ss -tin "dport = :$PORT" | field per_run_us |
            awk -v n="$n" '{ print $1 / n }' >>"$DIR/ss"
        in_ns "$COST" dump "$TICKS" 0 "$PORT" | field per_socket_us >>"$DIR/dump"
        in_ns "$COST" lookup "$TICKS" 0 "$PORT" | field per_socket_us >>"$DIR/lookup"
        in_ns "$COST" dump-per-family "$TICKS" 0 "$PORT" | field per_socket_us >>"$DIR/per-family"
    done
    ss=$(median <"$DIR/ss") dump=$(median <"$DIR/dump") lookup=$(median <"$DIR/lookup")
    per_family=$(median <"$DIR/per-family")
    awk -v n="$n" -v s="$ss" -v d="$dump" -v l="$lookup" -v f="$per_family" \
        'BEGIN { printf "| %d | %.3f | %.3f | %.3f | %.3f | %.1f | %.1f |\n", n, s, d, l, f, s / d, s / l }'
done

echo
echo "1 000 connections sampled every 10 ms for ${SHARE_S} s: share of one CPU, medians of $REPS interleaved repetitions"
echo
echo "| sampler | CPU share | per tick (µs) |"
echo "|---|---|---|"
hold 1000
: >"$DIR/share-dump" && : >"$DIR/share-lookup"
for _ in $(seq "$REPS"); do
    for mode in dump lookup; do
        in_ns "$COST" "$mode" $((SHARE_S * 100)) 10 "$PORT" >>"$DIR/share-$mode"
    done
done
for mode in dump lookup; do
    echo "| $mode | $(field cpu_share <"$DIR/share-$mode" | median) | $(field per_tick_us <"$DIR/share-$mode" | median) |"
done
exec 3>&-
wait

echo
echo "The engine's own sockets: CPU time of the sampling thread per socket per tick (µs), $OWN_TICKS ticks; busy: each connection carrying data meanwhile"
echo
echo "| sockets | idle: getsockopt TCP_INFO + SO_MEMINFO | idle: one lookup | busy: getsockopt | busy: one lookup | busy: lookup / getsockopt |"
echo "|---|---|---|---|---|---|"
for k in 1 2 4; do
    idle=$(in_ns "$COST" own "$k" "$OWN_TICKS")
    busy=$(in_ns "$COST" own "$k" "$OWN_TICKS" busy)
    g=$(echo "$busy" | field getsockopt_per_socket_us) l=$(echo "$busy" | field lookup_per_socket_us)
    echo "| $k | $(echo "$idle" | field getsockopt_per_socket_us) | $(echo "$idle" | field lookup_per_socket_us) | $g | $l | $(awk -v g="$g" -v l="$l" 'BEGIN { printf "%.1f", l / g }') |"
done

echo
echo "watch -i 1ms of iperf3 -P $MEM_STREAMS on loopback for ${MEM_S} s: peak resident size, medians of $REPS interleaved repetitions"
echo
echo "| watch | peak RSS (MB) | samples stored |"
echo "|---|---|---|"
MEM_PORT=5299
# Not through in_ns: a function in the background is a subshell, and $! would be it.
ip netns exec "$NS" iperf3 -s -p "$MEM_PORT" >/dev/null 2>&1 &
IPERF3_SERVER=$!
until in_ns ss -tln | grep -q ":$MEM_PORT "; do sleep 0.05; done
: >"$DIR/mem-db" && : >"$DIR/mem-json"
for _ in $(seq "$REPS"); do
    for mode in db json; do
        rm -f "$DIR"/m.db*
        case $mode in
            db) out=(--db "$DIR/m.db") ;;
            json) out=(--json) ;;
        esac
        in_ns /usr/bin/time -f "peak_kb=%M" -o "$DIR/time" \
            "$BIN" watch --port "$MEM_PORT" -i 1ms -t "$((MEM_S + 1))s" "${out[@]}" >/dev/null 2>&1 &
        sleep 0.5
        in_ns iperf3 -c 127.0.0.1 -p "$MEM_PORT" -P "$MEM_STREAMS" -t "$MEM_S" >/dev/null
        wait $!
        samples=0
        [ "$mode" = db ] && samples=$(($("$BIN" export "$DIR/m.db" --table samples | wc -l) - 1))
        echo "peak_kb=$(field peak_kb <"$DIR/time") samples=$samples" >>"$DIR/mem-$mode"
    done
done
kill "$IPERF3_SERVER" && wait "$IPERF3_SERVER" 2>/dev/null || true
IPERF3_SERVER=
for mode in db json; do
    label=$([ "$mode" = db ] && echo "--db (samples stored as it goes)" || echo "--json (keeps nothing)")
    echo "| $label | $(field peak_kb <"$DIR/mem-$mode" | median | awk '{ printf "%.1f", $1 / 1024 }') | $(field samples <"$DIR/mem-$mode" | median) |"
done
