#!/usr/bin/env bash
# Server CPU per broadcast delivery, two server binaries alternated in one run (noise hits both):
#   bench/broadcast-cpu.sh OLD_WSTUNE NEW_WSTUNE [CONNS] [ROUNDS] [RUNS]
# Each run starts `serve --app broadcast`, measures it with this checkout's release
# `wstune selftest --scenario broadcast` (the same generator for both), and prints the
# server's CPU seconds over the run (connects included) and the last-subscriber p50/max.
# On a busy host prefix the command with `chrt -r 1` (real-time priority, bounded runs).
set -euo pipefail
OLD=$1; NEW=$2; N=${3:-10000}; R=${4:-20}; RUNS=${5:-3}
GEN=${GEN:-./target/release/wstune}
ulimit -n 20000 2>/dev/null || true
one() {
  local bin=$1 port=$((20000 + RANDOM % 20000)) out
  out=$(mktemp)
  "$bin" serve --app broadcast --port "$port" --admin off >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 50); do (echo >/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
  local t0; t0=$(awk '{print $14+$15}' /proc/$pid/stat)
  "$GEN" selftest --url "ws://127.0.0.1:$port/" --scenario broadcast --conns "$N" --rounds "$R" \
    --secs 10 -f json >"$out" 2>/dev/null || true
  local t1; t1=$(awk '{print $14+$15}' /proc/$pid/stat)
  kill "$pid"; wait "$pid" 2>/dev/null || true
  python3 - "$bin" "$t0" "$t1" "$out" <<'PY'
import json, os, sys
b, t0, t1, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
s = json.load(open(out))["scenarios"][0]
l = s["broadcast_last_ms"]
hz = os.sysconf("SC_CLK_TCK")
print(f"{b}: server CPU {(t1 - t0) / hz:.2f} s, delivered {s['received']}, "
      f"last subscriber p50 {l['p50']:.0f} ms, max {l['max']:.0f} ms")
PY
  rm -f "$out"
}
for _ in $(seq "$RUNS"); do one "$OLD"; one "$NEW"; done
