#!/usr/bin/env bash
# Fuzz one target of fuzz/ for MINUTES (default 10) with libFuzzer, starting from its committed
# corpus, then minimise the corpus back into fuzz/corpus/TARGET. A crash is saved under
# fuzz/artifacts/TARGET/; copy it to fuzz/regressions/TARGET/ once fixed, so that
# `cargo test --test fuzz_corpus` replays it forever.
#
# Usage: bench/fuzz.sh TARGET [MINUTES=10]; bench/fuzz.sh list. Needs cargo-fuzz
# (`cargo install cargo-fuzz`); on a stable toolchain RUSTC_BOOTSTRAP=1 lets it use the
# sanitizer flags. Prints libFuzzer's last status line (executions, cov, ft) at the end.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
if [ "${1:-}" = list ] || [ -z "${1:-}" ]; then cargo fuzz list; exit 0; fi
T=$1; MIN=${2:-10}
mkdir -p "corpus/$T" "artifacts/$T"
LOG=$(mktemp /tmp/wstune-fuzz-$T.XXXXXX.log)
echo "fuzzing $T for $MIN min; log $LOG"
set +e
cargo fuzz run "$T" "corpus/$T" -- -max_total_time=$((MIN * 60)) -print_final_stats=1 \
  -rss_limit_mb=4096 -timeout=10 >"$LOG" 2>&1
rc=$?
set -e
grep -E "^#[0-9]+.*(DONE|pulse|NEW|REDUCE)" "$LOG" | tail -1
grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$LOG" || true
if [ $rc -ne 0 ]; then
  echo "libFuzzer stopped with $rc: a crash? see $LOG and fuzz/artifacts/$T/"
  exit $rc
fi
# Keep the committed corpus small: only inputs that add coverage (libFuzzer's merge), then the
# smallest of them up to 300 KB (tests/serving/fuzz_corpus.rs replays all of it on every cargo test).
BIN=$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/$T
MIN=$(mktemp -d)
"$BIN" -merge=1 -rss_limit_mb=4096 -timeout=10 "$MIN" "corpus/$T" >>"$LOG" 2>&1
rm -rf "corpus/$T"; mkdir -p "corpus/$T"
total=0
for f in $(ls -S -r "$MIN"); do
  s=$(stat -c %s "$MIN/$f")
  [ $((total + s)) -gt 300000 ] && continue
  cp "$MIN/$f" "corpus/$T/"; total=$((total + s))
done
rm -rf "$MIN"
echo "corpus/$T: $(ls "corpus/$T" | wc -l) files, $total bytes"
