# Network faults under `wstune serve` (tests/heavy/faults.rs), run inside `unshare --net --mount`:
# the server in this namespace on 10.77.0.1 (and 127.0.0.1), clients in the namespace "cli"
# (10.77.0.2) behind a veth, faults made with nftables and tc. CASE is blackhole, slow or flood.
# Prints tagged lines (RESULT, FIG) for the test to judge; every wait is bounded.
set -u
W="$WSTUNE"
T=$(mktemp -d)
C="python3 $FAULTS_DIR/fault_clients.py"
cleanup() {
  for j in $(jobs -p); do kill "$j" 2>/dev/null; done
  ip netns del cli 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
ip link set lo up
# A private /run/netns: the client namespace's name never shows outside this mount namespace.
mkdir -p /run/netns && mount -t tmpfs tmpfs /run/netns || exit 95
ip netns add cli || exit 95
ip link add vs type veth peer name vc || exit 95
ip link set vc netns cli
ip addr add 10.77.0.1/24 dev vs && ip link set vs up
ip netns exec cli ip addr add 10.77.0.2/24 dev vc
ip netns exec cli ip link set vc up
ip netns exec cli ip link set lo up
IN_CLI="ip netns exec cli"
PORT=9101; ADMIN=9102
URL_CLI="ws://10.77.0.1:$PORT/"; URL_LO="ws://127.0.0.1:$PORT/"

serve() { # extra serve flags
  "$W" serve --bind 0.0.0.0 --port $PORT --admin 127.0.0.1:$ADMIN --app channels --profile 10k "$@" \
    > "$T/server.log" 2>&1 &
  SPID=$!
  for _ in $(seq 200); do grep -q "listening on" "$T/server.log" && return 0; sleep 0.05; done
  echo "ERR server did not start: $(cat "$T/server.log")"; exit 96
}
metric() { curl -s --max-time 5 "http://127.0.0.1:$ADMIN/metrics" | awk -v m="$1" '$1 == m {v = $2} END {print v + 0}'; }
rss() { awk '/VmRSS/{print $2}' /proc/$SPID/status; }
wait_file() { for _ in $(seq 600); do [ -s "$1" ] && return 0; sleep 0.05; done; echo "ERR no $1"; exit 97; }
wait_gauge() { # value, max seconds -> prints the milliseconds it took, or "timeout"
  local t0=$(date +%s%N)
  for _ in $(seq $(( $2 * 20 ))); do
    if [ "$(metric ws_connections)" = "$1" ]; then echo $(( ($(date +%s%N) - t0) / 1000000 )); return; fi
    sleep 0.05
  done
  echo timeout
}
wait_metric_at_least() { # metric, value, max seconds: bounded; exits 98 naming it on timeout
  for _ in $(seq $(( $3 * 20 ))); do
    [ "$(metric "$1")" -ge "$2" ] && return 0
    sleep 0.05
  done
  echo "ERR $1 never reached $2 (now $(metric "$1"))"; exit 98
}
server_log_errors() { awk 'f; /listening on/{f=1}' "$T/server.log" | grep -cE "ERROR|panicked"; }

case $CASE in
blackhole)
  # 1,000 clients, then every packet to and from them is dropped: half-open connections. The
  # heartbeat (interval 2 s, timeout 3 s) must close each within interval + timeout, while
  # broadcasts keep trying to reach them and a loopback client keeps its echo.
  N=${N:-1000}
  serve --heartbeat-interval 2 --heartbeat-timeout 3
  RSS0=$(rss)
  $IN_CLI $C hold --url $URL_CLI --n $N --secs 60 --ready "$T/ready" > "$T/hold.json" &
  wait_file "$T/ready"
  $C probe --url $URL_LO --secs 25 > "$T/probe.json" &
  PROBE=$!
  G1=$(wait_gauge $((N + 1)) 20)
  RSS1=$(rss)
  MO0=$(metric ws_messages_out_total)
  $C publish --url $URL_LO --rate 20 --size 1000 --secs 20 > "$T/pub.json" &
  PUB=$!
  # Broadcasts are flowing (one has reached every client) before the blackhole.
  wait_metric_at_least ws_messages_out_total $((MO0 + N)) 10
  nft add table inet bh
  nft add chain inet bh out '{ type filter hook output priority 0; }'
  nft add chain inet bh in '{ type filter hook input priority 0; }'
  nft add rule inet bh out ip daddr 10.77.0.2 drop
  nft add rule inet bh in ip saddr 10.77.0.2 drop
  HB0=$(metric ws_heartbeat_timeouts_total); BP0=$(metric ws_backpressure_closes_total)
  # The probe and the publisher remain: N + 2 -> 2.
  MS=$(wait_gauge 2 30)
  HB=$(( $(metric ws_heartbeat_timeouts_total) - HB0 )); BP=$(( $(metric ws_backpressure_closes_total) - BP0 ))
  wait $PROBE $PUB
  # The probe and the publisher are gone from the gauge before RSS is read.
  GA=$(wait_gauge 0 10)
  RSS2=$(rss)
  echo "RESULT blackhole n=$N ready=$(cat "$T/ready") before_gauge_ms=$G1 closed_all_ms=$MS heartbeat_closes=$HB backpressure_closes=$BP gauge_after=$(metric ws_connections) deflate_after=$(metric ws_deflate_memory_bytes) rss0_kib=$RSS0 rss_connected_kib=$RSS1 rss_after_kib=$RSS2 log_errors=$(server_log_errors)"
  echo "PROBE $(cat "$T/probe.json")"
  ;;
slow)
  # A 1 Mbit/s link (tbf) to 20 clients under a broadcast of ~3 Mbit/s per client: their send
  # queues stay above the cap past the drain timeout and the server closes them (1008); 20
  # clients on loopback keep receiving every broadcast with low latency.
  serve --send-queue 65536 --drain-timeout 3
  tc qdisc add dev vs root tbf rate 1mbit burst 32kbit latency 400ms
  $IN_CLI $C listen --url $URL_CLI --n 20 --secs 16 --ready "$T/slow.ready" > "$T/slow.json" &
  A=$!
  $C listen --url $URL_LO --n 20 --secs 16 --ready "$T/fast.ready" > "$T/fast.json" &
  B=$!
  wait_file "$T/slow.ready"; wait_file "$T/fast.ready"
  $C publish --url $URL_LO --rate 50 --size 8000 --secs 10 > "$T/pub.json" &
  wait $A $B $!
  echo "RESULT slow backpressure_closes=$(metric ws_backpressure_closes_total) gauge_after=$(metric ws_connections) log_errors=$(server_log_errors)"
  echo "SLOW $(cat "$T/slow.json")"
  echo "FAST $(cat "$T/fast.json")"
  echo "PUB $(cat "$T/pub.json")"
  ;;
flood)
  # A small backlog (somaxconn 64, no SYN cookies) in the server's namespace, 100 established
  # clients, then a SYN flood (half-open, never answered), a backlog flood of full handshakes
  # and an RST storm from "cli": ListenOverflows/ListenDrops grow, `check --watch` reports
  # them, and the established clients keep being served.
  sysctl -qw net.core.somaxconn=64 net.ipv4.tcp_max_syn_backlog=64 net.ipv4.tcp_syncookies=0
  serve
  $IN_CLI $C hold --url $URL_CLI --n 100 --secs 20 --ready "$T/ready" > "$T/hold.json" &
  HOLD=$!
  wait_file "$T/ready"
  $C probe --url $URL_LO --secs 16 > "$T/probe.json" &
  PROBE=$!
  # The SYN-ACKs to the flood's ports are dropped in "cli", so its kernel never resets them.
  $IN_CLI nft add table inet f
  $IN_CLI nft add chain inet f in '{ type filter hook input priority 0; }'
  $IN_CLI nft add rule inet f in tcp dport 40000-49999 drop
  $IN_CLI sysctl -qw net.ipv4.ip_local_port_range="50000 60999"
  "$W" check --profile 10k --watch 10 -f json > "$T/check.json" 2> "$T/check.err" &
  CHECK=$!
  # No event to wait for: check prints nothing until its window ends. Half a second lets it
  # take its first sample of the counters before the storm starts.
  sleep 0.5
  # First the RST storm alone (a SYN flood without cookies refuses every new connection, the
  # storm's included), then the SYN flood and the backlog flood together.
  $IN_CLI $C rst --url $URL_CLI --conc 20 --secs 4 > "$T/rst.json"
  $IN_CLI python3 "$FAULTS_DIR/syn_flood.py" 10.77.0.2 10.77.0.1 $PORT 5 > "$T/syn.json" &
  F1=$!
  $IN_CLI $C connflood --url $URL_CLI --n 3000 --secs 5 > "$T/conn.json" &
  F2=$!
  wait $CHECK $F1 $F2 $HOLD $PROBE
  echo "RESULT flood gauge_after=$(metric ws_connections) log_errors=$(server_log_errors)"
  echo "HOLD $(cat "$T/hold.json")"
  echo "PROBE $(cat "$T/probe.json")"
  echo "SYN $(cat "$T/syn.json")"
  echo "CONN $(cat "$T/conn.json")"
  echo "RST $(cat "$T/rst.json")"
  echo "CHECK $(tr -d '\n' < "$T/check.json")"
  ;;
esac
kill $SPID 2>/dev/null; wait $SPID 2>/dev/null
