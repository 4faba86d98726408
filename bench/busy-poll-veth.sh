#!/usr/bin/env bash
# What epoll busy polling (EPIOCSPARAMS, Linux 6.9+) costs and buys a server under independent
# arrivals. Busy polling needs packets that carry a NAPI ID, which loopback's do not, so the
# server and the generator sit in two private network namespaces joined by a veth pair with
# GRO on (a veth with GRO receives through NAPI). Nothing on the host's own network changes;
# the namespaces go away on exit.
#   bench/busy-poll-veth.sh [RUNS=3]
# Servers, alternated run by run: bench/uring's one-thread epoll echo without busy polling
# (`epoll`) and with BUSY us of it (`epoll-busyBUSY`), and wstune serve (its default coalescing
# window; `wstune`). Server on core 0, the self-test's echo-rate generator on core 1, both
# `chrt -r 1`. Knobs: CONNS=5000 RATE=5 SECS=15 BUSY=50 WSTUNE=target/release/wstune
# UB=bench/uring/target/release/uring-bench OUT=dir. Every run is bounded (timeout 120 s).
set -euo pipefail
RUNS=${1:-3}
here=$(cd "$(dirname "$0")" && pwd)
WSTUNE=${WSTUNE:-$here/../target/release/wstune}
UB=${UB:-$here/uring/target/release/uring-bench}
CONNS=${CONNS:-5000}; RATE=${RATE:-5}; SECS=${SECS:-15}; BUSY=${BUSY:-50}
OUT=${OUT:-$(mktemp -d /tmp/busy-poll.XXXX)}
[ "$(id -u)" = 0 ] || { echo "busy-poll-veth.sh: needs root (network namespaces)" >&2; exit 3; }
for b in "$WSTUNE" "$UB"; do
  [ -x "$b" ] || { echo "busy-poll-veth.sh: $b is missing (cargo build --release; cargo build --release --manifest-path bench/uring/Cargo.toml)" >&2; exit 3; }
done
command -v ethtool >/dev/null || { echo "busy-poll-veth.sh: ethtool is missing" >&2; exit 3; }
ulimit -n 20000 2>/dev/null || { echo "busy-poll-veth.sh: cannot raise the open-file limit to 20000" >&2; exit 3; }
S=wstbp-srv-$$; G=wstbp-gen-$$; SRV=
cleanup() {
  [ -z "$SRV" ] || kill "$SRV" 2>/dev/null || true
  ip netns del "$S" 2>/dev/null || true
  ip netns del "$G" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$S"; ip netns add "$G"
ip link add vs netns "$S" type veth peer name vg netns "$G"
ip -n "$S" addr add 10.77.0.1/24 dev vs; ip -n "$G" addr add 10.77.0.2/24 dev vg
ip -n "$S" link set lo up; ip -n "$G" link set lo up
ip -n "$S" link set vs up; ip -n "$G" link set vg up
# GRO on: the veth then receives through NAPI, and each socket learns its NAPI ID.
ip netns exec "$S" ethtool -K vs gro on >/dev/null; ip netns exec "$G" ethtool -K vg gro on >/dev/null
# Does a socket here learn a NAPI ID (SO_INCOMING_NAPI_ID)? Without one, epoll has nothing to
# busy-poll and the busy-polling runs measure the ioctl's absence of effect, which is said.
napi=$(ip netns exec "$S" python3 -c '
import socket, struct, sys
l = socket.socket(); l.bind(("10.77.0.1", 27999)); l.listen(); l.settimeout(5)
c, _ = l.accept(); c.recv(16)
print(struct.unpack("I", c.getsockopt(socket.SOL_SOCKET, 56, 4))[0])' &
  sleep 0.5; ip netns exec "$G" python3 -c '
import socket, time
s = socket.create_connection(("10.77.0.1", 27999)); s.send(b"napi"); time.sleep(0.3)'; wait)
if [ "${napi:-0}" = 0 ]; then
  echo "busy-poll-veth.sh: the veth's sockets carry no NAPI ID (SO_INCOMING_NAPI_ID 0) on this kernel: busy polling cannot engage, and the busy-polling runs show what the setting costs when it cannot" >&2
else
  echo "busy-poll-veth.sh: the veth's sockets carry NAPI ID $napi: busy polling engages" >&2
fi
echo "busy-poll-veth.sh: $(date -u +%FT%TZ), $(git -C "$here" rev-parse --short HEAD 2>/dev/null), $CONNS x $RATE msgs/s, busy poll $BUSY us, out $OUT" >&2
names=(epoll "epoll-busy$BUSY" wstune)
port=28000
for r in $(seq "$RUNS"); do
  for k in 0 1 2; do
    name=${names[$(((k + r) % 3))]}
    port=$((port + 1))
    case $name in
      epoll) cmd=("$UB" serve --io epoll --bind 10.77.0.1 --port $port) ;;
      epoll-busy*) cmd=("$UB" serve --io epoll --bind 10.77.0.1 --port $port --busy-poll "$BUSY") ;;
      wstune) cmd=("$WSTUNE" serve --bind 10.77.0.1 --port $port --admin off --workers 1 --no-deflate --app echo) ;;
    esac
    ip netns exec "$S" chrt -r 1 taskset -c 0 "${cmd[@]}" >"$OUT/server.log" 2>&1 &
    SRV=$!
    for _ in $(seq 100); do ip netns exec "$G" bash -c "exec 3<>/dev/tcp/10.77.0.1/$port" 2>/dev/null && break; sleep 0.05; done
    f="$OUT/$name-$r.json"
    timeout 120 ip netns exec "$G" chrt -r 1 taskset -c 1 "$WSTUNE" selftest --url "ws://10.77.0.1:$port/" \
      --pid $SRV -f json --scenario echo-rate --conns "$CONNS" --rate "$RATE" --secs "$SECS" >"$f" 2>"$OUT/gen.err" || true
    kill $SRV 2>/dev/null || echo "busy-poll-veth.sh: $name had exited" >&2
    wait $SRV 2>/dev/null || true
    SRV=
    python3 - "$f" "$name" "$r" <<'PY'
import json, sys
f, name, r = sys.argv[1:]
try:
    s = json.load(open(f))["scenarios"][0]
    sv, lat = s["server"], s["service_latency_ms"]
    print(f"run {r} {name}: {1e6 * sv['cpu_secs'] / max(s['received'], 1):.2f} us/msg, server "
          f"{sv['cpu_pct']:.1f} %, service p50/p99/p99.9 {lat['p50']:.3f}/{lat['p99']:.2f}/"
          f"{lat['p999']:.2f} ms, lost {s['lost']}")
except Exception as e:
    print(f"run {r} {name}: no result ({e})")
PY
  done
done
python3 - "$OUT" "$RUNS" "${names[@]}" <<'PY'
import json, statistics, sys
out, runs, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("| server | CPU per message, us | % of its core | service p50 / p99 / p99.9 ms |")
print("|---|---|---|---|")
for n in names:
    per, pct, p50, p99, p999 = [], [], [], [], []
    for r in range(1, runs + 1):
        try:
            s = json.load(open(f"{out}/{n}-{r}.json"))["scenarios"][0]
        except Exception:
            continue
        sv, lat = s["server"], s["service_latency_ms"]
        per.append(1e6 * sv["cpu_secs"] / max(s["received"], 1)); pct.append(sv["cpu_pct"])
        p50.append(lat["p50"]); p99.append(lat["p99"]); p999.append(lat["p999"])
    m = lambda v, f: (f % statistics.median(v)) if v else "-"
    print(f"| {n} | {m(per, '%.2f')} ({m([min(per)] if per else [], '%.2f')}..{m([max(per)] if per else [], '%.2f')}) "
          f"| {m(pct, '%.1f')} | {m(p50, '%.3f')} / {m(p99, '%.2f')} / {m(p999, '%.2f')} |")
PY
