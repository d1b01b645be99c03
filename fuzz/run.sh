#!/usr/bin/env bash
# Fuzzes every parser that reads outside input (fuzz/fuzz_targets/*) with cargo fuzz
# (libFuzzer, nightly), starting from the committed seeds: RUNS inputs per target
# (default 1 000 000, the bar), or SECONDS_PER_TARGET each for a time-boxed run as CI
# does. Prints each target's count; stops at the first crash, whose input cargo fuzz
# leaves in fuzz/artifacts/TARGET/.
#   bash fuzz/run.sh
#   SECONDS_PER_TARGET=10 bash fuzz/run.sh
#   bash fuzz/run.sh build      # only build the targets
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
# cargo fuzz has no --locked (rust-fuzz/cargo-fuzz#312): check fuzz/Cargo.lock first, so
# a stale lock fails here instead of being rewritten by the build.
cargo +nightly metadata --locked --format-version 1 --manifest-path fuzz/Cargo.toml >/dev/null
if [ -n "${SECONDS_PER_TARGET:-}" ]; then
    budget=(-max_total_time="$SECONDS_PER_TARGET")
else
    budget=(-runs="${RUNS:-1000000}")
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# No sanitizer: the fuzzed crates forbid unsafe code (#![forbid(unsafe_code)]), so
# AddressSanitizer would check nothing Rust's own checks miss, and it doubles the build's
# time and halves the inputs per second.
flags=(-O --sanitizer none)
started=$SECONDS
cargo +nightly fuzz build "${flags[@]}" >"$log" 2>&1 || { tail -40 "$log"; exit 1; }
echo "built the targets in $((SECONDS - started)) s"
[ "${1:-}" = build ] && exit 0
for target in $(cargo +nightly fuzz list); do
    mkdir -p "fuzz/corpus/$target"
    if ! cargo +nightly fuzz run "${flags[@]}" "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
        "${budget[@]}" >"$log" 2>&1; then
        tail -40 "$log"
        echo "fuzz target $target failed"
        exit 1
    fi
    printf '%-12s %s\n' "$target" "$(grep -E '^Done' "$log")"
done
