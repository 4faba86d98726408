#!/usr/bin/env bash
# Server CPU per echo, A/B: wstune binaries alternated run by run at two fixed offered loads
# (open loop, so every binary does the same work and CPU per echo compares them fairly):
#   small: echo-rate SMALL_CONNS x SMALL_RATE msgs/s (default 100 x 300, one message in flight)
#   large: echo-rate LARGE_CONNS x LARGE_RATE msgs/s (default 10,000 x 2)
# Server `serve --app echo --workers 1 --no-deflate` on CPU 0, the generator (GEN's `selftest`)
# on CPU 1, both at real-time priority (PRIO) so other work on the machine does not take the
# cores; the server's CPU is the self-test's own /proc sampling (utime+stime over the window).
# Usage: bench/echo-cpu.sh RUNS NAME=BINARY [NAME=BINARY...]
#   GEN=/work/bin/wstune-main SECS=10 LOADS="small large" PRIO='chrt -r 1' PORT_BASE=25000 OUT=dir
# Prints one line per run and a median table; every run is bounded (timeout 120 s).
set -euo pipefail
RUNS=${1:?usage: bench/echo-cpu.sh RUNS NAME=BINARY [NAME=BINARY...]}
shift
[ $# -ge 1 ] || { echo "echo-cpu.sh: name at least one NAME=BINARY" >&2; exit 3; }
GEN=${GEN:-/work/bin/wstune-main}; SECS=${SECS:-10}; PRIO=${PRIO-chrt -r 1}
SMALL_CONNS=${SMALL_CONNS:-100}; SMALL_RATE=${SMALL_RATE:-300}
LARGE_CONNS=${LARGE_CONNS:-10000}; LARGE_RATE=${LARGE_RATE:-2}
read -r -a LOADS <<<"${LOADS:-small large}"
OUT=${OUT:-$(mktemp -d /tmp/echo-cpu.XXXX)}
mkdir -p "$OUT"
names=(); bins=()
for a in "$@"; do
  n=${a%%=*}; b=${a#*=}
  [ -x "$b" ] || { echo "echo-cpu.sh: $b is not an executable (NAME=BINARY)" >&2; exit 3; }
  names+=("$n"); bins+=("$b")
done
[ -x "$GEN" ] || { echo "echo-cpu.sh: the generator $GEN is missing (set GEN=)" >&2; exit 3; }
ulimit -n 20000 2>/dev/null || { echo "echo-cpu.sh: cannot raise the open-file limit to 20000" >&2; exit 3; }
port=${PORT_BASE:-25000}
echo "echo-cpu.sh: $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg), out $OUT" >&2
for r in $(seq "$RUNS"); do
  for load in "${LOADS[@]}"; do
    if [ "$load" = small ]; then c=$SMALL_CONNS; rate=$SMALL_RATE; else c=$LARGE_CONNS; rate=$LARGE_RATE; fi
    # The order rotates run by run, so no binary always runs first (or right after a build).
    for k in $(seq 0 $((${#names[@]} - 1))); do
      i=$(((k + r) % ${#names[@]}))
      port=$((port + 1)); [ $port -lt $((${PORT_BASE:-25000} + 900)) ] || port=$((${PORT_BASE:-25000} + 1))
      $PRIO taskset -c 0 "${bins[$i]}" serve --port $port --admin off --workers 1 --no-deflate --app echo \
        >"$OUT/server.log" 2>&1 &
      pid=$!
      for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
      f="$OUT/$load-${names[$i]}-$r.json"
      timeout 120 $PRIO taskset -c 1 "$GEN" selftest --url "ws://127.0.0.1:$port/" --pid $pid -f json \
        --scenario echo-rate --conns "$c" --rate "$rate" --secs "$SECS" >"$f" 2>"$OUT/gen.err" || true
      kill $pid 2>/dev/null || echo "echo-cpu.sh: ${names[$i]} had exited" >&2
      wait $pid 2>/dev/null || true
      python3 - "$f" "$load" "${names[$i]}" "$r" <<'PY'
import json, sys
f, load, name, r = sys.argv[1:]
try:
    s = json.load(open(f))["scenarios"][0]
    print(f"run {r} {load} {name}: {1e6 * s['server']['cpu_secs'] / max(s['received'], 1):.2f} us/echo "
          f"(server {s['server']['cpu_pct']:.1f} %, {s['received']} echoes)")
except Exception as e:
    print(f"run {r} {load} {name}: no result ({e})")
PY
    done
  done
done
python3 - "$OUT" "$RUNS" "${names[@]}" <<'PY'
import json, statistics, sys
out, runs, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
loads = [l for l in ("small", "large")]
print("| binary | " + " | ".join(f"{l}: server us per echo, median (range)" for l in loads) + " |")
print("|---|" + "---|" * len(loads))
for n in names:
    cells = []
    for l in loads:
        v = []
        for r in range(1, runs + 1):
            try:
                s = json.load(open(f"{out}/{l}-{n}-{r}.json"))["scenarios"][0]
                v.append(1e6 * s["server"]["cpu_secs"] / max(s["received"], 1))
            except Exception:
                pass
        cells.append(f"{statistics.median(v):.2f} ({min(v):.2f}..{max(v):.2f}, n={len(v)})" if v else "-")
    print(f"| {n} | " + " | ".join(cells) + " |")
PY
