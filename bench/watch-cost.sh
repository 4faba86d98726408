#!/usr/bin/env bash
# What `wstune watch` costs on a busy host: its CPU per interval and its memory with SOCKETS TCP
# sockets open (loopback connections held by bench/watch_sockets.py, both ends counted), at a
# 1 s interval, beside what an operator runs instead (`ss -tan` and `ss -ltn` once a second).
#   bench/watch-cost.sh [SOCKETS=100000] [ROUNDS=3]
# Per round: `watch --format json --count A` and `--count B` (B - A = SPAN frames), CPU from
# /usr/bin/time; CPU per interval = (cpu(B) - cpu(A)) / SPAN, which leaves out the start (the
# check pipeline that words the advice runs once). The goal: under 2 % of one core at 1 s.
# Knobs: SPAN=20 A=3 WSTUNE=path. Every load is bounded (the holders exit after 30 min).
set -euo pipefail
SOCKETS=${1:-100000}; ROUNDS=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
WSTUNE=${WSTUNE:-$here/../target/release/wstune}
SPAN=${SPAN:-20}; A=${A:-3}; B=$((A + SPAN))
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

cpu_of() { # COUNT -> "cpu_seconds max_rss_kib"
  /usr/bin/time -f "%U %S %M" -o "$out/time" "$WSTUNE" watch --format json -i 1 --count "$1" >"$out/frames" 2>"$out/err"
  awk '{printf "%.3f %d\n", $1 + $2, $3}' "$out/time"
}
for r in $(seq "$ROUNDS"); do
  read -r ca _ < <(cpu_of "$A")
  read -r cb rss < <(cpu_of "$B")
  age=$(python3 -c "import json,sys; f=[json.loads(l) for l in open('$out/frames')]; a=[x['connections_age_s'] for x in f if x.get('connections_age_s') is not None]; print(f'{max(a):.1f}' if a else '-')")
  t0=$(date +%s.%N)
  for _ in $(seq 10); do ss -tan >/dev/null; ss -ltn >/dev/null; done
  t1=$(date +%s.%N)
  ss_cpu=$( { /usr/bin/time -f "%U %S" ss -tan >/dev/null; } 2>&1 | awk '{print $1 + $2}')
  awk -v r="$r" -v ca="$ca" -v cb="$cb" -v span="$SPAN" -v rss="$rss" -v age="$age" -v t0="$t0" -v t1="$t1" -v sscpu="$ss_cpu" 'BEGIN {
    per = (cb - ca) / span
    printf "round %d: watch %.2f ms CPU per 1 s interval (%.2f %% of a core), max RSS %.1f MiB, per-listener figures at most %s s old; ss -tan + ss -ltn %.1f ms wall per second (ss -tan alone %.0f ms CPU)\n", r, per * 1000, per * 100, rss / 1024, age, (t1 - t0) * 100, sscpu * 1000
  }'
done
