# Sourced after journal_lib.sh inside `unshare --net --mount` (tests/commands/apply_killed.rs).
# For every failpoint step N of the 100k plan (0: entry saved, nothing changed; then each
# action, each file, the journal commit): apply paused at N and SIGKILLed, then (with
# SECOND=1) a second, complete apply, then ONE rollback. Prints one STEP line per step; the
# state (every /proc/sys value apply touches, every file under --prefix less the journal) must
# equal the state before. The loop ends at the first step apply never reaches (it completed).
state > "$T/before"
for N in $(seq 0 60); do
  # A fresh file, and this step's own line: never the previous step's pause.
  rm -f "$T/err"
  WSTUNE_FAILPOINT=apply-pause-after=$N "$W" apply --profile 100k --prefix "$P" --yes > "$T/out" 2> "$T/err" &
  pid=$!
  paused=no
  # Bounded (30 s): a debug build on a loaded machine is slow to reach a step.
  for _ in $(seq 600); do
    if grep -qx "wstune: failpoint: paused after action $N" "$T/err" 2>/dev/null; then paused=yes; break; fi
    kill -0 $pid 2>/dev/null || break
    sleep 0.05
  done
  [ $paused = yes ] && kill -9 $pid
  wait $pid 2>/dev/null; rc=$?
  state > "$T/killed"
  if cmp -s "$T/before" "$T/killed"; then changed=no; else changed=yes; fi
  second=-
  if [ "${SECOND:-0}" = 1 ]; then
    "$W" apply --profile 100k --prefix "$P" --yes > "$T/out2" 2> "$T/err2"; second=$?
    [ $second = 0 ] || { echo "ERR second apply at $N: $(tr '\n' ' ' < "$T/err2")"; }
  fi
  "$W" rollback --prefix "$P" --yes > "$T/out3" 2>&1; rb=$?
  echo "STEP n=$N paused=$paused rc=$rc changed=$changed second=$second rollback=$rb same=$(same)"
  [ $rb = 0 ] || echo "ERR rollback at $N: $(tr '\n' ' ' < "$T/out3")"
  [ $paused = yes ] || break
done
