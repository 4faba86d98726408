# Values an operator raised by hand above the profile's target (kernel default unknown: both
# scale with RAM) must be written to sysctl.d, or the next boot lowers them.
echo 100000 > /proc/sys/net/ipv4/tcp_max_syn_backlog
echo 500000 > /proc/sys/net/ipv4/tcp_max_tw_buckets
state > "$T/before"
"$W" apply --profile 100k --prefix "$P" --yes > "$T/out" 2>&1; rc=$?
echo "STEP apply rc=$rc"
[ $rc = 0 ] || cat "$T/out"
sed 's/^/FILE /' "$P/etc/sysctl.d/60-wstune.conf"
"$W" apply --profile 100k --prefix "$P" --yes > "$T/out" 2>&1; rc=$?
if grep -q "Nothing to change" "$T/out"; then echo "STEP second-apply rc=$rc nothing=yes"; else echo "STEP second-apply rc=$rc nothing=no"; cat "$T/out"; fi
"$W" rollback --prefix "$P" --yes > "$T/out" 2>&1; rc=$?
echo "STEP rollback rc=$rc same=$(same)"
[ $rc = 0 ] || cat "$T/out"
