# An apply SIGKILLed after its third change, then a second apply, then ONE rollback: every value
# and file must be as before the first apply. Prints STEP/ERR/CHECK lines for
# tests/commands/journal/interrupted.rs.
state > "$T/before"

WSTUNE_FAILPOINT=apply-pause-after=3 "$W" apply --profile 100k --prefix "$P" --yes > "$T/out" 2> "$T/err" &
pid=$!
# Up to 50 s (the failpoint pauses for 60): a debug build on a loaded machine is slow to get there.
for _ in $(seq 1000); do grep -q "failpoint: paused" "$T/err" && break; sleep 0.05; done
# The test build has the failpoints feature; without it the apply would not stop here.
if grep -q "failpoint: paused" "$T/err"; then echo "STEP paused yes"; else echo "STEP paused no"; fi
# While it is paused (alive, mid-apply), another apply must not run.
"$W" apply --profile 100k --prefix "$P" --yes > "$T/out2" 2> "$T/err2"; echo "STEP concurrent rc=$?"
echo "ERR concurrent $(tr '\n' ' ' < "$T/err2")"
kill -9 $pid; wait $pid 2>/dev/null
echo "STEP killed rc=137 same=$(same)"

"$W" check --profile 100k --prefix "$P" -f json > "$T/check.json"; echo "CHECK $(tr -d '\n' < "$T/check.json")"

"$W" apply --profile 100k --prefix "$P" --yes > "$T/out" 2> "$T/err"; rc=$?
echo "STEP second-apply rc=$rc"
echo "ERR second-apply $(tr '\n' ' ' < "$T/err")"
[ $rc = 0 ] || cat "$T/out"

"$W" rollback --prefix "$P" --yes > "$T/out" 2>&1; rc=$?
echo "STEP rollback rc=$rc same=$(same)"
[ $rc = 0 ] || cat "$T/out"

"$W" check --profile 100k --prefix "$P" -f json > "$T/check.json"
echo "CHECKAFTER $(tr -d '\n' < "$T/check.json")"
"$W" rollback --prefix "$P" --list
