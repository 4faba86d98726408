#!/usr/bin/env bash
# Runs inside `unshare --net --mount` (see tests/commands/cli/nic.rs): apply tunes a 4-queue veth in
# this private namespace (its channel counts over ethtool netlink, then each queue's RPS, RFS and
# XPS), the files it persists are read by their real consumers (udev's net_setup_link applies the
# .link file, `udevadm test` runs the rule), and rollback puts every queue and count back. /sys is
# mounted again so that it shows this namespace's links; the global settings are shielded
# (journal_lib.sh). Prints "STEP <name> ..." lines for the Rust test.
source "$(dirname "${BASH_SOURCE[0]}")/journal_lib.sh"
# (net.core.rps_sock_flow_entries exists only in the host's own namespace: not seen here.)
mount --make-rprivate / && mount -t sysfs sysfs /sys || exit 92
ip link add wsq0 numtxqueues 4 numrxqueues 4 type veth peer name wsq1 numtxqueues 4 numrxqueues 4 || exit 93
# One queue each way to start from: apply raises them (never above the 4 the link has).
ethtool -L wsq0 rx 1 tx 1 || exit 94
ip link set wsq0 up; ip link set wsq1 up
channels() { ethtool -l wsq0 | awk '/Current/ {c=1} c && /^(RX|TX):/ {printf "%s%s", $1, $2}'; echo; }
queues() {
  echo "channels=$(channels)"
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
echo "CHANNELS $(channels)"
echo "LINK $(base64 -w0 < "$P/etc/systemd/network/10-wstune-wsq0.link" 2>/dev/null)"
# The queues are new: a second apply sets their RPS and XPS.
"$W" apply --profile 100k --prefix "$P" --nic wsq0 --yes > "$T/out" 2>&1; rc=$?; echo "STEP second-apply rc=$rc"
[ $rc = 0 ] || cat "$T/out"
queues | sed 's/^/AFTER /'
echo "RULES $(base64 -w0 < "$P/etc/udev/rules.d/60-wstune-nic.rules" 2>/dev/null)"
"$W" check --profile 100k --prefix "$P" -f json > "$T/check.json"
echo "DRIFT $(python3 -c 'import json,sys; print([r["status"] for r in json.load(open(sys.argv[1]))["results"] if r["id"]=="wstune.journal.drift"])' "$T/check.json")"
# Changed by hand after the apply: check reports the drift.
echo 1 > /sys/class/net/wsq0/queues/rx-0/rps_cpus
"$W" check --profile 100k --prefix "$P" -f json > "$T/check.json"
echo "DRIFT-HAND $(python3 -c 'import json,sys; r=[r for r in json.load(open(sys.argv[1]))["results"] if r["id"]=="wstune.journal.drift"][0]; print(r["status"], r["note"])' "$T/check.json")"
# Without --force, rollback refuses to overwrite the queue changed by hand, and changes nothing.
"$W" rollback --prefix "$P" --yes > "$T/out" 2>&1; rc=$?
echo "REFUSED rc=$rc rx0=$(cat /sys/class/net/wsq0/queues/rx-0/rps_cpus) $(grep -o 'rx-0/rps_cpus: applied [0-9a-f,]*, now [0-9a-f,]* (changed by hand)' "$T/out")"

# The consumers, with wstune's files where they look for them (this mount namespace only).
if command -v udevadm > /dev/null; then
  mount --bind "$P/etc/udev/rules.d" /etc/udev/rules.d
  udevadm test --action=add /sys/class/net/wsq0 > "$T/udev" 2>&1
  echo "UDEV-RULE rc=$? rx0=$(cat /sys/class/net/wsq0/queues/rx-0/rps_cpus) $(grep -c 'ATTR .* writing' "$T/udev") writes"
  # The channel counts at boot: lowered by hand, then udev's builtin applies the .link file.
  ethtool -L wsq0 rx 1 tx 1
  mount --bind "$P/etc/systemd/network" /etc/systemd/network
  udevadm test-builtin net_setup_link /sys/class/net/wsq0 > "$T/link" 2>&1
  echo "UDEV-LINK rc=$? $(grep -o 'Config file .* is applied' "$T/link") channels=$(channels)"
  umount /etc/systemd/network /etc/udev/rules.d
else
  echo "UDEV-MISSING"
fi
"$W" rollback --prefix "$P" --yes --force > "$T/out" 2>&1; rc1=$?
"$W" rollback --prefix "$P" --yes --force >> "$T/out" 2>&1; rc=$?; [ $rc1 = 0 ] || rc=$rc1; nstep rollback $rc
[ $rc = 0 ] || cat "$T/out"
