#!/usr/bin/env bash
# Wake-up coalescing on and off, side by side, over the loads it must never make dearer:
#   closed loop  100 connections, each sending its next message when its reply came
#                (`--scenario echo-sat --inflight 1`), and 16 in flight each
#   open loop    5,000 clients x 5 and x 10 msgs/s on independent schedules (`echo-rate`)
# The server (`serve --app echo --workers WORKERS --no-deflate`) runs with the profile's window
# (`on`) and with `--coalesce-us 0` (`off`), alternated run by run (the order swapped every
# round), pinned to core 0 with the generator on core 1, both at real-time priority PRIO.
#   bench/coalesce.sh [ROUNDS=5]
# Per run: messages per second, server CPU per message (utime+stime over the measured window,
# read by the generator), latency p50/p99 (round trip in a closed loop, service latency from
# each message's scheduled send in an open loop) and, from /metrics in the middle of the
# window, how many I/O threads chose to wait (ws_coalesce_threads_waiting), and the waits per
# message over the run. The
# summary prints the medians and on/off ratios: `on` must never be worse than `off` in CPU per
# message or rate beyond the runs' spread, and keep its open-loop saving.
# Knobs: SECS=10 WARMUP=2 PRIO='chrt -r 1' LOADS="c1 c16 o5 o10" WSTUNE=path OUT=dir
#   WORKERS=1 (the server's I/O threads), CORES=0 (its cores) and GCORES=1 (the generator's):
#   WORKERS=2 CORES=0,1 GCORES=0,1 measures two I/O threads in one process, which decide together.
# Every run is bounded (timeout 120 s).
set -euo pipefail
ROUNDS=${1:-5}
here=$(cd "$(dirname "$0")" && pwd)
WSTUNE=${WSTUNE:-$here/../target/release/wstune}
SECS=${SECS:-10}; WARMUP=${WARMUP:-2}; WORKERS=${WORKERS:-1}
SCORES=${CORES:-0}; GCORES=${GCORES:-1}
PRIO=${PRIO-chrt -r 1}
read -r -a LOADS <<<"${LOADS:-c1 c16 o5 o10}"
OUT=${OUT:-$(mktemp -d /tmp/coalesce.XXXX)}
mkdir -p "$OUT"
[ -x "$WSTUNE" ] || { echo "coalesce.sh: $WSTUNE is missing (cargo build --release, or set WSTUNE=)" >&2; exit 3; }
command -v curl >/dev/null || { echo "coalesce.sh: curl is missing (apt-get install curl)" >&2; exit 3; }
ulimit -n 20000 2>/dev/null || { echo "coalesce.sh: cannot raise the open-file limit to 20000" >&2; exit 3; }
. "$here/rt-quiet.sh" # rt_quiet: wait for other real-time benchmarks on the host to end
SRV=
trap '[ -z "$SRV" ] || kill "$SRV" 2>/dev/null || true' EXIT
echo "coalesce.sh: $(date -u +%FT%TZ), $(git -C "$here" rev-parse --short HEAD 2>/dev/null), $("$WSTUNE" --version), $WORKERS I/O thread(s) on cores $SCORES, generator on $GCORES, load $(cut -d' ' -f1-3 /proc/loadavg), out $OUT" >&2

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

for r in $(seq "$ROUNDS"); do
  for load in "${LOADS[@]}"; do
    order="on off"; [ $((r % 2)) = 0 ] && order="off on"
    for mode in $order; do
      port=$(free_port); admin=$(free_port)
      extra=(); [ "$mode" = off ] && extra=(--coalesce-us 0)
      [ -z "$PRIO" ] || rt_quiet
      $PRIO taskset -c "$SCORES" "$WSTUNE" serve --port "$port" --admin "127.0.0.1:$admin" --workers "$WORKERS" \
        --no-deflate --app echo "${extra[@]}" >"$OUT/server.log" 2>&1 &
      SRV=$!
      for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
      case $load in
        c*) scen=(--scenario echo-sat --conns 100 --inflight "${load#c}") ;;
        o*) scen=(--scenario echo-rate --conns 5000 --rate "${load#o}") ;;
        *) echo "coalesce.sh: unknown load $load (c1, c16, cN: closed loop N in flight; o5, o10, oN: open loop N msgs/s x 5,000)" >&2; exit 3 ;;
      esac
      f="$OUT/$load-$mode-$r"
      timeout 120 $PRIO taskset -c "$GCORES" "$WSTUNE" selftest --url "ws://127.0.0.1:$port/" --pid $SRV -f json \
        "${scen[@]}" --secs "$SECS" --warmup "$WARMUP" >"$f.json" 2>"$f.err" &
      gen=$!
      # The middle of the measured window (5,000 connections take about a second).
      sleep $((2 + WARMUP + SECS / 2))
      curl -s "http://127.0.0.1:$admin/metrics" >"$f.mid" || true
      wait $gen || true
      curl -s "http://127.0.0.1:$admin/metrics" >"$f.metrics" || true
      kill $SRV 2>/dev/null || echo "coalesce.sh: the $mode server had exited" >&2
      wait $SRV 2>/dev/null || true
      SRV=
      python3 - "$f" "$load" "$mode" "$r" <<'PY'
import json, sys
f, load, mode, r = sys.argv[1:]
try:
    s = json.load(open(f + ".json"))["scenarios"][0]
    lat = s.get("service_latency_ms") or s["latency_ms"]
    def metrics(path):
        m = {}
        for line in open(path):
            p = line.split()
            if len(p) == 2 and not line.startswith("#"):
                m[p[0]] = float(p[1])
        return m
    m, mid = metrics(f + ".metrics"), metrics(f + ".mid")
    per = 1e6 * s["server"]["cpu_secs"] / max(s["received"], 1)
    waits = m.get("ws_coalesce_waits_total", 0) / max(m.get("ws_messages_in_total", 1), 1)
    print(f"run {r} {load} {mode}: {s['achieved_rate']:,.0f} msgs/s, {per:.2f} us/msg, server "
          f"{s['server']['cpu_pct']:.1f} %, p50/p99 {lat['p50']:.2f}/{lat['p99']:.2f} ms, "
          f"threads waiting mid-run {mid.get('ws_coalesce_threads_waiting', 0):.0f}, {waits:.3f} waits/msg, "
          f"lost {s['lost']}, generator {s['generator']['cpu_pct']:.0f} %")
except Exception as e:
    print(f"run {r} {load} {mode}: no result ({e})")
PY
    done
  done
done
python3 - "$OUT" "$ROUNDS" "${LOADS[@]}" <<'PY'
import json, statistics, sys
out, rounds, loads = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
names = {"c": "closed loop, 100 connections x {} in flight", "o": "open loop, 5,000 clients x {} msgs/s"}
def med(v, fmt):
    return f"{fmt % statistics.median(v)} ({fmt % min(v)}..{fmt % max(v)})" if v else "-"
print(f"\nmedians of {rounds} alternated runs (range); ratio = on / off\n")
print("| load | coalescing | msgs/s | server CPU us/msg | p50 / p99 ms | waits/msg |")
print("|---|---|---|---|---|---|")
for load in loads:
    fig = {}
    for mode in ("on", "off"):
        rate, per, p50, p99, waits = ([] for _ in range(5))
        for r in range(1, rounds + 1):
            f = f"{out}/{load}-{mode}-{r}"
            try:
                s = json.load(open(f + ".json"))["scenarios"][0]
            except Exception:
                continue
            lat = s.get("service_latency_ms") or s["latency_ms"]
            rate.append(s["achieved_rate"]); per.append(1e6 * s["server"]["cpu_secs"] / max(s["received"], 1))
            p50.append(lat["p50"]); p99.append(lat["p99"])
            m = {}
            try:
                for line in open(f + ".metrics"):
                    p = line.split()
                    if len(p) == 2 and not line.startswith("#"):
                        m[p[0]] = float(p[1])
            except OSError:
                pass
            waits.append(m.get("ws_coalesce_waits_total", 0) / max(m.get("ws_messages_in_total", 1), 1))
        fig[mode] = (rate, per)
        label = names[load[0]].format(load[1:])
        print(f"| {label} | {mode} | {med(rate, '%.0f')} | {med(per, '%.2f')} | "
              f"{med(p50, '%.2f')} / {med(p99, '%.2f')} | {med(waits, '%.3f')} |")
    (ron, pon), (roff, poff) = fig["on"], fig["off"]
    if ron and roff and pon and poff:
        print(f"| {label} | **ratio** | **{statistics.median(ron) / statistics.median(roff):.3f}** | "
              f"**{statistics.median(pon) / statistics.median(poff):.3f}** | | |")
PY
