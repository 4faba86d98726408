#!/usr/bin/env bash
# What `serve --processes` costs a broadcast: the same subscribers on one process, on two
# processes under the supervisor with the local relay, and on two processes that relay over
# Redis (--cluster). All on one port; the kernel spreads the subscribers, the publisher lands
# on one process, the others get the message through the relay. Measured by `wstune selftest
# --scenario broadcast` (publish -> each delivery, and -> the last subscriber, per round), at a
# small fan-out (the relay hop dominates) and a large one (the fan-out dominates).
# Bounded: ROUNDS rounds per row. Usage: bench/processes.sh [CONNS=10000] [ROUNDS=20]
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS=${1:-10000}; ROUNDS=${2:-20}
# WSTUNE=path/to/wstune measures that binary instead of building one.
if [ -z "${WSTUNE:-}" ]; then cargo build --release -q -p wstune; fi
W=${WSTUNE:-${CARGO_TARGET_DIR:-target}/release/wstune}
RP=16398; P=19421
redis-server --port $RP --bind 127.0.0.1 --save "" --appendonly no >/dev/null 2>&1 & RPID=$!
SPID=
trap 'kill $RPID $SPID 2>/dev/null || true' EXIT
start() { # start a server with "$@", wait for its port
  $W serve --profile 10k --max-connections 20000 --app broadcast --admin off --port $P "$@" >/dev/null 2>&1 & SPID=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$P) 2>/dev/null && sleep 1 && return; sleep 0.1; done
  echo "server did not start" >&2; exit 1
}
stop() { kill -TERM $SPID; wait $SPID || true; SPID=; }
row() { python3 -c '
import json, sys
r = json.load(sys.stdin); s = r["scenarios"][0]; l = s["latency_ms"]; b = s["broadcast_last_ms"]
print("| %s | %d | %d of %d | %.2f / %.2f | %.2f / %.2f |" % (sys.argv[1], s["conns_connected"], s["received"], s["conns_connected"] * s["broadcast_rounds"], l["p50"], l["p99"], b["p50"], b["p99"]))' "$1"; }
measure() { # label conns
  $W selftest --url ws://127.0.0.1:$P/ --broadcast-url ws://127.0.0.1:$P/ --scenario broadcast \
    --conns "$2" --generators 2 --rounds "$ROUNDS" --secs "$ROUNDS" --format json | row "$1" || true
}
echo "| setup | subscribers | deliveries | every delivery p50 / p99 ms | last subscriber p50 / p99 ms |"
echo "|---|---|---|---|---|"
for n in 100 "$CONNS"; do
  start; measure "one process" "$n"; stop
  start --processes 2; measure "2 processes, local relay" "$n"; stop
  start --processes 2 --cluster redis://127.0.0.1:$RP; sleep 1; measure "2 processes, Redis relay (--cluster)" "$n"; stop
done
