#!/usr/bin/env bash
# Two server binaries side by side in one run, alternated (noise on a shared host hits both):
#   bench/server-split.sh OLD_WSTUNE NEW_WSTUNE [CONNS=10000] [RUNS=3]
# Made to show no regression from the server split; reusable for any server change.
# Per run and binary, with one generator for both (GEN, default this checkout's release
# wstune) measuring the server process by --pid:
#   idle       CONNS idle connections: server RSS per connection (bytes)
#   echo-sat   100 connections, one message in flight each: echoes per server CPU-second
#   echo-rate  1,000 connections at 10 msgs/s each: p99 latency (ms)
#   broadcast  CONNS subscribers, 10 rounds (serve --app broadcast): server CPU seconds over
#              the run and the last subscriber's p50 (ms)
# Then the median of each measure per binary and NEW/OLD. Every step is bounded in time;
# SECS (default 5) is each scenario's measured window; ONLY=idle|echo-sat|echo-rate|broadcast
# runs one measure (more runs of a noisy one, say).
set -euo pipefail
OLD=$1; NEW=$2; N=${3:-10000}; RUNS=${4:-3}; SECS=${SECS:-5}
GEN=${GEN:-./target/release/wstune}
ONLY=${ONLY:-all}
want() { [ "$ONLY" = all ] || [ "$ONLY" = "$1" ]; }
OUT=${OUT:-$(mktemp -d)}; mkdir -p "$OUT"
ulimit -n 20000 2>/dev/null || true
wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }

one() { # label binary run
  local label=$1 bin=$2 run=$3 port pid t0 t1 f
  port=$((20000 + RANDOM % 20000))
  "$bin" serve --port "$port" --admin off --profile 100k --heartbeat-timeout 600 \
    --max-connections $((N + 100)) >/dev/null 2>&1 &
  pid=$!
  wait_port "$port"
  f="$OUT/$label-$run"
  want idle && { timeout 120 "$GEN" selftest --url "ws://127.0.0.1:$port/" --pid "$pid" \
    --scenario idle --conns "$N" --secs "$SECS" -f json >"$f-idle.json" 2>/dev/null || true; }
  want echo-sat && { timeout 120 "$GEN" selftest --url "ws://127.0.0.1:$port/" --pid "$pid" \
    --scenario echo-sat --conns 100 --secs "$SECS" -f json >"$f-sat.json" 2>/dev/null || true; }
  want echo-rate && { timeout 120 "$GEN" selftest --url "ws://127.0.0.1:$port/" --pid "$pid" \
    --scenario echo-rate --conns 1000 --rate 10 --secs "$SECS" -f json >"$f-rate.json" \
    2>/dev/null || true; }
  kill "$pid"; wait "$pid" 2>/dev/null || true
  want broadcast || { echo "run $run $label done" >&2; return 0; }

  port=$((20000 + RANDOM % 20000))
  "$bin" serve --app broadcast --port "$port" --admin off --profile 100k \
    --max-connections $((N + 100)) >/dev/null 2>&1 &
  pid=$!
  wait_port "$port"
  t0=$(cpu_ticks "$pid")
  timeout 180 "$GEN" selftest --url "ws://127.0.0.1:$port/" --scenario broadcast --conns "$N" \
    --rounds 10 --secs 10 -f json >"$f-bcast.json" 2>/dev/null || true
  t1=$(cpu_ticks "$pid")
  echo "$(( t1 - t0 ))" >"$f-bcast.cpu"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  echo "run $run $label done" >&2
}

for run in $(seq "$RUNS"); do one old "$OLD" "$run"; one new "$NEW" "$run"; done

python3 - "$OUT" "$RUNS" "$OLD" "$NEW" "$N" <<'PY'
import json, os, statistics, sys
out, runs, old, new, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
hz = os.sysconf("SC_CLK_TCK")
def scen(path):
    try:
        return json.load(open(path))["scenarios"][0]
    except Exception:
        return None
def measures(label, run):
    f = f"{out}/{label}-{run}"
    m = {}
    s = scen(f + "-idle.json")
    if s and s.get("server") and s["server"].get("rss_per_conn_bytes") is not None:
        m["idle bytes/conn"] = s["server"]["rss_per_conn_bytes"]
    s = scen(f + "-sat.json")
    if s and s.get("echoes_per_server_cpu_sec"):
        m["echo-sat echoes/server CPU-s"] = s["echoes_per_server_cpu_sec"]
    s = scen(f + "-rate.json")
    if s and s["latency_ms"]["count"]:
        m["echo-rate p99 ms"] = s["latency_ms"]["p99"]
    s = scen(f + "-bcast.json")
    if s and s.get("broadcast_last_ms"):
        m["broadcast server CPU s"] = int(open(f + "-bcast.cpu").read()) / hz
        m["broadcast last p50 ms"] = s["broadcast_last_ms"]["p50"]
    return m
rows = {}
for label in ("old", "new"):
    for r in range(1, runs + 1):
        for k, v in measures(label, r).items():
            rows.setdefault(k, {"old": [], "new": []})[label].append(v)
print(f"old = {old}\nnew = {new}\nconnections = {n}, runs = {runs} (alternated), raw JSON in {out}")
print(f"{'measure':32} {'old runs':>30} {'new runs':>30} {'old med':>10} {'new med':>10} {'new/old':>8}")
for k, v in rows.items():
    if not v["old"] or not v["new"]:
        print(f"{k:32} missing runs: {v}")
        continue
    mo, mn = statistics.median(v["old"]), statistics.median(v["new"])
    fmt = lambda xs: ", ".join(f"{x:.4g}" for x in xs)
    print(f"{k:32} {fmt(v['old']):>30} {fmt(v['new']):>30} {mo:10.4g} {mn:10.4g} {mn / mo:8.3f}")
PY
