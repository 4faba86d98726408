#!/usr/bin/env bash
# The self-test at the profile's size (bench/results/2026-12-01-selftest-100k.md): `serve --self-test` with the 100k
# profile, every scenario at 100,000 connections (as many server processes as the fd limit
# needs), then the idle row held 60 s (two 30 s heartbeat rounds), then the same scenarios at
# SMALL connections with one server process and with two, so the supervisor's and the relay's
# cost is visible. Prints one line per scenario and run; the JSON reports stay in OUT.
# Usage: bench/selftest-scale.sh [SMALL=19000] [OUT=/tmp/selftest-scale]
set -euo pipefail
cd "$(dirname "$0")/.."
SMALL=${1:-19000}; OUT=${2:-/tmp/selftest-scale}
mkdir -p "$OUT"
cargo build --release -q -p wstune
W=${CARGO_TARGET_DIR:-target}/release/wstune

row() { # NAME FILE WALL_S
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
name, path, wall = sys.argv[1], sys.argv[2], float(sys.argv[3])
r = json.load(open(path))
print(f"## {name}: {r['conns']} connections, {r.get('server_processes', 1)} server process(es), "
      f"wall {wall:.0f} s, verdict: {r['verdict']['summary']}")
if r.get("rate_note"):
    print(f"   rate: {r['rate_note']}")
for s in r["scenarios"]:
    srv, gen, l = s.get("server") or {}, s["generator"], s["latency_ms"]
    extra = []
    if s.get("storm_secs") is not None:
        extra.append(f"storm {s['storm_secs']:.2f} s")
    if s.get("broadcast_last_ms"):
        extra.append(f"last subscriber p50 {s['broadcast_last_ms']['p50']:.0f} ms, max {s['broadcast_last_ms']['max']:.0f} ms")
    if s.get("offered_rate"):
        extra.append(f"offered {s['offered_rate']:.0f}/s, lost {s['lost']}")
    if srv.get("rss_per_conn_bytes"):
        extra.append(f"{srv['rss_per_conn_bytes']:.0f} B RSS/conn")
    print(f"   {s['scenario']:<9} {s['conns_connected']:>7}/{s['conns_requested']:<7} "
          f"{s['achieved_rate']:>9.0f} msgs/s  p50 {l['p50']:.2f} p99 {l['p99']:.2f} max {l['max']:.1f} ms  "
          f"server {srv.get('cpu_pct', 0):.1f}% {(srv.get('rss_after_bytes') or 0) / 2**20:.0f} MiB  "
          f"generator {gen['cpu_pct']:.0f}% {(gen.get('peak_rss_bytes') or 0) / 2**20:.0f} MiB  "
          f"errors {s['errors']} closes {s['disconnects']}  {'; '.join(extra)}")
m = r.get("memory")
if m:
    k = m.get("kernel") or {}
    print(f"   memory: server RSS {m.get('server_rss_per_conn_bytes', 0):.0f} B/conn, "
          f"{(m.get('server_rss_bytes') or 0) / 2**20:.0f} MiB in all; TCP sockets "
          f"{k.get('before', {}).get('tcp_inuse')} -> {k.get('during', {}).get('tcp_inuse')}, "
          f"TCP buffers {k.get('tcp_mem_bytes_during', 0) / 2**20:.1f} MiB, slab per socket "
          f"{k.get('slab_bytes_per_socket') or 0:.0f} B")
    for c in m["compared"]:
        print(f"   estimate: {c['what']}: {c['estimate_bytes']} B vs {c['measured_bytes']:.0f} B measured "
              f"({c['error'] * 100:+.0f}%)")
PY
}

run() { # NAME ARGS...
  local name=$1; shift
  local t0; t0=$(date +%s.%N)
  "$W" serve --self-test --format json "$@" >"$OUT/$name.json" 2>"$OUT/$name.err" || true
  row "$name" "$OUT/$name.json" "$(echo "$(date +%s.%N) - $t0" | bc)"
}

run full-100k --profile 100k --report "$OUT/full-100k.html"
run idle60-100k --profile 100k --scenario idle --secs 60
run small-1p --profile 100k --conns "$SMALL" --processes 1
run small-2p --profile 100k --conns "$SMALL" --processes 2
