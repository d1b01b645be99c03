#!/usr/bin/env bash
# Per-run overhead of a sweep (bar: at most 1.5 times the shell loop's, measured in the
# same run): what a run costs beyond its flows' own sending time — building and removing
# the lab, the server, connecting, storing.
#
# In one run, interleaved in blocks so the machine's drift hits both alike:
#   tcplab  `tcplab sweep` of RUNS runs of DUR seconds (path "rtt 1ms"), wall time
#           per run minus DUR; also the sweep's own figure (wall minus the tests' time).
#   glue    what users script today: per run, two namespaces and a veth pair made with
#           `ip`, `iperf3 -s -1` in one, `iperf3 -c -t DUR -J` from the other into a
#           file, namespaces deleted; wall time per run minus DUR.
#
# Prints a Markdown table and the ratio tcplab / glue of the per-run overhead.
#
#   bash bench/sweep.sh                 # 3 blocks of 10 runs of 1 s each, per tool
#   BLOCKS=5 RUNS=20 DUR=0.5 bash bench/sweep.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# SHORT=1: the smallest run, as CI makes it (bench/build.sh).
if [ "${SHORT:-0}" = 1 ]; then BLOCKS=1; RUNS=2; DUR=1; fi
BLOCKS=${BLOCKS:-3}
RUNS=${RUNS:-10}
DUR=${DUR:-1}
command -v iperf3 >/dev/null || apt-get install -y -qq iperf3 >/dev/null
source bench/build.sh
OUT=$(mktemp -d)
A=swb-a B=swb-b
cleanup() {
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
    rm -rf "$OUT"
}
trap cleanup EXIT

now() { date +%s.%N; }
calc() { awk "BEGIN { print $1 }"; }

tcplab_block() { # block: seconds per run, and the sweep's own overhead figure (ms)
    local file=$OUT/exp$1.toml db=$OUT/exp$1.db t0 t1
    printf 'repetitions = %s\nduration = "%ss"\npath = "rtt 1ms"\n' "$RUNS" "$DUR" >"$file"
    t0=$(now)
    "$BIN" sweep "$file" --db "$db" >"$OUT/sweep$1.log"
    t1=$(now)
    echo "$(calc "($t1 - $t0) / $RUNS") $(grep -o 'median [0-9]* ms' "$OUT/sweep$1.log" | grep -o '[0-9]*')"
}

glue_run() { # one run the way a shell loop does it
    ip netns add "$A"
    ip netns add "$B"
    ip link add swb0 netns "$A" type veth peer name swb1 netns "$B"
    ip -n "$A" addr add 10.99.0.1/24 dev swb0
    ip -n "$B" addr add 10.99.0.2/24 dev swb1
    ip -n "$A" link set swb0 up
    ip -n "$B" link set swb1 up
    ip netns exec "$B" iperf3 -s -1 -D -p 5299
    local i
    for i in $(seq 50); do
        ip netns exec "$A" iperf3 -c 10.99.0.2 -p 5299 -t "$DUR" -J >"$OUT/glue.json" 2>/dev/null && break
        sleep 0.01
    done
    ip netns del "$A"
    ip netns del "$B"
}

glue_block() {
    local t0 t1 i
    t0=$(now)
    for i in $(seq "$RUNS"); do glue_run; done
    t1=$(now)
    calc "($t1 - $t0) / $RUNS"
}

printf '| block | tcplab s/run | tcplab overhead ms | (sweep'"'"'s own figure, ms) | glue s/run | glue overhead ms |\n|---|---|---|---|---|---|\n'
T=() G=() S=()
for b in $(seq "$BLOCKS"); do
    read -r t s < <(tcplab_block "$b")
    g=$(glue_block)
    to=$(calc "($t - $DUR) * 1000")
    go=$(calc "($g - $DUR) * 1000")
    T+=("$to") G+=("$go") S+=("$s")
    printf '| %s | %.3f | %.0f | %s | %.3f | %.0f |\n' "$b" "$t" "$to" "$s" "$g" "$go"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
mt=$(median "${T[@]}") mg=$(median "${G[@]}") ms=$(median "${S[@]}")
printf '\nper-run overhead, median of %s blocks of %s runs of %s s: tcplab %.0f ms (lab up/down, server, storing: %s ms), glue %.0f ms; ratio tcplab/glue %.2f; bar ≤ 1.5: %s\n' \
    "$BLOCKS" "$RUNS" "$DUR" "$mt" "$ms" "$mg" "$(calc "$mt / $mg")" \
    "$(calc "$mt <= 1.5 * $mg ? \"met\" : \"MISSED\"")"
