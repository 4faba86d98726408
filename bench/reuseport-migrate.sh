#!/usr/bin/env bash
# What net.ipv4.tcp_migrate_req does when one listener of an SO_REUSEPORT group closes (a
# server process restarting, an nginx reload retiring its old workers): N clients connect to
# a group of LISTENERS sockets that have not accepted yet, so each connection waits in the
# accept queue of the listener its hash picked; one listener closes; the others accept what
# they can. Counted: connections accepted by a live listener, and clients that found their
# connection reset. A = the kernel's default (0), B = wstune's target (1). Alternated A B A
# B..., every round printed.
#
# Runs as root in a private network namespace (unshare --net): the sysctl is per namespace, so
# the host's own value is never touched. Needs Linux 5.14 or later.
#
#   bench/reuseport-migrate.sh [CONNECTIONS=400] [LISTENERS=4] [ROUNDS=3]
set -euo pipefail
n=${1:-400}
listeners=${2:-4}
rounds=${3:-3}
[ "$(id -u)" = 0 ] || { echo "run as root (it makes a private network namespace)" >&2; exit 2; }
[ -e /proc/sys/net/ipv4/tcp_migrate_req ] || { echo "this kernel has no net.ipv4.tcp_migrate_req (Linux 5.14 added it)" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
echo "machine: $(nproc) CPUs, Linux $(uname -r)"
echo "date: $(date -u +%F), commit: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "connections: $n queued on $listeners SO_REUSEPORT listeners, one listener closed, rounds: $rounds"
run() {
  # One run: prints "not_accepted accepted reset".
  timeout 60 unshare --net bash -c "ip link set lo up; sysctl -qw net.ipv4.tcp_migrate_req=$1; exec python3 - $n $listeners" <<'PY'
import socket, sys, select
n, k = int(sys.argv[1]), int(sys.argv[2])
ls = []
port = 0
for _ in range(k):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", port)); s.listen(4096)
    port = s.getsockname()[1]
    s.setblocking(False)
    ls.append(s)
clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
closing = ls[0]
closing.close()
accepted = 0
for s in ls[1:]:
    while True:
        try:
            conn, _ = s.accept()
        except BlockingIOError:
            break
        accepted += 1
        conn.close()
reset = 0
for c in clients:
    c.setblocking(False)
    try:
        if c.recv(1) == b"":
            pass
    except BlockingIOError:
        pass
    except ConnectionResetError:
        reset += 1
print(n - accepted, accepted, reset)
PY
}
printf '%-6s %-16s %9s %9s\n' round tcp_migrate_req accepted reset
for r in $(seq 1 "$rounds"); do
  for v in 0 1; do
    read -r _lost acc rst < <(run "$v")
    printf '%-6s %-16s %9s %9s\n' "$r" "$v" "$acc" "$rst"
  done
done
