//! `apply` and `rollback` against a real kernel in private namespaces, on captured Linux and
//! Windows registry trees, and on a running process; the role's port range, refusals that change
//! nothing.

use crate::common;
use common::Tree;

use super::{default_tree_with, wstune120};
use common::{
    assert_same_tree, check_json, code, copy_dir, finding, fixture, json_of, stderr, stdout,
};
use std::path::Path;

#[test]
fn apply_and_rollback_against_a_real_kernel_in_private_namespaces() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/apply_rollback.sh");
    let host_before = std::fs::read_to_string("/proc/sys/net/core/somaxconn").unwrap();
    let Some(o) = common::in_netns(&format!("bash {}", script.display())) else {
        return;
    };
    let out = stdout(&o);
    let step = |name: &str| -> String {
        out.lines()
            .find(|l| l.starts_with(&format!("STEP {name} ")))
            .unwrap_or_else(|| panic!("no step {name} in:\n{out}\n{}", stderr(&o)))
            .to_string()
    };
    assert_eq!(
        step("dry-run"),
        "STEP dry-run rc=0 same=yes",
        "dry-run changes nothing"
    );
    assert_eq!(step("apply"), "STEP apply rc=0 same=no");
    assert_eq!(
        step("second-apply"),
        "STEP second-apply rc=0 nothing=yes",
        "a second apply plans nothing"
    );
    assert_eq!(
        step("rollback"),
        "STEP rollback rc=0 same=yes",
        "every value and file back, byte for byte"
    );
    assert_eq!(
        step("injected-failure"),
        "STEP injected-failure rc=3 same=yes",
        "a failure midway leaves the host as before"
    );
    assert_eq!(step("kernel-rejects"), "STEP kernel-rejects rc=3 same=yes");
    assert_eq!(
        step("killed"),
        "STEP killed rc=137 same=no",
        "the kill happened between changes"
    );
    assert_eq!(
        step("journal-pending"),
        "STEP journal-pending rc=0 same=yes"
    );
    assert_eq!(
        step("rollback-after-kill"),
        "STEP rollback-after-kill rc=0 same=yes",
        "a killed apply is rolled back from its journal"
    );

    let err = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("ERR {name} ")))
            .unwrap()
            .to_string()
    };
    let injected = err("injected-failure");
    assert!(
        injected.contains("failed: net.ipv4.tcp_fin_timeout -> 30")
            && injected.contains("read-only"),
        "{injected}"
    );
    assert!(
        injected.contains("every change made before it was undone"),
        "{injected}"
    );
    let rejected = err("kernel-rejects");
    assert!(
        rejected.contains("big.yaml:")
            && rejected.contains("linux.somaxconn: 3000000000 is out of range")
            && rejected.contains("the kernel's maximum is 2147483647"),
        "{rejected}"
    );

    // After apply, check passes what apply could change, at runtime and at the next boot.
    let check = out.lines().find_map(|l| l.strip_prefix("CHECK ")).unwrap();
    let r: serde_json::Value = serde_json::from_str(check).unwrap();
    for id in [
        "linux.net.core.somaxconn",
        "linux.net.core.somaxconn.boot",
        "linux.net.ipv4.tcp_tw_reuse",
        "linux.net.ipv4.tcp_fin_timeout",
        "linux.net.ipv4.tcp_fin_timeout.floor",
        "wstune.journal.drift",
    ] {
        assert_eq!(
            finding(&r, id)["status"],
            "pass",
            "{id}: {}",
            finding(&r, id)
        );
    }
    // A server (the default role) is not asked to widen its port range: left as it was.
    let range = finding(&r, "linux.net.ipv4.ip_local_port_range");
    assert_eq!(range["status"], "skip", "{range}");
    assert!(
        range["note"]
            .as_str()
            .unwrap()
            .starts_with("not needed on a server"),
        "{range}"
    );
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/core/somaxconn").unwrap(),
        host_before,
        "the host's own namespace is untouched"
    );
}

/// The settings the sources disagree on follow the host's role: a server is not asked for a
/// wider port range or tw_reuse 1, a proxy is, and a Kubernetes node (detected by its
/// kubelet's configuration, or named) must also keep its NodePorts and the kubelet's port out
/// of the ephemeral range, which apply reserves without dropping what was reserved already.
#[test]
fn the_role_decides_the_port_range_tw_reuse_and_reserved_ports() {
    let status =
        |r: &serde_json::Value, id: &str| finding(r, id)["status"].as_str().unwrap().to_string();
    let (_, server) = check_json(&fixture("default"), &[]);
    assert_eq!(
        (
            server["profile"]["role"].as_str(),
            server["profile"]["role_from"].as_str()
        ),
        (Some("server"), Some("default"))
    );
    assert_eq!(
        status(&server, "linux.net.ipv4.ip_local_port_range"),
        "skip"
    );
    // ...and no boot view to judge either.
    assert!(server["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["id"] != "linux.net.ipv4.ip_local_port_range.boot"));
    assert_eq!(status(&server, "linux.net.ipv4.tcp_tw_reuse"), "pass");
    assert_eq!(
        status(&server, "linux.net.ipv4.ip_local_reserved_ports"),
        "skip"
    );

    let (_, proxy) = check_json(&fixture("default"), &["--role", "proxy"]);
    assert_eq!(proxy["profile"]["role_from"], "--role");
    assert_eq!(status(&proxy, "linux.net.ipv4.ip_local_port_range"), "warn");
    assert_eq!(status(&proxy, "linux.net.ipv4.tcp_tw_reuse"), "warn");
    assert_eq!(
        status(&proxy, "linux.net.ipv4.ip_local_reserved_ports"),
        "skip"
    );

    // A kubelet's configuration makes it a Kubernetes node; the kernel already reserves a port.
    let tree = default_tree_with("proc/sys/net/ipv4/ip_local_reserved_ports", "9100\n");
    std::fs::create_dir_all(tree.join("var/lib/kubelet")).unwrap();
    std::fs::write(
        tree.join("var/lib/kubelet/config.yaml"),
        "kind: KubeletConfiguration\n",
    )
    .unwrap();
    let (_, node) = check_json(&tree, &[]);
    assert_eq!(node["profile"]["role"], "kubernetes-node");
    assert_eq!(
        node["profile"]["role_from"],
        "detected: /var/lib/kubelet/config.yaml"
    );
    let reserved = finding(&node, "linux.net.ipv4.ip_local_reserved_ports");
    assert_eq!(reserved["status"], "warn", "{reserved}");
    assert_eq!(reserved["compare"], "reserves");
    let t = tree.to_str().unwrap();
    let o = wstune120(&["apply", "--root", t, "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let now =
        std::fs::read_to_string(tree.join("proc/sys/net/ipv4/ip_local_reserved_ports")).unwrap();
    assert_eq!(
        now.trim(),
        "9100,10248-10250,10255-10256,30000-32767",
        "the union, in the kernel's form"
    );
    let conf = std::fs::read_to_string(tree.join("etc/sysctl.d/60-wstune.conf")).unwrap();
    assert!(
        conf.contains(
            "net.ipv4.ip_local_reserved_ports = 9100,10248-10250,10255-10256,30000-32767"
        ),
        "{conf}"
    );
    assert!(
        conf.contains("net.ipv4.ip_local_port_range = 10000 65535"),
        "{conf}"
    );
    // --role wins over what is detected, and over the profile's role.
    let (_, named) = check_json(&tree, &["--role", "server"]);
    assert_eq!(named["profile"]["role"], "server");
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("edge.yaml");
    std::fs::write(&profile, "extends: 100k\nname: edge\nrole: proxy\n").unwrap();
    let (_, from_profile) = check_json(
        &fixture("default"),
        &["--profile", profile.to_str().unwrap()],
    );
    assert_eq!(
        (
            from_profile["profile"]["role"].as_str(),
            from_profile["profile"]["role_from"].as_str()
        ),
        (Some("proxy"), Some("profile"))
    );
    std::fs::write(&profile, "extends: 100k\nname: edge\nrole: router\n").unwrap();
    let o = wstune120(&[
        "check",
        "--root",
        fixture("default").to_str().unwrap(),
        "--profile",
        profile.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 3);
    assert!(
        stderr(&o).contains(
            "edge.yaml:3: role: \"router\" is not one of `server`, `proxy`, `kubernetes-node`"
        ),
        "{}",
        stderr(&o)
    );
}

#[test]
fn apply_on_a_captured_tree_then_rollback_restores_it_exactly() {
    let tree = Tree::from_fixture("default");
    let t = tree.root();
    let o = wstune120(&["apply", "--root", t, "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("Applied 19 change(s)"),
        "{}",
        stdout(&o)
    );
    let limits =
        std::fs::read_to_string(tree.join("etc/security/limits.d/60-wstune.conf")).unwrap();
    assert!(
        limits.contains("* hard nofile 200000") && limits.contains("root hard nofile 200000"),
        "{limits}"
    );
    let r = json_of(&wstune120(&["check", "--root", t, "-f", "json"]));
    assert_eq!(finding(&r, "wstune.journal.drift")["status"], "pass");
    // Someone edits a value behind wstune's back: check notices.
    std::fs::write(tree.join("proc/sys/net/core/somaxconn"), "1024\n").unwrap();
    let r = json_of(&wstune120(&["check", "--root", t, "-f", "json"]));
    let drift = finding(&r, "wstune.journal.drift");
    assert_eq!(drift["status"], "warn");
    assert!(
        drift["note"]
            .as_str()
            .unwrap()
            .contains("net.core.somaxconn is 1024 (applied 65535)"),
        "{drift}"
    );
    std::fs::write(tree.join("proc/sys/net/core/somaxconn"), "65535\n").unwrap();

    let list = stdout(&wstune120(&["rollback", "--root", t, "--list"]));
    assert!(list.contains("applied") && list.contains("100k"), "{list}");
    let o = wstune120(&["rollback", "--root", t, "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    std::fs::remove_dir_all(tree.join("var")).unwrap();
    assert_same_tree(&fixture("default"), &tree);
    let o = wstune120(&["rollback", "--root", t, "--yes"]);
    assert_eq!(code(&o), 3);
    assert!(
        stderr(&o).contains("nothing to roll back"),
        "{}",
        stderr(&o)
    );
}

/// The `wstune rollback` lines apply and rollback print carry the `--root` they were given
/// (quoted for the shell: the copy's path has a space), and run as printed they act on that
/// copy: the rollback restores it exactly, the `--list` line lists its journal.
#[test]
fn the_rollback_lines_apply_prints_carry_its_root_and_work_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("host copy");
    copy_dir(&fixture("default"), &tree);
    let t = tree.to_str().unwrap();
    // The command between the backticks after `marker`, with the binary for `wstune`, run by
    // a shell as a user would paste it.
    let run_hint = |text: &str, marker: &str, extra: &str| {
        let at = text
            .find(marker)
            .unwrap_or_else(|| panic!("no `{marker}` in:\n{text}"));
        let hint = text[at + 1..].split('`').next().unwrap().to_string();
        // Checked before it runs: without the copy's root it would act on this host.
        assert!(hint.contains(&format!(" --root '{t}'")), "{hint}");
        let line = format!("{}{}{extra}", common::bin(), &hint["wstune".len()..]);
        let o = std::process::Command::new("sh")
            .args(["-c", &line])
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        (hint, o)
    };
    let o = wstune120(&["apply", "--root", t, "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let applied = stdout(&o);
    let o = wstune120(&["rollback", "--root", t, "--id", "no-such-entry"]);
    assert_eq!(code(&o), 3);
    let (hint, listed) = run_hint(&stderr(&o), "`wstune rollback --list", "");
    assert!(
        stdout(&listed).contains("applied") && stdout(&listed).contains("100k"),
        "{hint}: {}{}",
        stdout(&listed),
        stderr(&listed)
    );
    // Check's advice on a value changed since names the copy too.
    std::fs::write(tree.join("proc/sys/net/core/somaxconn"), "1024\n").unwrap();
    let r = json_of(&wstune120(&["check", "--root", t, "-f", "json"]));
    let drift = finding(&r, "wstune.journal.drift");
    assert_eq!(drift["status"], "warn", "{drift}");
    let fix = drift["fix"]["runtime"].as_str().unwrap();
    assert!(
        fix.contains(&format!("wstune apply --root '{t}'"))
            && fix.contains(&format!("wstune rollback --root '{t}'")),
        "{fix}"
    );
    std::fs::write(tree.join("proc/sys/net/core/somaxconn"), "65535\n").unwrap();
    let (hint, o) = run_hint(&applied, "`wstune rollback", " --yes");
    assert_eq!(code(&o), 0, "{hint}: {}", stderr(&o));
    std::fs::remove_dir_all(tree.join("var")).unwrap();
    assert_same_tree(&fixture("default"), &tree);
}

#[test]
fn apply_refuses_clearly_and_changes_nothing() {
    let tree = Tree::from_fixture("container");
    let t = tree.root();
    let o = wstune120(&["apply", "--root", t, "--yes"]);
    assert_eq!(code(&o), 3);
    let err = stderr(&o);
    assert!(err.contains("/proc/sys is read-only here"), "{err}");
    assert!(
        err.contains("docker run --sysctl net.core.somaxconn=65535"),
        "{err}"
    );
    assert_same_tree(&fixture("container"), &tree);
    // Without a terminal and without --yes, nothing happens either.
    let tree2 = tree.scratch().join("d");
    copy_dir(&fixture("default"), &tree2);
    let o = wstune120(&["apply", "--root", tree2.to_str().unwrap()]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("pass --yes"), "{}", stderr(&o));
    assert_same_tree(&fixture("default"), &tree2);
    let o = wstune120(&["apply", "--runtime-only", "--persist-only"]);
    assert_eq!(code(&o), 3);
    let o = wstune120(&["apply", "--prefix", "/nonexistent/p", "--dry-run"]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("--prefix /nonexistent/p: no such directory"));
    let o = wstune120(&[
        "rollback",
        "--id",
        "../../etc/passwd",
        "--root",
        tree2.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("is not a journal id"));
}

#[test]
fn apply_on_a_windows_registry_tree_and_rollback() {
    let tree = Tree::from_fixture("windows-default");
    let t = tree.root();
    let o = wstune120(&["apply", "--root", t, "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("TcpTimedWaitDelay"), "{}", stdout(&o));
    let (c, r) = check_json(&tree, &["--strict"]);
    assert_eq!(
        finding(&r, "windows.tcpip.tcp_timed_wait_delay")["current"],
        30
    );
    // apply only advises on the dynamic port range (netsh, not a registry value): its
    // findings remain, with the netsh command as their fix, and so does the host's core count.
    assert_eq!(c, 2, "{}", r["summary"]);
    let warned: Vec<&str> = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] == "warn" || f["status"] == "fail")
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        warned,
        [
            "windows.tcpip.dynamic_port_range",
            "windows.tcpip6.dynamic_port_range",
            "windows.tcpip.dynamic_port_count",
            "windows.host.cpus"
        ],
        "nothing else but the informational RSS profile remains"
    );
    assert_eq!(finding(&r, "wstune.journal.drift")["status"], "pass");
    let o = wstune120(&["rollback", "--root", t, "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let (_, r) = check_json(&tree, &[]);
    assert_eq!(
        finding(&r, "windows.tcpip.tcp_timed_wait_delay")["note"],
        "not set: the built-in default applies",
        "the value was deleted again"
    );
}

/// A Windows adapter's RSS keywords change only for an adapter named with --nic (the change
/// restarts it): *RSSProfile is written as its number under the adapter's class key, the plan
/// and the output say the adapter restarts (a captured tree cannot, and says so), and
/// rollback deletes the value it created. The built-in profiles' word is the drivers' default
/// (NUMAScalingStatic): an adapter left at it is not restarted for it; a profile that says
/// numa_scaling gets NUMAScaling written.
#[test]
fn apply_sets_a_named_windows_adapters_rss_keywords_and_rollback_deletes_them() {
    let tree = Tree::from_fixture("windows-default");
    let t = tree.root();
    let nic = "Intel(R) Ethernet Controller X710";
    let builtin = stdout(&wstune120(&[
        "apply",
        "--root",
        t,
        "--nic",
        nic,
        "--dry-run",
    ]));
    assert!(!builtin.contains("*RSSProfile"), "{builtin}");
    let profile = tree.scratch().join("dynamic.yaml");
    std::fs::write(
        &profile,
        "extends: 100k\nname: dynamic\nnic:\n  rss: numa_scaling\n",
    )
    .unwrap();
    let pr = profile.to_str().unwrap();
    let unnamed = stdout(&wstune120(&[
        "apply",
        "--root",
        t,
        "--profile",
        pr,
        "--dry-run",
    ]));
    assert!(
        unnamed.contains("adapters' RSS keywords not changed (Intel(R) Ethernet Controller X710)"),
        "{unnamed}"
    );
    assert!(!unnamed.contains("*RSSProfile"), "{unnamed}");
    // A name that is no adapter here is an error, and nothing changes.
    let o = wstune120(&["apply", "--root", t, "--nic", "Intel X710", "--yes"]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("--nic Intel X710: no such network interface here (found: Intel(R) Ethernet Controller X710)"), "{}", stderr(&o));
    assert_same_tree(&fixture("windows-default"), &tree);
    let o = wstune120(&["apply", "--root", t, "--profile", pr, "--nic", nic, "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    // The setting's cell wraps in the table: its words are there.
    assert!(
        out.contains(nic)
            && out.contains("*RSSProfile")
            && out.contains("NUMAScalingStatic -> NUMAScaling"),
        "{out}"
    );
    assert!(
        out.contains("the adapter restarts after its keywords are written"),
        "{out}"
    );
    assert!(
        out.contains(&format!("adapter {nic} could not be restarted here")),
        "{out}"
    );
    let reg = std::fs::read_to_string(tree.join("registry.yaml")).unwrap();
    assert!(
        reg.contains("'*RSSProfile':\n      type: REG_SZ\n      data: '3'"),
        "{reg}"
    );
    let (_, r) = check_json(&tree, &["--profile", pr]);
    assert_eq!(
        finding(&r, &format!("windows.nic.rss_profile[{nic}]"))["status"],
        "pass"
    );
    let o = wstune120(&["rollback", "--root", t, "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let (_, r) = check_json(&tree, &[]);
    let f = finding(&r, &format!("windows.nic.rss_profile[{nic}]"));
    assert_eq!(
        f["current"], "NUMAScalingStatic",
        "deleted again: the default stands in {f}"
    );
    assert!(!std::fs::read_to_string(tree.join("registry.yaml"))
        .unwrap()
        .contains("*RSSProfile"));
}

#[test]
fn apply_raises_a_running_process_and_writes_a_unit_drop_in() {
    let tree = Tree::from_fixture("tuned");
    std::fs::write(
        tree.join("wstune/systemd/wsserver.service.show"),
        "LimitNOFILE=4096\nLoadState=loaded\n",
    )
    .unwrap();
    let pristine = tree.scratch().join("pristine");
    copy_dir(&tree, &pristine);
    let t = tree.root();
    let args = [
        "apply",
        "--root",
        t,
        "--pid",
        "4242",
        "--unit",
        "wsserver.service",
        "--yes",
    ];
    let o = wstune120(&args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("Applied 2 change(s)"), "{out}");
    assert!(out.contains("systemctl restart wsserver.service"), "{out}");
    let dropin =
        std::fs::read_to_string(tree.join("etc/systemd/system/wsserver.service.d/60-wstune.conf"))
            .unwrap();
    assert!(
        dropin.contains("[Service]\nLimitNOFILE=200000\n"),
        "{dropin}"
    );
    let limits = std::fs::read_to_string(tree.join("proc/4242/limits")).unwrap();
    assert!(
        limits.lines().any(|l| l.starts_with("Max open files")
            && l.split_whitespace()
                .skip(3)
                .take(2)
                .eq(["200000", "262144"])),
        "{limits}"
    );
    let o = wstune120(&args);
    assert!(
        stdout(&o).contains("Nothing to change"),
        "the drop-in is written; the unit only needs its restart: {}",
        stdout(&o)
    );
    assert_eq!(code(&wstune120(&["rollback", "--root", t, "--yes"])), 0);
    std::fs::remove_dir_all(tree.join("var")).unwrap();
    assert_same_tree(&pristine, &tree);
}

/// The extended attributes of a file apply replaces (an operator's `user.*` mark, SELinux's
/// label) were dropped: the new file was a fresh one renamed over it, and rollback, written
/// the same way, could not bring them back. Both keep them now, with the bytes restored.
#[test]
fn apply_and_rollback_keep_a_replaced_files_extended_attributes() {
    let tree = Tree::from_fixture("default");
    let file = tree.join("etc/sysctl.d/60-wstune.conf");
    let old = "# Managed by wstune apply: this file is rewritten whole. `wstune rollback` restores what it replaced.\nfs.file-max = 100\n";
    std::fs::write(&file, old).unwrap();
    let mut marks = vec![("user.backup", b"nightly".to_vec())];
    if let Err(e) = xattr::set(&file, "user.backup", b"nightly") {
        return common::skip(
            "xattr",
            &format!("this file system takes no user.* extended attributes: {e}"),
        );
    }
    // A label as SELinux gives one, where this kernel lets root set it.
    let label = b"system_u:object_r:etc_t:s0".to_vec();
    if xattr::set(&file, "security.selinux", &label).is_ok() {
        marks.push(("security.selinux", label));
    }
    let kept = |when: &str| {
        for (name, value) in &marks {
            assert_eq!(
                xattr::get(&file, name).unwrap().as_deref(),
                Some(value.as_slice()),
                "{name} {when}"
            );
        }
    };
    let t = tree.root();
    let o = wstune120(&["apply", "--root", t, "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_ne!(std::fs::read_to_string(&file).unwrap(), old);
    kept("after apply");
    let o = wstune120(&["rollback", "--root", t, "--yes"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), old);
    kept("after rollback");
}

/// Under a confining security module, setting a `security.*` attribute (SELinux's label) on
/// the new copy of wstune's own file is refused (EACCES, EPERM): apply and rollback failed on
/// it where they used to work. A `security.*` attribute is kept where the kernel allows and
/// left to the module otherwise (it labels the new file itself); `user.*` stays kept. Root
/// without CAP_SYS_ADMIN (setpriv) is refused `security.*` the same way.
#[test]
fn a_security_attribute_the_kernel_refuses_does_not_fail_apply_or_rollback() {
    let tree = Tree::from_fixture("default");
    let file = tree.join("etc/sysctl.d/60-wstune.conf");
    let old = "# Managed by wstune apply: this file is rewritten whole. `wstune rollback` restores what it replaced.\nfs.file-max = 100\n";
    std::fs::write(&file, old).unwrap();
    if let Err(e) = xattr::set(&file, "user.backup", b"nightly")
        .and_then(|()| xattr::set(&file, "security.wstune-test", b"label"))
    {
        return common::skip(
            "xattr",
            &format!("this file system or user takes no user.* or security.* attributes: {e}"),
        );
    }
    let t = tree.root();
    let confined = |args: &[&str]| {
        std::process::Command::new("setpriv")
            .args(["--inh-caps=-sys_admin", "--bounding-set=-sys_admin", "--"])
            .arg(common::bin())
            .args(args)
            .env("NO_COLOR", "1")
            .output()
    };
    let o = match confined(&["apply", "--root", t, "--yes"]) {
        Ok(o) if !stderr(&o).contains("setpriv:") => o,
        _ => return common::skip("setpriv", "setpriv cannot drop CAP_SYS_ADMIN here"),
    };
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_ne!(std::fs::read_to_string(&file).unwrap(), old);
    let user = || xattr::get(&file, "user.backup").unwrap();
    assert_eq!(
        user().as_deref(),
        Some(&b"nightly"[..]),
        "user.* kept by apply"
    );
    let o = confined(&["rollback", "--root", t, "--yes"]).unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), old);
    assert_eq!(
        user().as_deref(),
        Some(&b"nightly"[..]),
        "user.* kept by rollback"
    );
}

/// On a captured tree, wstune's sysctl file was a link to a file outside the tree: check could
/// not read it (the tree answers only from its own files), but apply read the outside file,
/// found it differed from what the check saw, and said it "changed since the check". Both
/// refuse the link now: check names it, and apply names it and the fix, changing nothing.
#[test]
fn a_file_linked_out_of_a_captured_tree_is_refused_by_check_and_apply_alike() {
    let tree = Tree::from_fixture("default");
    let outside = tree.scratch().join("elsewhere.conf");
    std::fs::write(&outside, "net.core.somaxconn = 1024\n").unwrap();
    let link = tree.join("etc/sysctl.d/60-wstune.conf");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let pristine = tree.scratch().join("pristine");
    copy_dir(&tree, &pristine);
    let t = tree.root();
    let check = stdout(&wstune120(&["check", "--root", t, "-f", "json"]));
    assert!(
        check.contains(&format!(
            "{}: is a link to {}, outside the tree",
            link.display(),
            outside.display()
        )),
        "{check}"
    );
    let o = wstune120(&["apply", "--root", t, "--yes"]);
    assert_eq!(code(&o), 3, "{}{}", stdout(&o), stderr(&o));
    let err = stderr(&o);
    assert!(!err.contains("changed since the check"), "{err}");
    assert!(
        err.contains(&format!(
            "{} is a link to {}, outside the tree",
            link.display(),
            outside.display()
        )) && err.contains("Fix: put the file itself in the tree"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "net.core.somaxconn = 1024\n"
    );
    let _ = std::fs::remove_dir_all(tree.join("var"));
    assert_same_tree(&pristine, &tree);
}
