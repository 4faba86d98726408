#!/usr/bin/env bash
# What `wstune watch` costs on a busy host: its CPU per interval and its memory with SOCKETS TCP
# sockets open (loopback connections held by bench/watch_sockets.py, both ends counted), at a
# 1 s interval, beside what an operator runs instead (`ss -tan` and `ss -ltn` once a second).
#   bench/watch-cost.sh [SOCKETS=100000] [ROUNDS=3]
# Per round: `watch --format json -i 1` runs; its CPU time (utime + stime from /proc/PID/stat)
# is read WARM s after its start (past the check pipeline that words the advice, run once) and
# SPAN s later: CPU per interval = the difference / SPAN; memory is its peak RSS (VmHWM). The
# goal: under 2 % of one core at 1 s. Knobs: SPAN=60 WARM=5 WSTUNE=path. Every load is bounded
# (the holders exit after 30 min, and with this script).
set -euo pipefail
SOCKETS=${1:-100000}; ROUNDS=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
WSTUNE=${WSTUNE:-$here/../target/release/wstune}
SPAN=${SPAN:-60}; WARM=${WARM:-5}
[ -x "$WSTUNE" ] || { echo "watch-cost.sh: $WSTUNE is missing (cargo build --release, or set WSTUNE=)" >&2; exit 3; }
ulimit -n 20000 2>/dev/null || { echo "watch-cost.sh: cannot raise the open-file limit to 20000" >&2; exit 3; }
per=8000 # connections per holder: 16,000 descriptors, under the 20,000 a process may have
holders=$(( (SOCKETS / 2 + per - 1) / per ))
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
out=$(mktemp -d /tmp/watch-cost.XXXX)
base=$(( 20000 + RANDOM % 20000 ))
for i in $(seq "$holders"); do
  n=$(( SOCKETS / 2 - (i - 1) * per )); [ "$n" -gt "$per" ] && n=$per
  python3 "$here/watch_sockets.py" "$n" "127.0.0.$((i + 1))" $((base + i)) >"$out/holder-$i" 2>&1 &
  pids+=($!)
done
for i in $(seq "$holders"); do
  for _ in $(seq 240); do grep -q ready "$out/holder-$i" 2>/dev/null && break; sleep 0.5; done
  grep -q ready "$out/holder-$i" || { echo "watch-cost.sh: holder $i did not get its connections up" >&2; cat "$out/holder-$i" >&2; exit 3; }
done
inuse=$(awk '/^TCP:/ {print $3}' /proc/net/sockstat)
echo "watch-cost.sh: $(date -u +%FT%TZ), $(git -C "$here" rev-parse --short HEAD 2>/dev/null), $("$WSTUNE" --version), $(nproc) CPUs, TCP sockets in use $inuse (sockstat), load $(cut -d' ' -f1-3 /proc/loadavg)"

ticks=$(getconf CLK_TCK)
for r in $(seq "$ROUNDS"); do
  "$WSTUNE" watch --format json -i 1 --count $((WARM + SPAN + 5)) >"$out/frames" 2>"$out/err" &
  w=$!
  sleep "$WARM" # past the start (the check pipeline that words the advice runs once)
  read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$w/stat")
  sleep "$SPAN"
  [ -e "/proc/$w/stat" ] || { echo "watch-cost.sh: watch ended early:" >&2; cat "$out/err" >&2; exit 3; }
  read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$w/stat")
  rss=$(awk '/VmHWM/ {print $2}' "/proc/$w/status")
  kill "$w" 2>/dev/null; wait "$w" 2>/dev/null || true
  age=$(python3 -c "import json; f=[json.loads(l) for l in open('$out/frames') if l.strip()]; a=[x['connections_age_s'] for x in f[2:] if x.get('connections_age_s') is not None]; print(f'{max(a):.1f}' if a else '-')")
  # The peer: what an operator runs instead, once a second (its CPU, ss's own process).
  /usr/bin/time -f "%U %S" -o "$out/ss-time" sh -c 'for i in 1 2 3 4 5 6 7 8 9 10; do ss -tan >/dev/null; ss -ltn >/dev/null; done'
  read -r ssu sss <"$out/ss-time"
  awk -v r="$r" -v u="$((u1 - u0))" -v s="$((s1 - s0))" -v hz="$ticks" -v span="$SPAN" -v rss="${rss:-0}" -v age="$age" -v ssu="$ssu" -v sss="$sss" 'BEGIN {
    per = (u + s) / hz / span
    printf "round %d: watch %.2f ms CPU per 1 s interval (%.2f %% of a core; user %.2f, system %.2f ms), peak RSS %.1f MiB, per-listener figures at most %s s old; ss -tan + ss -ltn once a second: %.0f ms CPU (%.1f %% of a core)\n", r, per * 1000, per * 100, u / hz / span * 1000, s / hz / span * 1000, rss / 1024, age, (ssu + sss) * 100, (ssu + sss) * 10
  }'
done
