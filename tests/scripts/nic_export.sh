#!/usr/bin/env bash
# Runs inside `unshare --net --mount` (see tests/commands/export/nic.rs): `export --to nic` renders
# the NIC boot files for other hosts from a 4-queue veth in this private namespace, and their real
# consumers read them: `udevadm test` runs the rule (for "add", and for "move", the event a NIC that
# udev renames gets its name with), udev's net_setup_link applies the .link file. Nothing here is
# installed on the host: the files are bind-mounted over /etc's directories in this mount namespace
# only. Prints "TAG ..." lines for the Rust test.
W="$WSTUNE"
T="$(mktemp -d)"
mount --make-rprivate / && mount -t sysfs sysfs /sys || exit 92
# A virtual-only host: the export asks for a NIC by name.
"$W" export --to nic > "$T/out" 2>&1; echo "NONE rc=$? $(tr '\n' ' ' < "$T/out")"
ip link add wsx0 numtxqueues 4 numrxqueues 4 type veth peer name wsx1 numtxqueues 4 numrxqueues 4 || exit 93
ip link set wsx0 up; ip link set wsx1 up
N=$(nproc); [ "$N" -gt 4 ] && N=4
# At the profile's count already (one queue per CPU, at most 4): the .link file carries it.
ethtool -L wsx0 rx "$N" tx "$N" || exit 94
"$W" export --to nic --nic wsx9 > "$T/out" 2>&1; echo "MISSING rc=$? $(tr '\n' ' ' < "$T/out")"
mkdir "$T/files"
"$W" export --to nic --nic wsx0 -o "$T/files" > "$T/out" 2>&1; echo "EXPORT rc=$? $(tr '\n' ' ' < "$T/out")"
R="$T/files/etc/udev/rules.d/60-wstune-nic.rules"; L="$T/files/etc/systemd/network/10-wstune-wsx0.link"
echo "RULES $(base64 -w0 < "$R")"
echo "LINK $(base64 -w0 < "$L")"
echo "SYSCTL $(base64 -w0 < "$T/files/etc/sysctl.d/60-wstune-nic.conf")"
# Fewer queues here than the profile wants: refused, since the other hosts' queue settings
# are computed from this NIC's queues.
ethtool -L wsx0 rx 1 tx 1
"$W" export --to nic --nic wsx0 > "$T/out" 2>&1; echo "FEWER rc=$? $(tr '\n' ' ' < "$T/out")"
ethtool -L wsx0 rx "$N" tx "$N"
if command -v udevadm > /dev/null; then
  mount --bind "$T/files/etc/udev/rules.d" /etc/udev/rules.d
  for action in add move; do
    for q in /sys/class/net/wsx0/queues/rx-*/rps_cpus; do echo 0 > "$q"; done
    udevadm test --action=$action /sys/class/net/wsx0 > "$T/udev" 2>&1
    echo "UDEV-$action rc=$? rx0=$(cat /sys/class/net/wsx0/queues/rx-0/rps_cpus) $(grep -c 'ATTR .* writing' "$T/udev") writes"
  done
  ethtool -L wsx0 rx 1 tx 1
  mount --bind "$T/files/etc/systemd/network" /etc/systemd/network
  udevadm test-builtin net_setup_link /sys/class/net/wsx0 > "$T/link" 2>&1
  echo "UDEV-LINK rc=$? $(grep -o 'Config file .* is applied' "$T/link") channels=$(ethtool -l wsx0 | awk '/Current/ {c=1} c && /^(RX|TX):/ {printf "%s%s", $1, $2}')"
  umount /etc/systemd/network /etc/udev/rules.d
else
  echo "UDEV-MISSING"
fi
rm -rf "$T"
