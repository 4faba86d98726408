#!/usr/bin/env bash
# Server CPU per message under independent arrivals: every client sends on its own schedule,
# evenly spaced (the self-test's echo-rate generator), so messages reach the server one at a
# time, as unsynchronised clients' do, not in bursts. Servers alternated run by run (the order
# rotating), each on core 0 with the generator on core 1, both at real-time priority PRIO so
# other work on the host does not take their cores.
#   bench/arrivals.sh [RUNS=5]
# Loads: LOADS="5000x5 10000x5" (connections x msgs/s each: 25,000 and 50,000 msgs/s).
# Servers: SERVERS="wstune wstune-0 epoll tt-echo node-ws", where
#   wstune     WSTUNE serve --app echo --workers 1 --no-deflate (the profile's coalescing window)
#   wstune-0   the same with --coalesce-us 0 (every message served the moment it arrives)
#   wstune-US  the same with --coalesce-us US (any number)
#   main       MAIN (an older wstune binary) serve, as wstune, for an A/B
#   epoll      bench/uring's one-thread epoll loop (a minimal WebSocket echo: the floor)
#   uring      the same echo on bench/uring's io_uring loop (multishot receive)
#   tt-echo    tokio-tungstenite (bench/peers/tt-echo, TT=binary)
#   node-ws    Node.js ws (bench/peers/node)
# Per run: server CPU per message and % of its core (utime+stime over the measured window,
# read by the generator), service latency p50/p99/p99.9 (from each message's actual send),
# and, from `perf stat` over PERF_SECS in the middle of the window, the server's syscalls and
# context switches per message (counting them costs every server the same few percent).
# Knobs: SECS=15 WARMUP=2 PRIO='chrt -r 1' PORT_BASE=27000 OUT=dir GEN=WSTUNE PERF_SECS=4
# Every run is bounded (timeout 120 s).
set -euo pipefail
RUNS=${1:-5}
here=$(cd "$(dirname "$0")" && pwd)
WSTUNE=${WSTUNE:-$here/../target/release/wstune}
GEN=${GEN:-$WSTUNE}
TT=${TT:-$here/peers/tt-echo/target/release/tt-echo}
UB=${UB:-$here/uring/target/release/uring-bench}
MAIN=${MAIN:-}
SECS=${SECS:-15}; WARMUP=${WARMUP:-2}; PERF_SECS=${PERF_SECS:-4}
PRIO=${PRIO-chrt -r 1}
read -r -a LOADS <<<"${LOADS:-5000x5 10000x5}"
read -r -a SERVERS <<<"${SERVERS:-wstune wstune-0 epoll tt-echo node-ws}"
OUT=${OUT:-$(mktemp -d /tmp/arrivals.XXXX)}
mkdir -p "$OUT"
need() { [ -x "$1" ] || { echo "arrivals.sh: $1 is missing ($2)" >&2; exit 3; }; }
need "$GEN" "cargo build --release, or set GEN="
for s in "${SERVERS[@]}"; do
  case $s in
    wstune|wstune-*) need "$WSTUNE" "cargo build --release, or set WSTUNE=" ;;
    main) need "${MAIN:-/nonexistent}" "set MAIN= to an older wstune binary" ;;
    epoll|uring) need "$UB" "cargo build --release --manifest-path bench/uring/Cargo.toml, or set UB=" ;;
    tt-echo) need "$TT" "cargo build --release --manifest-path bench/peers/tt-echo/Cargo.toml, or set TT=" ;;
    node-ws) [ -d "$here/peers/node/node_modules/ws" ] ||
      { echo "arrivals.sh: node-ws needs (cd bench/peers/node && npm ci)" >&2; exit 3; } ;;
    *) echo "arrivals.sh: unknown server $s (wstune, wstune-US, main, epoll, uring, tt-echo, node-ws)" >&2; exit 3 ;;
  esac
done
command -v perf >/dev/null || { echo "arrivals.sh: perf is missing (apt-get install linux-perf)" >&2; exit 3; }
ulimit -n 20000 2>/dev/null || { echo "arrivals.sh: cannot raise the open-file limit to 20000" >&2; exit 3; }
. "$here/rt-quiet.sh" # rt_quiet: wait for other real-time benchmarks on the host to end
SRV=
trap '[ -z "$SRV" ] || kill "$SRV" 2>/dev/null || true' EXIT
echo "arrivals.sh: $(date -u +%FT%TZ), $(git -C "$here" rev-parse --short HEAD 2>/dev/null), load $(cut -d' ' -f1-3 /proc/loadavg), out $OUT" >&2

start_server() { # NAME PORT: starts it on core 0, sets SRV
  local w=(serve --port "$2" --admin off --workers 1 --no-deflate --app echo)
  case $1 in
    wstune) exec $PRIO taskset -c 0 "$WSTUNE" "${w[@]}" ;;
    wstune-*) exec $PRIO taskset -c 0 "$WSTUNE" "${w[@]}" --coalesce-us "${1#wstune-}" ;;
    main) exec $PRIO taskset -c 0 "$MAIN" "${w[@]}" ;;
    epoll) exec $PRIO taskset -c 0 "$UB" serve --io epoll --port "$2" ;;
    uring) exec $PRIO taskset -c 0 "$UB" serve --io uring --port "$2" ;;
    tt-echo) exec $PRIO taskset -c 0 "$TT" "$2" ;;
    node-ws) exec $PRIO taskset -c 0 node "$here/peers/node/echo.js" "$2" ;;
  esac >"$OUT/server.log" 2>&1 &
  SRV=$!
}

port=${PORT_BASE:-27000}
for r in $(seq "$RUNS"); do
  for load in "${LOADS[@]}"; do
    conns=${load%x*}; rate=${load#*x}
    for k in $(seq 0 $((${#SERVERS[@]} - 1))); do
      name=${SERVERS[$(((k + r) % ${#SERVERS[@]}))]}
      port=$((port + 1)); [ $port -lt $((${PORT_BASE:-27000} + 900)) ] || port=$((${PORT_BASE:-27000} + 1))
      [ -z "$PRIO" ] || rt_quiet
      start_server "$name" $port
      for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
      f="$OUT/$load-$name-$r"
      timeout 120 $PRIO taskset -c 1 "$GEN" selftest --url "ws://127.0.0.1:$port/" --pid $SRV -f json \
        --scenario echo-rate --conns "$conns" --rate "$rate" --secs "$SECS" --warmup "$WARMUP" \
        >"$f.json" 2>"$f.err" &
      gen=$!
      # The middle of the measured window: connects take about a second per 10,000.
      sleep $((conns / 10000 + 1 + WARMUP + (SECS - PERF_SECS) / 2))
      perf stat -x, -e raw_syscalls:sys_enter,context-switches -p $SRV -o "$f.perf" -- sleep "$PERF_SECS" \
        >/dev/null 2>&1 || true
      wait $gen || true
      kill $SRV 2>/dev/null || echo "arrivals.sh: $name had exited" >&2
      wait $SRV 2>/dev/null || true
      SRV=
      python3 - "$f" "$load" "$name" "$r" "$PERF_SECS" <<'PY'
import json, sys
f, load, name, r, psecs = sys.argv[1:]
try:
    s = json.load(open(f + ".json"))["scenarios"][0]
    sv, lat = s["server"], s["service_latency_ms"]
    per = 1e6 * sv["cpu_secs"] / max(s["received"], 1)
    counts = {}
    for line in open(f + ".perf"):
        p = line.strip().split(",")
        if len(p) > 2 and p[0].isdigit():
            counts[p[2]] = int(p[0])
    msgs = s["offered_rate"] * float(psecs)
    sc = counts.get("raw_syscalls:sys_enter", 0) / msgs
    cs = counts.get("context-switches", 0) / msgs
    print(f"run {r} {load} {name}: {per:.2f} us/msg, server {sv['cpu_pct']:.1f} %, "
          f"{sc:.2f} syscalls/msg, {cs:.2f} switches/msg, service p50/p99/p99.9 "
          f"{lat['p50']:.2f}/{lat['p99']:.2f}/{lat['p999']:.2f} ms, lost {s['lost']}, "
          f"generator {s['generator']['cpu_pct']:.0f} %")
except Exception as e:
    print(f"run {r} {load} {name}: no result ({e})")
PY
    done
  done
done
python3 - "$OUT" "$RUNS" "$PERF_SECS" "${LOADS[*]}" "${SERVERS[@]}" <<'PY'
import json, statistics, sys
out, runs, psecs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
loads, names = sys.argv[4].split(), sys.argv[5:]
def med(v, fmt):
    return f"{fmt % statistics.median(v)} ({fmt % min(v)}..{fmt % max(v)})" if v else "-"
for load in loads:
    c, rate = load.split("x")
    print(f"\n{int(c):,} connections x {rate} msgs/s ({int(c) * float(rate):,.0f} msgs/s), "
          f"medians of {runs} runs (range)\n")
    print("| server | server CPU per message, us | % of its core | syscalls / msg | switches / msg "
          "| service p50 / p99 / p99.9 ms | generator CPU |")
    print("|---|---|---|---|---|---|---|")
    for n in names:
        per, pct, sc, cs, p50, p99, p999, gen = ([] for _ in range(8))
        for r in range(1, runs + 1):
            f = f"{out}/{load}-{n}-{r}"
            try:
                s = json.load(open(f + ".json"))["scenarios"][0]
            except Exception:
                continue
            sv, lat = s["server"], s["service_latency_ms"]
            per.append(1e6 * sv["cpu_secs"] / max(s["received"], 1)); pct.append(sv["cpu_pct"])
            p50.append(lat["p50"]); p99.append(lat["p99"]); p999.append(lat["p999"])
            gen.append(s["generator"]["cpu_pct"])
            try:
                counts = {}
                for line in open(f + ".perf"):
                    p = line.strip().split(",")
                    if len(p) > 2 and p[0].isdigit():
                        counts[p[2]] = int(p[0])
                msgs = s["offered_rate"] * psecs
                if counts:
                    sc.append(counts.get("raw_syscalls:sys_enter", 0) / msgs)
                    cs.append(counts.get("context-switches", 0) / msgs)
            except OSError:
                pass
        print(f"| {n} | {med(per, '%.2f')} | {med(pct, '%.1f')} | {med(sc, '%.2f')} | {med(cs, '%.2f')} "
              f"| {med(p50, '%.2f')} / {med(p99, '%.2f')} / {med(p999, '%.2f')} | {med(gen, '%.0f')} % |")
PY
