#!/usr/bin/env bash
# A/B of two `wstune serve` builds on the same workload: a connect storm (accept rate: what a
# per-connection cost shows in) and open-loop echo (server CPU per message, p99), the server
# pinned to CPU 0 and the generator (the NEW build's `wstune selftest`) to CPU 1, the builds
# alternated and the order swapped every other round; medians per build and NEW/OLD ratios.
#
#   bench/serve-ab.sh OLD_WSTUNE NEW_WSTUNE [STORM_CONNS=10000] [ROUNDS=5]
set -euo pipefail
OLD=$1; NEW=$2; CONNS=${3:-10000}; ROUNDS=${4:-5}
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), Linux $(uname -r); date $(date -u +%F)"
echo "old: $OLD ($("$OLD" --version)), new: $NEW ($("$NEW" --version))"
echo "storm: $CONNS connections; echo-rate: 2000 connections x 10 msgs/s, 100 B, 10 s"
out=$(mktemp); trap 'rm -f "$out"' EXIT
for r in $(seq 1 "$ROUNDS"); do
  order="old new"; [ $((r % 2)) = 0 ] && order="new old"
  for v in $order; do
    bin=$OLD; [ "$v" = new ] && bin=$NEW
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    taskset -c 0 "$bin" serve --profile 10k --port "$port" >/dev/null 2>&1 & pid=$!
    for _ in $(seq 1 100); do (echo > /dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
    json=$(taskset -c 1 "$NEW" selftest --url "ws://127.0.0.1:$port/" --profile 10k --pid "$pid" \
      --scenario storm --conns "$CONNS" --format json 2>/dev/null || true)
    storm=$(echo "$json" | python3 -c 'import json,sys; r=json.load(sys.stdin); print([s for s in r["scenarios"] if s["scenario"]=="storm"][0]["storm_secs"])' 2>/dev/null || echo nan)
    json=$(taskset -c 1 "$NEW" selftest --url "ws://127.0.0.1:$port/" --profile 10k --pid "$pid" \
      --scenario echo-rate --conns 2000 --rate 10 --secs 10 --format json 2>/dev/null || true)
    echo_fig=$(echo "$json" | python3 -c 'import json,sys; r=json.load(sys.stdin); s=r["scenarios"][0]; print(round(1e6*s["server"]["cpu_secs"]/max(s["received"],1),2), s["latency_ms"]["p99"])' 2>/dev/null || echo "nan nan")
    kill "$pid"; wait "$pid" 2>/dev/null || true
    echo "$r $v $storm $echo_fig" | tee -a "$out"
  done
done
python3 - "$out" "$CONNS" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1])]
def med(v, i):
    xs = [float(r[i]) for r in rows if r[1] == v and r[i] != "nan"]
    return statistics.median(xs) if xs else float("nan")
conns = int(sys.argv[2])
print("\nmedians: build  storm s  accepts/s  echo server us/msg  echo p99 ms")
for v in ("old", "new"):
    s = med(v, 2)
    print(f"         {v:5}  {s:7.2f}  {conns / s:9.0f}  {med(v, 3):18.2f}  {med(v, 4):11.2f}")
print(f"new/old: storm time {med('new', 2) / med('old', 2):.3f}, echo CPU per message {med('new', 3) / med('old', 3):.3f}")
PY
