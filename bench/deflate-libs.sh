#!/usr/bin/env bash
# Permessage-deflate's libraries on the same bytes on this machine. Writes 64
# deterministic 64 KiB JSON ticker messages (bench/deflate_libs.py), then times compress and
# inflate per message (thread CPU time, median of RUNS passes over the 64) for zlib-rs (the
# server's codec), ISA-L and libdeflate in Rust (bench/deflate-libs) and C zlib, zlib-ng,
# ISA-L and libdeflate through Python's bindings, in both modes (fresh context / context
# takeover). Needs: nasm autoconf automake libtool (ISA-L's build), and
# `pip install isal zlib-ng deflate`. Usage: bench/deflate-libs.sh [RUNS=9] [SIZE=65536]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-9}; SIZE=${2:-65536}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}/deflate-libs
(cd bench/deflate-libs && cargo build --release -q)
MSGS=$(mktemp); trap 'rm -f "$MSGS"' EXIT
python3 bench/deflate_libs.py write "$MSGS" "$SIZE" 64
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
# Alternate the two sides, twice, so a busy minute on the shared VM hits both.
for pass in 1 2; do
  "$CARGO_TARGET_DIR/release/deflate-libs" "$MSGS" "$SIZE" "$RUNS"
  python3 bench/deflate_libs.py run "$MSGS" "$SIZE" "$RUNS"
done
