#!/usr/bin/env bash
# The same self-test scenarios, with the same generator (`wstune selftest`), against wstune serve
# and three peers started from their registries: tt-echo (tokio-tungstenite, default settings,
# bench/peers/tt-echo), Node.js `ws` (bench/peers/node) and Python `websockets` (py_echo.py).
# Each server is pinned to core 0 and the generator to core 1 (taskset), and each server is
# fresh for its idle measurement. Prints a Markdown table (and keeps every JSON report in $OUT).
#
# Usage: bench/peers/compare.sh [SERVERS...]   (default: wstune tt-echo node-ws py-websockets)
# Knobs (env): CONNS=5000 RATE=10 MAX_CONNS=5000 MAX_RATE=8 SAT_CONNS=100 SAT_INFLIGHT=16
#              STORM=3000 SECS=10 OUT=target/peers
# Every run is bounded: each scenario lasts SECS seconds plus a drain, then the server is killed.
set -euo pipefail
cd "$(dirname "$0")/../.."
CONNS=${CONNS:-5000}; RATE=${RATE:-10}; MAX_CONNS=${MAX_CONNS:-5000}; MAX_RATE=${MAX_RATE:-8}
SAT_CONNS=${SAT_CONNS:-100}; SAT_INFLIGHT=${SAT_INFLIGHT:-16}; STORM=${STORM:-3000}; SECS=${SECS:-10}
OUT=${OUT:-target/peers}; mkdir -p "$OUT"
SERVERS=("$@"); [ ${#SERVERS[@]} -gt 0 ] || SERVERS=(wstune tt-echo node-ws py-websockets)
cargo build --release -q -p wstune -p tt-echo
W=target/release/wstune
[ -d bench/peers/node/node_modules/ws ] || (cd bench/peers/node && npm install --no-audit --no-fund -q)
python3 -c 'import websockets' 2>/dev/null || pip install -q -r tests/requirements.txt
S0="taskset -c 0"; S1="taskset -c 1"
[ "$(nproc)" -ge 2 ] || { S0=""; S1=""; echo "warning: one core: server and generator share it" >&2; }

start() { # start SERVER PORT -> sets PID
  case $1 in
    wstune) $S0 $W serve --port "$2" --admin off --profile 10k --workers 1 --no-deflate >/dev/null 2>&1 & ;;
    tt-echo) $S0 target/release/tt-echo "$2" >/dev/null 2>&1 & ;;
    node-ws) $S0 node bench/peers/node/echo.js "$2" >/dev/null 2>&1 & ;;
    py-websockets) $S0 python3 bench/peers/py_echo.py "$2" >/dev/null 2>&1 & ;;
    *) echo "unknown server $1" >&2; exit 3 ;;
  esac
  PID=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$2") 2>/dev/null && return 0; sleep 0.1; done
  echo "$1 did not start" >&2; exit 1
}

port=9300
for s in "${SERVERS[@]}"; do
  port=$((port + 1)); start "$s" $port
  url=ws://127.0.0.1:$port/
  run() { # run NAME ARGS...: one scenario, JSON to $OUT/$s-NAME.json (a miss is not fatal)
    local name=$1; shift
    $S1 $W selftest --url "$url" --pid "$PID" --profile 10k --format json "$@" > "$OUT/$s-$name.json" || true
  }
  echo "== $s (pid $PID)" >&2
  run idle --scenario idle --conns "$CONNS" --secs "$SECS"
  run rate --scenario echo-rate --conns "$CONNS" --rate "$RATE" --secs "$SECS"
  run max --scenario echo-rate --conns "$MAX_CONNS" --rate "$MAX_RATE" --secs "$SECS"
  run sat --scenario echo-sat --conns "$SAT_CONNS" --inflight "$SAT_INFLIGHT" --secs "$SECS"
  run storm --scenario storm --conns "$STORM" --secs 30
  kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true
done

python3 - "$OUT" "${SERVERS[@]}" <<'PY'
import json, sys
out, servers = sys.argv[1], sys.argv[2:]
def load(s, n):
    try:
        r = json.load(open(f"{out}/{s}-{n}.json"))
        return r["scenarios"][0] if r["scenarios"] else None
    except Exception:
        return None
def f(v, d=1): return "-" if v is None else f"{v:,.{d}f}"
print("| server | echo-sat echoes/s | echoes per server CPU-s | gen CPU | echo-rate A: p50 / p99 ms (achieved/s) | echo-rate B: p50 / p99 ms (achieved/s) | gen CPU (B) | RSS per idle conn | idle CPU | storm s (connects/s) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for s in servers:
    sat, a, b, idle, st = (load(s, n) for n in ("sat", "rate", "max", "idle", "storm"))
    def rate(x):
        if not x: return "-"
        l = x["latency_ms"]; bad = "" if x["errors"] == 0 and x["disconnects"] == 0 else f", {x['errors']} err/{x['disconnects']} closed"
        return f"{f(l['p50'],2)} / {f(l['p99'],2)} ({f(x['achieved_rate'],0)}{bad})"
    print("| " + " | ".join([
        s,
        f(sat and sat["achieved_rate"], 0),
        f(sat and sat.get("echoes_per_server_cpu_sec"), 0),
        f(sat and sat["generator"]["cpu_pct"], 0) + "%",
        rate(a), rate(b),
        f(b and b["generator"]["cpu_pct"], 0) + "%",
        f(idle and (idle.get("server") or {}).get("rss_per_conn_bytes"), 0) + " B",
        f(idle and (idle.get("server") or {}).get("cpu_pct"), 2) + "%",
        (f(st["storm_secs"], 2) + f" ({f(st.get('connects_per_sec'), 0)})") if st else "-",
    ]) + " |")
PY
