//! `wstune export`: the profile's host settings in the form each toolchain wants (a sysctl.d
//! file, limits.d, a systemd drop-in, an Ansible playbook, Kubernetes manifests, docker flags,
//! a compose fragment, JSON).
//!
//! Place in the flow: findings -> [`crate::apply::plan::settings`] (the same value rule `apply`
//! uses: the profile's target, never lower than what the host already has) -> [`Export`] ->
//! one renderer per format. Renderers are pure text functions; every output is checked by the
//! tool that consumes it in `tests/commands/export.rs` (sysctl, ansible-playbook, kubernetes-validate,
//! docker-compose, systemd-analyze).

mod ansible;
mod containers;
mod files;
pub mod nic;
pub mod shards;
mod watch;

use crate::apply::plan::Settings;
use crate::catalog::Scope;
use serde::Serialize;

pub use files::{check_service, check_timer, serve_service, serve_socket};

/// What one export describes: the profile, where the values came from, and the settings.
pub struct Export {
    pub profile: String,
    /// Where the profile came from (builtin:100k, a path).
    pub source: String,
    pub connections: u64,
    /// Seconds a stop may take before the service manager kills `serve` (systemd's
    /// TimeoutStopSec): the profile's drain (delay and window) and the shutdown grace, with a
    /// margin (`DrainProfile::stop_secs`).
    pub stop_secs: u64,
    /// The host the values were computed on (hostname, or the --root tree).
    pub host: String,
    pub settings: Settings,
    /// The NICs' boot files (`--nic`, or `--to nic`): None when not asked for.
    pub nic: Option<nic::NicFiles>,
    /// A self-test over several generator hosts (`--to selftest-job|selftest-ansible`).
    pub shards: Option<shards::ShardRun>,
    /// The image a Kubernetes workload runs (`--image`; the watch DaemonSet's).
    pub image: String,
}

// Where Kubernetes lets each key be set: one list, the catalog's, which the check report's
// fix remarks read too.
pub use crate::catalog::kube::{kube_class, Kube};

/// One sysctl to set.
#[derive(Debug, Clone, Serialize)]
pub struct Sysctl {
    /// The check that asks for it (`wstune check` shows it under this id).
    pub check: String,
    pub key: String,
    /// As the kernel takes it: "65535", "1024 65535".
    pub value: String,
    /// `netns` (each network namespace, so each container, has its own) or `global`.
    pub scope: &'static str,
    pub kubernetes: Kube,
    /// How the host where it is set must compare, so that it is only ever raised there:
    /// `ge` (each field at least this), `le` (at most), `covers` (a range at least this
    /// wide), `eq` (exactly this); `RULE:N` (or `RULE:N,M`) when only those fields (0-based)
    /// are judged, the others keeping the host's own values; `le::LO` when a floor bounds the
    /// ceiling too (tcp_fin_timeout: kept between LO and the value, raised to LO below it).
    pub rule: String,
}

/// An awk program (POSIX; busybox's awk runs it) reading the current value on stdin, with
/// `-v want=VALUE -v r=RULE` ([`Sysctl::rule`]), printing the value to write there: per
/// whitespace-separated field, the node's own value where it is already beyond the wanted one
/// (`ge`: above it, `le`: below it, `covers`: a lower start or a higher end), else the wanted
/// one; with `RULE:N,M`, the fields but N and M keep the node's own (and with `ge`, a judged
/// field is never below the one before it: tcp_mem's max stays at or above its pressure
/// mark); with `le::LO`, a value under LO becomes LO. One program for the DaemonSet's script and the Ansible play.
pub const RAISE_AWK: &str = r#"BEGIN { split(r, p, ":"); rr = p[1]; nf = (p[2] == "" ? 0 : split(p[2], fl, ",")); for (j = 1; j <= nf; j++) only[fl[j] + 1] = 1; lo = p[3] } { n = split(want, w, " "); o = ""; for (i = 1; i <= n; i++) { v = w[i]; c = $i; if (c ~ /^-?[0-9]+$/ && v ~ /^-?[0-9]+$/) { if (nf && !(i in only)) v = c; else if ((rr == "ge" || (rr == "covers" && i == 2)) && c + 0 > v + 0) v = c; else if ((rr == "le" || (rr == "covers" && i == 1)) && c + 0 < v + 0) { v = c; if (lo != "" && c + 0 < lo + 0) v = lo }; if (nf && rr == "ge" && (i in only) && i > 1 && v + 0 < pv + 0) v = pv } pv = v; o = o (i > 1 ? " " : "") v } print o }"#;

impl Export {
    pub fn sysctls(&self) -> Vec<Sysctl> {
        self.settings
            .sysctls
            .iter()
            .map(|(check, key, value, scope)| Sysctl {
                check: check.clone(),
                key: key.clone(),
                value: value.clone(),
                scope: if *scope == Scope::Netns {
                    "netns"
                } else {
                    "global"
                },
                kubernetes: kube_class(key, *scope),
                rule: {
                    use crate::catalog::Compare;
                    let rule = self.settings.rules.get(key);
                    let r = match rule.map(|r| r.compare) {
                        Some(Compare::AtLeast) => "ge",
                        Some(Compare::AtMost) => "le",
                        Some(Compare::Covers) => "covers",
                        _ => "eq",
                    };
                    let fields: Vec<String> = rule
                        .map(|r| r.fields.iter().map(usize::to_string).collect())
                        .unwrap_or_default();
                    match rule.and_then(|r| r.floor) {
                        Some(lo) => format!("{r}:{}:{lo}", fields.join(",")),
                        None if fields.is_empty() => r.to_string(),
                        None => format!("{r}:{}", fields.join(",")),
                    }
                },
            })
            .collect()
    }

    /// Per-network-namespace sysctls: what a container runtime may set for one container.
    pub fn netns(&self) -> Vec<Sysctl> {
        self.sysctls()
            .into_iter()
            .filter(|s| s.scope == "netns")
            .collect()
    }

    /// Kernel-wide sysctls: set on the host (node) itself.
    pub fn node(&self) -> Vec<Sysctl> {
        self.sysctls()
            .into_iter()
            .filter(|s| s.scope != "netns")
            .collect()
    }

    /// Whether a format installs wstune's sysctl file (or sets its keys) along with the
    /// open-file limit: the play and the DaemonSet set fs.nr_open on the host they run on, and
    /// JSON carries both. The others (limits.d, a drop-in or unit, docker, compose) are
    /// installed alone, so their limit must fit the host's fs.nr_open without that file.
    fn carries_sysctls(format: &str) -> bool {
        matches!(format, "sysctl" | "ansible" | "kubernetes" | "json")
    }

    /// The open-file limit `format` writes ([`Settings::nofile`] or
    /// [`Settings::nofile_alone`]), and why it is lower than the profile asks, when it is.
    pub fn nofile(&self, format: &str) -> (Option<u64>, Option<&str>) {
        let s = &self.settings;
        if Self::carries_sysctls(format) {
            (s.nofile, s.nofile_note.as_deref())
        } else {
            (s.nofile_alone, s.nofile_alone_note.as_deref())
        }
    }

    /// The first comment lines of every text format: what made it and how to read the values.
    /// A value is "never lower" than the source host's own; only the formats that compare on
    /// the host where they run (the play, the DaemonSet) keep that promise on any other host.
    fn header(&self, format: &str, comment: &str) -> String {
        let host = &self.host;
        let mut s = format!(
            "{comment} Generated by `wstune export --profile {} --to {format}` ({}, {} connections).\n\
             {comment} Values: the profile's targets, never lower than what {host} already had\n\
             {comment} (its own value where that was beyond the target).\n",
            self.profile, self.source, self.connections
        );
        let where_set = match format {
            "ansible" => "The play compares each sysctl with the value of the host it runs on and keeps one already\n\
                 beyond it, and keeps a higher open-file limit than this one that the limits file or a file\n\
                 pam_limits reads before it already sets: it never lowers a host's value."
                .to_string(),
            "kubernetes" => "The DaemonSet compares each kernel-wide sysctl with its node's own value and never lowers\n\
                 it; the pod's sysctls are set as written, in each pod's own network namespace."
                .to_string(),
            _ => format!(
                "\"Never lower\" holds for {host} only: on another host these values are set as written,\n\
                 lowering any it has above them. Check that host first (`wstune check`), export on it (or\n\
                 from its `wstune snapshot` with --root), or use --to ansible, which compares on each host."
            ),
        };
        for l in where_set.lines() {
            s.push_str(&format!("{comment} {l}\n"));
        }
        for n in self.settings.notes.iter().map(String::as_str).chain(
            // The sysctl file writes no open-file limit: no note about one.
            Some(self.nofile(format).1)
                .filter(|_| format != "sysctl")
                .flatten(),
        ) {
            s.push_str(&format!("{comment} note: {n}\n"));
        }
        s
    }
}

/// The formats `--to` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Sysctl,
    Limits,
    Systemd,
    SystemdUnit,
    Ansible,
    Kubernetes,
    Docker,
    Compose,
    Json,
    /// The NICs' boot files; `-o DIR` writes each under DIR at its own path.
    Nic,
    /// A Kubernetes Indexed Job running a self-test's shards.
    SelftestJob,
    /// An Ansible play running a self-test's shards on an inventory group.
    SelftestAnsible,
    /// wstune-watch.service: the headless watch (`watch --serve 127.0.0.1:9977`), hardened.
    WatchSystemd,
    /// A DaemonSet running the headless watch on every node, scraped by Prometheus.
    WatchDaemonset,
}

/// The text of one export.
pub fn render(e: &Export, format: Format, unit: &str) -> String {
    match format {
        Format::Sysctl => files::sysctl(e),
        Format::Limits => files::limits(e),
        Format::Systemd => files::dropin(e, unit),
        Format::SystemdUnit => files::serve_service(e),
        Format::Ansible => ansible::playbook(e),
        Format::Kubernetes => containers::kubernetes(e),
        Format::Docker => containers::docker(e),
        Format::Compose => containers::compose(e),
        Format::Json => json(e),
        Format::Nic => nic_listing(e),
        Format::WatchSystemd => watch::service(e),
        Format::WatchDaemonset => watch::daemonset(e, &e.image),
        Format::SelftestJob | Format::SelftestAnsible => {
            let r = e
                .shards
                .as_ref()
                .expect("the shard formats are resolved with their run");
            if format == Format::SelftestJob {
                shards::job(e, r)
            } else {
                shards::play(e, r)
            }
        }
    }
}

/// The NIC files one after another, each under a line naming where it goes (for reading; `-o
/// DIR` writes them as files).
fn nic_listing(e: &Export) -> String {
    let mut s = String::new();
    for (path, text) in e.nic.iter().flat_map(|n| &n.files) {
        s.push_str(&format!("# ==> {path} <==\n{text}\n"));
    }
    s
}

fn json(e: &Export) -> String {
    #[derive(Serialize)]
    struct Out<'a> {
        profile: &'a str,
        source: &'a str,
        connections: u64,
        host: &'a str,
        sysctls: Vec<Sysctl>,
        nofile: Option<u64>,
        notes: Vec<&'a str>,
    }
    let (nofile, why) = e.nofile("json");
    let mut s = serde_json::to_string_pretty(&Out {
        profile: &e.profile,
        source: &e.source,
        connections: e.connections,
        host: &e.host,
        sysctls: e.sysctls(),
        nofile,
        notes: e
            .settings
            .notes
            .iter()
            .map(String::as_str)
            .chain(why)
            .collect(),
    })
    .expect("plain data serializes");
    s.push('\n');
    s
}

/// A YAML double-quoted scalar (values with spaces, keys with dots).
fn yq(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn export() -> Export {
        Export {
            profile: "100k".into(),
            source: "builtin:100k".into(),
            connections: 100_000,
            stop_secs: 75,
            host: "host h".into(),
            settings: Settings {
                sysctls: vec![
                    (
                        "c1".into(),
                        "net.core.somaxconn".into(),
                        "65535".into(),
                        Scope::Netns,
                    ),
                    (
                        "c2".into(),
                        "net.ipv4.ip_local_port_range".into(),
                        "10000 65535".into(),
                        Scope::Netns,
                    ),
                    (
                        "c3".into(),
                        "fs.nr_open".into(),
                        "1048576".into(),
                        Scope::Global,
                    ),
                ],
                nofile: Some(200_000),
                nofile_alone: Some(200_000),
                notes: vec![],
                rules: Default::default(),
                ..Default::default()
            },
            nic: None,
            shards: None,
            image: "ghcr.io/wstune/wstune:latest".into(),
        }
    }

    /// The raise program, run by the system's awk as the exported play and DaemonSet run it.
    fn raise(current: &str, want: &str, rule: &str) -> String {
        let out = std::process::Command::new("awk")
            .args([
                "-v",
                &format!("r={rule}"),
                "-v",
                &format!("want={want}"),
                RAISE_AWK,
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(current.as_bytes())?;
                c.wait_with_output()
            })
            .expect("awk runs");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    #[test]
    fn the_raise_program_keeps_each_judged_field_never_lower_and_the_others_the_hosts() {
        // tcp_mem: pressure (1) and high (2) raised, the host's own min (0) kept.
        let want = "287901 2000000 3000000";
        assert_eq!(
            raise("100 200 300\n", want, "ge:1,2"),
            "100 2000000 3000000"
        );
        // A node whose pressure mark is already above the wanted max: the max follows it.
        assert_eq!(
            raise("100 4000000 2000000\n", want, "ge:1,2"),
            "100 4000000 4000000"
        );
        // One field judged: the others are the host's.
        assert_eq!(raise("100 200 300\n", want, "ge:2"), "100 200 3000000");
        // The whole value.
        assert_eq!(raise("65535\n", "4096", "ge"), "65535");
        assert_eq!(raise("30\n", "15", "le"), "15");
        // A ceiling with a floor (tcp_fin_timeout: at most 30, not under 25).
        assert_eq!(raise("5\n", "30", "le::25"), "25");
        assert_eq!(raise("28\n", "30", "le::25"), "28");
        assert_eq!(raise("60\n", "30", "le::25"), "30");
        assert_eq!(
            raise("20000 60000\n", "10000 65535", "covers"),
            "10000 65535"
        );
    }

    #[test]
    fn containers_get_only_namespaced_keys_and_node_keys_are_named_for_the_host() {
        let e = export();
        let docker = render(&e, Format::Docker, "x.service");
        assert!(
            docker.contains("  --sysctl net.core.somaxconn=65535 \\\n"),
            "{docker}"
        );
        assert!(
            docker.contains("  --sysctl 'net.ipv4.ip_local_port_range=10000 65535' \\\n"),
            "{docker}"
        );
        assert!(
            docker.contains("  --ulimit nofile=200000:200000 \\\n"),
            "{docker}"
        );
        assert!(!docker.contains("--sysctl fs.nr_open"), "{docker}");
        assert!(docker.contains("#   fs.nr_open = 1048576"), "{docker}");
        let k8s = render(&e, Format::Kubernetes, "x.service");
        assert!(
            k8s.contains("--allowed-unsafe-sysctls='net.core.somaxconn'"),
            "{k8s}"
        );
        assert!(k8s.contains("raise fs/nr_open eq '1048576'"), "{k8s}");
        let sysctl = render(&e, Format::Sysctl, "x.service");
        assert!(
            sysctl.contains("\nnet.ipv4.ip_local_port_range = 10000 65535\n"),
            "{sysctl}"
        );
    }
}
