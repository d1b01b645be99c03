#!/usr/bin/env bash
# `shell --far host` as root and as user nobody, in the same run: a transfer of SIZE
# from behind PATH_SPEC to a server in the caller's namespace (up), and back (down, -R).
#
#   root    the caller is a namespace of the bench's own (ip netns), its server on
#           0.0.0.0; the lab reaches it through a veth pair and NAT, kernel TCP end to end.
#   nobody  the caller is this namespace, its server on 127.0.0.1 (nobody's own); the
#           lab reaches it through tcplab's TCP relay (slirp4netns for the rest).
#
# Interleaved, REPS times: root up, root down, nobody up, nobody down. Prints a Markdown
# table, the medians, and nobody / root per direction against the bar (≥ 0.95).
#
#   bash bench/far.sh                        # 3 × 20 MB each way through rtt 50ms rate 10mbit
#   REPS=5 SIZE=40M bash bench/far.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# SHORT=1: the smallest run, as CI makes it (bench/build.sh).
if [ "${SHORT:-0}" = 1 ]; then REPS=1; SIZE=1M; fi
REPS=${REPS:-3}
SIZE=${SIZE:-20M}
PATH_SPEC=${PATH_SPEC:-rtt 50ms rate 10mbit}
command -v slirp4netns >/dev/null || apt-get install -y -qq slirp4netns >/dev/null
source bench/build.sh
OUT=$(mktemp -d)
chmod 755 "$OUT"
CALLER=farb-caller$$
ROOT_PORT=5296 NOBODY_PORT=5297
cp "$BIN" "$OUT/tcplab"
cp "$BIN" "$OUT/tcplab-serve"
chmod 755 "$OUT/tcplab" "$OUT/tcplab-serve"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    ip netns del "$CALLER" 2>/dev/null || true
    rm -rf "$OUT"
}
trap cleanup EXIT
# Becomes nobody and execs the command: a background one's $! is the command's pid.
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups -- env -i PATH="$PATH" HOME="$OUT")

ip netns add "$CALLER"
ip -n "$CALLER" link set lo up
ip netns exec "$CALLER" "$OUT/tcplab-serve" serve --listen 0.0.0.0:$ROOT_PORT >/dev/null 2>&1 &
PIDS+=($!)
"${NOBODY[@]}" "$OUT/tcplab-serve" serve --listen 127.0.0.1:$NOBODY_PORT >/dev/null 2>&1 &
PIDS+=($!)
sleep 1
for pid in "${PIDS[@]}"; do kill -0 "$pid" || { echo "a server did not start" >&2; exit 1; }; done

received() { python3 -c 'import json,sys; print(json.load(sys.stdin)["summary"]["received_bps"] / 1e6)'; }

transfer() { # who direction: Mbit/s received
    local who=$1 dir=$2 flag=""
    [ "$dir" = down ] && flag=-R
    if [ "$who" = root ]; then
        "$OUT/tcplab" --netns "$CALLER" shell --far host --path "$PATH_SPEC" -- \
            sh -c "exec $OUT/tcplab run \$TCPLAB_HOST:$ROOT_PORT -n $SIZE $flag --json" 2>/dev/null | received
    else
        "${NOBODY[@]}" "$OUT/tcplab" shell --far host --path "$PATH_SPEC" -- \
            sh -c "exec $OUT/tcplab run \$TCPLAB_HOST:$NOBODY_PORT -n $SIZE $flag --json" 2>/dev/null | received
    fi
}

printf '| rep | root up | root down | nobody up | nobody down | (Mbit/s, %s each way through "%s") |\n|---|---|---|---|---|---|\n' "$SIZE" "$PATH_SPEC"
RU=() RD=() NU=() ND=()
for rep in $(seq "$REPS"); do
    ru=$(transfer root up) rd=$(transfer root down) nu=$(transfer nobody up) nd=$(transfer nobody down)
    RU+=("$ru") RD+=("$rd") NU+=("$nu") ND+=("$nd")
    printf '| %s | %.2f | %.2f | %.2f | %.2f | |\n' "$rep" "$ru" "$rd" "$nu" "$nd"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
calc() { awk "BEGIN { print $1 }"; }
mru=$(median "${RU[@]}") mrd=$(median "${RD[@]}") mnu=$(median "${NU[@]}") mnd=$(median "${ND[@]}")
up=$(calc "$mnu / $mru") down=$(calc "$mnd / $mrd")
printf '\nmedians of %s: root up %.2f, down %.2f; nobody up %.2f, down %.2f Mbit/s; nobody / root: up %.3f, down %.3f; bar ≥ 0.95: %s\n' \
    "$REPS" "$mru" "$mrd" "$mnu" "$mnd" "$up" "$down" \
    "$(calc "($up >= 0.95 && $down >= 0.95) ? \"met\" : \"MISSED\"")"
