#!/usr/bin/env bash
# io_uring beside epoll: the same WebSocket server code (bench/uring) with an
# epoll and an io_uring I/O loop, beside wstune (1 I/O thread) and tokio-tungstenite, all driven by
# the self-test's generator. Server on core 0, generator on core 1, both at $PRIO (real-time
# priority by default, so the other tenants' builds do not take the pinned cores); servers
# alternated run by run (uring-fixed: the io_uring loop with registered files). Per run and server:
#   sat:   echo-sat, SAT_CONNS connections, 1 message in flight each: echoes per server CPU-second
#   fixed: echo-rate, SAT_CONNS x SAT_RATE msgs/s open loop: server CPU % at the same offered load
#          (closed-loop echo-sat's rate follows whatever else runs on the cores, and CPU per echo
#          falls as the rate rises, so a fixed load compares the servers more fairly)
#   rate:  echo-rate, RATE_CONNS x RATE msgs/s open loop: server CPU %, service p99
#   bcast: broadcast 100 B to RATE_CONNS subscribers, BCAST_ROUNDS rounds: server CPU per delivery
# then the fan-out floors: bench/write-floor.c's send() loop, and bench/uring's floor (send()
# rounds and io_uring rounds alternated on the same sockets; reader epoll, then io_uring).
# One more echo-sat and echo-rate run per server under `perf stat` counts the syscalls per echo
# (separately, so perf's cost per traced syscall does not enter the CPU figures).
#   bench/uring.sh [RUNS=5]     STAGES="runs fixed perf profile" picks parts (default all)
# Knobs (env): GEN=wstune binary (generator and the wstune server), TT=tt-echo binary,
#   SERVERS="epoll uring uring-fixed wstune tt-echo" SECS=10 SAT_CONNS=100 SAT_RATE=300 RATE_CONNS=10000 RATE=2 BCAST_ROUNDS=20 PRIO='chrt -r 1' OUT=dir
# Every load run is bounded (selftest --secs plus its drain, `timeout` 120 s around each).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
GEN=${GEN:-/work/bin/wstune-main}
TT=${TT:-/work/bin/tt-echo}
SECS=${SECS:-10}; SAT_CONNS=${SAT_CONNS:-100}; SAT_RATE=${SAT_RATE:-300};
STAGES=" ${STAGES:-runs fixed perf profile} "; RATE_CONNS=${RATE_CONNS:-10000}; RATE=${RATE:-2}
BCAST_ROUNDS=${BCAST_ROUNDS:-20}
PRIO=${PRIO-chrt -r 1}
OUT=${OUT:-$(mktemp -d /tmp/uring-bench.XXXX)}
mkdir -p "$OUT"
for b in "$GEN" $([[ " ${SERVERS:-tt-echo} " == *" tt-echo "* ]] && echo "$TT"); do [ -x "$b" ] || { echo "uring.sh: $b is missing (set GEN= / TT=)" >&2; exit 3; }; done
ulimit -n 20000 2>/dev/null || ulimit -n 20000
[ "$(cat /proc/sys/kernel/io_uring_disabled 2>/dev/null || echo 0)" = 0 ] ||
  { echo "uring.sh: io_uring is disabled here (kernel.io_uring_disabled)" >&2; exit 3; }
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/bench/uring/target}
nice cargo build --release -q --manifest-path bench/uring/Cargo.toml
UB=$CARGO_TARGET_DIR/release/uring-bench
floor=$OUT/write-floor
cc -O2 -o "$floor" bench/write-floor.c
port=$((20000 + RANDOM % 900))

start() { # start SERVER MODE(echo|broadcast) -> PID, PORT
  port=$((port + 1)); [ $port -lt 20999 ] || port=20001
  local b=""; [ "$2" = broadcast ] && b=broadcast
  case $1 in
    epoll|uring) $PRIO taskset -c 0 "$UB" serve --io "$1" --port $port ${b:+--broadcast} >"$OUT/server.log" 2>&1 & ;;
    uring-fixed) $PRIO taskset -c 0 "$UB" serve --io uring --fixed --port $port ${b:+--broadcast} >"$OUT/server.log" 2>&1 & ;;
    wstune) $PRIO taskset -c 0 "$GEN" serve --port $port --admin off --workers 1 --no-deflate --app "$2" >"$OUT/server.log" 2>&1 & ;;
    tt-echo) $PRIO taskset -c 0 "$TT" $port $b >"$OUT/server.log" 2>&1 & ;;
  esac
  PID=$!; PORT=$port
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && return 0; sleep 0.05; done
  echo "uring.sh: $1 did not start: $(cat "$OUT/server.log")" >&2; exit 1
}
stop() { kill "$PID" 2>/dev/null || echo "uring.sh: the server had exited" >&2; wait "$PID" 2>/dev/null || true; }
gen() { # gen NAME ARGS...: one selftest run, JSON to $OUT/NAME.json
  local name=$1; shift
  timeout 120 $PRIO taskset -c 1 "$GEN" selftest --url "ws://127.0.0.1:$PORT/" --pid "$PID" -f json "$@" \
    >"$OUT/$name.json" 2>"$OUT/$name.err" || true
}
SAT=(--scenario echo-sat --conns "$SAT_CONNS" --inflight 1 --secs "$SECS")
RATEARGS=(--scenario echo-rate --conns "$RATE_CONNS" --rate "$RATE" --secs "$SECS")
read -r -a SERVERS <<<"${SERVERS:-epoll uring uring-fixed wstune tt-echo}"

echo "uring.sh: $(date -u +%FT%TZ), $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg), out $OUT" >&2
for r in $(seq "$RUNS"); do
  [[ $STAGES == *" runs "* ]] || break
  for s in "${SERVERS[@]}"; do
    start "$s" echo; gen "sat-$s-$r" "${SAT[@]}"; stop
    start "$s" echo; gen "rate-$s-$r" "${RATEARGS[@]}"; stop
    start "$s" broadcast; gen "bcast-$s-$r" --scenario broadcast --conns "$RATE_CONNS" --rounds "$BCAST_ROUNDS" --secs "$SECS"; stop
  done
  timeout 120 $PRIO taskset -c 0 "$floor" "$RATE_CONNS" "$BCAST_ROUNDS" 100 1 >"$OUT/floor-c-$r.txt" 2>&1 || true
  for rd in epoll uring; do
    timeout 120 $PRIO taskset -c 0 "$UB" floor "$RATE_CONNS" "$BCAST_ROUNDS" 100 1 100 $rd >"$OUT/floor-$rd-$r.txt" 2>&1 || true
  done
  echo "uring.sh: run $r of $RUNS done, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
for r in $(seq "$RUNS"); do
  [[ $STAGES == *" fixed "* ]] || break
  for s in "${SERVERS[@]}"; do
    start "$s" echo; gen "fixed-$s-$r" --scenario echo-rate --conns "$SAT_CONNS" --rate "$SAT_RATE" --secs "$SECS"; stop
  done
done
# Syscalls per echo: one more run each under perf stat, counting over the middle of the window.
EV=raw_syscalls:sys_enter,syscalls:sys_enter_io_uring_enter,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_sendto,syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_futex,syscalls:sys_enter_sched_yield
for s in "${SERVERS[@]}"; do
  [[ $STAGES == *" perf "* ]] || break
  for kind in sat rate; do
    start "$s" echo
    if [ $kind = sat ]; then args=("${SAT[@]}"); else args=("${RATEARGS[@]}"); fi
    gen "perf$kind-$s" "${args[@]}" &
    g=$!
    # The window: once every connection is open and 2 s of load have passed, for half of --secs.
    want=$([ $kind = sat ] && echo "$SAT_CONNS" || echo "$RATE_CONNS")
    for _ in $(seq 600); do [ "$(ss -Htn state established "( sport = :$PORT )" | wc -l)" -ge "$want" ] && break; sleep 0.1; done
    sleep 2
    timeout 60 perf stat -x, -e "$EV" -p "$PID" -- sleep $((SECS / 2)) 2>"$OUT/perf$kind-$s.csv" || true
    wait $g || true
    stop
  done
done
# Where the CPU goes: a flat profile (cpu-clock samples, kernel and user) of each prototype and of
# wstune at both loads, PROFILE_SECS inside the window; every symbol goes to $OUT/profile-*.txt,
# and the summary sorts the samples into user space, the syscall entry and fd lookup, epoll,
# io_uring, and the rest of the kernel (TCP/IP, loopback, skb memory, the scheduler).
if [[ $STAGES == *" profile "* ]]; then
  for s in epoll uring wstune; do
    for kind in sat rate; do
      start "$s" echo
      if [ $kind = sat ]; then args=("${SAT[@]}"); want=$SAT_CONNS; else args=("${RATEARGS[@]}"); want=$RATE_CONNS; fi
      gen "prof$kind-$s" "${args[@]}" &
      g=$!
      for _ in $(seq 600); do [ "$(ss -Htn state established "( sport = :$PORT )" | wc -l)" -ge "$want" ] && break; sleep 0.1; done
      sleep 2
      timeout 60 perf record -q -e cpu-clock -F 4000 -o "$OUT/prof.data" -p "$PID" -- sleep "${PROFILE_SECS:-4}" 2>/dev/null || true
      perf report -i "$OUT/prof.data" --no-children --sort sym --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' >"$OUT/profile-$kind-$s.txt" || true
      wait $g || true
      stop
    done
  done
  rm -f "$OUT/prof.data"
fi
python3 - "$OUT" "$RUNS" "$SECS" <<'PY'
import json, sys, statistics as st, re, os
out, runs, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
S = os.environ.get("SERVERS", "epoll uring uring-fixed wstune tt-echo").split()
def load(n):
    try:
        return json.load(open(f"{out}/{n}.json"))["scenarios"][0]
    except Exception:
        return None
def med(xs):
    xs = [x for x in xs if x is not None]
    return (st.median(xs), min(xs), max(xs)) if xs else (float("nan"),) * 3
def fmt(t, p=0):
    return f"{t[0]:,.{p}f} ({t[1]:,.{p}f}-{t[2]:,.{p}f})"
def sat(s):
    return s and s["received"] / s["server"]["cpu_secs"] if s and s["server"]["cpu_secs"] else None
def perf(n):
    c = {}
    try:
        for l in open(f"{out}/{n}.csv"):
            f = l.split(",")
            if len(f) > 3 and f[0].strip().isdigit():
                c[f[2].split(":")[-1].replace("sys_enter_", "")] = int(f[0])
    except FileNotFoundError:
        pass
    return c
print(f"medians of {runs} runs (range); generator CPU as % of its core")
print("| server | echo-sat: echoes per server CPU-s | server CPU % | gen CPU | fixed load: server CPU % | service p99 ms | syscalls/echo (sat) | echo-rate: server CPU % | service p99 ms | gen CPU | syscalls/echo (rate) | broadcast: us server CPU per delivery | last p50 ms | gen us/delivery |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for s in S:
    a = [load(f"sat-{s}-{r}") for r in range(1, runs + 1)]
    b = [load(f"rate-{s}-{r}") for r in range(1, runs + 1)]
    c = [load(f"bcast-{s}-{r}") for r in range(1, runs + 1)]
    fx = [load(f"fixed-{s}-{r}") for r in range(1, runs + 1)]
    row = [s, fmt(med([sat(x) for x in a])), fmt(med([x and x["server"]["cpu_pct"] for x in a])), fmt(med([x and x["generator"]["cpu_pct"] for x in a])),
           fmt(med([x and x["server"]["cpu_pct"] for x in fx]), 1), fmt(med([x and (x.get("service_latency_ms") or x["latency_ms"])["p99"] for x in fx]), 2)]
    for kind, xs in (("sat", a), ("rate", b)):
        p, ps = perf(f"perf{kind}-{s}"), load(f"perf{kind}-{s}")
        echoes = ps and ps["achieved_rate"] * (int(secs) // 2)
        sysc = p.get("sys_enter") if p else None
        det = ", ".join(f"{k} {v / echoes:.2f}" for k, v in sorted(p.items(), key=lambda kv: -kv[1]) if k != "sys_enter" and v and echoes and v / echoes >= 0.01)
        cell = f"{sysc / echoes:.2f} ({det})" if sysc and echoes else "n/a"
        if kind == "sat":
            row.append(cell)
        else:
            row += [fmt(med([x and x["server"]["cpu_pct"] for x in b]), 1),
                    fmt(med([x and (x.get("service_latency_ms") or x["latency_ms"])["p99"] for x in b]), 2),
                    fmt(med([x and x["generator"]["cpu_pct"] for x in b])), cell]
    row += [fmt(med([x and x["received"] and x["server"]["cpu_secs"] / x["received"] * 1e6 for x in c]), 2),
            fmt(med([x and x["broadcast_last_ms"]["p50"] for x in c]), 1),
            fmt(med([x and x["received"] and x["generator"]["cpu_secs"] / x["received"] * 1e6 for x in c]), 2)]
    print("| " + " | ".join(row) + " |")
fl = lambda pat, rx: med([float(m.group(1)) for r in range(1, runs + 1) for m in [re.search(rx, open(f"{out}/{pat}-{r}.txt").read()) if os.path.exists(f"{out}/{pat}-{r}.txt") else None] if m])
def cats(path):
    c = {"user": 0.0, "syscall entry + fd lookup": 0.0, "epoll": 0.0, "io_uring": 0.0, "rest of kernel (TCP/IP, loopback, scheduler)": 0.0}
    for l in open(path):
        m = re.match(r"\s*([\d.]+)%\s+\[(.)\]\s+(\S+)", l)
        if not m:
            continue
        p, where, sym = float(m.group(1)), m.group(2), m.group(3)
        if where != "k":
            c["user"] += p
        elif re.match(r"(io_|__io_|io_uring)", sym):
            c["io_uring"] += p
        elif re.match(r"(ep_|__ep_|do_epoll|sock_poll|__pollwait|ep_poll)", sym) or "epoll" in sym:
            c["epoll"] += p
        elif re.match(r"(do_syscall_64|entry_SYSCALL|syscall_|__x64_sys|__se_sys|__do_sys|exit_to_user|fget|__fget|fdget|__fdget|fput|sock_from_file|sockfd_lookup|__sys_|x64_sys_call|syscall_exit|arch_exit_to_user)", sym):
            c["syscall entry + fd lookup"] += p
        else:
            c["rest of kernel (TCP/IP, loopback, scheduler)"] += p
    return c
for kind in ("sat", "rate"):
    for s in ("epoll", "uring", "wstune"):
        f = f"{out}/profile-{kind}-{s}.txt"
        if os.path.exists(f):
            print(f"profile {kind} {s}: " + ", ".join(f"{k} {v:.1f} %" for k, v in cats(f).items()))
print("fan-out floor, writer CPU per 100 B send (us):",
      "write-floor.c send()", fmt(fl("floor-c", r"writer CPU ([\d.]+) us"), 2),
      "| bench/uring send()", fmt(fl("floor-epoll", r"send\(\) ([\d.]+) us"), 2),
      "| io_uring", fmt(fl("floor-epoll", r"io_uring ([\d.]+) us"), 2))
print("receive floor, reader CPU per receive (us): epoll+read", fmt(fl("floor-epoll", r"\) CPU ([\d.]+) us per receive"), 2),
      "| io_uring multishot", fmt(fl("floor-uring", r"\) CPU ([\d.]+) us per receive"), 2))
PY
