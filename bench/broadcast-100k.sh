#!/usr/bin/env bash
# Broadcast 100 B to 100,000 subscribers with the multi-process server (a row of the goals): one
# `serve --app broadcast --processes 7` (SO_REUSEPORT on one port; 7 processes because the
# per-process fd limit here is 20,000: each holds its share + 10 % + 64 files), pinned to core 0,
# and one `selftest --scenario broadcast` on core 1 (it starts as many generator processes as
# the fd limit needs and spreads the clients over loopback sources 127.0.0.x), both at
# real-time priority (PRIO, default `chrt -r 1`). A publish reaches the process that accepted
# the publisher, which fans out to its own subscribers and relays to its siblings through the
# supervisor. Reported per run: deliveries, the time until the last subscriber (p50 / max of
# the rounds), the server tree's CPU over the whole selftest (below), and
# the generator's CPU per delivery (all its processes).
#   bench/broadcast-100k.sh [CONNS=100000] [ROUNDS=5] [RUNS=1]   (server CPU per delivery: run ROUNDS=1 and 5)
# Env: W=wstune binary (default target/release/wstune), GEN= generator (default W),
# PROCESSES=7, GAP=5 (seconds between rounds: one 100k fan-out is 1-3 CPU-s on this VM),
# PORT=21990. Bounded: connects (~10 s), ROUNDS x GAP seconds, the closes; the server is
# stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100000}; R=${2:-5}; RUNS=${3:-1}
W=${W:-target/release/wstune}; GEN=${GEN:-$W}; PRIO=${PRIO-chrt -r 1}
PROCESSES=${PROCESSES:-7}; GAP=${GAP:-5}; PORT=${PORT:-21990}
. bench/rt-quiet.sh # rt_quiet: wait for other real-time benchmarks on the host to end
MAX=$((N + N / 10 + 64)) # what the self-test gives its own server (src/cmd/serve.rs, child_args)
# The server tree's CPU-seconds (supervisor and processes, /proc utime+stime, with the
# children it reaped): `selftest --pid` samples only the pid it is given, not a supervisor's
# children, so the script reads them itself, over the whole selftest (connects, rounds and
# closes). Run with ROUNDS=1 and ROUNDS=5: the difference over 4 x CONNS is per delivery.
tree_cpu() {
  python3 - "$1" <<'PY'
import os, sys
top, tck, kids = int(sys.argv[1]), os.sysconf("SC_CLK_TCK"), {}
for d in os.listdir("/proc"):
    if d.isdigit():
        try:
            f = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
            kids.setdefault(int(f[1]), []).append((int(d), f))
        except OSError:
            pass
f = open(f"/proc/{top}/stat").read().rsplit(")", 1)[1].split()
total, todo = sum(int(x) for x in f[11:15]), [top]  # the top's own + its reaped children's
while todo:
    for pid, g in kids.get(todo.pop(), []):
        total += int(g[11]) + int(g[12]); todo.append(pid)
print(total / tck)
PY
}
SPID=
trap '[ -z "$SPID" ] || kill -TERM "$SPID" 2>/dev/null || true' EXIT
for run in $(seq "$RUNS"); do
  out=$(mktemp)
  [ -z "$PRIO" ] || rt_quiet
  $PRIO taskset -c 0 "$W" serve --profile 100k --bind 127.0.0.1 --port "$PORT" --admin off \
    --app broadcast --processes "$PROCESSES" --max-connections "$MAX" >/dev/null 2>&1 &
  SPID=$!
  up=
  for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && up=1 && break; sleep 0.1; done
  [ -n "$up" ] || { echo "the server did not listen on $PORT" >&2; exit 1; }
  sleep 2 # every process binds the port in turn; the first to listen answers the probe
  t0=$(date +%s); c0=$(tree_cpu "$SPID")
  $PRIO taskset -c 1 "$GEN" selftest --url "ws://127.0.0.1:$PORT/" --pid "$SPID" --scenario broadcast \
    --conns "$N" --rounds "$R" --secs $((R * GAP)) -f json >"$out" 2>/dev/null || true
  wall=$(($(date +%s) - t0))
  sleep 5 # the generator's 100k closes reach the server after its report
  c1=$(tree_cpu "$SPID")
  kill -TERM "$SPID" 2>/dev/null || true; wait "$SPID" 2>/dev/null || true; SPID=
  python3 - "$run" "$out" "$wall" "$PROCESSES" "$(echo "$c1 - $c0" | bc)" <<'PY'
import json, sys
run, out, wall, procs, tree = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
try:
    r = json.load(open(out)); s = r["scenarios"][0]
except Exception as e:
    print(f"run {run}: no result ({e})"); sys.exit(0)
nan = float("nan")
l, srv, g = s.get("broadcast_last_ms") or {"p50": nan, "max": nan}, s.get("server") or {}, s["generator"]
n = max(s["received"], 1)
want = s["conns_connected"] * (s.get("broadcast_rounds") or 0)
print(f"run {run}: {s['conns_connected']} subscribers over {procs} server processes, {s['received']} of {want} "
      f"delivered ({s['errors']} errors), last subscriber p50 {l['p50']:.0f} ms, max {l['max']:.0f} ms; "
      f"server tree {tree:.2f} CPU-s over the whole selftest (connects, {s.get('broadcast_rounds')} rounds, closes); "
      f"generator {g['cpu_secs']:.2f} CPU-s = {g['cpu_secs'] / n * 1e6:.2f} us per delivery "
      f"(all its processes); wall {wall} s")
PY
  rm -f "$out"
  sleep 10 # the kernel's TIME_WAIT sockets and the last closes, before the next run
done
