//! `wstune export`: every format is read by the tool that consumes it (sysctl, ansible-playbook,
//! kubernetes-validate, docker, docker-compose, systemd-analyze), and the values follow apply's
//! rule (the profile's target, never lower than what the host has).
//!
//! Nothing here changes the host: runtime values are set only inside a fresh network namespace,
//! with every kernel-wide key that is visible there covered by a bind-mounted scratch file, and
//! every file goes under a temporary directory.

use crate::common;

use common::{bin, code, finding, fixture, have, stderr, stdout};
use serde_json::Value as Json;
use std::path::Path;
use std::process::Command;

fn export(args: &[&str]) -> String {
    let o = common::run(&[&["export"], args].concat());
    assert_eq!(code(&o), 0, "export {args:?}: {}", stderr(&o));
    stdout(&o)
}

/// (key, value, scope, check id) of every exported sysctl.
fn sysctls(json: &str) -> Vec<(String, String, String, String)> {
    let v: Json = serde_json::from_str(json).unwrap();
    v["sysctls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["key"].as_str().unwrap().to_string(),
                s["value"].as_str().unwrap().to_string(),
                s["scope"].as_str().unwrap().to_string(),
                s["check"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A bash prelude for `common::in_netns`: a scratch file over every kernel-wide key's
/// /proc/sys path that exists in the namespace, so a consumer that writes one changes nothing
/// outside. (Kernel-wide net.* keys do not exist in a new network namespace at all.)
fn shield(dir: &Path, json: &str) -> String {
    let mut s = String::from("set -e\n");
    for (i, (key, _, scope, _)) in sysctls(json).iter().enumerate() {
        if scope != "netns" {
            let p = format!("/proc/sys/{}", key.replace('.', "/"));
            let f = dir.join(format!("shield-{i}"));
            s.push_str(&format!(
                "if [ -e {p} ]; then cat {p} > {f}; mount --bind {f} {p}; fi\n",
                f = f.display()
            ));
        }
    }
    s
}

/// ansible-playbook accepts the play's syntax.
fn syntax_check(play: &Path) {
    let o = Command::new("ansible-playbook")
        .args(["--syntax-check", "-i", "localhost,"])
        .arg(play)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "syntax check: {}{}",
        stdout(&o),
        stderr(&o)
    );
}

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
    let dir = tempfile::tempdir().unwrap();
    common::copy_dir(&fixture("tuned"), dir.path());
    let sys = dir.path().join("proc/sys/net");
    std::fs::write(sys.join("core/somaxconn"), "100000\n").unwrap();
    std::fs::write(sys.join("ipv4/tcp_fin_timeout"), "5\n").unwrap();
    let root = dir.path().to_str().unwrap();
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

/// The manifests pass kubernetes-validate (strict, current Kubernetes); the pod sets only
/// per-namespace sysctls with the unsafe ones named for the kubelet, and the DaemonSet sets
/// every kernel-wide one.
#[test]
fn kubernetes_manifests_validate_and_split_pod_and_node() {
    if !have("kubernetes-validate") {
        return common::skip(
            "kubernetes-validate",
            "kubernetes-validate is not installed (pip install kubernetes-validate)",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("k8s.yaml");
    let root = fixture("default");
    let root = root.to_str().unwrap();
    // A proxy in front of the servers: its port range is exported too (a safe sysctl).
    export(&[
        "--to",
        "kubernetes",
        "--root",
        root,
        "--role",
        "proxy",
        "-o",
        file.to_str().unwrap(),
    ]);
    let o = Command::new("kubernetes-validate")
        .args(["--strict", "-k", "1.37.0"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("deployment/ws-server") && out.contains("daemonset/wstune-node-sysctls"),
        "{out}"
    );

    let text = std::fs::read_to_string(&file).unwrap();
    let docs: Vec<serde_yaml_ng::Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let all = sysctls(&export(&[
        "--to", "json", "--root", root, "--role", "proxy",
    ]));
    let pod: Vec<(String, String)> = docs[0]["spec"]["template"]["spec"]["securityContext"]
        ["sysctls"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().into(),
                s["value"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = all
        .iter()
        .filter(|(_, _, s, _)| s == "netns")
        .map(|(k, v, _, _)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(pod, want);
    let line = |k: &str| {
        text.lines()
            .find(|l| l.contains(&format!("- name: {k} ")))
            .unwrap()
            .to_string()
    };
    assert!(line("net.core.somaxconn").contains("unsafe"));
    assert!(line("net.ipv4.ip_local_port_range").contains("# safe"));
    assert!(
        text.contains("--allowed-unsafe-sysctls='net.core.somaxconn,net.ipv4.tcp_max_syn_backlog")
    );
    let script = docs[1]["spec"]["template"]["spec"]["initContainers"][0]["command"][2]
        .as_str()
        .unwrap();
    for (k, v, s, _) in &all {
        if s != "netns" {
            assert!(
                script.contains(&format!("raise {} ", k.replace('.', "/")))
                    && script.contains(&format!(" '{v}'\n")),
                "{k} in {script}"
            );
        }
    }
}

/// The DaemonSet wrote every kernel-wide value unconditionally and the play set exact values,
/// so a node that already had more was lowered. Run for real (the DaemonSet's script under
/// sh, the play under ansible-playbook) against a namespace with higher values, they leave
/// those unchanged and still raise the one below the profile.
#[test]
fn exported_daemonset_and_play_never_lower_a_node_that_has_more() {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture("default");
    let root = root.to_str().unwrap();
    let json = export(&["--to", "json", "--root", root]);
    let k8s = export(&["--to", "kubernetes", "--root", root]);
    let docs: Vec<serde_yaml_ng::Value> = serde_yaml_ng::Deserializer::from_str(&k8s)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let script = docs[1]["spec"]["template"]["spec"]["initContainers"][0]["command"][2]
        .as_str()
        .unwrap();
    std::fs::write(dir.path().join("daemonset.sh"), script).unwrap();
    let play = dir.path().join("wstune.yml");
    export(&[
        "--to",
        "ansible",
        "--root",
        root,
        "-o",
        play.to_str().unwrap(),
    ]);
    let prefix = dir.path().join("p");
    std::fs::create_dir(&prefix).unwrap();
    // Above the export: fs.nr_open, fs.file-max (ge), the range (covers), somaxconn (ge);
    // below it: fs.epoll.max_user_watches and tcp_max_syn_backlog; fin_timeout 5 is under the
    // ceiling (le) but also under its floor (25, HAProxy's "issues below 25-30 s"): raised to it.
    let higher = "echo 2147483584 > /proc/sys/fs/nr_open; echo 9223372036854775807 > /proc/sys/fs/file-max
echo 1000 > /proc/sys/fs/epoll/max_user_watches
echo 200000 > /proc/sys/net/core/somaxconn; echo 5 > /proc/sys/net/ipv4/tcp_fin_timeout
echo '1024 65535' > /proc/sys/net/ipv4/ip_local_port_range; echo 128 > /proc/sys/net/ipv4/tcp_max_syn_backlog";
    let show = "for k in fs/nr_open fs/file-max fs/epoll/max_user_watches net/core/somaxconn net/ipv4/tcp_fin_timeout net/ipv4/ip_local_port_range net/ipv4/tcp_max_syn_backlog; do printf '%s=%s;' $k \"$(cat /proc/sys/$k | tr '\\t' ' ')\"; done; echo";
    // tcp_fin_timeout is per namespace: the play sets it (to the floor), the DaemonSet, which
    // sets kernel-wide keys only, leaves it.
    let want = |fin: u32| {
        format!("fs/nr_open=2147483584;fs/file-max=9223372036854775807;fs/epoll/max_user_watches=5491511;net/core/somaxconn=200000;net/ipv4/tcp_fin_timeout={fin};net/ipv4/ip_local_port_range=1024 65535;")
    };
    let with_ansible = have("ansible-playbook");
    let script = format!(
        "{shield}
set +e
{higher}
sh {dir}/daemonset.sh; echo \"DAEMONSET rc=$? $({show})\"
{higher}
if {with_ansible}; then
ANSIBLE_LOCALHOST_WARNING=false ANSIBLE_NOCOLOR=1 ansible-playbook -i localhost, -c local \
  -e ansible_python_interpreter=\"$(command -v python3)\" \
  -e wstune_sysctl_file={prefix}/etc/sysctl.d/60-wstune.conf \
  -e wstune_limits_file={prefix}/etc/security/limits.d/60-wstune.conf {play} >&2
echo \"ANSIBLE rc=$? $({show})\"
grep -E '^(net.core.somaxconn|fs.nr_open|net.ipv4.tcp_fin_timeout)' {prefix}/etc/sysctl.d/60-wstune.conf | tr '\\n' ';' | sed 's/^/FILE /'; echo
fi
",
        shield = shield(dir.path(), &json),
        dir = dir.path().display(),
        prefix = prefix.display(),
        play = play.display(),
    );
    let Some(o) = common::in_netns(&script) else {
        return;
    };
    let all = format!("{}\nstderr:\n{}", stdout(&o), stderr(&o));
    let line = |tag: &str| {
        stdout(&o)
            .lines()
            .find(|l| l.starts_with(tag))
            .unwrap_or_else(|| panic!("no {tag}: {all}"))
            .to_string()
    };
    // 5491511 and 65535: raised to the profile's; the rest kept.
    assert_eq!(
        line("DAEMONSET "),
        format!(
            "DAEMONSET rc=0 {}net/ipv4/tcp_max_syn_backlog=128;",
            want(5)
        ),
        "the DaemonSet sets kernel-wide keys only: {all}"
    );
    if !with_ansible {
        return common::skip(
            "ansible",
            "ansible-playbook is not installed (pip install ansible)",
        );
    }
    assert_eq!(
        line("ANSIBLE "),
        format!(
            "ANSIBLE rc=0 {}net/ipv4/tcp_max_syn_backlog=65535;",
            want(25)
        ),
        "{all}"
    );
    // The file gets the host's own values beyond the profile's, and fin_timeout's floor: the
    // next boot neither lowers them nor leaves what check warns about.
    let file = line("FILE ");
    for want in [
        "net.core.somaxconn=200000",
        "fs.nr_open=2147483584",
        "net.ipv4.tcp_fin_timeout=25",
    ] {
        assert!(file.contains(want), "{want} in {file}: {all}");
    }
}

/// `docker run` accepts every flag (the CLI parses them before it looks for a daemon), and
/// docker-compose accepts the fragment.
#[test]
fn docker_flags_and_compose_fragment_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture("default");
    let root = root.to_str().unwrap();
    let compose = dir.path().join("compose.yaml");
    export(&[
        "--to",
        "compose",
        "--root",
        root,
        "-o",
        compose.to_str().unwrap(),
    ]);
    if have("docker-compose") {
        let o = Command::new("docker-compose")
            .arg("-f")
            .arg(&compose)
            .arg("config")
            .env("IMAGE", "busybox")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let cfg: serde_yaml_ng::Value = serde_yaml_ng::from_slice(&o.stdout).unwrap();
        let svc = &cfg["services"]["ws-server"];
        assert_eq!(svc["sysctls"]["net.core.somaxconn"].as_str(), Some("65535"));
        assert_eq!(svc["ulimits"]["nofile"]["hard"].as_u64(), Some(200000));
    } else {
        common::skip(
            "docker-compose",
            "docker-compose is not installed (apt-get install docker-compose)",
        );
    }

    let script = dir.path().join("run.sh");
    export(&[
        "--to",
        "docker",
        "--root",
        root,
        "-o",
        script.to_str().unwrap(),
    ]);
    if !have("docker") {
        // The docker CLI comes with the engine (apt's docker.io starts a daemon): not a CI install.
        return common::record_skip("docker-cli", "the docker CLI is not installed");
    }
    let o = Command::new("bash")
        .arg(&script)
        .arg("true")
        .env("IMAGE", "busybox")
        .env(
            "DOCKER_HOST",
            format!("unix://{}/no-daemon.sock", dir.path().display()),
        )
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(
        err.contains("Cannot connect to the Docker daemon"),
        "docker rejected a flag: {err}"
    );
}

/// The three units, and the serve unit with the `--to systemd` drop-in in its `.d` directory,
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

    // Without -o DIR there is nowhere to put three files: a clear refusal.
    let o = common::run(&["export", "--to", "systemd-unit"]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("-o DIR"), "{}", stderr(&o));
}

/// `systemd-analyze verify` on unit files in `dir` (with their drop-ins), offline.
pub fn verify(dir: &Path, names: &[&str]) {
    let mut cmd = Command::new("systemd-analyze");
    cmd.arg("verify")
        .env("SYSTEMD_UNIT_PATH", format!("{}:", dir.display()));
    for n in names {
        cmd.arg(dir.join(n));
    }
    let o = cmd.output().unwrap();
    assert!(
        o.status.success() && stderr(&o).trim().is_empty(),
        "systemd-analyze verify: {}{}",
        stdout(&o),
        stderr(&o)
    );
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
    let dir = tempfile::tempdir().unwrap();
    common::copy_dir(&fixture("default"), dir.path());
    std::fs::write(
        dir.path().join("usr/lib/sysctl.d/99-vendor.conf"),
        "net.core.somaxconn = 4096\n",
    )
    .unwrap();
    let text = export(&["--to", "sysctl", "--root", dir.path().to_str().unwrap()]);
    assert!(
        text.lines().any(|l| l.starts_with("# note: net.core.somaxconn: /usr/lib/sysctl.d/99-vendor.conf:1 sets 4096 and is applied after /etc/sysctl.d/60-wstune.conf")
            && l.contains("wins at boot")),
        "{text}"
    );
}

/// `--to nic` on a 4-queue veth in a private namespace: the files match the NIC by its name
/// (not this host's MAC address) and carry a header naming the host and the hardware they fit;
/// udev runs the rule for "add" and for "move" (the event a NIC renamed by udev gets its name
/// with), and its net_setup_link applies the .link file's channel counts. A virtual-only host,
/// a name that is no interface, and a NIC with fewer queues than the profile wants are refused
/// with the fix.
#[test]
fn nic_files_for_other_hosts_are_applied_by_udev_in_a_private_namespace() {
    if !have("ethtool") {
        return common::skip(
            "ethtool",
            "ethtool is not installed (apt-get install ethtool)",
        );
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/nic_export.sh");
    let Some(o) = common::in_netns(&format!("bash {}", script.display())) else {
        return;
    };
    let out = stdout(&o);
    let line = |tag: &str| common::tagged_line(&o, tag);
    let decoded = |tag: &str| common::tagged_base64(&o, tag);
    let none = line("NONE ");
    assert!(
        none.starts_with("NONE rc=3")
            && none.contains("no physical NIC")
            && none.contains("--nic NAME"),
        "{none}"
    );
    let missing = line("MISSING ");
    assert!(
        missing.starts_with("MISSING rc=3")
            && missing.contains("--nic wsx9: no such network interface")
            && missing.contains("wsx0"),
        "{missing}"
    );
    assert_eq!(line("EXPORT ").trim_end(), "EXPORT rc=0");
    let cpus = std::thread::available_parallelism().unwrap().get() as u32;
    let n = cpus.min(4);
    let rules = decoded("RULES ");
    assert!(
        rules.starts_with("# Generated by `wstune export --profile 100k --to nic --nic wsx0` for other hosts, computed on host "),
        "{rules}"
    );
    assert!(
        rules.contains(&format!(
            "#   wsx0: a virtual link, no NUMA node (CPUs {}), {n} receive and {n} transmit queues",
            if cpus == 1 {
                "0".to_string()
            } else {
                format!("0-{}", cpus - 1)
            }
        )),
        "{rules}"
    );
    assert!(rules.contains("and the NIC named wsx0"), "{rules}");
    assert!(
        rules.contains("# nic wsx0\nACTION==\"add|move\", SUBSYSTEM==\"net\", KERNEL==\"wsx0\", "),
        "{rules}"
    );
    assert!(!rules.contains("ATTR{address}"), "{rules}");
    let link = decoded("LINK ");
    assert!(link.contains("[Match]\nOriginalName=wsx0\n"), "{link}");
    assert!(
        link.contains(&format!("RxChannels={n}\nTxChannels={n}\n")),
        "{link}"
    );
    assert!(
        decoded("SYSCTL ").ends_with("net.core.rps_sock_flow_entries = 32768\n"),
        "the RFS table the rule's rps_flow_cnt shares"
    );
    let fewer = line("FEWER ");
    assert!(
        fewer.starts_with("FEWER rc=3") && fewer.contains("sudo wstune apply --nic wsx0"),
        "{fewer}"
    );
    if out.contains("UDEV-MISSING") {
        return common::skip("udev", "udevadm is not installed (apt-get install udev)");
    }
    // Every queue's RPS, RFS and XPS written by udev (3 per queue), on either event.
    let all = (1u64 << cpus) - 1;
    for action in ["add", "move"] {
        let l = line(&format!("UDEV-{action} "));
        let rx0 = u64::from_str_radix(
            l.split_whitespace()
                .nth(2)
                .unwrap()
                .trim_start_matches("rx0=")
                .replace(',', "")
                .as_str(),
            16,
        )
        .unwrap();
        assert!(
            l.starts_with(&format!("UDEV-{action} rc=0"))
                && l.ends_with(&format!(" {} writes", 3 * n)),
            "{l}"
        );
        assert_eq!(rx0, all, "{l}");
    }
    assert_eq!(
        line("UDEV-LINK "),
        format!("UDEV-LINK rc=0 Config file /etc/systemd/network/10-wstune-wsx0.link is applied channels=RX:{n}TX:{n}")
    );
}

/// The pinned interrupts' boot script and unit for other hosts, from a captured tree with an
/// 8-queue mlx5 NIC on NUMA node 1: systemd-analyze accepts the unit, the script (header after
/// its `#!` line) pins each interrupt by name on a tree, and the Ansible play with `--nic`
/// passes ansible-playbook's syntax check and, run for real under a scratch root, installs the
/// very files `--to nic -o DIR` wrote.
#[test]
fn nic_boot_script_unit_and_play_for_other_hosts_are_accepted_by_their_consumers() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("host");
    common::copy_dir(&fixture("tuned"), &tree);
    std::fs::write(
        tree.join("sys/class/net/eth0/device/local_cpulist"),
        "16-31\n",
    )
    .unwrap();
    for (k, irq) in (40..48).enumerate() {
        let d = tree.join(format!("proc/irq/{irq}/mlx5_comp{k}@pci:0000:3b:00.0"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(".keep"), "").unwrap();
        std::fs::write(
            tree.join(format!("proc/irq/{irq}/smp_affinity_list")),
            "0-31\n",
        )
        .unwrap();
    }
    let profile = dir.path().join("pinned.yaml");
    std::fs::write(
        &profile,
        "extends: 100k\nname: pinned\nnic:\n  irq: pinned\n",
    )
    .unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir(&files).unwrap();
    let (t, pr) = (tree.to_str().unwrap(), profile.to_str().unwrap());
    export(&[
        "--root",
        t,
        "--profile",
        pr,
        "--to",
        "nic",
        "--nic",
        "eth0",
        "-o",
        files.to_str().unwrap(),
    ]);
    let read = |p: &str| std::fs::read_to_string(files.join(p)).unwrap();
    let rules = read("etc/udev/rules.d/60-wstune-nic.rules");
    assert!(
        rules.contains("KERNEL==\"eth0\"")
            && rules.contains("ENV{SYSTEMD_WANTS}+=\"wstune-nic-irq.service\""),
        "{rules}"
    );
    assert!(
        rules.contains(&format!("{t}:\n#   CPUs 0-31 online"))
            && rules.contains("#   eth0: driver and model not readable (no device/uevent), no NUMA node (CPUs 16-31), 8 receive"),
        "{rules}"
    );
    let script = files.join("etc/wstune/nic-irq.sh");
    let text = std::fs::read_to_string(&script).unwrap();
    assert!(
        text.starts_with("#!/bin/sh\n# Generated by `wstune export"),
        "{text}"
    );
    let sh = Command::new("sh").arg(&script).arg(&tree).output().unwrap();
    assert!(sh.status.success(), "{}", stderr(&sh));
    for (k, irq) in (40..48).enumerate() {
        let now = std::fs::read_to_string(tree.join(format!("proc/irq/{irq}/smp_affinity_list")))
            .unwrap();
        assert_eq!(
            now.trim(),
            (16 + k).to_string(),
            "IRQ {irq}, node 1's CPUs in turn"
        );
    }
    if have("systemd-analyze") {
        verify(
            &files.join("etc/systemd/system"),
            &["wstune-nic-irq.service"],
        );
    } else {
        common::skip(
            "systemd",
            "systemd-analyze is not installed (apt-get install systemd)",
        );
    }
    // --nic is only for the forms that carry NIC files.
    let o = common::run(&["export", "--root", t, "--to", "sysctl", "--nic", "eth0"]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("--to nic"), "{}", stderr(&o));
    // The play carries the files only when asked.
    let plain = export(&["--root", t, "--profile", pr, "--to", "ansible"]);
    assert!(!plain.contains("wstune_nic_files"), "{plain}");
    if !have("ansible-playbook") {
        return common::skip(
            "ansible",
            "ansible-playbook is not installed (pip install ansible)",
        );
    }
    let play = dir.path().join("wstune.yml");
    export(&[
        "--root",
        t,
        "--profile",
        pr,
        "--to",
        "ansible",
        "--nic",
        "eth0",
        "-o",
        play.to_str().unwrap(),
    ]);
    syntax_check(&play);
    // Only the NIC tasks, under a scratch root: nothing of this host changes.
    let root = dir.path().join("root");
    let o = Command::new("ansible-playbook")
        .args(["-i", "localhost,", "-c", "local", "--start-at-task"])
        .arg("Directories of the NICs' boot files")
        .env("ANSIBLE_LOCALHOST_WARNING", "false")
        .env("ANSIBLE_NOCOLOR", "1")
        .arg("-e")
        .arg(format!("ansible_python_interpreter={}", which("python3")))
        .arg("-e")
        .arg(format!("wstune_nic_root={}", root.display()))
        .arg(&play)
        .output()
        .unwrap();
    assert!(o.status.success(), "play: {}{}", stdout(&o), stderr(&o));
    for f in [
        "etc/udev/rules.d/60-wstune-nic.rules",
        "etc/wstune/nic-irq.sh",
        "etc/systemd/system/wstune-nic-irq.service",
    ] {
        assert_eq!(
            std::fs::read_to_string(root.join(f)).unwrap(),
            read(f),
            "{f} as the play installed it"
        );
    }
}

/// The path of a program on PATH (the play runs its modules with the same python3 as the
/// namespace test's).
fn which(name: &str) -> String {
    let o = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .unwrap();
    stdout(&o).trim().to_string()
}
