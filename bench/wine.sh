#!/usr/bin/env bash
# The embedded server as wstune.exe under Wine beside the same server on Linux, in one run, both
# measured by the Linux `wstune selftest` (echo-rate, idle, storm). Under Wine, not a Windows
# performance claim: Wine's IOCP is emulated on epoll through wineserver, so this shows that
# the Windows build carries real load, and how far Wine is from native, nothing about Windows.
# The Windows server cannot be sampled for CPU/RSS (--pid takes a Linux pid of a Linux server),
# so only client-side figures are compared.
#
# Needs wine, x86_64-w64-mingw32-gcc and the x86_64-pc-windows-gnu target (.ci/run installs them).
# Usage: [WSTUNE=..] [WSTUNE_EXE=..] bench/wine.sh [CONNS=1000] [SECS=10] [RATE=10]
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS=${1:-1000}; SECS=${2:-10}; RATE=${3:-10}
T=${CARGO_TARGET_DIR:-target}
# WSTUNE / WSTUNE_EXE: binaries built already (both release builds take minutes).
[ -n "${WSTUNE:-}" ] || cargo build --release -q -p wstune
[ -n "${WSTUNE_EXE:-}" ] || cargo build --release -q -p wstune --target x86_64-pc-windows-gnu
W=$(realpath "${WSTUNE:-$T/release/wstune}")
EXE=$(realpath "${WSTUNE_EXE:-$T/x86_64-pc-windows-gnu/release/wstune.exe}")
# Wine 8 lacks ProcessPrng, which Rust's std imports: the test shim goes beside the .exe.
x86_64-w64-mingw32-gcc -shared -O2 -s -o "$(dirname "$EXE")/bcryptprimitives.dll" tests/wine/processprng.c -ladvapi32

WORK=$(mktemp -d)
export WINEPREFIX=$WORK/pfx WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml=;bcryptprimitives=n,b"
cleanup() { wineserver -k 2>/dev/null || true; [ -n "${LP:-}" ] && kill "$LP" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
wine wineboot --init >/dev/null 2>&1; wineserver -w

run() { # NAME PORT: the self-test against a server listening on PORT
  timeout $((SECS * 3 + 120)) "$W" selftest --url "ws://127.0.0.1:$2/" --profile 10k --conns "$CONNS" \
    --rate "$RATE" --secs "$SECS" --scenario echo-rate --scenario idle --scenario storm \
    --format json >"$WORK/$1.json" 2>"$WORK/$1.err" || true
}
wait_listen() { for _ in $(seq 200); do grep -q "listening on" "$1" 2>/dev/null && return; sleep 0.1; done; cat "$1"; exit 1; }

WPORT=$((20000 + RANDOM % 20000)); LPORT=$((WPORT + 1))
(cd "$WINEPREFIX/drive_c" && exec wine "$EXE" serve --port "$WPORT" --admin off --profile 10k) >"$WORK/wine-serve.log" 2>&1 &
wait_listen "$WORK/wine-serve.log"
run wine "$WPORT"
wineserver -k
"$W" serve --port "$LPORT" --admin off --profile 10k >"$WORK/linux-serve.log" 2>&1 &
LP=$!
wait_listen "$WORK/linux-serve.log"
run linux "$LPORT"

python3 - "$WORK" "$CONNS" "$RATE" "$SECS" <<'PY'
import json, sys, os
work, conns, rate, secs = sys.argv[1:]
print(f"{conns} connections, {rate} msgs/s each for {secs} s, 100-byte messages (profile 10k)")
print("server            scenario   connected errors achieved/s   p50 ms   p99 ms  storm s")
for name, label in (("wine", "wstune.exe (Wine)"), ("linux", "wstune (Linux)")):
    try:
        r = json.load(open(os.path.join(work, name + ".json")))
    except Exception as e:
        print(label, "failed:", e, open(os.path.join(work, name + ".err")).read()[-500:])
        continue
    for s in r["scenarios"]:
        l = s.get("latency_ms") or {}
        print(f"{label:17} {s['scenario']:10} {s['conns_connected']:>9} {s['errors']:>6} "
              f"{s.get('achieved_rate') or 0:>10.0f} {l.get('p50', 0):>8.2f} {l.get('p99', 0):>8.2f} "
              f"{s.get('storm_secs') or 0:>8.2f}")
PY
