#!/usr/bin/env bash
# The restart scenario at the profile's size: `serve --self-test --scenario restart` holds CONNS
# connections (100,000 by default: as many server processes and generator processes as the
# fd limit needs, the loopback sources 127.0.0.x the self-test picks), disrupts the server 2 s
# in, and reports how the fleet came back: closes and their codes, refused reconnects by kind,
# each client's close -> new upgrade time (p50/p99/max), the time until every client was back,
# the peak accept rate and the kernel's listen-queue counters. Once per trigger in BY (a comma
# list of --restart-by values; `default` is the self-test's own choice: sigterm for one server
# process, sigterm-child for several; `sighup` needs a supervisor with rolling restarts, and
# `drain-api` one with POST /api/drain). The JSON reports stay in OUT.
# Usage: bench/restart.sh [CONNS=100000] [BY=default,sighup] [OUT=/tmp/restart-bench]
#   WSTUNE=target/debug/wstune bench/restart.sh 10000 default   # a quick look, no release build
#   SECS=40: the window (at least 10 s plus a second per 5,000 connections by default)
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS=${1:-100000}; BY=${2:-default,sighup}; OUT=${3:-/tmp/restart-bench}
mkdir -p "$OUT"
if [ -z "${WSTUNE:-}" ]; then
  cargo build --release -q -p wstune
  WSTUNE=${CARGO_TARGET_DIR:-target}/release/wstune
fi
SECS_ARGS=()
[ -n "${SECS:-}" ] && SECS_ARGS=(--secs "$SECS")

row() { # NAME FILE WALL_S
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
name, path, wall = sys.argv[1], sys.argv[2], float(sys.argv[3])
try:
    r = json.load(open(path))
except ValueError:
    print(f"## {name}: no report (see {path[:-5]}.err)")
    sys.exit(0)
print(f"## {name}: {r['conns']} connections, {r.get('server_processes', 1)} server process(es), "
      f"wall {wall:.0f} s, verdict: {r['verdict']['summary']}")
for s in r["scenarios"]:
    x = s.get("restart")
    if not x:
        continue
    b = x["back_ms"]
    all_back = x.get("all_back_secs")
    print(f"   by {x['restart_by']}: {x.get('disruption', '')}")
    print(f"   held {s['conns_connected']}/{s['conns_requested']}, closed {x['closed']} "
          f"(codes {s['close_codes']}, {x['without_close_frame']} without a close frame), "
          f"attempts {x['attempts']}, back {x['back']}, still down {x['not_back']}")
    print(f"   refused {x['refused_total']} {x['refused']}")
    print(f"   back p50 {b['p50']:.0f} ms, p99 {b['p99']:.0f} ms, max {b['max']:.0f} ms; all back "
          f"{'after %.2f s' % all_back if all_back is not None else 'never'}; peak accept rate "
          f"{x['peak_accept_rate']:.0f} upgrades/s")
    if x.get("kernel"):
        print(f"   kernel: {x['kernel']}")
    if s.get("incomplete"):
        print(f"   INCOMPLETE: {s['incomplete']}")
for c in r["verdict"]["checks"]:
    if c["scenario"] == "restart":
        print(f"   {'ok  ' if c['ok'] else 'MISS'} {c['what']}: {c['detail']}")
PY
}

IFS=, read -ra HOWS <<<"$BY"
for how in "${HOWS[@]}"; do
  args=(--scenario restart --conns "$CONNS" ${SECS_ARGS[@]+"${SECS_ARGS[@]}"})
  [ "$how" != default ] && args+=(--restart-by "$how")
  t0=$(date +%s.%N)
  "$WSTUNE" serve --self-test --format json "${args[@]}" >"$OUT/$how.json" 2>"$OUT/$how.err" || true
  row "$how" "$OUT/$how.json" "$(echo "$(date +%s.%N) - $t0" | bc)"
done
