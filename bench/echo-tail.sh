#!/usr/bin/env bash
# Open-loop echo tail with the server pinned: `serve` on core 0, the self-test's
# generator on core 1, configurations alternated run by run. Each configuration is
# NAME=BINARY[@ENV=VALUE...] (the env goes to the server only, e.g. a jemalloc option; a
# binary named tt-echo* is the tokio-tungstenite peer, started as `tt-echo PORT`):
#   bench/echo-tail.sh CONNS RATE SECS RUNS main=/path/old new=/path/new 'decay=/path/new@_RJEM_MALLOC_CONF=dirty_decay_ms:1000'
# Per run: server CPU (% of its core, over the measured window), latency from when each message
# was due (scheduled) and from its actual send (service), the longest service latency (the
# longest stall a message met), the generator's CPU and headroom, and how long the server's
# threads waited for a CPU while runnable (/proc/PID/task/*/schedstat, the whole run: connects
# included): on a shared host that is other processes' time slices, not the server's stalls.
# PRIO='chrt -r 1' runs server and generator at real-time priority (bounded runs only) so the
# other tenants' compilers do not take slices of the pinned cores.
# NAME=node-ws and NAME=py-websockets (no binary) are the Node ws and Python websockets peers
# (bench/peers/). PORT0=21000 PORTN=1000 picks ports in [PORT0, PORT0+PORTN).
# GAPS=1 also traces the server's syscalls (perf record -e raw_syscalls:sys_enter -p PID) and
# core 0's switches (-e sched:sched_switch -C 0) for the whole run (it costs the server CPU: a
# traced run is not one of the measured ones) and prints each thread's gaps between two
# syscalls over GAP_MS=20 ms inside the measured window (the longest time a thread went without
# entering the kernel: a long run of one task, or a thread that was not running), each with what
# core 0 ran meanwhile (the server itself: a long run in user space; idle: nothing to do; or
# another process and its pid) and the syscall the thread entered last (232: epoll_wait).
set -euo pipefail
N=$1; RATE=$2; SECS=$3; RUNS=$4; shift 4
GEN=${GEN:-./target/release/wstune}
PRIO=${PRIO:-}
runq() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $2} END {print s / 1e6}'; }
ulimit -n 20000 2>/dev/null || ulimit -n 20000
here=$(cd "$(dirname "$0")" && pwd)
. "$here/rt-quiet.sh" # rt_quiet: wait for other real-time benchmarks on the host to end
SRV=
trap '[ -z "$SRV" ] || kill "$SRV" 2>/dev/null || true' EXIT
one() {
  local name=${1%%=*} spec=${1#*=}
  local bin=${spec%%@*} envs=() port=$((${PORT0:-10000} + RANDOM % ${PORTN:-10000})) out
  [[ $spec == *@* ]] && IFS=@ read -r -a envs <<<"${spec#*@}"
  out=$(mktemp)
  [ -z "$PRIO" ] || rt_quiet
  if [[ $bin == node-ws ]]; then # the peers in bench/peers/
    env "${envs[@]}" $PRIO taskset -c 0 node "$here/peers/node/echo.js" "$port" >/dev/null 2>&1 &
  elif [[ $bin == py-websockets ]]; then
    env "${envs[@]}" $PRIO taskset -c 0 python3 "$here/peers/py_echo.py" "$port" >/dev/null 2>&1 &
  elif [[ $(basename "$bin") == tt-echo* ]]; then # the tokio-tungstenite peer (bench/peers/tt-echo)
    env "${envs[@]}" $PRIO taskset -c 0 "$bin" "$port" >/dev/null 2>&1 &
  else
    env "${envs[@]}" $PRIO taskset -c 0 "$bin" serve --port "$port" --admin off >/dev/null 2>&1 &
  fi
  local pid=$! trace= tracer= switches= swtracer=
  SRV=$pid
  for _ in $(seq 50); do (echo >/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
  if [ -n "${GAPS:-}" ]; then
    trace=$(mktemp)
    switches=$(mktemp)
    perf record -q -m 8192 -e raw_syscalls:sys_enter -p "$pid" -o "$trace" >/dev/null 2>&1 &
    tracer=$!
    perf record -q -m 1024 -e sched:sched_switch -C 0 -o "$switches" >/dev/null 2>&1 &
    swtracer=$!
    sleep 1
  fi
  local q0; q0=$(runq "$pid")
  local t0; t0=$(date +%s.%N)
  $PRIO taskset -c 1 "$GEN" selftest --url "ws://127.0.0.1:$port/" --pid "$pid" --scenario echo-rate \
    --conns "$N" --rate "$RATE" --secs "$SECS" -f json >"$out" 2>/dev/null || true
  local t1; t1=$(date +%s.%N)
  local q1; q1=$(runq "$pid")
  if [ -n "$tracer" ]; then kill -INT "$tracer" "$swtracer"; wait "$tracer" "$swtracer" 2>/dev/null || true; fi
  kill "$pid" 2>/dev/null || echo "$name: the server had exited (see its log)" >&2; wait "$pid" 2>/dev/null || true
  SRV=
  python3 - "$name" "$out" "$q0" "$q1" <<'PY'
import json, sys
name, out, q0, q1 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
s = json.load(open(out))["scenarios"][0]
l, v, srv, g = s["latency_ms"], s.get("service_latency_ms") or {}, s["server"], s["generator"]
f = lambda d, k: f"{d.get(k, float('nan')):.2f}"
print(f"{name}: {s['received']} echoes ({s['achieved_rate']:.0f}/s, lost {s['lost']}), server CPU {srv['cpu_pct']:.1f}%; "
      f"scheduled p50/p99/p99.9/max {f(l,'p50')}/{f(l,'p99')}/{f(l,'p999')}/{f(l,'max')} ms; "
      f"service {f(v,'p50')}/{f(v,'p99')}/{f(v,'p999')}/{f(v,'max')} ms; "
      f"generator {g['cpu_pct']:.0f}% of its core (headroom {max(0, 100 - g['cpu_pct'] / s['workers']):.0f}%); "
      f"server runnable but waiting for the CPU {q1 - q0:.0f} ms")
PY
  if [ -n "$trace" ]; then
    # perf's timestamps are CLOCK_MONOTONIC seconds. The generator exits ~0.5 s after its
    # window (the closes, then the report), so [exit - SECS, exit - 0.7 s] is inside the window.
    # Threads with under 5 % of the window's syscalls (a runtime's idle helpers) are left out.
    local mono1; mono1=$(python3 -c 'import time; print(time.monotonic())')
    local wall_now; wall_now=$(date +%s.%N)
    { perf script -i "$trace" -F tid,pid,time,event,trace; perf script -i "$switches" -F tid,pid,time,event,trace; } 2>/dev/null |
      sort -s -k2,2n | python3 -c '
import sys
exit_ = float(sys.argv[1]) - (float(sys.argv[2]) - float(sys.argv[3]))
start, end = exit_ - float(sys.argv[4]), exit_ - 0.7
gap, me = float(sys.argv[5]) / 1e3, sys.argv[6]
last, gaps, longest, n, per, nr = {}, [], {}, 0, {}, {}
sw = []  # core 0 timeline: (time, tid, comm) of whoever was switched in
for line in sys.stdin:
    f = line.split()
    if len(f) < 3 or "/" not in f[0]: continue
    (pid, tid), t = f[0].split("/"), float(f[1].rstrip(":"))
    if "sched_switch" in f[2]:
        comm, rest = line.split("next_comm=")[1].split(" next_pid=")
        sw.append((t, rest.split()[0], comm))
        continue
    if pid != me: continue
    if start <= t <= end:
        n += 1
        per[tid] = per.get(tid, 0) + 1
        p = last.get(tid)
        if p is not None:
            d = t - p
            longest[tid] = max(longest.get(tid, 0), d)
            if d > gap: gaps.append((d, tid, p, t, nr.get(tid)))
    last[tid] = t
    if "NR " in line:
        nr[tid] = line.split("NR ")[1].split()[0]
def who(tid, a, b):  # what core 0 ran during [a, b]
    use = {}
    for k, (t, nt, comm) in enumerate(sw):
        u = sw[k + 1][0] if k + 1 < len(sw) else b
        lo, hi = max(a, t), min(b, u)
        if hi <= lo: continue
        key = "the server" if nt == tid else ("idle" if nt == "0" else f"{comm} pid {nt}")
        use[key] = use.get(key, 0) + hi - lo
    return ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in sorted(use.items(), key=lambda kv: -kv[1])[:3])
busy = {k for k, v in per.items() if v >= 0.05 * n}
gaps = sorted((g for g in gaps if g[1] in busy), reverse=True)
longest = {k: v for k, v in longest.items() if k in busy}
print(f"  syscall trace: {n} server syscalls in the window; longest gap per thread: "
      + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in sorted(longest.items(), key=lambda kv: -kv[1])[:4])
      + f"; gaps over {sys.argv[5]} ms: {len(gaps)}"
      + "".join(f"; {d * 1e3:.1f} ms at {a - start:.1f} s after syscall {k} (core 0 ran: {who(tid, a, b)})"
                for d, tid, a, b, k in gaps[:6]))
' "$mono1" "$wall_now" "$t1" "$SECS" "${GAP_MS:-20}" "$pid"
    rm -f "$trace" "$switches"
  fi
  rm -f "$out"
}
for _ in $(seq "$RUNS"); do
  for c in "$@"; do one "$c"; done
done
