//! Exports for containers and clusters: Kubernetes manifests (pod and node split, validated),
//! the DaemonSet and play never lowering a node that has more, docker flags and compose.

use crate::common;

use super::{export, shield, sysctls};
use common::{fixture, have, stderr, stdout};
use std::process::Command;

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
