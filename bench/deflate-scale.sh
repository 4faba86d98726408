#!/usr/bin/env bash
# Server CPU per compressed echo at the same total rate spread two ways: 1,000 connections x
# 10 msg/s and 100,000 x 0.1 msg/s (10,000 msg/s both), each through `serve --self-test
# --scenario deflate` (the profile's deflate settings, its own server processes and
# generators), for one or more wstune binaries alternated run by run (the order swapped every
# other round). The per-message cost should not depend on how the rate is spread: a server
# that creates (or re-faults) a context per message pays it only in the 100k shape.
#
# Usage: bench/deflate-scale.sh BIN [BIN...]      ROUNDS (default 3), SECS (default 10),
#        PROFILE (default 100k), SHAPES (default "1000:10 100000:0.1"), SCENARIO (default
#        deflate; echo-rate is the control without compression), PROCESSES (default: as
#        serve --self-test sizes it; e.g. 7 runs every shape on 7 server processes), SIZE
#        (default 1024: the profiles' 100-byte payload is below the server's 256-byte
#        compression threshold, so only the client's messages would be compressed), WARMUP
#        (seconds; default: the self-test's own, one send interval plus a second),
#        KEEP (a directory: each run's JSON report is kept there, to read the service p99,
#        the generator's CPU, the kernel's drop counters and the window's disturbance)
# Prints one line per run, then the median per binary and shape and the 100k/1k ratio. A run
# whose p99 from the actual send passes a second was backlogged (a stall at the window's start
# whose cause is not known; bench/results/2026-12-02-deflate-at-100k.md): marked "backlogged", printed, and left out of the
# medians.
set -u
ROUNDS=${ROUNDS:-3}; SECS=${SECS:-10}; PROFILE=${PROFILE:-100k}
SHAPES=${SHAPES:-"1000:10 100000:0.1"}; SCENARIO=${SCENARIO:-deflate}
procs=(); [ -n "${PROCESSES:-}" ] && procs=(--processes "$PROCESSES")
procs+=(--size "${SIZE:-1024}")
[ -n "${WARMUP:-}" ] && procs+=(--warmup "$WARMUP")
bins=("$@")
[ ${#bins[@]} -ge 1 ] || { echo "usage: $0 BIN [BIN...]" >&2; exit 2; }
out=$(mktemp); trap 'rm -f "$out"' EXIT
[ -n "${KEEP:-}" ] && mkdir -p "$KEEP"
echo "# round binary conns rate server_cpu_s received us_per_msg p99_ms server_processes connected service_p99_ms generator_cpu_pct state"
for r in $(seq 1 "$ROUNDS"); do
  order=("${bins[@]}")
  if [ $((r % 2)) = 0 ]; then order=(); for ((i=${#bins[@]}-1; i>=0; i--)); do order+=("${bins[i]}"); done; fi
  for bin in "${order[@]}"; do
    for shape in $SHAPES; do
      conns=${shape%%:*}; rate=${shape##*:}
      json=$("$bin" serve --self-test --profile "$PROFILE" --scenario "$SCENARIO" "${procs[@]}" --conns "$conns" \
        --rate "$rate" --secs "$SECS" --format json 2>/dev/null)
      [ -n "${KEEP:-}" ] && echo "$json" > "$KEEP/r$r-$(basename "$bin")-$conns.json"
      line=$(echo "$json" | python3 -c '
import json, sys
r = json.load(sys.stdin); s = r["scenarios"][0]; sv = s["server"]
n = max(s["received"], 1)
svc = (s.get("service_latency_ms") or s["latency_ms"])["p99"]
print(sv["cpu_secs"], s["received"], round(1e6 * sv["cpu_secs"] / n, 2),
      s["latency_ms"]["p99"], r.get("server_processes", "?"), s["conns_connected"],
      svc, s["generator"].get("cpu_pct", "?"), "backlogged" if svc > 1000 else "ok")' 2>/dev/null || echo "failed")
      echo "$r $bin $conns $rate $line" | tee -a "$out"
    done
  done
done
python3 - "$out" <<'EOF'
import sys, statistics, collections
runs = collections.defaultdict(list)
for l in open(sys.argv[1]):
    f = l.split()
    if len(f) >= 13 and f[4] != "failed" and f[12] == "ok":
        runs[(f[1], f[2])].append(float(f[6]))
print("# median server CPU us per compressed echo (runs not backlogged)")
bins = sorted({b for b, _ in runs})
for b in bins:
    shapes = sorted({c for bb, c in runs if bb == b}, key=int)
    meds = {c: statistics.median(runs[(b, c)]) for c in shapes}
    desc = ", ".join(f"{c} conns: {meds[c]:.1f} ({len(runs[(b, c)])})" for c in shapes)
    ratio = f", ratio {meds[shapes[-1]] / meds[shapes[0]]:.2f}" if len(shapes) > 1 else ""
    print(f"{b}: {desc}{ratio}")
EOF
