//! `wstune export`: every format is read by the tool that consumes it (sysctl, ansible-playbook,
//! kubernetes-validate, docker, docker-compose, systemd-analyze), and the values follow apply's
//! rule (the profile's target, never lower than what the host has).
//!
//! Nothing here changes the host: runtime values are set only inside a fresh network namespace,
//! with every kernel-wide key that is visible there covered by a bind-mounted scratch file, and
//! every file goes under a temporary directory. One submodule per idea: `host`, `containers`,
//! `nic`; the helpers they share are here.

use crate::common;

use common::{code, stderr, stdout};
use serde_json::Value as Json;
use std::path::Path;
use std::process::Command;

mod containers;
mod host;
mod nic;
mod shards;

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

/// The path of a program on PATH (the play runs its modules with the same python3 as the
/// namespace test's).
fn which(name: &str) -> String {
    let o = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .unwrap();
    stdout(&o).trim().to_string()
}
