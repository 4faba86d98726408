#!/usr/bin/env bash
# Broadcast latency across a cluster: 10,000 subscribers split over two `serve --cluster` nodes
# on one redis-server, a publisher on node A; beside the same 10,000 on a single node. Both
# measured by `wstune selftest --scenario broadcast` (time from the publish until each
# subscriber has it, and until the last one has it, per round). Bounded: ROUNDS rounds.
# Usage: bench/cluster.sh [CONNS=10000] [ROUNDS=20]
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS=${1:-10000}; ROUNDS=${2:-20}
cargo build --release -q -p wstune
W=target/release/wstune
RP=16399; A=19411; B=19412; S=19413
redis-server --port $RP --bind 127.0.0.1 --save "" --appendonly no >/dev/null 2>&1 & RPID=$!
$W serve --profile 10k --max-connections 20000 --app broadcast --admin off --port $A --cluster redis://127.0.0.1:$RP >/dev/null 2>&1 & APID=$!
$W serve --profile 10k --max-connections 20000 --app broadcast --admin off --port $B --cluster redis://127.0.0.1:$RP >/dev/null 2>&1 & BPID=$!
$W serve --profile 10k --max-connections 20000 --app broadcast --admin off --port $S >/dev/null 2>&1 & SPID=$!
trap 'kill $RPID $APID $BPID $SPID 2>/dev/null' EXIT
sleep 2
row() { python3 -c '
import json, sys
r = json.load(sys.stdin); s = r["scenarios"][0]; l = s["latency_ms"]; b = s["broadcast_last_ms"]
print("| %s | %d | %d of %d | %.1f / %.1f | %.1f / %.1f | %.0f%% |" % (sys.argv[1], s["conns_connected"], s["received"], s["conns_connected"] * s["broadcast_rounds"], l["p50"], l["p99"], b["p50"], b["p99"], s["generator"]["cpu_pct"]))' "$1"; }
echo "| setup | subscribers | deliveries | every delivery p50 / p99 ms | last subscriber p50 / p99 ms | generator CPU |"
echo "|---|---|---|---|---|---|"
$W selftest --url ws://127.0.0.1:$S/ --broadcast-url ws://127.0.0.1:$S/ --scenario broadcast \
  --conns "$CONNS" --generators 2 --rounds "$ROUNDS" --secs "$ROUNDS" --format json | row "one node"
$W selftest --url ws://127.0.0.1:$A/ --broadcast-url ws://127.0.0.1:$A/ \
  --subscribe-url ws://127.0.0.1:$A/ --subscribe-url ws://127.0.0.1:$B/ --scenario broadcast \
  --conns "$CONNS" --generators 2 --rounds "$ROUNDS" --secs "$ROUNDS" --format json | row "two nodes over Redis (publish on A)"
