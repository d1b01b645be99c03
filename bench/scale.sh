#!/usr/bin/env bash
# Studies of thousands of runs, in one run of this script:
#   plan     a PLAN-run experiment (two axes, one repetition): `sweep --dry-run`, then
#            the first sweep (plans and stores it, runs one run) and a second (resumes
#            it, runs one more), each against the same one-run sweep of a one-run plan:
#            the difference is what planning and resuming cost.
#   report   a database of RUNS real runs of SAMPLE_MS sampling over DUR (both ends,
#            two points): a few runs swept for real (`--shard`), the rest of the plan
#            filled with copies of them (example `fill_plan`); then `results`, `report`
#            and `export --table samples`, timed, and the bytes the database takes
#            per stored sample.
# Needs root (labs).
#
#   bash bench/scale.sh                      # PLAN=10000 RUNS=1000 DUR=2.5 SAMPLE_MS=1
#   PLAN=2000 RUNS=200 bash bench/scale.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# SHORT=1: the smallest run, as CI makes it (bench/build.sh).
if [ "${SHORT:-0}" = 1 ]; then PLAN=100; RUNS=16; DUR=0.5; fi
PLAN=${PLAN:-10000}
RUNS=${RUNS:-1000}
DUR=${DUR:-2.5}
SAMPLE_MS=${SAMPLE_MS:-1}
source bench/build.sh
source bench/build.sh -p tcplab-experiment --example fill_plan
FILL=$PWD/target/$PROFILE/examples/fill_plan
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

now() { date +%s.%N; }
calc() { awk "BEGIN { printf \"%.3f\", $1 }"; }
timed() { # seconds the command took; its output goes to $OUT/last.txt
    local t0
    t0=$(now)
    "$@" >"$OUT/last.txt" 2>&1 || { cat "$OUT/last.txt" >&2; return 1; }
    calc "$(now) - $t0"
}

# --- planning and resuming: a PLAN-run plan against a one-run plan, one run each.
side=$(awk "BEGIN { print int(sqrt($PLAN)) }")
# Two axes of write and read sizes: every point costs the same to run.
sizes() { seq -s, "$1" "$(($1 + $2 - 1))" | sed 's/[0-9]*/"&K"/g'; }
cat >"$OUT/big.toml" <<EOF
name = "plan-big"
repetitions = 1
duration = "0.2s"
path = "rtt 1ms"
[[axis]]
key = "flow.write_size"
values = [$(sizes 64 "$side")]
[[axis]]
key = "flow.read_size"
values = [$(sizes 64 "$((PLAN / side))")]
EOF
printf 'name = "plan-one"\nrepetitions = 1\nduration = "0.2s"\npath = "rtt 1ms"\n' >"$OUT/one.toml"
planned=$("$BIN" sweep "$OUT/big.toml" --db "$OUT/big.db" --dry-run | sed -n 1p)
dry=$(timed "$BIN" sweep "$OUT/big.toml" --db "$OUT/big.db" --dry-run)
one=$(timed "$BIN" sweep "$OUT/one.toml" --db "$OUT/one.db")
first=$(timed "$BIN" sweep "$OUT/big.toml" --db "$OUT/big.db" --shard "1/$PLAN")
rm "$OUT/one.db"
one_again=$(timed "$BIN" sweep "$OUT/one.toml" --db "$OUT/one.db")
resume=$(timed "$BIN" sweep "$OUT/big.toml" --db "$OUT/big.db" --shard "2/$PLAN")

# --- a database of RUNS runs.
cat >"$OUT/scale.toml" <<EOF
name = "scale"
repetitions = $((RUNS / 2))
duration = "${DUR}s"
sample_interval = "${SAMPLE_MS}ms"
path = "rtt 2ms"
[[axis]]
name = "buffer"
key = "flow.window"
values = ["64K", "4M"]
EOF
shards=$((RUNS / 4))
"$BIN" sweep "$OUT/scale.toml" --db "$OUT/scale.db" --shard "1/$shards" >/dev/null
"$BIN" sweep "$OUT/scale.toml" --db "$OUT/scale.db" --shard "2/$shards" >/dev/null
"$FILL" "$OUT/scale.db" >&2
read -r runs samples blob_bytes < <(python3 - "$OUT/scale.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
runs = c.execute("SELECT count(*) FROM runs").fetchone()[0]
samples, blob = c.execute("SELECT sum(samples), sum(length(data)) FROM sample_blocks").fetchone()
print(runs, samples, blob)
PY
)
db_bytes=$(stat -c %s "$OUT/scale.db")
results=$(timed "$BIN" results "$OUT/scale.db")
report=$(timed "$BIN" report "$OUT/scale.db" -o "$OUT/report.html")
export_csv=$(timed "$BIN" export "$OUT/scale.db" --table samples --format csv -o "$OUT/samples.csv")
rows=$(($(wc -l <"$OUT/samples.csv") - 1))
[ "$rows" = "$samples" ] || { echo "export wrote $rows samples of $samples" >&2; exit 1; }

echo "$planned"
echo
echo "| measure | seconds |"
echo "|---|---|"
echo "| \`sweep --dry-run\`, $PLAN-run plan | $dry |"
echo "| first sweep of the $PLAN-run plan (plans, stores, one run) − one-run plan | $(calc "$first - $one") ($first − $one) |"
echo "| resumed sweep of it (one more run) − one-run plan | $(calc "$resume - $one_again") ($resume − $one_again) |"
echo
echo "Database of $runs runs, $samples samples ($(calc "$samples / $runs") a run), $(calc "$db_bytes / 1048576") MiB:"
echo
echo "| measure | result |"
echo "|---|---|"
echo "| \`results\` | $results s |"
echo "| \`report\` | $report s |"
echo "| \`export --table samples --format csv\` ($rows rows) | $export_csv s |"
echo "| database bytes per sample | $(calc "$db_bytes / $samples") (sample blocks alone $(calc "$blob_bytes / $samples")) |"
