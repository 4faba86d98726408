#!/usr/bin/env bash
# Server benchmarks for BENCHMARKS.md, each beside the tokio-tungstenite peer in the same run:
#   1. idle memory per connection and idle CPU at N connections (heartbeats on, 5 s interval)
#   2. echo throughput at saturation: 100 connections, 100-byte messages, closed loop
#   3. broadcast of one 100-byte message to N clients: time until the last one has it
# The server runs on core 0 and the load generator on core 1 (taskset) where there are two.
# Usage: bench/server.sh [CONNS=10000]; HB=SECS sets the heartbeat interval (default 30, the
# profile's); ONLY=idle|echo|broadcast runs one section. Every loop is bounded in time.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10000}
HB=${HB:-30}
ONLY=${ONLY:-all}
want() { [ "$ONLY" = all ] || [ "$ONLY" = "$1" ]; }
cargo build --release -q -p wstune -p wsbench -p tt-echo
W=target/release/wstune; L=target/release/wsload; T=target/release/tt-echo; B=target/release/broadcast-bench
S0="taskset -c 0"; S1="taskset -c 1"
[ "$(nproc)" -ge 2 ] || { S0=""; S1=""; }
cpu() { awk '{print $14+$15}' /proc/$1/stat; }          # clock ticks
rss() { awk '/VmRSS/{print $2}' /proc/$1/status; }        # KiB
wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.1; done; return 1; }
start_server() { # name port -> sets SPID
  case $1 in
    wstune) $S0 $W serve --port $2 --admin off --profile 100k --heartbeat-interval $HB --heartbeat-timeout 600 >/dev/null 2>&1 & ;;
    wstune-broadcast) $S0 $W serve --port $2 --admin off --profile 100k --app broadcast >/dev/null 2>&1 & ;;
    tt) $S0 $T $2 >/dev/null 2>&1 & ;;
    tt-broadcast) $S0 $T $2 broadcast >/dev/null 2>&1 & ;;
  esac
  SPID=$!; wait_port $2
}
stop() { kill "$@" 2>/dev/null || true; wait "$@" 2>/dev/null || true; }
HZ=$(getconf CLK_TCK)

if want idle; then
echo "## idle: $N connections, heartbeat every $HB s, CPU over 30 s"
for s in wstune tt; do
  port=$((19000 + RANDOM % 1000)); start_server $s $port; sleep 1
  r0=$(rss $SPID)
  fifo=$(mktemp -u); mkfifo $fifo
  $S1 $L idle 127.0.0.1:$port --conns $N --hold 50 > $fifo & LPID=$!
  read -r ready < $fifo; rm -f $fifo
  sleep 3; r1=$(rss $SPID); c0=$(cpu $SPID); sleep 30; c1=$(cpu $SPID)
  echo "server=$s $ready rss_before_kib=$r0 rss_after_kib=$r1 bytes_per_conn=$(( (r1 - r0) * 1024 / N )) idle_cpu_pct=$(echo "scale=2; ($c1-$c0)*100/$HZ/30" | bc)"
  stop $LPID $SPID
done
fi

if want echo; then
echo "## echo: 100 connections, 100-byte messages, 10 s"
for s in wstune tt; do
  port=$((20000 + RANDOM % 1000)); start_server $s $port
  c0=$(cpu $SPID)
  out=$($S1 $L echo 127.0.0.1:$port --conns 100 --secs 10 | tail -1)
  c1=$(cpu $SPID)
  msgs=$(echo "$out" | sed 's/.*messages=\([0-9]*\).*/\1/')
  scpu=$(echo "scale=3; ($c1-$c0)/$HZ" | bc)
  echo "server=$s $out server_cpu_s=$scpu echoes_per_server_cpu_s=$(echo "scale=0; $msgs/$scpu" | bc)"
  stop $SPID
done
fi

want broadcast || exit 0
echo "## broadcast: $N subscribers, 100-byte message (in-process library calls)"
$B $N 15 $L

echo "## broadcast: $N subscribers, published by a client (server apps)"
for s in wstune-broadcast tt-broadcast; do
  port=$((21000 + RANDOM % 1000)); start_server $s $port
  fifo=$(mktemp -u); mkfifo $fifo
  $S1 $L sub 127.0.0.1:$port --conns $N --rounds 10 --timeout 60 > $fifo & LPID=$!
  exec 4<$fifo; read -r ready <&4
  $S1 $L pub 127.0.0.1:$port --rounds 10 --gap-ms 500
  results=$(cat <&4); exec 4<&-; rm -f $fifo
  lasts=$(echo "$results" | sed -n 's/.*last_ms=\([0-9.]*\).*/\1/p' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
  recv=$(echo "$results" | sed -n 's/.*received=\([0-9]*\).*/\1/p' | sort -n | head -1)
  echo "server=$s rounds=10 min_received=$recv median_last_ms=$lasts"
  stop $LPID $SPID
done
