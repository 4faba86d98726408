#!/usr/bin/env bash
# `wstune bench deflate` beside Python's zlib (bench/deflate_peer.py: the same messages and
# settings) in one run. Usage: bench/deflate.sh [ITERATIONS=10000] [LEVEL=1]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10000}; LEVEL=${2:-1}
cargo build --release -q -p wstune
echo "## wstune bench deflate (zlib-rs), level $LEVEL, window 15, memLevel 8, $N iterations"
target/release/wstune bench deflate --iterations "$N" --level "$LEVEL"
echo "## Python zlib, same messages and settings"
python3 bench/deflate_peer.py "$N" "$LEVEL" 15 8 | python3 -c '
import json, sys
d = json.load(sys.stdin)
print("zlib", d["zlib"])
for r in d["rows"]:
    print("%6d %-9s %-18s %10.1f ms/10k  ratio %.3f" % (r["size_bytes"], r["stream"], r["mode"], r["ms_per_10k"], r["ratio"]))'
