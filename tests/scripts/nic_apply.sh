#!/usr/bin/env bash
# Runs inside `unshare --net --mount` (see tests/cli.rs): apply tunes a 4-queue veth's RPS,
# RFS and XPS in this private namespace, and rollback puts every queue back byte for byte.
# /sys is mounted again so that it shows this namespace's links; the global settings are
# shielded (journal_lib.sh, and RFS's global flow table here). Prints "STEP <name> ..." lines
# and the files' texts for the Rust test to assert on.
source "$(dirname "${BASH_SOURCE[0]}")/journal_lib.sh"
# (net.core.rps_sock_flow_entries exists only in the host's own namespace: not seen here.)
mount --make-rprivate / && mount -t sysfs sysfs /sys || exit 92
ip link add wsq0 numtxqueues 4 numrxqueues 4 type veth peer name wsq1 numtxqueues 4 numrxqueues 4 || exit 93
ip link set wsq0 up; ip link set wsq1 up
queues() {
  for f in /sys/class/net/wsq0/queues/rx-*/rps_cpus /sys/class/net/wsq0/queues/rx-*/rps_flow_cnt \
           /sys/class/net/wsq0/queues/tx-*/xps_cpus; do
    printf '%s=%s\n' "$f" "$(cat "$f")"
  done
}
nic_state() { queues; state; }
nic_state > "$T/before"
nstep() { nic_state > "$T/now"; if cmp -s "$T/before" "$T/now"; then same=yes; else same=no; diff "$T/before" "$T/now" >&2; fi; echo "STEP $1 rc=$2 same=$same"; }

# Without evidence or --nic: the NIC is not a physical one and nothing names it.
"$W" apply --profile 100k --prefix "$P" --runtime-only --dry-run > "$T/out" 2>&1; echo "PLAN-UNNAMED $(tr '\n' ' ' < "$T/out")"

"$W" apply --profile 100k --prefix "$P" --nic wsq0 --dry-run > "$T/out" 2>&1; rc=$?; nstep dry-run $rc
echo "PLAN $(tr '\n' ' ' < "$T/out")"
"$W" apply --profile 100k --prefix "$P" --nic wsq0 --yes > "$T/out" 2>&1; rc=$?; nstep apply $rc
[ $rc = 0 ] || cat "$T/out"
queues | sed 's/^/AFTER /'
echo "RULES $(base64 -w0 < "$P/etc/udev/rules.d/60-wstune-nic.rules" 2>/dev/null)"
echo "SYSCTL $(base64 -w0 < "$P/etc/sysctl.d/60-wstune-nic.conf" 2>/dev/null)"
"$W" check --profile 100k --prefix "$P" -f json > "$T/check.json"
echo "DRIFT $(python3 -c 'import json,sys; print([r["status"] for r in json.load(open(sys.argv[1]))["results"] if r["id"]=="wstune.journal.drift"])' "$T/check.json")"
# Changed by hand after the apply: check reports the drift.
echo 1 > /sys/class/net/wsq0/queues/rx-0/rps_cpus
"$W" check --profile 100k --prefix "$P" -f json > "$T/check.json"
echo "DRIFT-HAND $(python3 -c 'import json,sys; r=[r for r in json.load(open(sys.argv[1]))["results"] if r["id"]=="wstune.journal.drift"][0]; print(r["status"], r["note"])' "$T/check.json")"
"$W" rollback --prefix "$P" --yes --force > "$T/out" 2>&1; rc=$?; nstep rollback $rc
[ $rc = 0 ] || cat "$T/out"
