#!/usr/bin/env bash
# What net.ipv4.tcp_migrate_req (Linux 5.14+) changes when one SO_REUSEPORT listener of a group
# closes with handshakes still queued on it: the restart of one process of a reuseport server
# (an nginx reload, a process replaced without handing over its socket). Each round runs
# bench/reuseport_restart.py in a fresh private network namespace (unshare --net; the sysctl and
# the TcpExt counters are per namespace, so the host's own value is never touched): LISTENERS
# listeners on one port that accept nothing until the close, QUEUED clients whose handshakes
# complete and wait in an accept queue, HALF clients whose final ACK an nftables rule holds back
# so that the server keeps them as requests (SYN_RECV); then the first listener closes, and the
# others accept everything and answer each client with one byte. Counted per client: ok, reset
# (ECONNRESET), eof, silent; and the kernel's TCPMigrateReqSuccess/Failure and OutRsts.
# A = 0 (the kernel's default), B = 1; alternated A B A B..., medians of ROUNDS rounds.
#
#   bench/tcp-migrate-req.sh [QUEUED=1000] [HALF=200] [ROUNDS=5] [LISTENERS=2]
# BACKLOG=4096: each listener's listen() backlog; a smaller one than the queued handshakes
# leaves the survivors no room, and the migration then fails (TCPMigrateReqFailure).
# Needs root, python3, nft and ss. Every round is bounded (timeout 60 s; clients wait 5 s).
set -euo pipefail
nq=${1:-1000}; nh=${2:-200}; rounds=${3:-5}; nl=${4:-2}; backlog=${BACKLOG:-4096}
[ "$(id -u)" = 0 ] || { echo "tcp-migrate-req.sh: run as root (it makes private network namespaces)" >&2; exit 2; }
for t in python3 nft ss unshare; do
  command -v "$t" >/dev/null || { echo "tcp-migrate-req.sh: $t is missing (apt-get install nftables iproute2 python3)" >&2; exit 2; }
done
[ -e /proc/sys/net/ipv4/tcp_migrate_req ] || {
  echo "tcp-migrate-req.sh: this kernel ($(uname -r)) has no net.ipv4.tcp_migrate_req (it came in Linux 5.14): nothing to measure" >&2; exit 3; }
[ "$nl" -ge 2 ] || { echo "tcp-migrate-req.sh: LISTENERS must be 2 or more (one closes, one takes over)" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
host_before=$(cat /proc/sys/net/ipv4/tcp_migrate_req)
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), Linux $(uname -r)"
echo "date: $(date -u +%FT%TZ), commit: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "per round: $nl SO_REUSEPORT listeners (backlog $backlog), $nq queued handshakes, $nh held as requests; the first listener closes; rounds: $rounds"
run() { # MIGRATE PORT -> the script's key=value line
  timeout 60 unshare --net bash -c "ip link set lo up; sysctl -qw net.ipv4.tcp_migrate_req=$1; exec python3 '$here/reuseport_restart.py' $2 $nq $nh $nl 5 $backlog"
}
get() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }
keys=(closed_listener_accept_queue syn_recv_at_close queued_reset half_reset queued_ok half_ok queued_silent half_silent TCPMigrateReqSuccess TCPMigrateReqFailure OutRsts)
declare -A col
printf '%-5s %-6s %9s %9s %9s %9s %9s %9s %8s %8s %8s\n' round migrate on_closed reset_q reset_h ok_q ok_h silent migr_ok migr_fail OutRsts
port=9100
for r in $(seq 1 "$rounds"); do
  for m in 0 1; do
    port=$((port + 1))
    line=$(run "$m" "$port") || { echo "round $r migrate $m: failed" >&2; continue; }
    echo "raw $r $m $line" >&2
    q=$(get "$line" closed_listener_accept_queue)
    vals=("$q" "$(get "$line" queued_reset)" "$(get "$line" half_reset)" "$(get "$line" queued_ok)" "$(get "$line" half_ok)"
          "$(($(get "$line" queued_silent) + $(get "$line" half_silent)))" "$(get "$line" TCPMigrateReqSuccess)"
          "$(get "$line" TCPMigrateReqFailure)" "$(get "$line" OutRsts)")
    printf '%-5s %-6s %9s %9s %9s %9s %9s %9s %8s %8s %8s\n' "$r" "$m" "${vals[@]}"
    for i in "${!vals[@]}"; do col[$m,$i]+="${vals[$i]} "; done
  done
done
median() { tr ' ' '\n' <<<"$1" | { grep -E '^[0-9.]+$' || true; } | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
echo
echo "medians over $rounds rounds (on_closed: handshakes in the closed listener's accept queue;"
echo "reset_q/ok_q: of the $nq queued clients; reset_h/ok_h: of the $nh held as requests):"
printf '%-12s %9s %9s %9s %9s %9s %9s %8s %8s %8s\n' migrate on_closed reset_q reset_h ok_q ok_h silent migr_ok migr_fail OutRsts
for m in 0 1; do
  out=()
  for i in $(seq 0 8); do out+=("$(median "${col[$m,$i]:-}")"); done
  printf '%-12s %9s %9s %9s %9s %9s %9s %8s %8s %8s\n' "$m" "${out[@]}"
done
host_after=$(cat /proc/sys/net/ipv4/tcp_migrate_req)
echo "host's own net.ipv4.tcp_migrate_req: $host_before before, $host_after after (never written)"
