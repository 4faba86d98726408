#!/usr/bin/env bash
# TLS termination in process vs at HAProxy, with plain ws:// as the baseline: the self-test's
# echo-rate (latency, server CPU per message) and tls-handshake (handshakes per second and per
# server CPU-second: the server is every process given with --pid, so HAProxy's handshakes
# count) against
#   plain    wstune serve                                   ws://
#   inproc   wstune serve --tls-cert/--tls-key              wss:// (rustls, in process)
#   haproxy  HAProxy --tls-cert in front of wstune serve    wss:// (wstune lb haproxy)
# RUNS times each (default 3), variants interleaved, medians printed. One release build, one
# certificate (ECDSA P-256 by default; KEY=rsa for RSA-2048: the key type decides much of a
# full handshake's cost). Needs openssl and haproxy. Run it on a quiet host.
#
# Usage: bench/tls-termination.sh      (env: RUNS=3 CONNS=1000 RATE=10 SECS=10 CONCURRENCY=64 KEY=ec;
#        WSTUNE=path/to/wstune measures that binary instead of building a release one)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}; CONNS=${CONNS:-1000}; RATE=${RATE:-10}; SECS=${SECS:-10}
CONCURRENCY=${CONCURRENCY:-64}; KEY=${KEY:-ec}
for tool in openssl haproxy python3; do
  command -v $tool >/dev/null || { echo "bench/tls-termination.sh: needs $tool" >&2; exit 3; }
done
if [ -n "${WSTUNE:-}" ]; then W=$WSTUNE; else cargo build --release --quiet; W=$PWD/target/release/wstune; fi
T=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT

# A CA and a server certificate it signed (a CA certificate as the server's own is refused).
case $KEY in
  ec) newkey=(-newkey ec -pkeyopt ec_paramgen_curve:P-256) ;;
  rsa) newkey=(-newkey rsa:2048) ;;
  *) echo "KEY=ec or KEY=rsa" >&2; exit 3 ;;
esac
openssl req -x509 "${newkey[@]}" -nodes -days 2 -subj /CN=bench-ca -keyout "$T/ca.key" -out "$T/ca.pem" 2>/dev/null
openssl req "${newkey[@]}" -nodes -subj /CN=localhost -keyout "$T/site.key" -out "$T/site.csr" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' > "$T/ext"
openssl x509 -req -in "$T/site.csr" -CA "$T/ca.pem" -CAkey "$T/ca.key" -CAcreateserial \
  -days 2 -extfile "$T/ext" -out "$T/site.crt" 2>/dev/null
cat "$T/site.crt" "$T/site.key" > "$T/site.pem"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 100); do (echo > /dev/tcp/127.0.0.1/$1) 2>/dev/null && return; sleep 0.1; done; echo "nothing listens on $1" >&2; exit 3; }

# One measurement of VARIANT: a JSON line of the figures, appended to $T/results.
measure() {
  local v=$1 p f pids url scen=(--scenario echo-rate --scenario tls-handshake) hp=""
  p=$(port)
  case $v in
    plain|haproxy) "$W" serve --port "$p" --admin off >/dev/null 2>&1 & ;;
    inproc) "$W" serve --port "$p" --admin off --tls-cert "$T/site.crt" --tls-key "$T/site.key" >/dev/null 2>&1 & ;;
  esac
  local sp=$!
  wait_port "$p"
  pids=(--pid "$sp"); url=wss://localhost:$p/
  if [ "$v" = plain ]; then url=ws://127.0.0.1:$p/; scen=(--scenario echo-rate); fi
  if [ "$v" = haproxy ]; then
    f=$(port)
    "$W" lb haproxy --backends "127.0.0.1:$p" --bind "127.0.0.1:$f" --tls-cert "$T/site.pem" \
      --profile 10k | sed -e "s#/run/haproxy/admin.sock#$T/admin.sock#" -e 's/maxconn 11000/maxconn 4000/' > "$T/haproxy.cfg"
    haproxy -db -f "$T/haproxy.cfg" >/dev/null 2>&1 &
    hp=$!
    wait_port "$f"
    pids=(--pid "$hp" --pid "$sp"); url=wss://localhost:$f/
  fi
  local tls=(); [ "$v" = plain ] || tls=(--ca "$T/ca.pem")
  "$W" selftest --url "$url" "${tls[@]}" "${pids[@]}" "${scen[@]}" --profile 10k \
    --conns "$CONNS" --rate "$RATE" --secs "$SECS" --storm-concurrency "$CONCURRENCY" \
    --format json --accept-noise 2>/dev/null > "$T/out.json" || true
  kill $sp $hp 2>/dev/null || true; wait $sp $hp 2>/dev/null || true
  python3 - "$v" "$T/out.json" >> "$T/results" <<'PY'
import json, sys
v, path = sys.argv[1], sys.argv[2]
r = json.load(open(path))
out = {"variant": v}
for s in r["scenarios"]:
    if s["scenario"] == "echo-rate":
        out.update(p99_ms=s["latency_ms"]["p99"], rate=s["achieved_rate"],
                   server_us_per_msg=s.get("server_cpu_us_per_msg"), errors=s["errors"])
        out["scheme"] = (s.get("tls") or {}).get("signature_scheme", "-")
    if s["scenario"] == "tls-handshake":
        out.update(hs_per_s=s.get("handshakes_per_sec"),
                   hs_per_core_s=s.get("handshakes_per_server_core_sec"),
                   hs_errors=s["errors"])
print(json.dumps(out))
PY
}

: > "$T/results"
for r in $(seq 1 "$RUNS"); do
  for v in plain inproc haproxy; do
    echo "run $r/$RUNS: $v" >&2
    measure "$v"
  done
done

python3 - "$T/results" "$RUNS" "$CONNS" "$RATE" "$SECS" "$CONCURRENCY" "$KEY" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
runs, conns, rate, secs, conc, key = sys.argv[2:]
print(f"tls-termination: median of {runs} runs; echo-rate {conns} conns x {rate} msg/s, "
      f"{secs} s; tls-handshake {conc} in flight; key {key}")
cols = [("p99_ms", "echo p99 ms"), ("rate", "echoes/s"), ("server_us_per_msg", "server us/msg"),
        ("hs_per_s", "handshakes/s"), ("hs_per_core_s", "handshakes/server CPU-s")]
print(f"{'variant':<9} {'scheme':<24} " + " ".join(f"{h:>24}" for _, h in cols) + "  errors")
for v in ("plain", "inproc", "haproxy"):
    mine = [r for r in rows if r["variant"] == v]
    def med(k):
        xs = [r[k] for r in mine if r.get(k) is not None]
        return f"{statistics.median(xs):.2f}" if xs else "-"
    errs = sum((r.get("errors") or 0) + (r.get("hs_errors") or 0) for r in mine)
    scheme = next((r.get("scheme") for r in mine if r.get("scheme")), "-")
    print(f"{v:<9} {scheme:<24} " + " ".join(f"{med(k):>24}" for k, _ in cols) + f"  {errs}")
PY
