#!/usr/bin/env bash
# Runs inside `unshare --net --mount` (see tests/commands/cli/apply.rs): apply and rollback against
# the real kernel of a private network namespace, with --prefix for files and the global settings
# (fs.*, conntrack, ...) shielded by bind-mounting scratch files over them, so nothing outside this
# namespace can change. Prints one "STEP <name> rc=<code> same=<yes|no>" line per step; the Rust
# test asserts on them. The scratch --prefix $P, the shielded globals and state(): see
# journal_lib.sh.
source "$(dirname "${BASH_SOURCE[0]}")/journal_lib.sh"

step() { # name rc
  state > "$T/now"
  if cmp -s "$T/before" "$T/now"; then same=yes; else same=no; fi
  echo "STEP $1 rc=$2 same=$same"
}

# An operator's own file at the path wstune owns: it must come back byte for byte, mode too.
mkdir -p "$P/etc/sysctl.d"
printf '# mine\nnet.ipv4.tcp_fin_timeout=20\n' > "$P/etc/sysctl.d/60-wstune.conf"
chmod 640 "$P/etc/sysctl.d/60-wstune.conf"
state > "$T/before"

"$W" apply --profile 100k --prefix "$P" --dry-run > "$T/out" 2>&1; step dry-run $?

"$W" apply --profile 100k --prefix "$P" --yes > "$T/out" 2>&1; rc=$?; step apply $rc
[ $rc = 0 ] || cat "$T/out"
"$W" check --profile 100k --prefix "$P" -f json > "$T/check.json"; echo "CHECK $(tr -d '\n' < "$T/check.json")"

"$W" apply --profile 100k --prefix "$P" --yes > "$T/out" 2>&1; rc=$?
if grep -q "Nothing to change" "$T/out"; then echo "STEP second-apply rc=$rc nothing=yes"; else echo "STEP second-apply rc=$rc nothing=no"; cat "$T/out"; fi

"$W" rollback --prefix "$P" --yes > "$T/out" 2>&1; rc=$?; step rollback $rc
[ $rc = 0 ] || cat "$T/out"

# A failure in the middle: tcp_fin_timeout is read-only, after somaxconn and others changed.
ro=$(mktemp -p "$T"); cat /proc/sys/net/ipv4/tcp_fin_timeout > "$ro"
mount --bind -o ro "$ro" /proc/sys/net/ipv4/tcp_fin_timeout
"$W" apply --profile 100k --prefix "$P" --yes > "$T/out" 2> "$T/err"; rc=$?; step injected-failure $rc
echo "ERR injected-failure $(tr '\n' ' ' < "$T/err")"
umount /proc/sys/net/ipv4/tcp_fin_timeout

# A value the kernel would reject (somaxconn is an int): refused when the profile is loaded.
sed 's/somaxconn: 65535/somaxconn: 3000000000/' "$(dirname "$0")/../../profiles/base.yaml" > "$T/big.yaml"
"$W" apply --profile "$T/big.yaml" --prefix "$P" --yes > "$T/out" 2> "$T/err"; rc=$?; step kernel-rejects $rc
echo "ERR kernel-rejects $(tr '\n' ' ' < "$T/err")"

# SIGKILL in the middle: a test failpoint holds the apply after its third change, when the
# journal is saved and some keys are changed; then it is killed.
WSTUNE_FAILPOINT=apply-pause-after=3 "$W" apply --profile 100k --prefix "$P" --yes > "$T/out" 2> "$T/err" &
pid=$!
# Bounded (10 s), and a clear error if the failpoint never holds it.
for _ in $(seq 200); do grep -q "failpoint: paused" "$T/err" && break; sleep 0.05; done
grep -q "failpoint: paused" "$T/err" || { echo "ERR the apply never paused: $(cat "$T/err")"; kill -9 $pid; exit 95; }
kill -9 $pid; wait $pid 2>/dev/null
step killed 137
"$W" rollback --prefix "$P" --list > "$T/out" 2>&1; grep -q pending "$T/out" && echo "STEP journal-pending rc=0 same=yes"
"$W" rollback --prefix "$P" --yes > "$T/out" 2>&1; rc=$?; step rollback-after-kill $rc
[ $rc = 0 ] || cat "$T/out"
