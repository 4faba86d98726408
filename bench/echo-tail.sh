#!/usr/bin/env bash
# Open-loop echo tail with the server pinned (issue 16): `serve` on core 0, the self-test's
# generator on core 1, configurations alternated run by run. Each configuration is
# NAME=BINARY[@ENV=VALUE...] (the env goes to the server only, e.g. a jemalloc option; a
# binary named tt-echo* is the tokio-tungstenite peer, started as `tt-echo PORT`):
#   bench/echo-tail.sh CONNS RATE SECS RUNS main=/path/old new=/path/new 'decay=/path/new@_RJEM_MALLOC_CONF=dirty_decay_ms:1000'
# Per run: server CPU (% of its core, over the measured window), latency from when each message
# was due (scheduled) and from its actual send (service), the longest service latency (the
# longest stall a message met), the generator's CPU and headroom, and how long the server's
# threads waited for a CPU while runnable (/proc/PID/task/*/schedstat, the whole run: connects
# included): on a shared host that is other processes' time slices, not the server's stalls.
# PRIO='chrt -r 1' runs server and generator at real-time priority (bounded runs only) so the
# other tenants' compilers do not take slices of the pinned cores.
set -euo pipefail
N=$1; RATE=$2; SECS=$3; RUNS=$4; shift 4
GEN=${GEN:-./target/release/wstune}
PRIO=${PRIO:-}
runq() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $2} END {print s / 1e6}'; }
ulimit -n 20000 2>/dev/null || ulimit -n 20000
one() {
  local name=${1%%=*} spec=${1#*=}
  local bin=${spec%%@*} envs=() port=$((10000 + RANDOM % 10000)) out
  [[ $spec == *@* ]] && IFS=@ read -r -a envs <<<"${spec#*@}"
  out=$(mktemp)
  if [[ $(basename "$bin") == tt-echo* ]]; then # the tokio-tungstenite peer (bench/peers/tt-echo)
    env "${envs[@]}" $PRIO taskset -c 0 "$bin" "$port" >/dev/null 2>&1 &
  else
    env "${envs[@]}" $PRIO taskset -c 0 "$bin" serve --port "$port" --admin off >/dev/null 2>&1 &
  fi
  local pid=$!
  for _ in $(seq 50); do (echo >/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
  local q0; q0=$(runq "$pid")
  $PRIO taskset -c 1 "$GEN" selftest --url "ws://127.0.0.1:$port/" --pid "$pid" --scenario echo-rate \
    --conns "$N" --rate "$RATE" --secs "$SECS" -f json >"$out" 2>/dev/null || true
  local q1; q1=$(runq "$pid")
  kill "$pid" 2>/dev/null || echo "$name: the server had exited (see its log)" >&2; wait "$pid" 2>/dev/null || true
  python3 - "$name" "$out" "$q0" "$q1" <<'PY'
import json, sys
name, out, q0, q1 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
s = json.load(open(out))["scenarios"][0]
l, v, srv, g = s["latency_ms"], s.get("service_latency_ms") or {}, s["server"], s["generator"]
f = lambda d, k: f"{d.get(k, float('nan')):.2f}"
print(f"{name}: {s['received']} echoes ({s['achieved_rate']:.0f}/s, lost {s['lost']}), server CPU {srv['cpu_pct']:.1f}%; "
      f"scheduled p50/p99/p99.9/max {f(l,'p50')}/{f(l,'p99')}/{f(l,'p999')}/{f(l,'max')} ms; "
      f"service {f(v,'p50')}/{f(v,'p99')}/{f(v,'p999')}/{f(v,'max')} ms; "
      f"generator {g['cpu_pct']:.0f}% of its core (headroom {max(0, 100 - g['cpu_pct'] / s['workers']):.0f}%); "
      f"server runnable but waiting for the CPU {q1 - q0:.0f} ms")
PY
  rm -f "$out"
}
for _ in $(seq "$RUNS"); do
  for c in "$@"; do one "$c"; done
done
