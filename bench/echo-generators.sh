#!/usr/bin/env bash
# Does the self-test's generator flatter the server? The same server binary, the same load
# (echo-rate, CONNS clients x RATE msgs/s, 100-byte messages, open loop), measured by the
# self-test's generator (`wstune selftest`) and by bench/wsbench's `wspaced`, an independent
# generator that shares no code with it and sleeps until each message's own due time (every
# send evenly spaced, one every 1 / (CONNS x RATE) s). Alternated run by run, the order
# rotating; the server `serve --app echo --workers 1 --no-deflate` pinned to CPU 0, the
# generator to CPU 1, both at real-time priority (PRIO) so other work on the box does not
# take their cores; each generator reads the server's utime+stime over its own measured
# window (after WARMUP s). OLD=path/to/wstune adds an older self-test generator as a third.
#   bench/echo-generators.sh [RUNS=5]
#   WSTUNE=target/release/wstune WSPACED=target/release/wspaced CONNS=5000 RATE=5 SECS=20
#   WARMUP=2 PRIO='chrt -r 1' PORT_BASE=26000 OUT=dir OLD=
# Prints one line per run and the medians; every run is bounded (timeout 120 s).
set -euo pipefail
RUNS=${1:-5}
here=$(cd "$(dirname "$0")" && pwd)
WSTUNE=${WSTUNE:-$here/../target/release/wstune}
WSPACED=${WSPACED:-$here/../target/release/wspaced}
CONNS=${CONNS:-5000}; RATE=${RATE:-5}; SECS=${SECS:-20}; WARMUP=${WARMUP:-2}
PRIO=${PRIO-chrt -r 1}; OLD=${OLD:-}
OUT=${OUT:-$(mktemp -d /tmp/echo-generators.XXXX)}
mkdir -p "$OUT"
for b in "$WSTUNE" "$WSPACED" ${OLD:+"$OLD"}; do
  [ -x "$b" ] || { echo "echo-generators.sh: $b is missing (cargo build --release -p wstune -p wsbench)" >&2; exit 3; }
done
ulimit -n 20000 2>/dev/null || { echo "echo-generators.sh: cannot raise the open-file limit to 20000" >&2; exit 3; }
gens=(selftest wspaced); [ -n "$OLD" ] && gens+=(old-selftest)
port=${PORT_BASE:-26000}
echo "echo-generators.sh: $(date -u +%FT%TZ), $(git -C "$here" rev-parse --short HEAD 2>/dev/null), load $(cut -d' ' -f1-3 /proc/loadavg), $CONNS x $RATE msgs/s, $SECS s, out $OUT" >&2
for r in $(seq "$RUNS"); do
  for k in $(seq 0 $((${#gens[@]} - 1))); do
    g=${gens[$(((k + r) % ${#gens[@]}))]}
    port=$((port + 1))
    $PRIO taskset -c 0 "$WSTUNE" serve --port $port --admin off --workers 1 --no-deflate --app echo \
      >"$OUT/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
    f="$OUT/$g-$r.json"
    case $g in
      wspaced)
        timeout 120 $PRIO taskset -c 1 "$WSPACED" --addr 127.0.0.1:$port --pid $pid --conns "$CONNS" \
          --rate "$RATE" --secs "$SECS" --warmup "$WARMUP" >"$f" 2>"$OUT/gen.err" || true ;;
      *)
        # The current binary measures one window as it comes (no re-measure when noisy): this
        # script compares generators, and reports the box's noise beside each run.
        bin=$WSTUNE; extra=(--accept-noise)
        [ "$g" = old-selftest ] && { bin=$OLD; extra=(); }
        timeout 120 $PRIO taskset -c 1 "$bin" selftest --url "ws://127.0.0.1:$port/" --pid $pid -f json \
          --scenario echo-rate --conns "$CONNS" --rate "$RATE" --secs "$SECS" --warmup "$WARMUP" \
          "${extra[@]}" >"$f" 2>"$OUT/gen.err" || true ;;
    esac
    kill $pid 2>/dev/null || echo "echo-generators.sh: the server had exited" >&2
    wait $pid 2>/dev/null || true
    python3 - "$f" "$g" "$r" <<'PY'
import json, sys
f, g, r = sys.argv[1:]
try:
    d = json.load(open(f))
    if "scenarios" in d:
        s = d["scenarios"][0]
        a = s.get("arrivals") or {}
        n = s.get("disturbance") or {}
        print(f"run {r} {g}: server {s['server']['cpu_pct']:.1f} %, generator {s['generator']['cpu_pct']:.1f} %, "
              f"service p99 {s['service_latency_ms']['p99']:.2f} ms, gap CV {a.get('gap_cv', float('nan')):.2f}, "
              f"{s['achieved_rate']:.0f}/s; box: other processes {n.get('other_cpu_pct', float('nan')):.0f} % of a core, "
              f"steal {n.get('steal_pct', float('nan')):.1f} %")
    else:
        print(f"run {r} {g}: server {d['server_cpu_pct']:.1f} %, generator {d['generator_cpu_pct']:.1f} %, "
              f"service p99 {d['service_p99_ms']:.2f} ms, gap CV {d['gap_cv']:.2f}, {d['received'] / d['secs']:.0f}/s")
except Exception as e:
    print(f"run {r} {g}: no result ({e})")
PY
  done
done
python3 - "$OUT" "$RUNS" "${gens[@]}" <<'PY'
import json, statistics, sys
out, runs, gens = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def fig(g, r):
    d = json.load(open(f"{out}/{g}-{r}.json"))
    if "scenarios" in d:
        s = d["scenarios"][0]
        return s["server"]["cpu_pct"], s["generator"]["cpu_pct"], s["service_latency_ms"]["p99"], (s.get("arrivals") or {}).get("gap_cv", float("nan"))
    return d["server_cpu_pct"], d["generator_cpu_pct"], d["service_p99_ms"], d["gap_cv"]
med = {}
print("| generator | server CPU, % of a core: median (range) | generator CPU % | service p99 ms | gap CV | runs |")
print("|---|---|---|---|---|---|")
for g in gens:
    v = []
    for r in range(1, runs + 1):
        try:
            v.append(fig(g, r))
        except Exception:
            pass
    if not v:
        print(f"| {g} | - | - | - | - | 0 |"); continue
    col = lambda i: [x[i] for x in v]
    med[g] = statistics.median(col(0))
    print(f"| {g} | {med[g]:.1f} ({min(col(0)):.1f}..{max(col(0)):.1f}) | {statistics.median(col(1)):.1f} | "
          f"{statistics.median(col(2)):.2f} | {statistics.median(col(3)):.2f} | {len(v)} |")
if "selftest" in med and "wspaced" in med and med["wspaced"] > 0:
    print(f"self-test generator / wspaced, server CPU: {med['selftest'] / med['wspaced']:.3f}")
if "old-selftest" in med and "wspaced" in med and med["wspaced"] > 0:
    print(f"old self-test generator / wspaced, server CPU: {med['old-selftest'] / med['wspaced']:.3f}")
PY
