//! Links, owners and modes: rollback restores them exactly, and hard links, links out of their
//! directory, out of /etc, dangling or in a parent directory are refused before any change.

use crate::common;

use super::lib_path;
use common::{stderr, stdout, tagged, tagged_line};

/// The shape of every file under a tree (less the journal): type, mode, owner, link count,
/// link target and content, one line each, for an exact before/after comparison.
const FINGERPRINT: &str = r#"fp() { (cd "$1" && find . -mindepth 1 -path ./var -prune -o -printf '%y %m %U:%G %n %l %p\n' | sort
  find . -path ./var -prune -o -type f -print | sort | xargs -r sha256sum); }"#;

/// A symlinked limits.d file (to a plain file beside it), a sysctl.d file owned by 1000:1000
/// with mode 640: apply writes through the link and keeps the owner and mode; rollback puts
/// back the tree exactly (it made the link a regular 0600 copy, the owner 0:0, and the 640 file
/// was 644 while applied).
#[test]
fn rollback_restores_links_owners_and_modes_exactly() {
    let script = format!(
        r#"source {lib}
{FINGERPRINT}
mkdir -p "$P/etc/sysctl.d" "$P/etc/security/limits.d"
printf '# mine\nvm.swappiness = 10\n' > "$P/etc/sysctl.d/60-wstune.conf"
chown 1000:1000 "$P/etc/sysctl.d/60-wstune.conf"; chmod 640 "$P/etc/sysctl.d/60-wstune.conf"
printf '# real\n' > "$P/etc/security/limits.d/wstune.real"; chown 1000:1000 "$P/etc/security/limits.d/wstune.real"
chmod 600 "$P/etc/security/limits.d/wstune.real"
ln -s wstune.real "$P/etc/security/limits.d/60-wstune.conf"
fp "$P" > "$T/tree-before"; before=$(state)
"$W" apply --profile 100k --yes --prefix "$P" > "$T/out" 2>&1; echo "APPLY $?"
echo "DURING $(stat -c '%a %u:%g %h' "$P/etc/sysctl.d/60-wstune.conf") $(stat -c %F "$P/etc/security/limits.d/60-wstune.conf")"
grep -c nofile "$P/etc/security/limits.d/wstune.real" | sed 's/^/REALNOFILE /'
"$W" rollback --yes --prefix "$P" >> "$T/out" 2>&1; echo "ROLLBACK $?"
fp "$P" > "$T/tree-after"
if cmp -s "$T/tree-before" "$T/tree-after"; then echo "TREE same"; else echo "TREE differs"; diff "$T/tree-before" "$T/tree-after"; fi
[ "$before" = "$(state)" ] && echo "VALUES same" || echo "VALUES differ"
cat "$T/out""#,
        lib = lib_path("journal_lib.sh")
    );
    let Some(o) = common::in_netns(&script) else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    assert_eq!(tagged_line(&o, "APPLY "), "APPLY 0", "{all}");
    assert_eq!(
        tagged_line(&o, "DURING "),
        "DURING 640 1000:1000 1 symbolic link",
        "applied in place: mode, owner and symlink kept: {all}"
    );
    assert_eq!(
        tagged_line(&o, "REALNOFILE "),
        "REALNOFILE 4",
        "written through the link: {all}"
    );
    assert_eq!(tagged_line(&o, "ROLLBACK "), "ROLLBACK 0", "{all}");
    assert_eq!(tagged_line(&o, "TREE "), "TREE same", "{all}");
    assert_eq!(tagged_line(&o, "VALUES "), "VALUES same", "{all}");
}

/// A hard-linked sysctl.d file was rewritten in place (truncated, then written: a power loss
/// left it empty for systemd-sysctl at boot), and a link `60-wstune.conf -> ../limits.conf` had
/// limits.conf's whole content replaced while applied. Both are refused before any change now,
/// with the reason and the fix.
#[test]
fn hard_links_and_links_out_of_their_directory_are_refused_before_any_change() {
    let script = format!(
        r#"source {lib}
{FINGERPRINT}
for case in hardlink limits-conf absolute-beside; do
  rm -rf "$P"/*; mkdir -p "$P/etc/sysctl.d" "$P/etc/security/limits.d"
  printf '# limits\n' > "$P/etc/security/limits.conf"
  case $case in
    hardlink) printf '# mine\n' > "$P/etc/sysctl.d/60-wstune.conf"; ln "$P/etc/sysctl.d/60-wstune.conf" "$P/etc/sysctl-copy.conf" ;;
    limits-conf) ln -s ../limits.conf "$P/etc/security/limits.d/60-wstune.conf" ;;
    absolute-beside) printf '# x\n' > "$P/etc/sysctl.d/real"; ln -s "$P/etc/sysctl.d/real" "$P/etc/sysctl.d/60-wstune.conf" ;;
  esac
  fp "$P" > "$T/tree-before"; before=$(state)
  "$W" apply --profile 100k --yes --prefix "$P" > "$T/out" 2> "$T/err"; rc=$?
  fp "$P" > "$T/tree-after"
  same=no; cmp -s "$T/tree-before" "$T/tree-after" && [ "$before" = "$(state)" ] && same=yes
  echo "CASE $case rc=$rc same=$same var=$(test -e "$P/var/lib/wstune" && echo left || echo none)"
  echo "ERR $(tr '\n' ' ' < "$T/err")"
done"#,
        lib = lib_path("journal_lib.sh")
    );
    let Some(o) = common::in_netns(&script) else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    assert_eq!(
        tagged(&o, "CASE "),
        vec![
            "CASE hardlink rc=3 same=yes var=none",
            "CASE limits-conf rc=3 same=yes var=none",
            "CASE absolute-beside rc=3 same=yes var=none",
        ],
        "{all}"
    );
    let errs = tagged(&o, "ERR ");
    assert!(
        errs[0].contains("hard links") && errs[0].contains("Fix:"),
        "{all}"
    );
    for e in &errs[1..] {
        assert!(e.contains("own directory") && e.contains("Fix:"), "{all}");
    }
}

/// A link wstune cannot write through and put back (out of /etc, dangling) is refused before
/// anything changes, with the reason and the fix.
#[test]
fn a_link_out_of_etc_or_dangling_is_refused_before_any_change() {
    let script = format!(
        r#"source {lib}
{FINGERPRINT}
mkdir -p "$P/etc/sysctl.d" "$T/outside"; printf '# victim\n' > "$T/outside/victim.conf"
for target in "$T/outside/victim.conf" "$P/etc/nowhere.conf"; do
  ln -sfn "$target" "$P/etc/sysctl.d/60-wstune.conf"
  fp "$P" > "$T/tree-before"; before=$(state); v=$(sha256sum < "$T/outside/victim.conf")
  "$W" apply --profile 100k --yes --prefix "$P" > "$T/out" 2> "$T/err"; rc=$?
  fp "$P" > "$T/tree-after"
  same=no; cmp -s "$T/tree-before" "$T/tree-after" && [ "$before" = "$(state)" ] && [ "$v" = "$(sha256sum < "$T/outside/victim.conf")" ] && same=yes
  # The fingerprint skips ./var: a journal directory left by the refusal is checked here.
  [ -e "$P/var/lib/wstune" ] && same=no
  echo "CASE rc=$rc same=$same"; echo "ERR $(tr '\n' ' ' < "$T/err")"
done"#,
        lib = lib_path("journal_lib.sh")
    );
    let Some(o) = common::in_netns(&script) else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    assert_eq!(
        tagged(&o, "CASE "),
        vec!["CASE rc=3 same=yes", "CASE rc=3 same=yes"],
        "{all}"
    );
    let errs = tagged(&o, "ERR ");
    assert!(
        errs[0].contains("outside") && errs[0].contains("Fix:"),
        "{all}"
    );
    assert!(
        errs[1].contains("does not exist") && errs[1].contains("Fix:"),
        "{all}"
    );
}

/// A link in a directory above wstune's file (`etc/security/limits.d -> outside`): apply wrote
/// `outside/60-wstune.conf`. Each such parent is refused before any change now, with nothing
/// written outside and no journal directory left behind.
#[test]
fn a_link_in_a_parent_directory_is_refused_before_any_change() {
    let script = format!(
        r#"source {lib}
{FINGERPRINT}
for linked in etc/security/limits.d etc/security etc/sysctl.d; do
  rm -rf "$P"/* "$T/outside"; mkdir -p "$P/$(dirname $linked)" "$T/outside"
  ln -s "$T/outside" "$P/$linked"
  fp "$P" > "$T/tree-before"; before=$(state)
  "$W" apply --profile 100k --yes --prefix "$P" > "$T/out" 2> "$T/err"; rc=$?
  fp "$P" > "$T/tree-after"
  same=no; cmp -s "$T/tree-before" "$T/tree-after" && [ "$before" = "$(state)" ] && same=yes
  echo "CASE $linked rc=$rc same=$same outside=$(find "$T/outside" -mindepth 1 | wc -l) var=$(test -e "$P/var/lib/wstune" && echo left || echo none)"
  echo "ERR $(tr '\n' ' ' < "$T/err")"
done"#,
        lib = lib_path("journal_lib.sh")
    );
    let Some(o) = common::in_netns(&script) else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    assert_eq!(
        tagged(&o, "CASE "),
        vec![
            "CASE etc/security/limits.d rc=3 same=yes outside=0 var=none",
            "CASE etc/security rc=3 same=yes outside=0 var=none",
            "CASE etc/sysctl.d rc=3 same=yes outside=0 var=none",
        ],
        "{all}"
    );
    for e in tagged(&o, "ERR ") {
        assert!(e.contains("outside") && e.contains("Fix:"), "{all}");
    }
}
