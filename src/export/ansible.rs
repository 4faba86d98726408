//! An Ansible playbook: ansible.posix.sysctl for each key (now and in the sysctl.d file) and
//! community.general.pam_limits for nofile, both collections shipped in the `ansible` package.
//! Every path and the node-wide switch are variables, so a playbook can be tried on a network
//! namespace with files under a scratch directory (tests/commands/export.rs does).

use super::{yq, Export, Sysctl};
use crate::apply::plan::{LIMITS_FILE, SYSCTL_FILE};

pub fn playbook(e: &Export) -> String {
    let mut s = e.header("ansible", "#");
    s.push_str(
        "# Run: ansible-playbook -i INVENTORY --become THIS_FILE   (-e wstune_hosts=GROUP to narrow it)\n\
         # Needs the ansible.posix and community.general collections (both in the `ansible` package).\n",
    );
    s.push_str(&format!(
        "- name: Tune for {} WebSocket connections (wstune profile {})\n\
         \x20 hosts: \"{{{{ wstune_hosts | default('all') }}}}\"\n\
         \x20 gather_facts: false\n\
         \x20 vars:\n\
         \x20   wstune_sysctl_file: {SYSCTL_FILE}\n\
         \x20   wstune_limits_file: {LIMITS_FILE}\n\
         \x20   # false: write the kernel-wide keys to the file only (applied at the next boot).\n\
         \x20   wstune_set_node_sysctls: true\n",
        e.connections, e.profile
    ));
    let map = |name: &str, comment: &str, list: &[Sysctl]| {
        let mut m = format!("    # {comment}\n    {name}:");
        if list.is_empty() {
            m.push_str(" {}\n");
        } else {
            m.push('\n');
            for x in list {
                m.push_str(&format!("      {}: {}\n", yq(&x.key), yq(&x.value)));
            }
        }
        m
    };
    s.push_str(&map(
        "wstune_netns_sysctls",
        "Per network namespace: each container has its own.",
        &e.netns(),
    ));
    s.push_str(&map("wstune_node_sysctls", "Kernel-wide.", &e.node()));
    // Only ever raised on each host: how each key compares (ge: at least, le: at most, covers: a
    // range at least this wide, eq: exactly), applied to the host's own value before setting.
    s.push_str("    # How each key compares on the host: its own value is kept where it is already beyond the one above.\n    wstune_rules:");
    let all = e.sysctls();
    if all.is_empty() {
        s.push_str(" {}\n");
    } else {
        s.push('\n');
        for x in &all {
            s.push_str(&format!("      {}: {}\n", yq(&x.key), x.rule));
        }
    }
    match e.nofile("ansible").0 {
        Some(n) => s.push_str(&format!("    wstune_nofile: {n}\n")),
        None => s.push_str("    wstune_nofile: 0  # the profile sets none: the task is skipped\n"),
    }
    if let Some(nic) = &e.nic {
        s.push_str(&nic_vars(nic));
    }
    s.push_str(&format!(
        "  tasks:
    - name: The value for each sysctl on this host (the profile's, never lower than what it already has)
      # A key this host lacks (a module not loaded, a kernel-wide net key in a container) gets
      # the profile's value, for the file only.
      ansible.builtin.shell: >-
        f=/proc/sys/{{{{ item.key | replace('.', '/') | quote }}}};
        if [ -e \"$f\" ]; then awk -v r={{{{ wstune_rules[item.key] | default('eq') | quote }}}} -v want={{{{ item.value | string | quote }}}}
        {awk} < \"$f\"; else printf '%s\\n' {{{{ item.value | string | quote }}}};
        echo \"not on this host: written to the file only\" >&2; fi
      loop: \"{{{{ (wstune_netns_sysctls | dict2items) + (wstune_node_sysctls | dict2items) }}}}\"
      register: wstune_values
      changed_when: false
      check_mode: false
",
        awk = shell_single(super::RAISE_AWK)
    ));
    s.push_str(
        "    - name: Directories for the sysctl.d and limits.d files
      ansible.builtin.file:
        path: \"{{ item | dirname }}\"
        state: directory
        mode: \"0755\"
      loop:
        - \"{{ wstune_sysctl_file }}\"
        - \"{{ wstune_limits_file }}\"
    - name: Per-network-namespace sysctls, now and in the sysctl.d file
      ansible.posix.sysctl:
        name: \"{{ item.key }}\"
        value: \"{{ wstune_here.stdout }}\"
        sysctl_file: \"{{ wstune_sysctl_file }}\"
        sysctl_set: \"{{ wstune_here.stderr == '' }}\"
        # No `sysctl -p FILE`: it would also set the keys the next task may leave alone.
        reload: false
        state: present
      loop: \"{{ wstune_netns_sysctls | dict2items }}\"
      vars:
        wstune_here: \"{{ wstune_values.results | selectattr('item.key', 'equalto', item.key) | first }}\"
    - name: Kernel-wide sysctls, in the sysctl.d file and (wstune_set_node_sysctls) now
      ansible.posix.sysctl:
        name: \"{{ item.key }}\"
        value: \"{{ wstune_here.stdout }}\"
        sysctl_file: \"{{ wstune_sysctl_file }}\"
        sysctl_set: \"{{ (wstune_set_node_sysctls | bool) and wstune_here.stderr == '' }}\"
        reload: false
        state: present
      loop: \"{{ wstune_node_sysctls | dict2items }}\"
      vars:
        wstune_here: \"{{ wstune_values.results | selectattr('item.key', 'equalto', item.key) | first }}\"
",
    );
    s.push_str(NOFILE_TASKS);
    if e.nic.is_some() {
        s.push_str(NIC_TASKS);
    }
    s
}

/// The open-file limit for new logins, never lowering the host's: pam_limits reads
/// limits.conf, then limits.d/*.conf by name (C locale), a later line for the same domain and
/// type replacing an earlier one, so a value set before our file is one ours would replace:
/// the higher of it and the profile's is written (a file read after ours wins anyway), and
/// `use_max` keeps a higher value already in our file. Only plain numbers count (the kernel
/// refuses an unlimited nofile).
const NOFILE_TASKS: &str = r#"    # pam_limits: new logins only. A systemd service needs LimitNOFILE (`wstune export --to systemd`).
    - name: The open-file limit new logins get now from the files pam_limits reads before this one
      ansible.builtin.shell: >-
        d={{ wstune_limits_file | dirname | quote }}; LC_ALL=C; export LC_ALL;
        set -- ; for f in "${d%/*}/limits.conf" "$d"/*.conf; do [ -f "$f" ] && set -- "$@" "$f"; done;
        awk -v conf="${d%/*}/limits.conf" -v me={{ wstune_limits_file | basename | quote }}
        '{ sub(/#.*/, ""); n = FILENAME; sub(/.*\//, "", n) };
        FILENAME != conf && n >= me { next };
        NF >= 4 && $3 == "nofile" && ($1 == "*" || $1 == "root") && $4 ~ /^[0-9]+$/ {
        if ($2 == "soft" || $2 == "-") v[$1 " soft"] = $4; if ($2 == "hard" || $2 == "-") v[$1 " hard"] = $4 };
        END { printf "{"; s = ""; split("* soft,* hard,root soft,root hard", k, ",");
        for (i = 1; i <= 4; i++) { printf "%s\"%s\": %s", s, k[i], ((k[i] in v) ? v[k[i]] : 0); s = ", " } print "}" }'
        "$@" < /dev/null
      register: wstune_logins
      changed_when: false
      check_mode: false
      when: wstune_nofile | int > 0
    - name: Open-file limit for new logins (`*` does not match root in pam_limits), never lower than the host's
      community.general.pam_limits:
        domain: "{{ item[0] }}"
        limit_type: "{{ item[1] }}"
        limit_item: nofile
        value: "{{ [wstune_nofile | int, (wstune_logins.stdout | from_json)[item[0] ~ ' ' ~ item[1]] | int] | max }}"
        use_max: true
        dest: "{{ wstune_limits_file }}"
      loop: "{{ ['*', 'root'] | product(['soft', 'hard']) | list }}"
      when: wstune_nofile | int > 0
"#;

/// The NIC files as play variables: where each goes, its mode and its text. The header of each
/// file says which hardware it fits, and so does the play's.
fn nic_vars(nic: &super::nic::NicFiles) -> String {
    let mut s = String::from(
        "    # The NICs' boot files (`wstune export --to nic`), for hosts of this hardware only:\n",
    );
    for l in nic.origin.header("#").lines() {
        s.push_str(&format!("    {l}\n"));
    }
    s.push_str("    # Installed under this directory (\"\": the host's own /).\n    wstune_nic_root: \"\"\n    wstune_nic_files:\n");
    for (path, text) in &nic.files {
        s.push_str(&format!(
            "      - path: {}\n        content: {}\n",
            yq(path),
            yq(text)
        ));
    }
    s
}

/// Install the NIC files; udev and systemd read them again. They take effect when each NIC
/// next appears (at boot); `udevadm trigger --action=add /sys/class/net/NAME` applies them
/// now, and resets the NIC's channels (its link drops for a moment), so the play leaves that
/// to the operator.
const NIC_TASKS: &str = "    - name: Directories of the NICs' boot files
      ansible.builtin.file:
        path: \"{{ (wstune_nic_root ~ item.path) | dirname }}\"
        state: directory
        mode: \"0755\"
      loop: \"{{ wstune_nic_files }}\"
    - name: The NICs' boot files (udev rule, .link files, sysctl.d, interrupt script and unit)
      ansible.builtin.copy:
        dest: \"{{ wstune_nic_root ~ item.path }}\"
        content: \"{{ item.content }}\"
        mode: \"0644\"
      loop: \"{{ wstune_nic_files }}\"
      register: wstune_nic_copied
    # Applied when each NIC next appears (boot); `udevadm trigger --action=add
    # /sys/class/net/NAME` applies them now (the NIC's link drops for a moment).
    - name: udev reads the rules again
      ansible.builtin.command: udevadm control --reload
      when: wstune_nic_copied is changed and wstune_nic_root == ''
    - name: systemd reads the units again
      ansible.builtin.systemd:
        daemon_reload: true
      when: wstune_nic_copied is changed and wstune_nic_root == ''
";

/// `s` in single quotes for sh (the awk program has none of its own).
fn shell_single(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
