#!/usr/bin/env bash
# Echo efficiency beside the three peers (the goals' "echo, 100 connections, 1 in flight" and
# "syscalls per echo" rows): `selftest --scenario echo-sat` at CONNS connections x INFLIGHT
# messages in flight, the server pinned to core 0, the generator to core 1, both at real-time
# priority (PRIO, default `chrt -r 1`, so the other tenants' builds do not take the pinned
# cores), servers alternated run by run (the order rotated every run). The server's CPU is read
# by the generator (`selftest --pid`: utime+stime of the server's process tree over the window).
#   bench/echo-peers.sh INFLIGHT RUNS [SERVERS...]
#   SERVERS (default all): wstune-1 (serve --workers 1, which is also the default when pinned to
#   one core: one I/O thread per core the process may use), wstune-2 (--workers 2, the default
#   on this 2-core host unpinned, both threads on core 0 here), tt-echo, node-ws, py-websockets.
# Env: W=wstune binary to serve (default target/release/wstune), GEN= generator binary
# (default W), TT= tt-echo binary (default target/release/tt-echo), CONNS=100 SECS=10 SIZE=100.
# SYSCALLS=1: also count the server's syscalls by name (perf stat on tracepoints, attached to
# every thread of the server for the generator's whole run) and print them per echo (per
# message the generator sent, warm-up and drain included: the server echoes every one; the
# 100 handshakes are noise). Tracing costs the server CPU: take the efficiency from runs
# without it. PROFILE=DIR: also `perf record -g` the server for SYS_SECS=4 s in the middle of
# the window into DIR/NAME-RUN.data (for perf report).
# Prints one line per run; each run is bounded (SECS + ~6 s) and every server is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
INFLIGHT=$1; RUNS=$2; shift 2
SERVERS=("$@"); [ ${#SERVERS[@]} -gt 0 ] || SERVERS=(wstune-1 wstune-2 tt-echo node-ws py-websockets)
W=${W:-target/release/wstune}; GEN=${GEN:-$W}; TT=${TT:-target/release/tt-echo}
CONNS=${CONNS:-100}; SECS=${SECS:-10}; SIZE=${SIZE:-100}; SYS_SECS=${SYS_SECS:-4}
PRIO=${PRIO-chrt -r 1}
. bench/rt-quiet.sh # rt_quiet: wait for other real-time benchmarks on the host to end
PID= SPERF=
trap '[ -z "$SPERF" ] || kill -INT "$SPERF" 2>/dev/null; [ -z "$PID" ] || kill "$PID" 2>/dev/null || true' EXIT
[ -z "${PROFILE:-}" ] || mkdir -p "$PROFILE"
EV=(-e raw_syscalls:sys_enter) # the tracepoints this kernel has, looked up once (perf list is slow)
for e in recvfrom read readv writev sendto write sendmsg epoll_wait epoll_pwait epoll_pwait2 \
  epoll_ctl futex sched_yield io_uring_enter; do
  [ -d "/sys/kernel/tracing/events/syscalls/sys_enter_$e" ] && EV+=(-e "syscalls:sys_enter_$e")
done

start() { # start SERVER PORT -> PID
  case $1 in
    wstune-1) $PRIO taskset -c 0 "$W" serve --port "$2" --admin off --workers 1 --no-deflate >/dev/null 2>&1 & ;;
    wstune-2) $PRIO taskset -c 0 "$W" serve --port "$2" --admin off --workers 2 --no-deflate >/dev/null 2>&1 & ;;
    tt-echo) $PRIO taskset -c 0 "$TT" "$2" >/dev/null 2>&1 & ;;
    node-ws) $PRIO taskset -c 0 node bench/peers/node/echo.js "$2" >/dev/null 2>&1 & ;;
    py-websockets) $PRIO taskset -c 0 python3 bench/peers/py_echo.py "$2" >/dev/null 2>&1 & ;;
    *) echo "unknown server $1 (wstune-1, wstune-2, tt-echo, node-ws, py-websockets)" >&2; exit 3 ;;
  esac
  PID=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$2") 2>/dev/null && return 0; sleep 0.1; done
  echo "$1 did not start" >&2; exit 1
}

one() { # one SERVER RUN
  local name=$1 run=$2 port=$((21000 + RANDOM % 900)) out sys=/dev/null
  out=$(mktemp)
  [ -z "$PRIO" ] || rt_quiet
  start "$name" "$port"
  if [ "${SYSCALLS:-}" = 1 ]; then # counted over the generator's whole run, divided by every
    sys=$(mktemp)                   # message it sent (warm-up and drain included: each is echoed)
    perf stat -x, "${EV[@]}" -p "$PID" -o "$sys" >/dev/null 2>&1 &
    SPERF=$!
    sleep 0.5
  fi
  $PRIO taskset -c 1 "$GEN" selftest --url "ws://127.0.0.1:$port/" --pid "$PID" --scenario echo-sat \
    --conns "$CONNS" --inflight "$INFLIGHT" --size "$SIZE" --secs "$SECS" -f json >"$out" 2>/dev/null &
  local gen=$!
  if [ -n "${PROFILE:-}" ]; then
    sleep $(((SECS - SYS_SECS) / 2 + 1)) # past the connects and the 1 s warm-up: the middle
    perf record -q -g -o "$PROFILE/$name-$run.data" -p "$PID" -- sleep "$SYS_SECS" >/dev/null 2>&1 || true
  fi
  wait "$gen" || true
  if [ -n "$SPERF" ]; then kill -INT "$SPERF"; wait "$SPERF" 2>/dev/null || true; SPERF=; fi
  kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; PID=
  python3 - "$name" "$out" "$sys" "$SYS_SECS" <<'PY'
import json, sys
name, out, sysf, win = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
try:
    s = json.load(open(out))["scenarios"][0]
except Exception as e:
    print(f"{name}: no result ({e})"); sys.exit(0)
srv, g = s["server"], s["generator"]
line = (f"{name}: {s['achieved_rate']:.0f} echoes/s, server {srv['cpu_secs']:.2f} CPU-s "
        f"({srv['cpu_pct']:.0f}%), {s.get('echoes_per_server_cpu_sec') or 0:.0f} echoes per server CPU-s "
        f"({1e6 * srv['cpu_secs'] / max(s['received'], 1):.2f} us each), generator {g['cpu_pct']:.0f}%, "
        f"errors {s['errors']}")
if sysf != "/dev/null":
    counts = {}
    for l in open(sysf):
        f = l.strip().split(",")
        if len(f) > 2 and f[0].replace(".", "").isdigit():
            counts[f[2].split(":")[-1].replace("sys_enter_", "")] = float(f[0])
    echoes = max(s["sent"], 1)
    total = counts.pop("sys_enter", 0)
    named = {k: v for k, v in counts.items() if v > 0}
    other = total - sum(named.values())
    parts = ", ".join(f"{k} {v / echoes:.3f}" for k, v in sorted(named.items(), key=lambda kv: -kv[1]))
    line += f"; syscalls per echo {total / echoes:.3f}: {parts}, other {other / echoes:.3f}"
print(line, flush=True)
PY
  rm -f "$out"; [ "$sys" = /dev/null ] || rm -f "$sys"
}

for r in $(seq "$RUNS"); do
  n=${#SERVERS[@]}
  for i in $(seq 0 $((n - 1))); do one "${SERVERS[$(((i + r - 1) % n))]}" "$r"; done
done
