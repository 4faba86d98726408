#!/usr/bin/env bash
# The server's no-context round trip (compress_fresh + inflate_fresh,
# ISA-L inflating) beside ISA-L's own and beside the server before (zlib-rs
# inflating), one run, at several message sizes. Per size: bench/deflate_libs.py writes 64
# ticker messages, then bench/deflate-libs (thread CPU time per message, median of RUNS passes)
# runs twice, pinned to one core at real-time priority so the shared VM's builds do not take it.
# Usage: bench/deflate-inflate.sh [RUNS=5] [SIZES="1024 4096 8192 16384 65536"]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}; SIZES=${2:-"1024 4096 8192 16384 65536"}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}/deflate-libs
(cd bench/deflate-libs && cargo build --release -q)
BIN=$CARGO_TARGET_DIR/release/deflate-libs
MSGS=$(mktemp); trap 'rm -f "$MSGS"' EXIT
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for size in $SIZES; do
  python3 bench/deflate_libs.py write "$MSGS" "$size" 64
  for pass in 1 2; do
    # Only the fresh-mode rows that compare the inflate halves (the takeover rows are
    # those of bench/results/2026-12-01-deflate-isal.md, unchanged).
    timeout 120 taskset -c 1 chrt -r 1 "$BIN" "$MSGS" "$size" "$RUNS" 2>/dev/null \
      | grep '"mode":"fresh"' | grep -E 'level 1"|276 KiB|wstune|libdeflate' \
      | sed "s/^/{\"size\":$size,\"pass\":$pass,\"row\":/; s/\$/}/"
  done
done
