#!/usr/bin/env bash
# How long `wstune check` takes on this host, beside `sysctl -a` (which reads every sysctl and
# nothing else) measured in the same run. check exits 2 on an untuned host, hence -i. Needs hyperfine (apt-get install hyperfine).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
bin=target/release/wstune
hyperfine --warmup 5 --runs 50 -N -i --export-json "${1:-/tmp/wstune-check-latency.json}" \
  "$bin check --profile 100k" \
  "$bin check --profile 100k --format json" \
  "$bin check --root tests/fixtures/tuned --profile 100k" \
  "sysctl -a" 2>&1 | grep -v '^$'
