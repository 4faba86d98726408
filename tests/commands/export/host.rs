//! Exports for a host: the Ansible play in a namespace, the sysctl file as the next boot, never
//! lower than the host, a vendor file that wins at boot, systemd drop-ins and units, bad input.

use crate::common;
use common::Tree;

use super::{export, shield, syntax_check, sysctls, verify};
use common::{bin, code, finding, fixture, have, stderr};
use serde_json::Value as Json;

/// The status of finding `id` in a check report.
fn status_of(report: &Json, id: &str) -> String {
    finding(report, id)["status"].as_str().unwrap().to_string()
}

fn host_sysctl(key: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/{}", key.replace('.', "/")))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The playbook is valid for ansible-playbook, and run for real against a network namespace it
/// sets every per-namespace key (now and in its sysctl.d file) and the limits.d file, after
/// which `wstune check` passes each row it set, runtime and boot view; the host is untouched.
#[test]
fn ansible_playbook_tunes_a_namespace_and_check_passes_what_it_set() {
    if !have("ansible-playbook") {
        return common::skip(
            "ansible",
            "ansible-playbook is not installed (pip install ansible)",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let play = dir.path().join("wstune.yml");
    let json = export(&["--to", "json"]);
    export(&["--to", "ansible", "-o", play.to_str().unwrap()]);

    syntax_check(&play);

    let prefix = dir.path().join("root");
    std::fs::create_dir(&prefix).unwrap();
    let netns: Vec<_> = sysctls(&json)
        .into_iter()
        .filter(|(_, _, s, _)| s == "netns")
        .collect();
    assert!(netns.iter().any(|(k, _, _, _)| k == "net.core.somaxconn"));
    let host_before: Vec<String> = sysctls(&json)
        .iter()
        .map(|(k, _, _, _)| host_sysctl(k))
        .collect();

    let script = format!(
        "{shield}
before=$(\"$WSTUNE\" check --prefix {prefix} -f json) || true
ANSIBLE_LOCALHOST_WARNING=false ANSIBLE_NOCOLOR=1 ansible-playbook -i localhost, -c local \
  -e ansible_python_interpreter=\"$(command -v python3)\" -e wstune_set_node_sysctls=false \
  -e wstune_sysctl_file={prefix}/etc/sysctl.d/60-wstune.conf \
  -e wstune_limits_file={prefix}/etc/security/limits.d/60-wstune.conf {play} >&2
after=$(\"$WSTUNE\" check --prefix {prefix} -f json) || true
printf '%s\\n%s\\n' \"$before\" \"$after\" | python3 -c 'import json,sys; d=json.JSONDecoder(); t=sys.stdin.read(); a,i=d.raw_decode(t); b,_=d.raw_decode(t[i:].lstrip()); print(json.dumps([a,b]))'
",
        shield = shield(dir.path(), &json),
        prefix = prefix.display(),
        play = play.display()
    );
    let Some(o) = common::in_netns(&script) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    let both: Json = serde_json::from_slice(&o.stdout).unwrap();
    let (before, after) = (&both[0], &both[1]);
    // A fresh namespace starts at the kernel's defaults: the playbook really changed it.
    assert_eq!(status_of(before, "linux.net.core.somaxconn"), "fail");
    for (key, _, _, id) in &netns {
        // tcp_rmem/tcp_wmem's targets are computed from tcp_mem, which a network namespace
        // cannot see: skipped before and after, never a pass or a fail there.
        let was = status_of(before, id);
        let now = status_of(after, id);
        if was == "skip" && now == "skip" {
            continue;
        }
        assert_eq!(now, "pass", "{id} ({key}) after the playbook");
        assert_eq!(status_of(after, &format!("{id}.boot")), "pass", "{id}.boot");
    }
    for id in [
        "linux.net.core.somaxconn",
        "linux.net.ipv4.tcp_max_syn_backlog",
        "linux.net.ipv4.tcp_tw_reuse",
        "linux.net.ipv4.tcp_fin_timeout",
    ] {
        assert_eq!(status_of(after, id), "pass", "{id}");
    }
    // A server (the default role) needs no wider port range: not exported, not checked.
    assert_eq!(
        status_of(after, "linux.net.ipv4.ip_local_port_range"),
        "skip"
    );
    let limits =
        std::fs::read_to_string(prefix.join("etc/security/limits.d/60-wstune.conf")).unwrap();
    let nofile: Json = serde_json::from_str(&json).unwrap();
    let n = nofile["nofile"].as_u64().unwrap();
    for who in ["*", "root"] {
        for kind in ["soft", "hard"] {
            assert!(
                limits
                    .lines()
                    .any(|l| l.split_whitespace().collect::<Vec<_>>()
                        == [who, kind, "nofile", &n.to_string()]),
                "{who} {kind} nofile {n} in {limits}"
            );
        }
    }
    // The kernel-wide keys went to the file only, and the host kept every value.
    let file = std::fs::read_to_string(prefix.join("etc/sysctl.d/60-wstune.conf")).unwrap();
    assert!(file.contains("fs.nr_open"), "{file}");
    let host_after: Vec<String> = sysctls(&json)
        .iter()
        .map(|(k, _, _, _)| host_sysctl(k))
        .collect();
    assert_eq!(host_before, host_after, "the host's own sysctls changed");
}

/// The sysctl.d file loads with procps `sysctl -p` in a namespace, and `check` reads it back as
/// the next boot's configuration, every exported key passing its boot view.
#[test]
fn sysctl_file_loads_with_sysctl_and_is_the_next_boot_for_check() {
    let dir = tempfile::tempdir().unwrap();
    let json = export(&["--to", "json"]);
    let conf = dir.path().join("etc/sysctl.d/60-wstune.conf");
    std::fs::create_dir_all(conf.parent().unwrap()).unwrap();
    export(&["--to", "sysctl", "-o", conf.to_str().unwrap()]);
    let script = format!(
        "{shield}
# -e: the kernel-wide net.* keys do not exist in a network namespace.
sysctl -e -q -p {conf} >&2
\"$WSTUNE\" check --prefix {prefix} -f json || true
",
        shield = shield(dir.path(), &json),
        conf = conf.display(),
        prefix = dir.path().display()
    );
    let Some(o) = common::in_netns(&script) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    let report: Json = serde_json::from_slice(&o.stdout).unwrap();
    let mut passed = 0;
    for (key, _, _, id) in sysctls(&json) {
        // A kernel-wide net.* key does not exist in a network namespace, and tcp_rmem/wmem's
        // targets need one (tcp_mem): those rows are skipped there, every other one passes.
        if status_of(&report, &id) == "skip" {
            continue;
        }
        assert_eq!(status_of(&report, &id), "pass", "{id} ({key})");
        assert_eq!(
            status_of(&report, &format!("{id}.boot")),
            "pass",
            "{id}.boot"
        );
        passed += 1;
    }
    assert!(passed >= 8, "only {passed} exported rows could be checked");
}

/// apply's rule: a value the host already has above the target (or below, for `<=`) is kept;
/// everything else is the profile's target.
#[test]
fn export_never_lowers_what_the_host_has() {
    let tree = Tree::from_fixture("tuned");
    let sys = tree.join("proc/sys/net");
    std::fs::write(sys.join("core/somaxconn"), "100000\n").unwrap();
    std::fs::write(sys.join("ipv4/tcp_fin_timeout"), "5\n").unwrap();
    let root = tree.root();
    let got = sysctls(&export(&["--to", "json", "--root", root]));
    let value = |k: &str| {
        got.iter()
            .find(|(key, _, _, _)| key == k)
            .unwrap()
            .1
            .clone()
    };
    assert_eq!(value("net.core.somaxconn"), "100000");
    // A ceiling (30) keeps a lower value, but the floor (25, HAProxy's "issues below 25-30
    // seconds") raises one that short.
    assert_eq!(value("net.ipv4.tcp_fin_timeout"), "25");
    // The default tree is below every target: it gets the profile's.
    let plain = sysctls(&export(&[
        "--to",
        "json",
        "--root",
        fixture("default").to_str().unwrap(),
    ]));
    let somaxconn = plain
        .iter()
        .find(|(k, _, _, _)| k == "net.core.somaxconn")
        .unwrap();
    assert_eq!(somaxconn.1, "65535");
    // tcp_mem: the pressure and high marks are both judged (at least 200,000 and 300,000 pages
    // for 100k connections of 8 KiB buffers), the host's own min is kept, and the exported
    // rule names both fields so the play and the DaemonSet never lower either.
    let json: Json = serde_json::from_str(&export(&[
        "--to",
        "json",
        "--root",
        fixture("default").to_str().unwrap(),
    ]))
    .unwrap();
    let mem = json["sysctls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == "net.ipv4.tcp_mem")
        .unwrap();
    assert_eq!(
        (mem["value"].as_str(), mem["rule"].as_str()),
        (Some("287901 383868 575802"), Some("ge:1,2")),
        "{mem}"
    );
    // Advice (info checks of settings with a known default: retries, keepalives, the default
    // buffers, SYN-ACK retries) is what apply leaves alone: not exported either.
    for advice in [
        "net.ipv4.tcp_retries2",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_synack_retries",
    ] {
        assert!(!plain.iter().any(|(k, _, _, _)| k == advice), "{advice}");
    }
    // The same value goes into every format.
    let sysctl = export(&["--to", "sysctl", "--root", root]);
    assert!(
        sysctl.lines().any(|l| l == "net.core.somaxconn = 100000"),
        "{sysctl}"
    );
    let docker = export(&["--to", "docker", "--root", root]);
    assert!(
        docker.contains("--sysctl net.core.somaxconn=100000 "),
        "{docker}"
    );
}

/// The four units, and the serve unit with the `--to systemd` drop-in in its `.d` directory,
/// pass `systemd-analyze verify`; the unit carries the profile's LimitNOFILE.
#[test]
fn systemd_dropin_and_units_pass_systemd_analyze() {
    if !have("systemd-analyze") {
        return common::skip(
            "systemd",
            "systemd-analyze is not installed (apt-get install systemd)",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let units = dir.path();
    let o = common::run(&[
        "export",
        "--to",
        "systemd-unit",
        "-o",
        units.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let dropin_dir = units.join("wstune-serve.service.d");
    std::fs::create_dir(&dropin_dir).unwrap();
    export(&[
        "--to",
        "systemd",
        "-o",
        dropin_dir.join("60-wstune.conf").to_str().unwrap(),
    ]);
    let names = [
        "wstune-serve.service",
        "wstune-serve.socket",
        "wstune-check.service",
        "wstune-check.timer",
    ];
    verify(units, &names);
    let serve = std::fs::read_to_string(units.join(names[0])).unwrap();
    assert!(
        serve.contains(&format!("ExecStart={} serve --profile 100k", bin())),
        "{serve}"
    );
    assert!(serve.contains("LimitNOFILE=200000"), "{serve}");
    // The service takes its listening socket from the .socket unit (held across a restart),
    // and `systemctl reload` is the rolling restart.
    assert!(serve.contains("Requires=wstune-serve.socket\n"), "{serve}");
    assert!(
        serve.contains("ExecReload=/bin/kill -HUP $MAINPID\n"),
        "{serve}"
    );
    let socket = std::fs::read_to_string(units.join(names[1])).unwrap();
    for want in [
        "ListenStream=0.0.0.0:9001\n",
        // The profile's net.core.somaxconn.
        "Backlog=65535\n",
        "FileDescriptorName=wstune\n",
        "Service=wstune-serve.service\n",
    ] {
        assert!(socket.contains(want), "{want} in {socket}");
    }

    // Without -o DIR there is nowhere to put three files: a clear refusal.
    let o = common::run(&["export", "--to", "systemd-unit"]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("-o DIR"), "{}", stderr(&o));
}

/// Bad input: exit 3 and a message that names the problem.
#[test]
fn export_refuses_bad_input_clearly() {
    let o = common::run(&["export", "--to", "sysctl", "--profile", "nope"]);
    assert_eq!(code(&o), 3);
    let o = common::run(&["export", "--to", "systemd", "--unit", "a/b"]);
    assert_eq!(code(&o), 3);
    assert!(
        stderr(&o).contains("not a systemd unit name"),
        "{}",
        stderr(&o)
    );
    let o = common::run(&["export", "--to", "yaml"]);
    assert_eq!(code(&o), 3);
    let windows = fixture("windows-default");
    let o = common::run(&[
        "export",
        "--to",
        "sysctl",
        "--root",
        windows.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("not a Linux host"), "{}", stderr(&o));
    // An unwritable -o leaves nothing behind and says where.
    let o = common::run(&[
        "export",
        "--to",
        "sysctl",
        "-o",
        "/nonexistent/dir/60-wstune.conf",
    ]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("/nonexistent/dir"), "{}", stderr(&o));
}

/// `export --to sysctl` said nothing about a vendor file applied after wstune's that sets the
/// same key, though apply names it: the file installed as-is would lose at boot. The export
/// carries apply's note now.
#[test]
fn sysctl_export_names_a_vendor_file_that_wins_at_boot() {
    let tree = Tree::from_fixture("default");
    std::fs::write(
        tree.join("usr/lib/sysctl.d/99-vendor.conf"),
        "net.core.somaxconn = 4096\n",
    )
    .unwrap();
    let text = export(&["--to", "sysctl", "--root", tree.root()]);
    assert!(
        text.lines().any(|l| l.starts_with("# note: net.core.somaxconn: /usr/lib/sysctl.d/99-vendor.conf:1 sets 4096 and is applied after /etc/sysctl.d/60-wstune.conf")
            && l.contains("wins at boot")),
        "{text}"
    );
}

/// A vendor file applied after wstune's sets fs.nr_open = 1048576, and the profile (1m) asks
/// for nofile 2000000: apply writes 1048576 there and says why, but limits, docker and compose
/// wrote 2000000, which every login's and container's setrlimit refuses after the next boot.
/// Every export caps it by apply's rule now, with apply's note; and the static files' header
/// says that "never lower" holds only for the host the values were computed on.
#[test]
fn exports_cap_nofile_at_the_nr_open_the_tree_boots_with() {
    let tree = Tree::from_fixture("default");
    let t = tree.root();
    let with = |to: &str| export(&["--to", to, "--root", t, "--profile", "1m"]);
    // Without the vendor file the exported sysctl file's own fs.nr_open (4194304) is what the
    // tree boots with once that file is installed: the formats that carry it keep the
    // profile's 2000000 (the others are capped: the test below).
    let json: Json = serde_json::from_str(&with("json")).unwrap();
    assert_eq!(json["nofile"], 2000000, "{json}");
    assert!(
        with("ansible").contains("\n    wstune_nofile: 2000000\n"),
        "{}",
        with("ansible")
    );
    std::fs::write(
        tree.join("usr/lib/sysctl.d/99-vendor.conf"),
        "fs.nr_open = 1048576\n",
    )
    .unwrap();
    let note = "above the fs.nr_open this host will have after the next boot (1048576, set by /usr/lib/sysctl.d/99-vendor.conf:1)";
    let settings = |text: &str| -> String {
        text.lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let limits = with("limits");
    for who in ["*", "root"] {
        for kind in ["soft", "hard"] {
            assert!(
                limits.contains(&format!("\n{who} {kind} nofile 1048576\n")),
                "{limits}"
            );
        }
    }
    let docker = with("docker");
    assert!(
        docker.contains("  --ulimit nofile=1048576:1048576 \\\n"),
        "{docker}"
    );
    let compose = with("compose");
    assert!(
        compose.contains("      nofile:\n        soft: 1048576\n        hard: 1048576\n"),
        "{compose}"
    );
    for (to, text) in [
        ("limits", &limits),
        ("docker", &docker),
        ("compose", &compose),
    ] {
        assert!(!settings(text).contains("2000000"), "{to}: {text}");
        assert!(text.contains(note), "{to}: {text}");
        // The values are this tree's; on another host they are set as written.
        assert!(
            text.contains(&format!(
                "# \"Never lower\" holds for snapshot:{t} only: on another host these values are set as written,"
            )),
            "{to}: {text}"
        );
    }
    let json: Json = serde_json::from_str(&with("json")).unwrap();
    assert_eq!(json["nofile"], 1048576, "{json}");
    // The play compares on each host: its header says so, not "for this host only".
    let play = with("ansible");
    assert!(play.contains("it never lowers a host's value"), "{play}");
    assert!(!play.contains("\"Never lower\" holds for"), "{play}");
}

/// limits.d, a drop-in, a unit, docker and compose were capped at the fs.nr_open of the
/// exported sysctl file (4194304 from the 1m profile), which none of them installs: on the
/// default tree (fs.nr_open 1048576, now and at boot) `* hard nofile 2000000` installed as
/// limits.d makes pam_limits' setrlimit fail with EPERM, and new ssh and su sessions are
/// refused. A format installed alone is capped at the host's nr_open without that file now,
/// with a note saying to install the sysctl file (or apply) first and export again.
#[test]
fn exports_without_the_sysctl_file_fit_the_nr_open_the_host_has_without_it() {
    let tree = Tree::from_fixture("default");
    let t = tree.root();
    let with = |to: &str| export(&["--to", to, "--root", t, "--profile", "1m"]);
    let settings = |text: &str| -> String {
        text.lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let note = "nofile 2000000 is above the fs.nr_open this host has without wstune's sysctl file (1048576, the kernel's default: no boot file sets it), which this format does not install";
    let fix = "Fix: install `wstune export --to sysctl` as /etc/sysctl.d/60-wstune.conf and run `sysctl --system`, or run `wstune apply`, to raise fs.nr_open first, then export again";
    let limits = with("limits");
    for who in ["*", "root"] {
        for kind in ["soft", "hard"] {
            assert!(
                limits.contains(&format!("\n{who} {kind} nofile 1048576\n")),
                "{limits}"
            );
        }
    }
    let systemd = with("systemd");
    assert!(systemd.contains("\nLimitNOFILE=1048576\n"), "{systemd}");
    let docker = with("docker");
    assert!(
        docker.contains("  --ulimit nofile=1048576:1048576 \\\n"),
        "{docker}"
    );
    let compose = with("compose");
    assert!(
        compose.contains("      nofile:\n        soft: 1048576\n        hard: 1048576\n"),
        "{compose}"
    );
    for (to, text) in [
        ("limits", &limits),
        ("systemd", &systemd),
        ("docker", &docker),
        ("compose", &compose),
    ] {
        assert!(!settings(text).contains("2000000"), "{to}: {text}");
        assert!(text.contains(note), "{to}: {text}");
        assert!(text.contains(fix), "{to}: {text}");
    }
    // The sysctl file itself raises fs.nr_open, and says nothing of a limit it does not write.
    let sysctl = with("sysctl");
    assert!(sysctl.contains("\nfs.nr_open = 4194304\n"), "{sysctl}");
    assert!(!sysctl.contains("nofile"), "{sysctl}");
    // A host already raised (by the sysctl file, or apply) gets the profile's limit.
    std::fs::write(tree.join("proc/sys/fs/nr_open"), "4194304\n").unwrap();
    std::fs::write(
        tree.join("etc/sysctl.d/60-wstune.conf"),
        "fs.nr_open = 4194304\n",
    )
    .unwrap();
    let limits = with("limits");
    assert!(limits.contains("\n* hard nofile 2000000\n"), "{limits}");
    assert!(!limits.contains("this format does not install"), "{limits}");
}

/// pam_limits without `use_max` turned a host's 1048576 into the profile's 200000. The play
/// never lowers a host's open-file limit now: run for real against files under a scratch
/// directory, one at 1048576 in limits.conf (read before the play's file) and in the play's
/// own file (from an earlier run) stays 1048576, while a file read after the play's, which
/// wins anyway, is not what it keeps; limits.conf and that file are left alone.
#[test]
fn ansible_play_never_lowers_a_hosts_higher_open_file_limit() {
    if !have("ansible-playbook") {
        return common::skip(
            "ansible",
            "ansible-playbook is not installed (pip install ansible)",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let play = dir.path().join("wstune.yml");
    let json = export(&["--to", "json"]);
    export(&["--to", "ansible", "-o", play.to_str().unwrap()]);
    let prefix = dir.path().join("root");
    let security = prefix.join("etc/security");
    std::fs::create_dir_all(security.join("limits.d")).unwrap();
    let conf = "# the host's own\n*\tsoft\tnofile\t1048576\n*  hard  nofile  1048576\n";
    std::fs::write(security.join("limits.conf"), conf).unwrap();
    std::fs::write(
        security.join("limits.d/60-wstune.conf"),
        "root soft nofile 1048576\nroot hard nofile 1048576\n",
    )
    .unwrap();
    let later = "* hard nofile 4000000\n";
    std::fs::write(security.join("limits.d/90-later.conf"), later).unwrap();
    let script = format!(
        "{shield}
ANSIBLE_LOCALHOST_WARNING=false ANSIBLE_NOCOLOR=1 ansible-playbook -i localhost, -c local \
  -e ansible_python_interpreter=\"$(command -v python3)\" -e wstune_set_node_sysctls=false \
  -e wstune_sysctl_file={prefix}/etc/sysctl.d/60-wstune.conf \
  -e wstune_limits_file={prefix}/etc/security/limits.d/60-wstune.conf {play}
",
        shield = shield(dir.path(), &json),
        prefix = prefix.display(),
        play = play.display()
    );
    let Some(o) = common::in_netns(&script) else {
        return;
    };
    assert!(o.status.success(), "{}{}", common::stdout(&o), stderr(&o));
    let ours = std::fs::read_to_string(security.join("limits.d/60-wstune.conf")).unwrap();
    let lines: Vec<Vec<&str>> = ours
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|w: &Vec<&str>| !w.is_empty() && !w[0].starts_with('#'))
        .collect();
    for who in ["*", "root"] {
        for kind in ["soft", "hard"] {
            let set: Vec<&str> = lines
                .iter()
                .filter(|w| w.len() == 4 && w[0] == who && w[1] == kind && w[2] == "nofile")
                .map(|w| w[3])
                .collect();
            assert_eq!(set, ["1048576"], "{who} {kind} nofile in {ours}");
        }
    }
    assert_eq!(
        std::fs::read_to_string(security.join("limits.conf")).unwrap(),
        conf
    );
    assert_eq!(
        std::fs::read_to_string(security.join("limits.d/90-later.conf")).unwrap(),
        later
    );
}
