#!/usr/bin/env bash
# What RPS (and XPS) do, measured: a WebSocket server receives over a multi-queue veth (one
# queue per CPU, at most 4) whose other end is driven by a load generator pinned to CPU 0. A veth delivers what it is sent
# on the sending CPU (netif_rx -> that CPU's backlog), as a one-queue NIC delivers everything
# on its one interrupt's CPU, so without RPS all the server-bound receive work lands on CPU 0;
# with RPS the kernel hashes each flow to a CPU of the queue's rps_cpus (scaling.rst).
#   A = the queues as the kernel makes them (rps_cpus 0, xps_cpus 0)
#   B = what `wstune apply --profile PROFILE --nic wsr0 --yes` sets (RPS on every CPU, RFS
#       table sizes, XPS per CPU), run for real in the receiver's namespaces; `wstune
#       rollback` returns to A after each B run.
# Alternated A B A B ..., ROUNDS rounds each, a fresh server per run; then one more A run
# with `wstune check --watch` beside it: the evidence `apply --watch` decides on. Two loads
# per run, both from `wstune selftest` (many small messages over many TCP connections, the path a WebSocket
# server's receive softirq takes; bulk TCP would arrive as a few 64 KiB GSO packets and say
# little about per-packet work):
#   echo-rate: CONNS clients x RATE msgs/s, open loop, the same work in A and B, so the
#              per-CPU receive work and the latency percentiles compare directly;
#   echo-sat:  CONNS clients, INFLIGHT messages in flight each, closed loop: throughput.
# Per load, per CPU: packets received and RPS IPIs taken (/proc/net/softnet_stat), NET_RX
# softirqs (/proc/softirqs) and softirq time (/proc/stat, tick-sampled without
# CONFIG_IRQ_TIME_ACCOUNTING), per second over the whole selftest invocation (connect,
# warm-up and measured window); messages/s, latency p50/p99 (from each send) and the
# server's CPU (over selftest's measured window). Printed: each run, the medians, B/A, and in
# how many rounds B was above A. /proc/softirqs, /proc/stat and softnet_stat are global, not
# per namespace: the host's own rate with no load is measured first and last (IDLE s) and
# printed; keep the box otherwise quiet.
# The server (`serve --app echo --workers 1 --no-deflate`) is pinned to CPU 1, the generator
# (one process) to CPU 0; their priorities are left alone.
#
# Never touches the host's interfaces or settings: both ends live in namespaces made here
# (`unshare --net --mount`, /sys mounted again so the veth's queues are visible); the global
# sysctls apply would write (fs.*, nf_conntrack_*) are shielded by scratch files bind-mounted
# over them in the receiver's private mount namespace; every file apply writes goes under a
# scratch --prefix. The host's global sysctls and links are compared before and after, and a
# difference fails the run (exit 4). On exit (trap) the server is stopped by its pid and the
# two namespace holders are killed, which takes the veth and its namespaces away.
#
#   sudo bench/rps-veth.sh [ROUNDS=7]
#   WSTUNE=target/release/wstune PROFILE=100k CONNS=1000 RATE=20 SIZE=100 SECS=8 WARMUP=1
#   INFLIGHT=4 IDLE=5 OUT=dir
# Needs root, 2+ CPUs, ip (iproute2), ethtool, nsenter/unshare (util-linux), taskset, python3.
# Every load is bounded (timeout 120 s per selftest); about 5 minutes at the defaults (2 vCPUs).
set -euo pipefail
ROUNDS=${1:-7}
here=$(cd "$(dirname "$0")" && pwd)
WSTUNE=${WSTUNE:-$here/../target/release/wstune}
PROFILE=${PROFILE:-100k}
CONNS=${CONNS:-1000}; RATE=${RATE:-20}; SIZE=${SIZE:-100}; SECS=${SECS:-8}; WARMUP=${WARMUP:-1}
INFLIGHT=${INFLIGHT:-4}; IDLE=${IDLE:-5}; WATCH=$(( ${SECS%.*} > 5 ? ${SECS%.*} - 3 : 2 ))
die() { echo "rps-veth.sh: $*" >&2; exit 3; }

[ "$(id -u)" = 0 ] || die "needs root (network namespaces, apply): run it with sudo"
for t in ip tc ethtool nsenter unshare taskset python3 timeout; do
  command -v "$t" > /dev/null || die "$t is not installed (apt-get install iproute2 ethtool util-linux python3)"
done
[ -x "$WSTUNE" ] || die "$WSTUNE is missing: cargo build --release --features isal (or set WSTUNE=)"
NCPU=$(nproc)
[ "$NCPU" -ge 2 ] || die "RPS spreads receive work over CPUs: this host has $NCPU"
[ "$ROUNDS" -ge 1 ] 2>/dev/null || die "ROUNDS must be a positive number, not '$ROUNDS'"
OUT=${OUT:-$(mktemp -d /tmp/rps-veth.XXXX)}
mkdir -p "$OUT"
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
NQ=$((NCPU < 4 ? NCPU : 4))          # one queue per CPU, of the 4 the veth has: apply keeps it
ADDR=10.211.0.1; PEER=10.211.0.2
SHIELD="fs/file-max fs/nr_open fs/epoll/max_user_watches net/netfilter/nf_conntrack_max
        net/netfilter/nf_conntrack_buckets net/core/netdev_max_backlog net/ipv4/tcp_mem
        net/ipv4/tcp_max_orphans net/core/rps_sock_flow_entries"

# The host's global settings and links, compared at the end.
host_state() {
  for k in $SHIELD; do [ -e "/proc/sys/$k" ] && printf '%s=%s\n' "$k" "$(cat "/proc/sys/$k")"; done
  ip -o link show | awk '{print $2}'
}
host_state > "$OUT/host-before"

RX=; TX=; SRV=
cleanup() {
  [ -n "$SRV" ] && kill "$SRV" 2>/dev/null
  [ -n "$RX" ] && kill "$RX" 2>/dev/null
  [ -n "$TX" ] && kill "$TX" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$OUT/prefix" "$OUT/shield"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Two namespace holders, each its own network and mount namespace (bounded: 1 h at most).
# The receiver's shields its global sysctls there, so apply's writes to them go to scratch files.
mkdir -p "$OUT/shield" "$OUT/prefix"
unshare --net --mount --propagation private bash -c '
  mount -t sysfs sysfs /sys || exit 92
  for k in $1; do
    f=/proc/sys/$k; [ -e "$f" ] || continue
    s=$(mktemp -p "$2"); cat "$f" > "$s"; mount --bind "$s" "$f" || exit 91
  done
  exec sleep 3600' rx "$SHIELD" "$OUT/shield" &
RX=$!
unshare --net --mount --propagation private bash -c 'mount -t sysfs sysfs /sys || exit 92; exec sleep 3600' &
TX=$!
inrx() { nsenter -t "$RX" --net --mount -- "$@"; }
intx() { nsenter -t "$TX" --net --mount -- "$@"; }
for _ in $(seq 50); do
  [ "$(readlink "/proc/$RX/ns/net")" != "$(readlink /proc/self/ns/net)" ] &&
    [ "$(readlink "/proc/$TX/ns/net")" != "$(readlink /proc/self/ns/net)" ] && break
  sleep 0.1
done
inrx ip link add wsr0 numtxqueues 4 numrxqueues 4 type veth peer name wst0 numtxqueues 4 numrxqueues 4 netns "$TX" ||
  die "cannot create a veth pair in a private namespace"
inrx ethtool -L wsr0 rx "$NQ" tx "$NQ" > /dev/null; intx ethtool -L wst0 rx "$NQ" tx "$NQ" > /dev/null
inrx ip addr add "$ADDR/24" dev wsr0; intx ip addr add "$PEER/24" dev wst0
for l in lo wsr0; do inrx ip link set "$l" up; done
for l in lo wst0; do intx ip link set "$l" up; done
queues() { inrx sh -c 'cd /sys/class/net/wsr0/queues && for f in rx-*/rps_cpus rx-*/rps_flow_cnt tx-*/xps_cpus; do printf "%s=%s " "$f" "$(cat "$f")"; done'; }

P=$OUT/prefix
apply() { inrx "$WSTUNE" apply --profile "$PROFILE" --prefix "$P" "$@" --yes >> "$OUT/apply.log" 2>&1 ||
  die "wstune apply $* failed: see $OUT/apply.log"; }
# The profile's sysctls first, for A and B alike (NICs are left alone without --nic): B then
# differs from A by the NIC's queues only, and rollback undoes just those.
apply
echo "A queues: $(queues)" > "$OUT/queues"

commit=$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)
model=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)
echo "rps-veth.sh: $(date -u +%FT%TZ), commit $commit, $NCPU CPUs ($model), Linux $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "veth wsr0 (receiver) <- wst0 (sender), $NQ queues each way, qdisc $(inrx tc qdisc show dev wsr0 | awk '{print $2}'); server on CPU 1, generator on CPU 0; profile $PROFILE; out $OUT"
echo "loads: echo-rate $CONNS x $RATE msgs/s, $SIZE B, $SECS s (+$WARMUP s warm-up); echo-sat $CONNS conns x $INFLIGHT in flight, $SECS s"

snap() { { date +%s.%N; grep NET_RX /proc/softirqs; grep '^cpu[0-9]' /proc/stat; cat /proc/net/softnet_stat; } > "$1"; }
idle() { snap "$OUT/$1.0"; sleep "$IDLE"; snap "$OUT/$1.1"; }
idle idle-before

port=27000
run() {  # run CONFIG ROUND: a fresh server, echo-rate then echo-sat, each between two snapshots
  local cfg=$1 r=$2
  port=$((port + 1))
  # The shell writes its own pid, the server's after exec (a background function is a subshell).
  rm -f "$OUT/server.pid"
  inrx sh -c 'echo $$ > "$1"; shift; exec "$@"' sh "$OUT/server.pid" taskset -c 1 "$WSTUNE" serve \
    --bind "$ADDR" --port $port --admin off --workers 1 --no-deflate --app echo > "$OUT/server.log" 2>&1 &
  local job=$!
  for _ in $(seq 100); do [ -s "$OUT/server.pid" ] && break; sleep 0.05; done
  SRV=$(cat "$OUT/server.pid")
  for _ in $(seq 100); do intx bash -c "exec 3<>/dev/tcp/$ADDR/$port" 2>/dev/null && break; sleep 0.05; done
  local loads=(echo-rate echo-sat) watcher=
  [ "$cfg" = evidence ] && loads=(echo-rate)
  for load in "${loads[@]}"; do
    local f=$OUT/$cfg-$r-$load
    if [ "$cfg" = evidence ]; then
      # What `apply --watch` would measure under this load: check's watch, inside the measured
      # window, in the receiver's namespaces (its softirq figures are the host's, as above).
      (sleep $((WARMUP + 2)); inrx timeout 120 "$WSTUNE" check --profile "$PROFILE" --prefix "$P" \
         --watch "$WATCH" -f json > "$OUT/evidence.json" 2> "$OUT/evidence.err") &
      watcher=$!
    fi
    snap "$f.0"
    intx timeout 120 taskset -c 0 "$WSTUNE" selftest --url "ws://$ADDR:$port/" --pid "$SRV" -f json \
      --scenario "$load" --conns "$CONNS" --rate "$RATE" --size "$SIZE" --inflight "$INFLIGHT" \
      --secs "$SECS" --warmup "$WARMUP" --generators 1 --accept-noise > "$f.json" 2> "$f.err" || true
    snap "$f.1"
  done
  [ -n "$watcher" ] && { wait "$watcher" || true; }
  kill "$SRV" 2>/dev/null || echo "rps-veth.sh: the server had exited (see $OUT/server.log)" >&2
  wait "$job" 2>/dev/null || true
  SRV=
}

for r in $(seq "$ROUNDS"); do
  run A "$r"
  apply --nic wsr0
  q=$(queues)
  case $q in *"rps_cpus=0 "*) die "apply --nic wsr0 left an rps_cpus at 0: $q (see $OUT/apply.log)";; esac
  [ "$r" = 1 ] && echo "B queues: $q" >> "$OUT/queues"
  run B "$r"
  inrx "$WSTUNE" rollback --prefix "$P" --yes >> "$OUT/apply.log" 2>&1 || die "wstune rollback failed: see $OUT/apply.log"
  [ "$(queues)" = "$(sed -n 's/^A queues: //p' "$OUT/queues")" ] || die "rollback did not restore the queues: $(queues)"
done
# One more A run, not in the table: the evidence apply's rule reads (docs/apply.md, "NIC queues").
run evidence 0
idle idle-after
cat "$OUT/queues"
python3 - "$OUT/evidence.json" <<'PY'
import json, sys
try:
    r = {x["id"]: x for x in json.load(open(sys.argv[1]))["results"]}
except Exception as e:
    print(f"evidence: no check --watch result ({e}); see {sys.argv[1][:-5]}.err")
    sys.exit(0)
print("evidence under A's echo-rate load (wstune check --watch, what apply --watch decides on):")
for id in ("linux.cpu.softirq", "linux.cpu.net_rx", "linux.softnet.dropped", "linux.softnet.time_squeeze"):
    x = r.get(id)
    if x:
        print(f"  {id}: {x['status']}: {x.get('note') or x.get('current') or ''}")
PY

python3 - "$OUT" "$ROUNDS" "$NCPU" <<'PY'
import json, statistics, sys
out, rounds, ncpu = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
hz = 100  # USER_HZ, the unit of /proc/stat

def snap(path):
    lines = open(path).read().split("\n")
    net = [[int(x, 16) for x in l.split()] for l in lines[2 + ncpu:2 + 2 * ncpu]]
    return {"t": float(lines[0]),
            "netrx": [int(x) for x in lines[1].split()[1:1 + ncpu]],
            "soft": [int(l.split()[7]) for l in lines[2:2 + ncpu]],
            "pkts": [n[0] for n in net],     # softnet_stat: packets processed (backlog, NAPI)
            "ipi": [n[9] for n in net]}      # softnet_stat: woken by an RPS IPI

def delta(base):
    a, b = snap(base + ".0"), snap(base + ".1")
    dt = b["t"] - a["t"]
    d = {k: [(y - x) / dt for x, y in zip(a[k], b[k])] for k in ("netrx", "pkts", "ipi")}
    d["soft"] = [100.0 * (y - x) / hz / dt for x, y in zip(a["soft"], b["soft"])]
    return d

def per_cpu(v, fmt):
    return "/".join(fmt.format(x) for x in v)

for name in ("idle-before", "idle-after"):
    d = delta(f"{out}/{name}")
    print(f"host with no load ({name}): NET_RX/s {per_cpu(d['netrx'], '{:.0f}')}, packets/s "
          f"{per_cpu(d['pkts'], '{:.0f}')}, softirq % {per_cpu(d['soft'], '{:.1f}')} (per CPU)")

rows = {}
print()
print("per CPU: a/b = CPU0/CPU1...; other % = other processes' CPU on the box (selftest), in % of a core")
print("run cfg load      msgs/s  p50 ms  p99 ms server %  packets/s    RPS IPI/s  NET_RX/s     softirq %  other %")
for r in range(1, rounds + 1):
    for cfg in ("A", "B"):
        for load in ("echo-rate", "echo-sat"):
            base = f"{out}/{cfg}-{r}-{load}"
            try:
                s = json.load(open(base + ".json"))["scenarios"][0]
            except Exception as e:
                print(f"{r:>3} {cfg}   {load:<9} no result ({e}; see {base}.err)")
                continue
            d = delta(base)
            lat = s.get("service_latency_ms") or s.get("latency_ms") or {}
            dist = s.get("disturbance") or {}
            row = {"rate": s.get("achieved_rate", float("nan")),
                   "p50": lat.get("p50", float("nan")), "p99": lat.get("p99", float("nan")),
                   "server": s["server"]["cpu_pct"], "other": dist.get("other_cpu_pct", float("nan")),
                   **d}
            row["soft_all"] = sum(row["soft"])
            rows.setdefault((cfg, load), {})[r] = row
            print(f"{r:>3} {cfg}   {load:<9}{row['rate']:>7.0f} {row['p50']:>7.2f} {row['p99']:>7.2f}"
                  f" {row['server']:>8.1f}  {per_cpu(row['pkts'], '{:.0f}'):<12} "
                  f"{per_cpu(row['ipi'], '{:.0f}'):<10} {per_cpu(row['netrx'], '{:.0f}'):<12} "
                  f"{per_cpu(row['soft'], '{:.1f}'):<10} {row['other']:>6.0f}")

def val(x, key, i):
    return x[key] if i is None else x[key][i]

def med(cfg, load, key, i=None):
    v = [val(x, key, i) for x in rows.get((cfg, load), {}).values()]
    return statistics.median(v) if v else float("nan")

def higher(load, key, i=None):
    """In how many rounds B's figure was above A's in the same round."""
    a, b = rows.get(("A", load), {}), rows.get(("B", load), {})
    both = [r for r in a if r in b]
    return f"{sum(val(b[r], key, i) > val(a[r], key, i) for r in both)}/{len(both)}"

print()
print("medians                   A            B      B/A   B higher in (rounds)")
for load in ("echo-rate", "echo-sat"):
    figs = [("msgs/s", "rate", None), ("p50 ms", "p50", None), ("p99 ms", "p99", None),
            ("server CPU %", "server", None)]
    for key, label in (("pkts", "packets/s"), ("ipi", "RPS IPI/s"), ("netrx", "NET_RX/s"),
                       ("soft", "softirq %")):
        figs += [(f"{label} CPU{i}", key, i) for i in range(ncpu)]
    figs += [("softirq % all CPUs", "soft_all", None), ("other procs %", "other", None)]
    print(f"{load} ({len(rows.get(('A', load), {}))} A runs, {len(rows.get(('B', load), {}))} B runs)")
    for label, key, i in figs:
        a, b = med("A", load, key, i), med("B", load, key, i)
        ratio = f"{b / a:>6.2f}" if a else "     -"
        print(f"  {label:<20} {a:>10.2f}   {b:>10.2f}   {ratio}   {higher(load, key, i)}")
    # The share of all received packets that CPU 0 (the generator's) processed.
    for cfg in ("A", "B"):
        sh = [x["pkts"][0] / sum(x["pkts"]) for x in rows.get((cfg, load), {}).values() if sum(x["pkts"])]
        if sh:
            print(f"  {cfg}: CPU0's share of the packets received, median {statistics.median(sh):.2f}")
PY
echo "XPS: B also sets xps_cpus (transmit queue k for the CPUs at position k), but a veth has no"
echo "qdisc (noqueue) and no transmit-completion interrupt, the two costs XPS saves (queue-lock"
echo "contention and completion cache misses, scaling.rst): its transmit effect cannot show here, and"
echo "every B/A difference above is RPS's. RFS is off in both (net.core.rps_sock_flow_entries is a"
echo "host-wide setting, $(cat /proc/sys/net/core/rps_sock_flow_entries) here, which this script does not change)."

host_state > "$OUT/host-after"
if ! diff "$OUT/host-before" "$OUT/host-after" > /dev/null; then
  echo "rps-veth.sh: the host's own settings changed during the run:" >&2
  diff "$OUT/host-before" "$OUT/host-after" >&2
  exit 4
fi
echo "host's global sysctls and links: unchanged"
