#!/usr/bin/env bash
# A/B echo efficiency: OLD and NEW echo harnesses alternated, server pinned to CPU 0, the
# generator to CPU 1; server CPU per echo from the self-test's own
# /proc sampling (utime+stime of the server process over the 8 s window).
set -u
# Usage: bench/echo-cpu-ab.sh OLD_SERVER NEW_SERVER GENERATOR_WSTUNE [INFLIGHT]
# Each server binary takes its port as its one argument and serves the built-in echo (the
# harness: bench/echo-cpu-harness.rs, built against each crate;
# bench/results/2026-12-01-handler-api-cost.md). ROUNDS (default 4) alternations,
# the order swapped every other round.
OLD=$1; NEW=$2; GEN=$3; INFLIGHT=${4:-1}
ROUNDS=${ROUNDS:-4}
for r in $(seq 1 $ROUNDS); do
  order="old new"; [ $((r % 2)) = 0 ] && order="new old"
  for v in $order; do
    port=$(python3 -c "import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); print(s.getsockname()[1])")
    bin=$OLD; [ $v = new ] && bin=$NEW
    taskset -c 0 "$bin" $port 2>/dev/null & pid=$!
    for i in $(seq 1 50); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
    out=$(nice -n 10 taskset -c 1 $GEN selftest --url ws://127.0.0.1:$port/ --scenario echo-sat --conns 100 --inflight $INFLIGHT --secs 8 --pid $pid --format json 2>/dev/null)
    kill $pid; wait $pid 2>/dev/null
    # round, binary, echoes per server CPU-s, echoes, server CPU s, server CPU us per echo
    echo "$r $v $(echo "$out" | python3 -c 'import json,sys; r=json.load(sys.stdin); s=r["scenarios"][0]; print(round(s["echoes_per_server_cpu_sec"]), s["received"], s["server"]["cpu_secs"], round(1e6*s["server"]["cpu_secs"]/max(s["received"],1),3))')"
  done
done
