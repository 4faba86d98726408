#!/usr/bin/env bash
# Fan-out cost beside its floor: server CPU per broadcast delivery, measured over the
# rounds only (connects excluded: `selftest --pid` samples the server's utime+stime at the
# window's edges), server pinned to core 0 and generator to core 1, binaries alternated run by
# run, and in each run the floor: bench/write-floor.c's one 100-byte send() per socket to the
# same number of loopback sockets, on the same cores.
#   bench/fanout-cpu.sh OLD_WSTUNE NEW_WSTUNE [CONNS] [ROUNDS] [RUNS]
# PEER=path/to/tt-echo adds the tokio-tungstenite peer (its broadcast mode) to every run;
# PEERS='node-ws py-websockets' adds Node ws and Python websockets (bench/peers/, broadcast mode).
# PRIO='chrt -r 1' runs server and generator at real-time priority; PORT0=21000 PORTN=1000 picks
# ports in [PORT0, PORT0+PORTN); NOFLOOR=1 skips the floor program.
# Prints one line per run; the medians are for BENCHMARKS.md.
set -euo pipefail
PRIO=${PRIO:-}
PID=
trap '[ -z "$PID" ] || kill "$PID" 2>/dev/null || true' EXIT
OLD=$1; NEW=$2; N=${3:-10000}; R=${4:-20}; RUNS=${5:-3}
GEN=${GEN:-$NEW}
SECS=${SECS:-10}
ulimit -n 20000 2>/dev/null || ulimit -n 20000
here=$(cd "$(dirname "$0")" && pwd)
. "$here/rt-quiet.sh" # rt_quiet: wait for other real-time benchmarks on the host to end
floor=$(mktemp -d)/write-floor
cc -O2 -o "$floor" "$here/write-floor.c"
one() {
  local name=$1 bin=$2 port=$((${PORT0:-10000} + RANDOM % ${PORTN:-10000})) out
  out=$(mktemp)
  [ -z "$PRIO" ] || rt_quiet
  if [[ $bin == node-ws ]]; then # the peers' broadcast modes (bench/peers/)
    $PRIO taskset -c 0 node "$here/peers/node/echo.js" "$port" broadcast >/dev/null 2>&1 &
  elif [[ $bin == py-websockets ]]; then
    $PRIO taskset -c 0 python3 "$here/peers/py_echo.py" "$port" broadcast >/dev/null 2>&1 &
  elif [[ $(basename "$bin") == tt-echo* ]]; then # the tokio-tungstenite peer's broadcast mode
    $PRIO taskset -c 0 "$bin" "$port" broadcast >/dev/null 2>&1 &
  else
    $PRIO taskset -c 0 "$bin" serve --app broadcast --port "$port" --admin off >/dev/null 2>&1 &
  fi
  local pid=$!
  PID=$pid
  for _ in $(seq 50); do (echo >/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
  $PRIO taskset -c 1 "$GEN" selftest --url "ws://127.0.0.1:$port/" --pid "$pid" --scenario broadcast \
    --conns "$N" --rounds "$R" --secs "$SECS" -f json >"$out" 2>/dev/null || true
  kill "$pid"; wait "$pid" 2>/dev/null || true; PID=
  python3 - "$name" "$out" <<'PY'
import json, sys
name, out = sys.argv[1], sys.argv[2]
s = json.load(open(out))["scenarios"][0]
nan = float("nan")
l, srv, g = s.get("broadcast_last_ms") or {"p50": nan, "max": nan}, s["server"], s["generator"]
n = max(s["received"], 1)
print(f"{name}: server {srv['cpu_secs']:.3f} CPU-s = {srv['cpu_secs'] / n * 1e6:.2f} us per delivery "
      f"({s['received']} of {s['conns_connected'] * (s.get('broadcast_rounds') or 0)} delivered), last subscriber p50 {l['p50']:.1f} ms max {l['max']:.1f} ms, "
      f"generator {g['cpu_secs']:.2f} CPU-s = {g['cpu_secs'] / n * 1e6:.2f} us per delivery")
PY
  rm -f "$out"
}
for _ in $(seq "$RUNS"); do
  one old "$OLD"
  one new "$NEW"
  [ -z "${PEER:-}" ] || one tt-echo "$PEER"
  for p in ${PEERS:-}; do one "$p" "$p"; done
  [ -n "${NOFLOOR:-}" ] || $PRIO taskset -c 0 "$floor" "$N" "$R" 100 1
done
rm -f "$floor"
