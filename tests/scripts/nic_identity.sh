# Sourced after journal_lib.sh inside `unshare --net --mount` (tests/commands/cli/nic.rs), with CASE
# set: a NIC apply tuned is renamed (rename), renamed while another takes its name (swap), has its
# channel counts changed by hand (hand), is deleted (del), or is deleted and a new link takes its
# name (taken; forced: and the operator changes what the first rollback restored before `--id ID
# --force`; flow: with RPS and RFS's host-wide flow table), or was tuned by an apply in another
# network namespace (netns), and then rollback runs. /sys is mounted again so that it shows this
# namespace's links. Prints tagged lines for the Rust test: each NIC's state as `ch=RX:1TX:1
# rx-0/rps_cpus=0 ...`, each command's exit code and output on one line.
mount --make-rprivate / && mount -t sysfs sysfs /sys || exit 92
veth() {
  ip link add "$1" numtxqueues 4 numrxqueues 4 type veth peer name "$1p" numtxqueues 4 numrxqueues 4 || exit 93
  ip link set "$1" up && ip link set "$1p" up || exit 93
}
channels() { ethtool -l "$1" | awk '/Current/ {c=1} c && /^(RX|TX):/ {printf "%s%s", $1, $2}'; }
# A NIC's channel counts and every queue setting, under the name it has now.
nic() {
  printf 'ch=%s' "$(channels "$1")"
  for f in /sys/class/net/"$1"/queues/*/rps_cpus /sys/class/net/"$1"/queues/*/rps_flow_cnt \
           /sys/class/net/"$1"/queues/*/xps_cpus; do
    [ -e "$f" ] && printf ' %s=%s' "${f#/sys/class/net/$1/queues/}" "$(cat "$f" 2>/dev/null)"
  done
  echo
}
one_line() { tr '\n' ' ' < "$1"; }
apply_nic() {
  "$W" apply --profile 100k --prefix "$P" --nic "$1" --yes > "$T/out" 2>&1
  echo "APPLY rc=$? $(grep -o 'Applied [0-9]* change(s)\|Nothing to change' "$T/out")"
}
rollback() {
  "$W" rollback --prefix "$P" --yes "$@" > "$T/out" 2> "$T/err"
  echo "ROLLBACK rc=$? OUT $(one_line "$T/out") ERR $(one_line "$T/err")"
}
rename() { ip link set "$1" down && ip link set "$1" name "$2" && ip link set "$2" up || exit 95; }

case "$CASE" in
swap)
  # The issue's reproduction: vb tuned (from one queue each way) three times, then renamed vc,
  # and va, never tuned, renamed vb; three rollbacks must restore vc and leave the new vb alone.
  veth va; veth vb
  ethtool -L vb rx 1 tx 1 || exit 94
  state > "$T/before"
  echo "VA-BEFORE $(nic va)"
  echo "VB-BEFORE $(nic vb)"
  apply_nic vb; apply_nic vb; apply_nic vb
  echo "VB-TUNED $(nic vb)"
  rename vb vc; rename va vb
  rollback; rollback; rollback
  echo "VC-AFTER $(nic vc)"
  echo "VB-AFTER $(nic vb)"
  echo "SAME $(same 2>/dev/null)"
  ;;
rename)
  veth wsr
  ethtool -L wsr rx 1 tx 1 || exit 94
  state > "$T/before"
  echo "BEFORE $(nic wsr)"
  apply_nic wsr; apply_nic wsr
  rename wsr wsz
  rollback; rollback
  echo "AFTER $(nic wsz)"
  echo "SAME $(same 2>/dev/null)"
  ;;
hand)
  veth wsh
  ethtool -L wsh rx 1 tx 1 || exit 94
  state > "$T/before"
  apply_nic wsh
  echo "APPLIED $(nic wsh)"
  # Changed by hand since: neither what apply set nor what it replaced.
  n=$(channels wsh | sed 's/^RX:\([0-9]*\).*/\1/'); h=3; [ "$n" = 3 ] && h=2
  ethtool -L wsh rx "$h" tx "$h" || exit 94
  echo "HAND $(nic wsh)"
  rollback
  echo "KEPT $(nic wsh)"
  rollback --force
  echo "FORCED $(nic wsh)"
  echo "SAME $(same 2>/dev/null)"
  ;;
del)
  veth wsd
  ethtool -L wsd rx 1 tx 1 || exit 94
  state > "$T/before"
  apply_nic wsd; apply_nic wsd
  ip link del wsd
  # The file the newest apply wrote, removed by hand: nothing of that entry but wsd's values is
  # left to change back.
  rm -f "$P/etc/udev/rules.d/60-wstune-nic.rules"
  rollback; rollback; rollback
  "$W" rollback --prefix "$P" --list > "$T/out" 2>&1
  echo "LIST $(one_line "$T/out")"
  echo "SAME $(same 2>/dev/null)"
  ;;
taken)
  veth wst
  ethtool -L wst rx 1 tx 1 || exit 94
  state > "$T/before"
  apply_nic wst
  # Another link of that name: never the one apply tuned.
  ip link del wst; veth wst
  echo "NEW-BEFORE $(nic wst)"
  rollback
  echo "NEW-AFTER $(nic wst)"
  echo "SAME $(same 2>/dev/null)"
  "$W" rollback --prefix "$P" --list > "$T/out" 2>&1
  echo "LIST $(one_line "$T/out")"
  id=$(basename "$(ls "$P"/var/lib/wstune/journal/*.json | head -1)" .json)
  rollback --id "$id" --force
  echo "FORCED $(nic wst)"
  ;;
forced)
  veth wsf
  ethtool -L wsf rx 1 tx 1 || exit 94
  state > "$T/before"
  apply_nic wsf
  ip link del wsf; veth wsf
  rollback
  # Since that rollback the operator set a value it restored and wrote a file it removed: a
  # later `--id ID --force`, meant for the refused NIC, must leave both as they are now.
  echo 777 > /proc/sys/net/core/somaxconn || exit 96
  mkdir -p "$P/etc/sysctl.d" && echo 'net.core.somaxconn = 777' > "$P/etc/sysctl.d/60-wstune.conf"
  id=$(basename "$(ls "$P"/var/lib/wstune/journal/*.json | head -1)" .json)
  rollback --id "$id" --force
  echo "SOMAXCONN $(cat /proc/sys/net/core/somaxconn)"
  echo "OPERATOR-FILE $(cat "$P/etc/sysctl.d/60-wstune.conf" 2>&1)"
  echo "FORCED $(nic wsf)"
  "$W" rollback --prefix "$P" --list > "$T/out" 2>&1
  echo "LIST $(one_line "$T/out")"
  rollback --id "$id" --force
  ;;
flow)
  # RFS's flow table (net.core.rps_sock_flow_entries) is host-wide: only the initial network
  # namespace has it, as the receive budget the NIC plan raises. A scratch file stands in for it
  # here (as journal_lib.sh shields the other host-wide keys), beside this namespace's own
  # net.core files, bound where they were.
  echo "NS-HAS $(cd /proc/sys/net/core && ls rps_sock_flow_entries netdev_budget netdev_budget_usecs 2>/dev/null)"
  core=$(mktemp -d -p "$T") && mount -t tmpfs tmpfs "$core" || exit 91
  for f in /proc/sys/net/core/*; do
    : > "$core/${f##*/}" && mount --bind "$f" "$core/${f##*/}" || exit 91
  done
  echo 0 > "$core/rps_sock_flow_entries" && mount --rbind "$core" /proc/sys/net/core || exit 91
  veth wsl
  state > "$T/before"
  echo "FLOW-BEFORE $(cat /proc/sys/net/core/rps_sock_flow_entries)"
  apply_nic wsl
  echo "FLOW-APPLIED $(cat /proc/sys/net/core/rps_sock_flow_entries)"
  # Another link takes the name: the tuned NIC's RPS, and the table it uses, are left alone.
  ip link del wsl; veth wsl
  rollback
  echo "FLOW-LEFT $(cat /proc/sys/net/core/rps_sock_flow_entries)"
  echo "SAME $(same 2>/dev/null)"
  id=$(basename "$(ls "$P"/var/lib/wstune/journal/*.json | head -1)" .json)
  rollback --id "$id" --force
  echo "FLOW-FORCED $(cat /proc/sys/net/core/rps_sock_flow_entries)"
  umount -R /proc/sys/net/core && umount -R "$core"
  ;;
netns)
  # A container's network namespace (ip netns keeps its name under /run: this one's own), its
  # veth tuned by an apply run there; this namespace's somaxconn is already what the profile
  # sets (a host tuned by hand), which a rollback run here must not take for that apply's.
  mount -t tmpfs tmpfs /run && ip netns add wsb || exit 96
  inb() { ip netns exec wsb "$@"; }
  inb bash -c "$(declare -f veth); veth vn" || exit 93
  inb ethtool -L vn rx 1 tx 1 || exit 94
  bnic() { inb bash -c "$(declare -f channels nic); nic vn"; }
  echo 65535 > /proc/sys/net/core/somaxconn || exit 96
  state > "$T/before"
  echo "B-BEFORE $(inb cat /proc/sys/net/core/somaxconn) $(bnic)"
  inb "$W" apply --profile 100k --prefix "$P" --nic vn --yes > "$T/out" 2>&1
  echo "APPLY rc=$? $(grep -o 'Applied [0-9]* change(s)\|Nothing to change' "$T/out")"
  echo "B-APPLIED $(inb cat /proc/sys/net/core/somaxconn) $(bnic)"
  rollback
  echo "HERE-SOMAXCONN $(cat /proc/sys/net/core/somaxconn)"
  echo "SAME $(same 2>/dev/null)"
  echo "B-LEFT $(inb cat /proc/sys/net/core/somaxconn) $(bnic)"
  "$W" rollback --prefix "$P" --list > "$T/out" 2>&1
  echo "LIST $(one_line "$T/out")"
  id=$(basename "$(ls "$P"/var/lib/wstune/journal/*.json | head -1)" .json)
  inb "$W" rollback --prefix "$P" --id "$id" --yes > "$T/out" 2> "$T/err"
  echo "ROLLBACK rc=$? OUT $(one_line "$T/out") ERR $(one_line "$T/err")"
  echo "B-AFTER $(inb cat /proc/sys/net/core/somaxconn) $(bnic)"
  echo "HERE-AFTER $(cat /proc/sys/net/core/somaxconn)"
  "$W" rollback --prefix "$P" --list > "$T/out" 2>&1
  echo "LIST $(one_line "$T/out")"
  ;;
esac
