#!/usr/bin/env bash
# The self-test generator's own cost: two generator binaries, A and B,
# alternated run by run against the SAME server binary, server pinned to core 0 and the
# generator to core 1, both at real-time priority 1 (bounded runs), so the server's figures
# stay put and only the generator's move:
#   bench/generator-ab.sh SERVER GEN_A GEN_B [RUNS=3] [SECS=20]
# Per run and generator: echo-rate 5,000 x 5 and 5,000 x 10 msgs/s (generator and server CPU,
# service p99 / p99.9, the generator's headroom) and broadcast 100 B to 10,000 subscribers, 20
# rounds (generator and server CPU per delivery, until the last subscriber p50); then
# bench/write-floor.c's plain epoll reader on the same broadcast shape, the receive floor.
# CONNS, RATES and BCAST (subscribers) override the load.
set -euo pipefail
SERVER=$1; A=$2; B=$3; RUNS=${4:-3}; SECS=${5:-20}
CONNS=${CONNS:-5000}; RATES=${RATES:-"5 10"}; BCAST=${BCAST:-10000}
PRIO=${PRIO:-chrt -r 1}
ulimit -n 20000 2>/dev/null || ulimit -n 20000
here=$(cd "$(dirname "$0")" && pwd)
floor=$(mktemp -d)/write-floor
cc -O2 -o "$floor" "$here/write-floor.c"
server() { # APP PORT: the server, pinned; prints its pid
  $PRIO taskset -c 0 "$SERVER" serve --app "$1" --port "$2" --admin off >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 50); do (echo >/dev/tcp/127.0.0.1/"$2") 2>/dev/null && break; sleep 0.1; done
  echo "$pid"
}
one() { # NAME GEN SCENARIO-ARGS...
  local name=$1 gen=$2; shift 2
  local app=echo port=$((24000 + RANDOM % 1000)) out pid
  [[ " $* " == *" broadcast "* ]] && app=broadcast
  out=$(mktemp)
  pid=$(server "$app" "$port")
  $PRIO taskset -c 1 "$gen" selftest --url "ws://127.0.0.1:$port/" --pid "$pid" "$@" -f json \
    >"$out" 2>/dev/null || true
  kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  python3 - "$name" "$out" <<'PY'
import json, sys
name, out = sys.argv[1], sys.argv[2]
try:
    s = json.load(open(out))["scenarios"][0]
except Exception as e:
    print(f"{name}: no report ({e})"); sys.exit()
srv, g = s["server"], s["generator"]
n = max(s["received"], 1)
if s["scenario"] == "broadcast":
    l = s["broadcast_last_ms"]
    print(f"{name} broadcast: {s['received']} delivered; server {srv['cpu_secs'] / n * 1e6:.2f} us, "
          f"generator {g['cpu_secs'] / n * 1e6:.2f} us per delivery; last subscriber p50 {l['p50']:.1f} ms")
else:
    v = s.get("service_latency_ms") or {}
    print(f"{name} echo-rate {s['offered_rate']:.0f}/s: achieved {s['achieved_rate']:.0f}/s lost {s['lost']}; "
          f"generator {g['cpu_pct']:.1f}% (headroom {max(0, 100 - g['cpu_pct'] / s['workers']):.0f}%), "
          f"server {srv['cpu_pct']:.1f}%; service p99/p99.9 {v.get('p99', float('nan')):.2f}/"
          f"{v.get('p999', float('nan')):.2f} ms")
PY
  rm -f "$out"
}
for _ in $(seq "$RUNS"); do
  for rate in $RATES; do
    for g in "A=$A" "B=$B"; do
      one "${g%%=*}" "${g#*=}" --scenario echo-rate --conns "$CONNS" --rate "$rate" --secs "$SECS"
    done
  done
  for g in "A=$A" "B=$B"; do
    one "${g%%=*}" "${g#*=}" --scenario broadcast --conns "$BCAST" --rounds 20 --secs 10
  done
  $PRIO taskset -c 0 "$floor" "$BCAST" 20 100 1
done
rm -f "$floor"
