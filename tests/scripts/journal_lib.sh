# Sourced by the namespace scripts of tests/commands/journal.rs and by apply_rollback.sh
# (tests/commands/cli/apply.rs), inside `unshare --net --mount`: a scratch --prefix, the global
# settings a profile touches shielded by bind-mounting scratch files over them (so nothing outside
# this namespace can change), and `state`, a fingerprint of every value and file apply may touch, to
# compare before and after.
set -u
W="$WSTUNE"
P=$(mktemp -d)
T=$(mktemp -d)
trap 'rm -rf "$P" "$T"' EXIT

shield() {
  for k in "$@"; do
    f=/proc/sys/$k
    [ -e "$f" ] || continue
    s=$(mktemp -p "$T"); cat "$f" > "$s"; mount --bind "$s" "$f" || exit 91
  done
}
shield fs/file-max fs/nr_open fs/epoll/max_user_watches net/netfilter/nf_conntrack_max net/netfilter/nf_conntrack_buckets \
       net/core/netdev_max_backlog net/ipv4/tcp_mem net/ipv4/tcp_max_orphans

KEYS="net/core/somaxconn net/ipv4/tcp_max_syn_backlog net/ipv4/tcp_tw_reuse net/ipv4/ip_local_port_range
      net/ipv4/tcp_fin_timeout net/ipv4/tcp_max_tw_buckets net/ipv4/tcp_rmem net/ipv4/tcp_wmem
      fs/file-max fs/nr_open fs/epoll/max_user_watches"
state() {
  for k in $KEYS; do printf '%s=%s\n' "$k" "$(cat /proc/sys/$k)"; done
  (cd "$P" && find . -path ./var -prune -o -print | sort | while read -r f; do
     if [ -f "$f" ]; then echo "$(stat -c %a "$f") $(sha256sum < "$f") $f"; else echo "dir $f"; fi
   done)
}
same() { state > "$T/now"; if cmp -s "$T/before" "$T/now"; then echo yes; else echo no; diff "$T/before" "$T/now" >&2; fi; }
