#!/usr/bin/env bash
# The hostile-client attacks at the outside audit's sizes, against the release `wstune serve`
# (profile 100k, one process, its default memory budget unless BUDGET is set), each beside a
# probe client (bench/hostile.py). One JSON line per attack, for BENCHMARKS.md.
# Usage: bench/hostile.sh [WSTUNE=target/release/wstune] [ATTACKS="amplify offload reassembly drip inflate-cpu"]
# Needs ~6 GiB of memory for amplify at 300 connections (the attackers' 16 MiB messages are
# built in Python) and about 4 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/wstune}
ATTACKS=${2:-amplify offload reassembly drip inflate-cpu}
ulimit -n "$(ulimit -Hn)"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(git rev-parse --short HEAD)"
for attack in $ATTACKS; do
  extra=(); args=()
  case $attack in
    amplify)     args=(--conns 300 --secs 32 --pong-every 15) ;;
    offload)     extra=(--handler block:2000 --offload-pool 2); args=(--count 350 --secs 20) ;;
    reassembly)  args=(--conns 60 --secs 40) ;;
    drip)        args=(--conns 50 --secs 45 --pong-every 20) ;;
    inflate-cpu) args=(--secs 20) ;;
  esac
  port=$(free_port); admin=$(free_port)
  budget=(); [ -n "${BUDGET:-}" ] && budget=(--memory-budget "$BUDGET")
  "$BIN" serve --profile 100k --processes 1 --port "$port" --admin "127.0.0.1:$admin" \
    "${budget[@]}" "${extra[@]}" 2>/dev/null &
  pid=$!
  for _ in $(seq 1 100); do (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  python3 bench/hostile.py "$attack" --port "$port" --admin "$admin" --pid "$pid" "${args[@]}" \
    | python3 -c '
import json, sys
r = json.load(sys.stdin)
m = r.pop("metrics", {})
keep = {k: v for k, v in m.items() if v and ("budget" in k or "timeouts" in k or "ratio" in k or "pauses" in k or "skipped" in k or "backpressure" in k)}
print(json.dumps({**r, "metrics": keep}))'
  kill "$pid"; wait "$pid" 2>/dev/null || true
done
