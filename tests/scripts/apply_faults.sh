# Sourced after journal_lib.sh inside `unshare --net --mount` (tests/commands/apply_killed.rs):
# apply meets a full disk or a read-only file partway through and must stop cleanly, undo what it
# did, and say what failed. Prints one line per case: CASE NAME rc=RC same=yes|no, then ERR.

# 1. A full disk: --prefix on a tmpfs of 1..12 pages (4 KiB each). Small ones fail at the
#    journal, larger ones at a file or the commit, the largest succeed (then are rolled back).
for pages in $(seq 1 12); do
  D=$(mktemp -d)
  mount -t tmpfs -o size=$((pages * 4))k tmpfs "$D" || exit 92
  PP=$P; P=$D
  state > "$T/before"
  "$W" apply --profile 100k --prefix "$D" --yes > "$T/out" 2> "$T/err"; rc=$?
  if [ $rc = 0 ]; then
    "$W" rollback --prefix "$D" --yes > "$T/out" 2>&1; echo "ROLLBACK pages=$pages rc=$?"
  fi
  echo "CASE disk-$pages rc=$rc same=$(same)"
  echo "ERR disk-$pages $(tr '\n' ' ' < "$T/err" | cut -c1-400)"
  P=$PP
  umount "$D"; rmdir "$D"
done

# 2. A read-only /proc/sys file in the middle of the runtime changes: the apply before it
#    changed some values; all must be undone. The key is the middle one apply would change.
state > "$T/before"
"$W" apply --profile 100k --prefix "$P" --yes > /dev/null 2>&1
changed=""
for k in $KEYS; do
  grep -qx "$k=$(cat /proc/sys/$k)" "$T/before" || changed="$changed $k"
done
"$W" rollback --prefix "$P" --yes > /dev/null 2>&1
set -- $changed
mid=$(eval echo "\${$(( ($# + 1) / 2 ))}")
echo "CHANGED $changed MIDDLE $mid"
s=$(mktemp -p "$T"); cat /proc/sys/$mid > "$s"
mount --bind "$s" /proc/sys/$mid && mount -o remount,bind,ro /proc/sys/$mid || exit 93
state > "$T/before"
"$W" apply --profile 100k --prefix "$P" --yes > "$T/out" 2> "$T/err"; rc=$?
echo "CASE ro-sysctl rc=$rc same=$(same)"
echo "ERR ro-sysctl $(tr '\n' ' ' < "$T/err" | cut -c1-600)"
umount /proc/sys/$mid

# 3. A read-only directory for the last file apply writes (after the sysctls and the first
#    file): the values and the first file must be undone.
mkdir -p "$P/etc/security/limits.d"
mount --bind "$P/etc/security/limits.d" "$P/etc/security/limits.d" &&
  mount -o remount,bind,ro "$P/etc/security/limits.d" || exit 94
state > "$T/before"
"$W" apply --profile 100k --prefix "$P" --yes > "$T/out" 2> "$T/err"; rc=$?
echo "CASE ro-file rc=$rc same=$(same)"
echo "ERR ro-file $(tr '\n' ' ' < "$T/err" | cut -c1-600)"
umount "$P/etc/security/limits.d"
