#!/usr/bin/env bash
# The bytes of one idle connection (no deflate), allocation by allocation.
# Runs embedded-server/tests/idle_bytes.rs (release, the server in-process on jemalloc under a
# counting allocator; 10,000 idle clients in a Python process: bench/idle_clients.py) and
# prints the table for BENCHMARKS.md: live allocations per connection by requested size, the
# bytes jemalloc handed out for them, the process RSS growth, and the kernel slab caches a
# TCP connection lives in (system-wide, both loopback ends; /proc/slabinfo needs root).
# Usage: bench/idle-bytes.sh [CONNECTIONS=10000] [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10000}; RUNS=${2:-3}
ulimit -n "$(ulimit -Hn)"
cargo test --release -q -p embedded-server --no-default-features --test idle_bytes --no-run
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg), $(git rev-parse --short HEAD)"
for run in $(seq "$RUNS"); do
  echo "## run $run"
  IDLE_CONNS=$N cargo test --release -q -p embedded-server --no-default-features --test idle_bytes -- --ignored --nocapture 2>&1 \
    | grep -E '^(\||idle|task|type|heap|RSS|kernel|last)'
done
