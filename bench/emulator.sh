#!/usr/bin/env bash
# The link emulator (`tcplab lab`) in one run, repetitions interleaved so drift and the
# load of a shared machine hit every variant alike. Prints Markdown tables of medians
# (every run listed in order) and one summary line per bar:
#
#   1. iperf3 single-stream throughput over a raw veth pair, the plain TUN forwarder
#      (crates/sys/examples/tun_forward.rs, pass-through with offloads), a lab
#      `rtt 20ms` (delay only: super-packets pass whole), and per packet (segmented,
#      re-coalesced): `rtt 20ms rate 1gbit queue 1bdp`, `rtt 20ms rate 10gbit queue 1bdp`
#      and `rtt 20ms loss 0.01%` (TPUT_VARIANTS="lab_10g lab_loss" runs some). Not by
#      default: `tun_seg` (the forwarder segmenting and re-coalescing, no delay line),
#      `lab_rtt5` (`rtt 5ms`), `lab_10g_5ms` and `lab_10g_1ms` (rate 10gbit at 5 and 1
#      ms: what is in flight then fits the CPU's cache).
#   2. Delay error under load: the emulator's own lateness histogram (`lab show --json`)
#      in a rated lab under a full 1 Gbit/s iperf3 load (bar p99 ≤ 50 µs), plus an
#      independent ICMP echo check (see the comment at section 2).
#   3. Rate accuracy at 10mbit, 100mbit, 1gbit: iperf3 goodput against R × MSS/(MSS+52)
#      and the link's delivered bytes against R (bar ±1 %).
#   4. `lab up` + `lab down` time, CYCLES cycles per repetition (bar ≤ 150 ms).
#
# Needs root, iperf3, ping and python3.
#
#   bash bench/emulator.sh                       # 3 repetitions, 5 s runs, 10 up/down cycles
#   REPS=5 DUR=10 CYCLES=10 bash bench/emulator.sh
#   KEEP=1 bash bench/emulator.sh                # keep the raw JSON (directory printed)
#   SECTIONS=2 bash bench/emulator.sh            # only the listed sections (default 1234)
set -euo pipefail
cd "$(dirname "$0")/.."
# SHORT=1: the smallest run, as CI makes it (bench/build.sh).
# Of the lab variants only one: the others differ by their spec alone.
if [ "${SHORT:-0}" = 1 ]; then REPS=1; DUR=1; CYCLES=1; PINGS=20; TPUT_VARIANTS=${TPUT_VARIANTS:-veth tun lab_rate}; fi
REPS=${REPS:-3}
DUR=${DUR:-5}
CYCLES=${CYCLES:-10}
PINGS=${PINGS:-300}
KEEP=${KEEP:-0}
SECTIONS=${SECTIONS:-1234}
command -v iperf3 >/dev/null || apt-get install -y -qq iperf3 >/dev/null
source bench/build.sh
source bench/build.sh --example tun_forward -p tcplab-sys
FWD=$PWD/target/$PROFILE/examples/tun_forward
PY="python3 $PWD/bench/emulator_report.py"
OUT=$(mktemp -d)
RES=$OUT/results.jsonl
: >"$RES"

VA=emub-va VB=emub-vb          # veth pair namespaces
TA=emub-ta TB=emub-tb          # tun_forward namespaces (it creates and deletes them)
LABS=(embtp emblr embpi embpl embrt embud)
PIDS=()                        # background processes started here

# ---- cleanup ---------------------------------------------------------------------------
kill_pid() { # pid: TERM, wait up to 2 s, then KILL
    local p=$1 i
    kill "$p" 2>/dev/null || return 0
    for i in $(seq 20); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
}
cleanup() {
    local p ns lab
    for p in "${PIDS[@]}"; do kill_pid "$p"; done
    PIDS=()
    for ns in "$VA" "$VB" "$TA" "$TB"; do
        # only this script's processes live in these namespaces
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill_pid "$p"; done
        ip netns del "$ns" 2>/dev/null || true
    done
    for lab in "${LABS[@]}"; do
        # the lab daemon lives outside its namespaces: what runs inside is ours (iperf3)
        for ns in "$lab-client" "$lab-server"; do
            for p in $(ip netns pids "$ns" 2>/dev/null); do kill_pid "$p"; done
        done
        "$BIN" lab down "$lab" >/dev/null 2>&1 || true
    done
    "$BIN" lab gc >/dev/null 2>&1 || true
}
on_exit() {
    cleanup
    if [[ $KEEP == 1 ]]; then echo "raw results kept in $OUT" >&2; else rm -rf "$OUT"; fi
}
cleanup
trap on_exit EXIT
trap 'exit 130' INT TERM

# ---- helpers ---------------------------------------------------------------------------
load() { $PY record "$RES" sec=load "load1=$(cut -d' ' -f1 /proc/loadavg)"; }

wait_listen() { # ns port: until something listens there (5 s)
    local i
    for i in $(seq 100); do
        [[ -n $(ip netns exec "$1" ss -Hltn "sport = :$2") ]] && return 0
        sleep 0.05
    done
    echo "nothing listens on port $2 in $1" >&2
    return 1
}
start_server() { # ns: iperf3 server on 5201, pid in SRV
    ip netns exec "$1" iperf3 -s -p 5201 >/dev/null 2>&1 &
    SRV=$!
    PIDS+=("$SRV")
    wait_listen "$1" 5201
}
stop_pid() { # pid: stop it and forget it
    kill_pid "$1"
    local keep=() p
    for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}
client() { # ns addr file iperf3-args...: one iperf3 -J run; a failure is recorded, not fatal
    local ns=$1 addr=$2 file=$3
    shift 3
    ip netns exec "$ns" iperf3 -c "$addr" -p 5201 -J "$@" >"$file" 2>&1 || true
}
lab_up() { "$BIN" lab up "$1" --path "$2" >/dev/null; }
lab_down() { "$BIN" lab down "$1" >/dev/null; }

veth_up() {
    ip netns add "$VA"
    ip netns add "$VB"
    ip link add veth-a netns "$VA" type veth peer name veth-b netns "$VB"
    ip -n "$VA" addr add 10.251.0.1/24 dev veth-a
    ip -n "$VB" addr add 10.251.0.2/24 dev veth-b
    local ns
    for ns in "$VA" "$VB"; do ip -n "$ns" link set lo up; done
    ip -n "$VA" link set veth-a up
    ip -n "$VB" link set veth-b up
}
veth_down() {
    ip netns del "$VA"
    ip netns del "$VB"
}
fwd_up() { # [tun_forward flags]: client ns TA 10.77.0.1, server ns TB 10.77.0.2
    "$FWD" --client-ns "$TA" --server-ns "$TB" "$@" >"$OUT/fwd.log" 2>&1 &
    FWDPID=$!
    PIDS+=("$FWDPID")
    local i
    for i in $(seq 100); do
        ip -n "$TB" -4 addr show dev tun-s 2>/dev/null | grep -q 10.77.0.2 &&
            ip -n "$TA" -4 addr show dev tun-c 2>/dev/null | grep -q 10.77.0.1 && return 0
        sleep 0.05
    done
    echo "tun_forward did not come up:" >&2
    cat "$OUT/fwd.log" >&2
    return 1
}
fwd_down() { stop_pid "$FWDPID"; } # SIGTERM: it stops forwarding and deletes TA and TB

# ---- 1. throughput ---------------------------------------------------------------------
tput_run() { # variant rep
    local v=$1 rep=$2 f=$OUT/tput.$1.$2.json
    case $v in
        veth)
            veth_up
            start_server "$VB"
            client "$VA" 10.251.0.2 "$f" -t "$DUR"
            stop_pid "$SRV"
            veth_down
            ;;
        tun | tun_seg)
            if [[ $v == tun ]]; then fwd_up; else fwd_up --segment-coalesce; fi
            start_server "$TB"
            client "$TA" 10.77.0.2 "$f" -t "$DUR"
            stop_pid "$SRV"
            fwd_down
            ;;
        lab_*)
            local spec
            case $v in
                lab_rtt) spec="rtt 20ms" ;;
                lab_rtt5) spec="rtt 5ms" ;;
                lab_10g_1ms) spec="rtt 1ms rate 10gbit queue 1bdp" ;;
                lab_10g_5ms) spec="rtt 5ms rate 10gbit queue 1bdp" ;;
                lab_rate) spec="rtt 20ms rate 1gbit queue 1bdp" ;;
                lab_10g) spec="rtt 20ms rate 10gbit queue 1bdp" ;;
                lab_loss) spec="rtt 20ms loss 0.01%" ;;
            esac
            lab_up embtp "$spec"
            start_server embtp-server
            client embtp-client 10.77.0.1 "$f" -t "$DUR"
            "$BIN" lab show embtp --json >"$OUT/tput.$v.$rep.show.json"
            stop_pid "$SRV"
            lab_down embtp
            $PY show "$RES" "$OUT/tput.$v.$rep.show.json" sec=tputshow "variant=$v" "rep=$rep"
            ;;
    esac
    $PY iperf "$RES" "$f" sec=tput "variant=$v" "rep=$rep"
}

# ---- 2. delay error --------------------------------------------------------------------
# The bar is on the emulator's delay error, which its own lateness histogram measures
# directly (due time vs the moment the packet is written to the egress TUN). That is read
# in the lab the bar names, `rtt 20ms rate 1gbit queue 1bdp`, under a full-rate iperf3
# load (≈ 0.96 Gbit/s of goodput, the link saturated); the histogram is cumulative since
# `lab up`, so every condition gets its own fresh lab and the reading covers that
# condition only.
#
# The independent check cannot share that lab: a ping there waits behind up to 1 BDP of
# queued TCP data, which is queueing, not delay error. So it uses lab `rtt 20ms` (no
# rate, no queue) twice: idle, and under a ~1 Gbit/s iperf3 load paced by the sender
# (--fq-rate 1G; unpaced it would run at 10+ Gbit/s). ICMP echo RTT − 20 ms covers BOTH
# directions' lateness plus the kernel/TUN path of request and reply (including the time
# a packet waits in the TUN queue before the daemon reads it, which the lateness histogram
# cannot see), so it is an upper bound on the one-way error; the same pings through the
# plain tun_forward (no delay) give the fixed kernel/TUN part. iputils ping prints a
# 20 ms RTT with 100 µs resolution, so the percentiles come from emulator_report.py's
# pinger (the same ICMP echo, kernel receive timestamps, ns resolution); the iputils
# `ping -i 0.01 -c 300 -q` summary (µs resolution) runs alongside as a cross-check.
iputils() { # ns dest cond rep: iputils ping, summary only
    local line
    line=$(ip netns exec "$1" ping -q -i 0.01 -c "$PINGS" "$2" | grep -F 'rtt min/avg/max') || return 0
    line=${line#*= }
    IFS=/ read -r mn av mx _ <<<"${line% ms}"
    $PY record "$RES" sec=iputils "cond=$3" "rep=$4" \
        "min=${mn}e3" "avg=${av}e3" "max=${mx}e3"
}
pings() { # client-ns dest cond rep
    local ns=$1 dest=$2 cond=$3 rep=$4 ip_pid
    iputils "$ns" "$dest" "$cond" "$rep" &
    ip_pid=$!
    ip netns exec "$ns" $PY ping "$RES" "$dest" "$PINGS" 0.01 sec=ping "cond=$cond" "rep=$rep"
    wait "$ip_pid" || true
}
delay_run() { # rep
    local rep=$1 f
    # (a) rated lab, full load, emulator lateness
    f=$OUT/lat.rate_load.$rep.json
    lab_up emblr "rtt 20ms rate 1gbit queue 1bdp"
    start_server emblr-server
    client emblr-client 10.77.0.1 "$f" -t "$DUR"
    "$BIN" lab show emblr --json >"$f.show"
    stop_pid "$SRV"
    lab_down emblr
    $PY show "$RES" "$f.show" sec=lat cond=rate_load "rep=$rep"
    $PY iperf "$RES" "$f" sec=latload cond=rate_load "rep=$rep"

    # (b) the fixed part: the same pings through the plain TUN forwarder, no delay
    fwd_up
    pings "$TA" 10.77.0.2 ping_fwd "$rep"
    fwd_down

    # (c) rtt-only lab, idle: pings only
    lab_up embpi "rtt 20ms"
    pings embpi-client 10.77.0.1 ping_idle "$rep"
    "$BIN" lab show embpi --json >"$OUT/lat.ping_idle.$rep.show"
    lab_down embpi
    $PY show "$RES" "$OUT/lat.ping_idle.$rep.show" sec=lat cond=ping_idle "rep=$rep"

    # (d) rtt-only lab, paced ~1 Gbit/s load, pings in the middle of it
    f=$OUT/lat.ping_load.$rep.json
    local secs=$((PINGS / 100 + 3)) cpid
    lab_up embpl "rtt 20ms"
    start_server embpl-server
    client embpl-client 10.77.0.1 "$f" -t "$secs" --fq-rate 1G &
    cpid=$!
    PIDS+=("$cpid")
    sleep 1
    pings embpl-client 10.77.0.1 ping_load "$rep"
    wait "$cpid" || true
    stop_pid "$cpid"
    "$BIN" lab show embpl --json >"$f.show"
    stop_pid "$SRV"
    lab_down embpl
    $PY show "$RES" "$f.show" sec=lat cond=ping_load "rep=$rep"
    $PY iperf "$RES" "$f" sec=latload cond=ping_load "rep=$rep"
}

# ---- 3. rate accuracy ------------------------------------------------------------------
# iperf3 -O 1 drops the first second (slow start) from its result; the link counters are
# read at two counter publishes inside the measured part (see `edge` in the helper).
rate_run() { # rate rep
    local rate=$1 rep=$2 f=$OUT/rate.$1.$2.json cpid
    lab_up embrt "rate $rate queue 1bdp rtt 10ms"
    start_server embrt-server
    client embrt-client 10.77.0.1 "$f" -t "$DUR" -O 1 &
    cpid=$!
    PIDS+=("$cpid")
    sleep 1.2
    $PY edge "$BIN" embrt >"$f.e1" || true
    # iperf3 sends for 1 + DUR s; end the window a good second early, as `lab show`
    # and python start slowly on a loaded machine
    sleep "$(awk -v d="$DUR" 'BEGIN { print (d > 2.2 ? d - 1.0 : 1.2) }')"
    $PY edge "$BIN" embrt >"$f.e2" || true
    wait "$cpid" || true
    stop_pid "$cpid"
    "$BIN" lab show embrt --json >"$f.show"
    stop_pid "$SRV"
    lab_down embrt
    $PY iperf "$RES" "$f" sec=rate_iperf "rate=$rate" "rep=$rep"
    $PY linkrate "$RES" "$f.e1" "$f.e2" sec=rate_link "rate=$rate" "rep=$rep"
    $PY show "$RES" "$f.show" sec=rate_show "rate=$rate" "rep=$rep"
}

# ---- 4. lab up/down time ---------------------------------------------------------------
updown_run() { # rep
    local i t0 t1 t2
    for i in $(seq "$CYCLES"); do
        t0=$(date +%s%N)
        lab_up embud "rtt 20ms"
        t1=$(date +%s%N)
        lab_down embud
        t2=$(date +%s%N)
        $PY record "$RES" sec=updown "rep=$1" "up_ms=$(((t1 - t0) / 1000))e-3" "down_ms=$(((t2 - t1) / 1000))e-3"
    done
}

# ---- run -------------------------------------------------------------------------------
section() { [[ $SECTIONS == *$1* ]]; }
T0=$(date +%s)
load
for rep in $(seq "$REPS"); do
    if section 1; then
        for v in ${TPUT_VARIANTS:-veth tun lab_rtt lab_rate lab_10g lab_loss}; do tput_run "$v" "$rep"; sleep 0.3; done
    fi
    if section 2; then delay_run "$rep"; fi
    if section 3; then
        for r in 10mbit 100mbit 1gbit; do rate_run "$r" "$rep"; sleep 0.3; done
    fi
    if section 4; then updown_run "$rep"; fi
    load
    echo "repetition $rep of $REPS done ($(($(date +%s) - T0)) s, load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
done

# Merge each rate run's three records into one for the report.
python3 - "$RES" <<'PY'
import json, sys
path = sys.argv[1]
recs = [json.loads(l) for l in open(path)]
keep, rate = [], {}
for r in recs:
    if r.get("sec") in ("rate_iperf", "rate_link", "rate_show"):
        m = rate.setdefault((r["rate"], r["rep"]), {"sec": "rate"})
        m.update({k: v for k, v in r.items() if k != "sec"})
    else:
        keep.append(r)
with open(path, "w") as f:
    for r in keep + list(rate.values()):
        f.write(json.dumps(r) + "\n")
PY
$PY report "$RES" "$REPS" "$DUR" "$SECTIONS"
echo
echo "- wall time $(($(date +%s) - T0)) s; load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
