#!/usr/bin/env bash
# What tcp_notsent_lowat does to a server writing to clients that stopped reading (the
# broadcast-to-slow-consumers case): per stalled socket, how many bytes the kernel accepts
# before write() says EAGAIN, how many of them sit unsent in the sender's queue (SIOCOUTQNSD),
# and TCP's memory for all sockets (/proc/net/sockstat "mem", pages). A = the kernel's default
# (no mark), B = wstune's target (131072). Alternated A B A B..., medians of ROUNDS runs.
#
# Runs as root in a private network namespace (unshare --net): the sysctl is per namespace, so
# the host's own value is never touched. The clients are on loopback, so their receive buffers
# are counted too; on a real host they live on the client's side, and only the sender's queue
# (the "unsent" column) stays on the server.
#
#   bench/notsent-lowat.sh [CONNECTIONS=200] [ROUNDS=5]
set -euo pipefail
n=${1:-200}
rounds=${2:-5}
[ "$(id -u)" = 0 ] || { echo "run as root (it makes a private network namespace)" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), Linux $(uname -r)"
echo "date: $(date -u +%F), commit: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "connections: $n stalled readers, 64 KiB writes until EAGAIN, rounds: $rounds"
run() {
  # One run: prints "accepted unsent mem_pages" (medians per socket; mem for all).
  timeout 60 unshare --net bash -c "ip link set lo up; sysctl -qw net.ipv4.tcp_notsent_lowat=$1; exec python3 - $n" <<'PY'
import socket, fcntl, termios, struct, sys, time, statistics
SIOCOUTQNSD = 0x894B  # unsent bytes in the send queue (linux/sockios.h)
n = int(sys.argv[1])
ls = socket.socket()
ls.bind(("127.0.0.1", 0)); ls.listen(4096)
port = ls.getsockname()[1]
senders, readers = [], []
for _ in range(n):
    c = socket.create_connection(("127.0.0.1", port)); r, _ = ls.accept()
    c.setblocking(False); senders.append(c); readers.append(r)
buf = b"x" * 65536
accepted = []
for c in senders:
    total = 0
    while True:
        try:
            total += c.send(buf)
        except BlockingIOError:
            break
    accepted.append(total)
time.sleep(0.2)
unsent = [struct.unpack("i", fcntl.ioctl(c, SIOCOUTQNSD, b"\0" * 4))[0] for c in senders]
tcp = [l.split() for l in open("/proc/net/sockstat") if l.startswith("TCP:")][0]
mem = int(tcp[tcp.index("mem") + 1])
print(int(statistics.median(accepted)), int(statistics.median(unsent)), mem)
PY
}
declare -a A_acc A_uns A_mem B_acc B_uns B_mem
printf '%-6s %-12s %14s %14s %12s\n' round setting accepted/sock unsent/sock tcp_mem_pages
for r in $(seq 1 "$rounds"); do
  read -r acc uns mem < <(run 4294967295)
  A_acc+=("$acc"); A_uns+=("$uns"); A_mem+=("$mem")
  printf '%-6s %-12s %14s %14s %12s\n' "$r" "A default" "$acc" "$uns" "$mem"
  read -r acc uns mem < <(run 131072)
  B_acc+=("$acc"); B_uns+=("$uns"); B_mem+=("$mem")
  printf '%-6s %-12s %14s %14s %12s\n' "$r" "B 131072" "$acc" "$uns" "$mem"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : int((a[NR/2] + a[NR/2+1]) / 2)}'; }
ma=$(median "${A_acc[@]}"); mu=$(median "${A_uns[@]}"); mm=$(median "${A_mem[@]}")
na=$(median "${B_acc[@]}"); nu=$(median "${B_uns[@]}"); nm=$(median "${B_mem[@]}")
echo
echo "medians over $rounds rounds:"
printf '%-12s %14s %14s %12s\n' setting accepted/sock unsent/sock tcp_mem_pages
printf '%-12s %14s %14s %12s\n' "A default" "$ma" "$mu" "$mm"
printf '%-12s %14s %14s %12s\n' "B 131072" "$na" "$nu" "$nm"
awk -v a="$mu" -v b="$nu" -v ma="$mm" -v mb="$nm" 'BEGIN { printf "B/A: unsent per stalled socket %.3f, TCP memory %.3f\n", b / a, mb / ma }'
