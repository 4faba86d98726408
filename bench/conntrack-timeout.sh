#!/usr/bin/env bash
# How long conntrack keeps the entries of clients that vanish without a FIN or RST (a phone that
# leaves coverage, a NAT that forgets them, a client host that loses power), with the kernel's
# default net.netfilter.nf_conntrack_tcp_timeout_established (432000 s, 5 days) beside a lowered
# one (LOW, 30 s by default so that a round ends in about a minute; the arithmetic is the same
# for 600 or 3600), and what the lowered one does to connections that are alive but idle longer
# than it.
#
# Each setting gets its own server namespace, with a client namespace on one veth (the CONNS
# clients that will vanish) and another on a second veth (ALIVE clients that stay). The server
# namespace's nftables input chain is a common stateful one (policy drop; ct state
# established,related accept; ct state invalid drop; tcp dport 9300 accept), which turns
# connection tracking on there. Every client connects and sends one byte; the server reads it,
# then holds every socket idle (no pings, no keepalive) and echoes whatever arrives later. Then
# the CONNS clients vanish: their veth is deleted first and their process killed after, so not
# one FIN or RST reaches the server. The server namespace's conntrack count
# (/proc/sys/net/netfilter/nf_conntrack_count, per namespace) and the TCP entries
# /proc/net/nf_conntrack lists, with their median remaining timeout, are sampled every STEP s
# for OBSERVE s. After that the ALIVE clients, idle all along, send one byte each and wait 5 s
# for the echo: does an idle connection outlive its expired entry?
# Settings, run at the same time side by side, ROUNDS times; medians per sample:
#   default:      timeout 432000, nf_conntrack_tcp_loose 1 (the kernel's defaults)
#   low:          timeout LOW, loose 1 (a packet of a connection without an entry is picked up)
#   low-strict:   timeout LOW, loose 0 (such a packet is INVALID, and the ruleset drops it)
#
# nf_conntrack_tcp_timeout_established and nf_conntrack_tcp_loose are per network namespace
# (written here only inside the namespaces; the script shows the host's own values before and
# after); nf_conntrack_max is the host's, read-only in a namespace, and each namespace's count is
# held against it. Not measured here: NAT. On a NAT or Kubernetes node an entry that expires
# under a live connection also loses its address translation, which loose pickup cannot restore.
#
#   bench/conntrack-timeout.sh [CONNS=2000] [ROUNDS=3] [LOW=30] [OBSERVE=60] [STEP=5] [ALIVE=20]
# Needs root, python3, nft, ip, and a kernel with nf_conntrack and nft's ct expression (built in
# or loadable). Everything is bounded: each client and server process by `timeout`, the
# sampling by OBSERVE.
set -euo pipefail
n=${1:-2000}; rounds=${2:-3}; low=${3:-30}; observe=${4:-60}; step=${5:-5}; alive=${6:-20}
[ "$(id -u)" = 0 ] || { echo "conntrack-timeout.sh: run as root (it makes network namespaces)" >&2; exit 2; }
for t in python3 nft ip bc; do
  command -v "$t" >/dev/null || { echo "conntrack-timeout.sh: $t is missing (apt-get install nftables iproute2 python3 bc)" >&2; exit 2; }
done
[ "$observe" -gt $((low + 10)) ] || { echo "conntrack-timeout.sh: OBSERVE ($observe) must exceed LOW ($low) by more than 10 s, or nothing expires in the window" >&2; exit 2; }
[ -e /proc/sys/net/netfilter/nf_conntrack_tcp_timeout_established ] || modprobe nf_conntrack 2>/dev/null || true
[ -e /proc/sys/net/netfilter/nf_conntrack_tcp_timeout_established ] || {
  echo "conntrack-timeout.sh: this kernel ($(uname -r)) has no nf_conntrack (no /proc/sys/net/netfilter/nf_conntrack_tcp_timeout_established, modprobe nf_conntrack failed): nothing to measure" >&2; exit 3; }
ulimit -n $(((n + alive) * 2 + 100)) 2>/dev/null || { echo "conntrack-timeout.sh: cannot raise the open-file limit to $(((n + alive) * 2 + 100))" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
hv() { echo "timeout_established $(cat /proc/sys/net/netfilter/nf_conntrack_tcp_timeout_established), tcp_loose $(cat /proc/sys/net/netfilter/nf_conntrack_tcp_loose)"; }
host_before=$(hv)
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), Linux $(uname -r)"
echo "date: $(date -u +%FT%TZ), commit: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "per round: $n idle connections whose clients vanish at t=0 and $alive that stay, idle; sampled every $step s for $observe s; rounds: $rounds"
echo "host: $host_before, nf_conntrack_max $(cat /proc/sys/net/netfilter/nf_conntrack_max) (global)"

tags=(default low low-strict)
tmo=(432000 "$low" "$low"); loose=(1 1 0)
NS=()
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for ns in "${NS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  NS=(); PIDS=()
}
OUT=$(mktemp -d /tmp/conntrack-timeout.XXXX)
trap 'cleanup; rm -rf "$OUT"' EXIT

setup() { # I: server namespace ct-s-I (10.(81+I).0.1 to the vanishing clients in ct-c-I,
  # 10.(81+I).1.1 to the staying clients in ct-a-I)
  local i=$1 s=ct-s-$1-$$ c=ct-c-$1-$$ a=ct-a-$1-$$ net=$((81 + $1))
  for ns in "$s" "$c" "$a"; do ip netns add "$ns"; NS+=("$ns"); ip -n "$ns" link set lo up; done
  ip link add vs netns "$s" type veth peer name vc netns "$c"
  ip link add va netns "$s" type veth peer name vc netns "$a"
  ip -n "$s" addr add "10.$net.0.1/24" dev vs; ip -n "$c" addr add "10.$net.0.2/24" dev vc
  ip -n "$s" addr add "10.$net.1.1/24" dev va; ip -n "$a" addr add "10.$net.1.2/24" dev vc
  ip -n "$s" link set vs up; ip -n "$s" link set va up; ip -n "$c" link set vc up; ip -n "$a" link set vc up
  ip netns exec "$s" nft -f - <<'NFT'
table inet track {
 chain in {
  type filter hook input priority 0; policy drop;
  iif lo accept
  ct state established,related accept
  ct state invalid drop
  tcp dport 9300 accept
 }
}
NFT
  ip netns exec "$s" sysctl -qw "net.netfilter.nf_conntrack_tcp_timeout_established=${tmo[$i]}" \
    "net.netfilter.nf_conntrack_tcp_loose=${loose[$i]}"
  local got
  got=$(ip netns exec "$s" cat /proc/sys/net/netfilter/nf_conntrack_tcp_timeout_established /proc/sys/net/netfilter/nf_conntrack_tcp_loose | paste -sd' ')
  [ "$got" = "${tmo[$i]} ${loose[$i]}" ] || { echo "conntrack-timeout.sh: the namespace reads '$got' after writing '${tmo[$i]} ${loose[$i]}'" >&2; exit 3; }
}

server() { # NS COUNT: accepts COUNT, reads a byte from each, says "ready", then echoes what comes
  exec timeout $((observe + 120)) ip netns exec "$1" python3 -c '
import selectors, socket, sys
n = int(sys.argv[1]); ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("0.0.0.0", 9300)); ls.listen(4096); sel = selectors.DefaultSelector(); held = 0
while held < n:
    c, _ = ls.accept(); c.recv(1); sel.register(c, selectors.EVENT_READ); held += 1
print("ready", flush=True)
while True:
    for key, _ in sel.select():
        try:
            d = key.fileobj.recv(64)
        except OSError:
            d = b""
        if d:
            key.fileobj.send(d)
        else:
            sel.unregister(key.fileobj)' "$2"
}
clients() { # NS ADDR COUNT IDLE: COUNT connections, one byte each; then silence. IDLE > 0: after
  # IDLE s, send a byte on each and print how many got their echo within 5 s.
  exec timeout $((observe + 120)) ip netns exec "$1" python3 -c '
import socket, sys, time
addr, n, idle = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
socks = [socket.create_connection((addr, 9300)) for _ in range(n)]
for s in socks: s.send(b"h")
print("open", flush=True)
if idle <= 0:
    time.sleep(10**6)
time.sleep(idle)
for s in socks: s.settimeout(5); s.send(b"p")
end = time.monotonic() + 5; ok = 0
for s in socks:
    s.settimeout(max(0.01, end - time.monotonic()))
    try:
        ok += s.recv(1) == b"p"
    except OSError:
        pass
print("alive_echoed %d of %d after %.0f s idle" % (ok, n, idle), flush=True)' "$2" "$3" "$4"
}
sample() { # NS -> "count listed median-remaining-s": the namespace's count (what nf_conntrack_max
  # is held against; expired entries leave it when the garbage collector reaps them), the TCP
  # entries /proc/net/nf_conntrack lists (it skips expired ones), their median remaining timeout
  ip netns exec "$1" sh -c 'cat /proc/sys/net/netfilter/nf_conntrack_count; awk "\$3 == \"tcp\" {print \$5}" /proc/net/nf_conntrack | sort -n | awk "{a[NR]=\$1} END {print NR, (NR ? a[int((NR+1)/2)] : \"-\")}"' | paste -sd' '
}
median() { tr ' ' '\n' <<<"$1" | { grep -E '^[0-9.]+$' || true; } | sort -n | awk '{a[NR]=$1} END {print (NR == 0) ? "-" : (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

declare -A cnt lst rem echoed
hdr=$(printf '%-28s' "default (432000, loose 1)" "low ($low, loose 1)" "low-strict ($low, loose 0)")
for r in $(seq 1 "$rounds"); do
  VPIDS=()
  for i in 0 1 2; do
    setup "$i"
    s=ct-s-$i-$$; net=$((81 + i))
    server "$s" $((n + alive)) >"$OUT/server-$i" 2>&1 & PIDS+=($!)
    for _ in $(seq 50); do ip netns exec "$s" ss -Hltn 'sport = :9300' | grep -q . && break; sleep 0.1; done
    clients "ct-c-$i-$$" "10.$net.0.1" "$n" 0 >"$OUT/clients-$i" 2>&1 & PIDS+=($!); VPIDS+=($!)
    clients "ct-a-$i-$$" "10.$net.1.1" "$alive" $((observe + 8)) >"$OUT/alive-$i" 2>&1 & PIDS+=($!)
  done
  for _ in $(seq 600); do
    grep -qs ready "$OUT/server-0" && grep -qs ready "$OUT/server-1" && grep -qs ready "$OUT/server-2" && break; sleep 0.1
  done
  for i in 0 1 2; do
    grep -qs ready "$OUT/server-$i" || { echo "conntrack-timeout.sh: round $r: the connections did not all open within 60 s" >&2; cat "$OUT"/* >&2; exit 1; }
  done
  before=()
  for i in 0 1 2; do before+=("$(sample "ct-s-$i-$$")"); done
  # The clients vanish: the link goes first, then their process, so no FIN or RST gets out.
  for i in 0 1 2; do ip -n "ct-c-$i-$$" link del vc; done
  kill "${VPIDS[@]}" 2>/dev/null || true
  t0=$(date +%s.%N)
  echo
  echo "round $r: the server namespace's conntrack count, TCP entries listed, their median remaining timeout (s), t s after the clients vanished"
  echo "  before: ${before[0]} | ${before[1]} | ${before[2]}"
  printf '  %-6s %s\n' t_s "$hdr"
  for t in $(seq 0 "$step" "$observe"); do
    while [ "$(echo "$(date +%s.%N) - $t0 < $t" | bc)" = 1 ]; do sleep 0.2; done
    row=()
    for i in 0 1 2; do
      v=$(sample "ct-s-$i-$$"); row+=("$v")
      read -r c1 l1 r1 <<<"$v"
      cnt[$i,$t]+="$c1 "; lst[$i,$t]+="$l1 "; rem[$i,$t]+="$r1 "
    done
    printf '  %-6s %-28s%-28s%-28s\n' "$t" "${row[@]}"
  done
  for i in 0 1 2; do
    for _ in $(seq 200); do grep -qs alive_echoed "$OUT/alive-$i" && break; sleep 0.1; done
    a=$(grep -s alive_echoed "$OUT/alive-$i" || echo "alive_echoed - of $alive (no answer)")
    echo "  ${tags[$i]}: $a"
    echoed[$i]+="$(awk '{print $2}' <<<"$a") "
  done
  cleanup
done
echo
echo "medians over $rounds rounds: conntrack count / TCP entries listed (median remaining timeout, s), t s after $n clients vanished ($alive idle clients stay)"
printf '%-6s %s\n' t_s "$hdr"
for t in $(seq 0 "$step" "$observe"); do
  row=()
  for i in 0 1 2; do row+=("$(median "${cnt[$i,$t]}") / $(median "${lst[$i,$t]}") ($(median "${rem[$i,$t]}"))"); done
  printf '%-6s %-28s%-28s%-28s\n' "$t" "${row[@]}"
done
printf '%-6s %-28s%-28s%-28s\n' echoed "$(median "${echoed[0]}") of $alive" "$(median "${echoed[1]}") of $alive" "$(median "${echoed[2]}") of $alive"
echo "(echoed: the idle clients that got their byte back after $((observe + 8)) s idle)"
echo "host's own values: $host_before before, $(hv) after (never written)"
