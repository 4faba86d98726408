#!/usr/bin/env bash
# I/O threads per core: the guide says 2-4 per core for echo and fan-out (IOCP workers that may
# block briefly); wstune's event loops never block, so `wstune pool` advises one per core. This
# measures that advice: echo-sat against `serve --workers N` for N = 1, 2 and 4 per core, REPS
# runs each, medians printed. The server is pinned to core 0 and the generator to core 1
# (taskset), as in bench/peers/compare.sh, so "per core" is exact and the generator does not
# steal the server's core. Usage: bench/io-workers.sh [REPS=5] [SECS=4]
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-5}; SECS=${2:-4}
cargo build --release -q -p wstune
W=target/release/wstune
CORES=1
S0="taskset -c 0"; S1="taskset -c 1"
[ "$(nproc)" -ge 2 ] || { S0=""; S1=""; echo "warning: one core: server and generator share it" >&2; }
PORT=$((20000 + RANDOM % 20000))
echo "per_core workers rep echoes_per_s echoes_per_server_cpu_s p50_ms p99_ms server_cpu_pct generator_cpu_pct"
for per in 1 2 4; do
  for rep in $(seq "$REPS"); do
    $S0 "$W" serve --port "$PORT" --admin off --profile 10k --workers $((per * CORES)) --no-deflate >/dev/null 2>&1 &
    SP=$!
    sleep 0.7
    timeout $((SECS + 30)) $S1 "$W" selftest --url "ws://127.0.0.1:$PORT/" --pid "$SP" --profile 10k \
      --scenario echo-sat --conns 200 --inflight 4 --secs "$SECS" --format json 2>/dev/null |
      python3 -c '
import json, sys
s = json.load(sys.stdin)["scenarios"][0]
print(sys.argv[1], sys.argv[2], sys.argv[3], round(s["achieved_rate"]), round(s.get("echoes_per_server_cpu_sec") or 0),
      s["latency_ms"]["p50"], s["latency_ms"]["p99"], round(s["server"]["cpu_pct"]), round(s["generator"]["cpu_pct"]))' \
      "$per" $((per * CORES)) "$rep" || echo "$per $((per * CORES)) $rep failed"
    kill "$SP"; wait "$SP" 2>/dev/null || true
  done
done | tee /tmp/io-workers.$$
python3 - /tmp/io-workers.$$ <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l[0].isdigit() and "failed" not in l]
print("\nmedians:")
for per in sorted({r[0] for r in rows}, key=int):
    rs = [r for r in rows if r[0] == per]
    med = lambda i: statistics.median(float(r[i]) for r in rs)
    print(f"{per}/core ({rs[0][1]} threads): {med(3):,.0f} echoes/s, {med(4):,.0f} per server CPU-s, "
          f"p50 {med(5)} ms, p99 {med(6)} ms, generator CPU {med(8):.0f} %")
PY
rm -f /tmp/io-workers.$$
