# Sourced by the pinned benchmarks (echo-tail.sh, echo-peers.sh, fanout-cpu.sh,
# broadcast-100k.sh): `rt_quiet` waits until no other user process runs at real-time priority.
# On a shared host several users may pin their servers to core 0 at `chrt -r 1`; two such runs at
# once share the core round-robin in 100 ms slices and each measures the other's stalls. Bounded:
# RT_WAIT seconds (default 600), then it goes on and says so. Kernel threads (children of
# kthreadd, pid 2) are not counted. RT_WAIT=0 skips the wait.
rt_others() {
  ps -eo pid=,ppid=,cls=,args= | awk -v me="$$" '($3 == "RR" || $3 == "FF") && $1 != 2 && $2 != 2 && $2 != me' | wc -l
}
rt_quiet() {
  local waited=0 limit=${RT_WAIT:-600}
  while [ "$limit" -gt 0 ] && [ "$(rt_others)" -gt 0 ]; do
    [ "$waited" -ge "$limit" ] && { echo "  (other real-time processes still running after ${limit} s: measuring anyway)" >&2; return 0; }
    sleep 2; waited=$((waited + 2))
  done
  [ "$waited" -eq 0 ] || echo "  (waited ${waited} s for other real-time benchmarks to end)" >&2
}
