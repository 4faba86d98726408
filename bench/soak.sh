#!/usr/bin/env bash
# Churn soak of `wstune serve` (RELIABILITY.md#soak): CONNS connections (default 10,000) held for
# MINUTES (default 10) while CHURN of them per second (default 500) close and reconnect (a
# third with a close frame, a third with a TCP reset, a third with a FIN alone), with echo
# traffic, a broadcast every second and permessage-deflate on half of them (the Rust client
# bench/wsbench/src/bin/wssoak.rs, or with CLIENT=python bench/soak_client.py, the same mix
# through Python's `websockets`; in processes of at most 2,500 connections each).
#
# Every 10 s the clients pause churning and settle (so the counts can be compared exactly),
# and one sample is taken: server RSS, open fds (/proc/PID/fd), the `ws_connections` gauge
# against the kernel's count of established server sockets (ss), and `ws_deflate_memory_bytes`.
#
# Pass: the gauge equals the real count at every sample; after warm-up (the first fifth of the
# run, at least 20 s; WARMUP_SECS sets it) RSS grows by less than 2 % (RSS_MAX_GROWTH_PCT); the fds return to their baseline once the
# clients leave; the server log has no warning, error or panic; no client lost a connection it
# did not close. Exit 0 on pass, 1 on fail.
#
# Usage: bench/soak.sh [MINUTES=10]; env CONNS, CHURN, NO_DEFLATE=1 (no client compresses), BIN (a wstune binary: default a release
# build), OUT (directory for samples.csv, chart.svg, summary.txt, server.log; default a temp dir),
# CLIENT=rust (default; SOAK_CLIENT names a built wssoak, else a release build) or python
# (python3 with `websockets`, tests/requirements.txt: ~130 reconnects/s at most on 2 vCPUs).
# Needs python3 (the summary) and `ss`. Run it under `nice` beside other work: it is a leak and
# correctness test, not a latency measurement (but 500 reconnects/s needs the CPU it asks for).
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-10}
CONNS=${CONNS:-10000}
CHURN=${CHURN:-500}
SECS=$(python3 -c "print(int(float('$MINUTES') * 60))")
OUT=${OUT:-$(mktemp -d /tmp/wstune-soak.XXXXXX)}
mkdir -p "$OUT"
if [ -z "${BIN:-}" ]; then
  cargo build --release -q -p wstune
  BIN=${CARGO_TARGET_DIR:-target}/release/wstune
fi
CLIENT=${CLIENT:-rust}
case "$CLIENT" in
  rust)
    if [ -z "${SOAK_CLIENT:-}" ]; then
      cargo build --release -q -p wsbench --bin wssoak
      SOAK_CLIENT=${CARGO_TARGET_DIR:-target}/release/wssoak
    fi
    CLIENT_CMD=("$SOAK_CLIENT") ;;
  python) CLIENT_CMD=(python3 bench/soak_client.py) ;;
  *) echo "CLIENT must be rust or python, not '$CLIENT'" >&2; exit 3 ;;
esac
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port); APORT=$(free_port)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "${SPID:-}" ] && kill "$SPID" 2>/dev/null || true
  rm -f "$OUT"/pause
}
trap cleanup EXIT

# The server: channels app (echo through one's own channel, broadcast through "all"),
# permessage-deflate offered, heartbeat as the profile sets it.
"$BIN" serve --port "$PORT" --admin "127.0.0.1:$APORT" --app channels --profile 100k --deflate \
  >"$OUT/server.log" 2>&1 &
SPID=$!
for _ in $(seq 100); do
  if grep -q "listening on" "$OUT/server.log" 2>/dev/null; then break; fi
  kill -0 $SPID 2>/dev/null || { cat "$OUT/server.log"; exit 1; }
  sleep 0.1
done
grep -q "listening on" "$OUT/server.log" || { echo "the server did not start"; exit 1; }

rss() { awk '/VmRSS/{print $2}' /proc/$SPID/status; }   # KiB
fds() { ls /proc/$SPID/fd | wc -l; }
metric() { curl -s --max-time 5 "http://127.0.0.1:$APORT/metrics" | awk -v m="$1" '$1 == m {v = $2} END {print v}'; }
# The server's end of each connection: local address 127.0.0.1:PORT. (Not `sport = :PORT`:
# a client on 127.0.x.y may get PORT as its own ephemeral port.)
real() { ss -Htn state established "( src 127.0.0.1:$PORT )" | wc -l; }

FD0=$(fds); RSS0=$(rss)
echo "server pid $SPID on port $PORT; baseline: rss ${RSS0} KiB, ${FD0} fds; out $OUT"

PER=2500
NPROC=$(( (CONNS + PER - 1) / PER ))
rm -f "$OUT"/pause "$OUT"/quiet.* "$OUT"/ready.* "$OUT"/client.*
for i in $(seq 0 $((NPROC - 1))); do
  n=$(( i < NPROC - 1 ? PER : CONNS - PER * (NPROC - 1) ))
  "${CLIENT_CMD[@]}" --url "ws://127.0.0.1:$PORT/" --conns "$n" \
    --churn "$(python3 -c "print($CHURN * $n / $CONNS)")" --secs "$SECS" --index "$i" \
    --pause "$OUT/pause" --quiet "$OUT/quiet.$i" --ready "$OUT/ready.$i" ${NO_DEFLATE:+--no-deflate} \
    >"$OUT/client.$i.json" 2>"$OUT/client.$i.err" &
  PIDS+=($!)
done
for _ in $(seq 1200); do
  if [ "$(ls "$OUT"/ready.* 2>/dev/null | wc -l)" -eq "$NPROC" ]; then break; fi
  sleep 0.1
done
echo "clients ready: $(for f in "$OUT"/ready.*; do cat "$f"; echo; done | awk "{s += \$1} END {print s}") connections in $NPROC processes"

echo "t_s,rss_kib,fds,gauge,real,clients,deflate_bytes" >"$OUT/samples.csv"
T0=$(date +%s)
FAIL=()
K=0
while :; do
  K=$((K + 1))
  # Every 10 s on the clock, however long the previous sample took to settle.
  while [ "$(date +%s)" -lt $((T0 + 10 * K)) ]; do sleep 0.2; done
  t=$(( $(date +%s) - T0 ))
  # Pause the churn and wait (bounded) until every process has settled.
  touch "$OUT/pause"
  settled=0
  for _ in $(seq 300); do
    alive=0; quiet=0
    for i in $(seq 0 $((NPROC - 1))); do
      if kill -0 "${PIDS[$i]}" 2>/dev/null; then
        alive=$((alive + 1))
        if [ -e "$OUT/quiet.$i" ]; then quiet=$((quiet + 1)); fi
      fi
    done
    if [ "$alive" -eq 0 ]; then break; fi
    if [ "$quiet" -eq "$alive" ]; then settled=1; break; fi
    sleep 0.1
  done
  if [ "$alive" -eq 0 ]; then rm -f "$OUT/pause"; break; fi
  # Closes the server already saw may still be on their way through its tasks: a moment for
  # the two counts to meet, then they must be equal.
  g=""; r=""
  for _ in $(seq 20); do
    g=$(metric ws_connections); r=$(real)
    if [ "$g" = "$r" ]; then break; fi
    sleep 0.1
  done
  # What the clients hold (each wrote its count when it settled).
  held=$(for i in $(seq 0 $((NPROC - 1))); do cat "$OUT/quiet.$i" 2>/dev/null; echo; done | awk '{s += $1} END {print s + 0}')
  # A client whose run ended while this sample was taken stops being quiet (it removes its
  # file) to leave: the counts no longer belong together, and sampling is over.
  ended=0
  for i in $(seq 0 $((NPROC - 1))); do
    { [ -e "$OUT/quiet.$i" ] && kill -0 "${PIDS[$i]}" 2>/dev/null; } || ended=1
  done
  if [ "$settled" = 1 ] && [ "$ended" = 1 ]; then rm -f "$OUT/pause"; break; fi
  row="$t,$(rss),$(fds),$g,$r,$held,$(metric ws_deflate_memory_bytes)"
  rm -f "$OUT/pause"
  echo "$row" >>"$OUT/samples.csv"
  echo "sample $row (settled=$settled)"
  [ "$settled" = 1 ] || FAIL+=("t=${t}s: the clients did not settle within 30 s")
  [ "$g" = "$r" ] || FAIL+=("t=${t}s: gauge $g but $r established sockets")
  [ "$settled" = 0 ] || [ "$held" = "$r" ] || FAIL+=("t=${t}s: the clients hold $held connections, the server has $r")
done
for p in "${PIDS[@]}"; do wait "$p" || FAIL+=("a client process failed: $(cat "$OUT"/client.*.err | tail -3)"); done
PIDS=()

# The clients left: the gauge goes to 0 and the fds back to the baseline (bounded wait).
for _ in $(seq 300); do
  if [ "$(metric ws_connections)" = 0 ] && [ "$(fds)" -le "$FD0" ]; then break; fi
  sleep 0.1
done
FD1=$(fds); G1=$(metric ws_connections); RSS1=$(rss)
[ "$FD1" -le "$FD0" ] || FAIL+=("fds did not return to the baseline: $FD1 after, $FD0 before")
[ "$G1" = 0 ] || FAIL+=("ws_connections is $G1 after every client left")
# What the allocator hands back to the kernel once the clients are gone (jemalloc purges freed
# pages on its own default decay, src/main.rs sets none; glibc kept most of them): informational,
# not a criterion.
sleep "${RETURN_SECS:-15}"; RSS2=$(rss)
kill -TERM $SPID; wait $SPID || true; SPID=""
# From "listening" on (the start-up host check warns about this host's limits, rightly).
BAD=$(awk 'f; /listening on/{f=1}' "$OUT/server.log" | grep -E "WARN|ERROR|panicked" || true)
[ -z "$BAD" ] || FAIL+=("the server log has warnings or errors: ${BAD:0:600}")

python3 - "$OUT" "$SECS" "$RSS0" "$FD0" "$FD1" "$RSS1" "${WARMUP_SECS:-0}" "${RSS_MAX_GROWTH_PCT:-2}" "$RSS2" "${RETURN_SECS:-15}" >"$OUT/summary.txt" <<'EOF' || FAIL+=("the summary's criteria (above)")
import csv, json, sys, glob
out, secs, rss0, fd0, fd1, rss1, warmup = sys.argv[1], int(sys.argv[2]), *map(int, sys.argv[3:8])
limit = float(sys.argv[8])
rss2, later = int(sys.argv[9]), sys.argv[10]
rows = [{k: int(v or -1) for k, v in r.items()} for r in csv.DictReader(open(f"{out}/samples.csv"))]
clients = [json.loads(l) for f in sorted(glob.glob(f"{out}/client.*.json")) for l in open(f) if l.strip()]
tot = {k: sum(c[k] for c in clients) for k in clients[0] if k not in ("index", "errors")} if clients else {}
errs = [e for c in clients for e in c["errors"]]
warm = warmup or max(20, secs // 5)
after = [r for r in rows if r["t_s"] >= warm]
ok = True
print(f"samples: {len(rows)} (every 10 s), warm-up {warm} s")
print(f"baseline: rss {rss0} KiB, {fd0} fds; after the clients left: rss {rss1} KiB, {fd1} fds; "
      f"{later} s later: rss {rss2} KiB")
if len(after) >= 2:
    first, last = after[0]["rss_kib"], after[-1]["rss_kib"]
    peak = max(r["rss_kib"] for r in after)
    growth = (last - first) * 100 / first
    print(f"rss after warm-up: {first} KiB -> {last} KiB ({growth:+.2f} %), peak {peak} KiB")
    if growth >= limit:
        ok = False
        print(f"FAIL: rss grew {growth:.2f} % after warm-up (limit {limit} %)")
else:
    ok = False
    print("FAIL: fewer than two samples after warm-up")
print(f"connections at the samples: {min(r['real'] for r in rows)}..{max(r['real'] for r in rows)}; "
      f"gauge == real at {sum(r['gauge'] == r['real'] for r in rows)} of {len(rows)} samples, "
      f"== what the clients hold at {sum(r['clients'] == r['real'] for r in rows)}")
print(f"fds at the samples: {min(r['fds'] for r in rows)}..{max(r['fds'] for r in rows)}; "
      f"deflate memory: {min(r['deflate_bytes'] for r in rows)}..{max(r['deflate_bytes'] for r in rows)} bytes")
print("clients: " + ", ".join(f"{k} {v}" for k, v in tot.items()))
churned = tot.get("closed_frame", 0) + tot.get("closed_rst", 0) + tot.get("closed_fin", 0)
print(f"churn: {churned} closes and reconnects in {secs} s ({churned / secs:.0f}/s)")
if tot.get("lost", 0) or tot.get("connect_failed", 0):
    ok = False
    print(f"FAIL: {tot.get('lost')} connections lost, {tot.get('connect_failed')} connects failed: {errs[:5]}")
if not tot.get("broadcasts_received") or not tot.get("echo_ok"):
    ok = False
    print("FAIL: no broadcast or no echo came back")
# The chart: RSS and fds over time.
W, H, L, B = 640, 300, 60, 40
def poly(key, lo, hi, color):
    pts = " ".join(f"{L + r['t_s'] * (W - L - 60) / max(1, rows[-1]['t_s']):.1f},"
                   f"{H - B - (r[key] - lo) * (H - B - 20) / max(1, hi - lo):.1f}" for r in rows)
    return f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{pts}"/>'
if rows:
    rlo, rhi = 0, max(r["rss_kib"] for r in rows) * 1.1
    flo, fhi = 0, max(r["fds"] for r in rows) * 1.1
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<line x1="{L}" y1="{H-B}" x2="{W-60}" y2="{H-B}" stroke="black"/>',
           f'<line x1="{L}" y1="20" x2="{L}" y2="{H-B}" stroke="black"/>',
           f'<line x1="{W-60}" y1="20" x2="{W-60}" y2="{H-B}" stroke="black"/>',
           f'<text x="{W/2}" y="{H-8}" text-anchor="middle">seconds ({len(rows)} samples, churn {churned/secs:.0f}/s)</text>',
           f'<text x="{L-4}" y="24" text-anchor="end" fill="#1f77b4">{rhi/1024:.0f} MiB</text>',
           f'<text x="{L-4}" y="{H-B}" text-anchor="end" fill="#1f77b4">0</text>',
           f'<text x="{W-56}" y="24" fill="#d62728">{fhi:.0f} fds</text>',
           f'<text x="{W-56}" y="{H-B}" fill="#d62728">0</text>',
           f'<text x="{L+8}" y="14" fill="#1f77b4">server RSS</text>',
           f'<text x="{L+100}" y="14" fill="#d62728">open fds</text>',
           f'<text x="{W-64}" y="{H-B+14}" text-anchor="end">{rows[-1]["t_s"]}</text>',
           poly("rss_kib", rlo, rhi, "#1f77b4"), poly("fds", flo, fhi, "#d62728"), '</svg>']
    open(f"{out}/chart.svg", "w").write("\n".join(svg) + "\n")
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
EOF
cat "$OUT/summary.txt"
if [ ${#FAIL[@]} -gt 0 ]; then
  printf 'FAIL: %s\n' "${FAIL[@]}"
  exit 1
fi
echo "soak passed; samples, chart and logs in $OUT"
