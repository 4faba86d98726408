//! clap's side of the value enums a flag parses into. The enums live beside their meaning
//! (`selftest::Scenario`, `lb::Kind`, `lb::Sticky`, `export::Format`, `profile::Role`,
//! `report::Show`, `report::ListFormat`) and know nothing of clap; here each is given its
//! command-line names and the help line `--help` lists for it. One enum per meaning: the flag
//! parses straight into the type the command works with, so no mirror has to be kept in step.

use crate::export::Format as ExportFormat;
use crate::lb::{Kind, Sticky};
use crate::profile::Role;
use crate::report::{ListFormat, Show};
use crate::selftest::Scenario;
use clap::builder::PossibleValue;
use clap::ValueEnum;

/// The names and help come from each scenario's own file (`selftest::scenario`).
impl ValueEnum for Scenario {
    /// The scenarios chosen by name: those with a help line (script is run by `--script`).
    fn value_variants<'a>() -> &'a [Self] {
        static BY_NAME: std::sync::LazyLock<Vec<Scenario>> = std::sync::LazyLock::new(|| {
            Scenario::ALL
                .into_iter()
                .filter(|s| s.workload().help().is_some())
                .collect()
        });
        &BY_NAME
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        let w = self.workload();
        Some(PossibleValue::new(w.name()).help(w.help()?))
    }
}

impl ValueEnum for Kind {
    fn value_variants<'a>() -> &'a [Self] {
        &[Kind::Haproxy, Kind::Nginx]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(match self {
            Kind::Haproxy => "haproxy",
            Kind::Nginx => "nginx",
        }))
    }
}

impl ValueEnum for Sticky {
    fn value_variants<'a>() -> &'a [Self] {
        &[Sticky::Cookie, Sticky::Source]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Sticky::Cookie => {
                PossibleValue::new("cookie").help("HAProxy inserts a cookie naming the backend")
            }
            Sticky::Source => {
                PossibleValue::new("source").help("The client's address picks the backend")
            }
        })
    }
}

impl ValueEnum for ExportFormat {
    fn value_variants<'a>() -> &'a [Self] {
        use ExportFormat::*;
        &[
            Sysctl,
            Limits,
            Systemd,
            SystemdUnit,
            Ansible,
            Kubernetes,
            Docker,
            Compose,
            Json,
            Nic,
            SelftestJob,
            SelftestAnsible,
            WatchSystemd,
            WatchDaemonset,
        ]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        use ExportFormat::*;
        let (name, help) = match self {
            Sysctl => ("sysctl", "A sysctl.d file (/etc/sysctl.d/60-wstune.conf)"),
            Limits => ("limits", "A limits.d file (/etc/security/limits.d/60-wstune.conf)"),
            Systemd => ("systemd", "A systemd drop-in for --unit with LimitNOFILE"),
            SystemdUnit => (
                "systemd-unit",
                "wstune-serve.service and .socket, wstune-check.service and .timer, into -o DIR",
            ),
            Ansible => (
                "ansible",
                "An Ansible playbook (ansible.posix.sysctl, community.general.pam_limits)",
            ),
            Kubernetes => (
                "kubernetes",
                "A Deployment with securityContext.sysctls and a DaemonSet for kernel-wide sysctls",
            ),
            Docker => ("docker", "`docker run --sysctl ... --ulimit nofile=...` flags"),
            Compose => ("compose", "A docker compose service fragment"),
            Json => ("json", "The settings as JSON, for other tools"),
            Nic => (
                "nic",
                "The NICs' boot files apply writes (udev rule, .link, sysctl.d, interrupt script and unit), matched by name, for hosts of this hardware; -o DIR writes them under DIR",
            ),
            SelftestJob => (
                "selftest-job",
                "A Kubernetes Indexed Job: one pod per shard of a self-test (--shards N, --image, the selftest flags after --), the reports merged with `wstune report merge`",
            ),
            SelftestAnsible => (
                "selftest-ansible",
                "An Ansible play running one shard per host of the wstune_generators group, fetching the reports and merging them on the controller (--shards N, the selftest flags after --)",
            ),
            WatchSystemd => (
                "watch-systemd",
                "wstune-watch.service: `wstune watch --serve 127.0.0.1:9977` as a hardened service (a dynamic user, no capabilities), for Prometheus on this host",
            ),
            WatchDaemonset => (
                "watch-daemonset",
                "A DaemonSet running `wstune watch --serve` on every node (the node's network, as nobody, read-only; --image), with Prometheus scrape annotations and a /healthz probe",
            ),
        };
        Some(PossibleValue::new(name).help(help))
    }
}

/// `--role`'s words are the profile's `role:` words ([`Role::as_str`]).
impl ValueEnum for Role {
    fn value_variants<'a>() -> &'a [Self] {
        &Role::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        let help = match self {
            Role::Server => "Accepts WebSocket clients; few outbound connections of its own",
            Role::Proxy => "Opens a backend connection per client (HAProxy, nginx, Envoy)",
            Role::KubernetesNode => {
                "A Kubernetes node (NodePorts 30000-32767, the kubelet on 10250)"
            }
        };
        Some(PossibleValue::new(self.as_str()).help(help))
    }
}

impl ValueEnum for Show {
    fn value_variants<'a>() -> &'a [Self] {
        &[Show::Problems, Show::All]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Show::Problems => PossibleValue::new("problems")
                .help("Failures and warnings in full, by area; passes as a count"),
            Show::All => PossibleValue::new("all").help("Every row, by area"),
        })
    }
}

impl ValueEnum for ListFormat {
    fn value_variants<'a>() -> &'a [Self] {
        &[ListFormat::Table, ListFormat::Json]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(match self {
            ListFormat::Table => "table",
            ListFormat::Json => "json",
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names are also the JSON report's (serde) for scenarios: one spelling each.
    #[test]
    fn every_scenario_parses_from_its_own_name_and_matches_its_json_name() {
        for s in Scenario::value_variants() {
            let name = s.to_possible_value().unwrap().get_name().to_string();
            assert_eq!(Scenario::from_str(&name, false), Ok(*s));
            assert_eq!(serde_json::to_string(s).unwrap(), format!("\"{name}\""));
        }
    }

    /// `--role`'s words are the ones a profile's `role:` is written in.
    #[test]
    fn every_role_parses_from_its_profile_word() {
        for r in Role::ALL {
            assert_eq!(Role::from_str(r.as_str(), false), Ok(r));
        }
    }
}
