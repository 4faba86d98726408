//! The check pipeline: load a profile and the catalog for a backend's platform, read every
//! value the catalog names once (`gather`), evaluate them (pure), and assemble one
//! [`CheckReport`]. `check` renders it; `apply` plans from it; `export` takes its values;
//! `serve` names its failures.

use crate::catalog::eval::{evaluate, Status, Summary};
use crate::catalog::facts::{FactsRequest as Options, HostFacts};
use crate::catalog::{self, Catalog};
use crate::gather::gather;
use crate::host::store::Store;
use crate::host::{Backend, ReadError};
use crate::profile::{self, Loaded, Role};
use crate::report::{self, CheckReport, HostRef, ProfileRef};
use anyhow::{bail, Result};
use std::collections::BTreeSet;

/// What to check against, as named by the user: a profile, optionally a running process and a
/// systemd unit, optionally another catalog file.
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// A built-in profile name or a profile file.
    pub profile: String,
    pub pid: Option<u32>,
    pub unit: Option<String>,
    /// A catalog file instead of the built-in one for the host's platform.
    pub catalog: Option<String>,
    /// `--role`: the host's role, over the profile's and what is detected.
    pub role: Option<Role>,
}

impl Target {
    /// Just a profile: no process, no unit, the built-in catalog.
    pub fn profile(spec: &str) -> Target {
        Target {
            profile: spec.to_string(),
            ..Target::default()
        }
    }
}

/// Everything the pipeline needs besides the backend: loaded, validated, ready to gather.
pub struct Inputs {
    pub profile: Loaded,
    /// The catalog as this host's role needs it ([`Catalog::for_role`]).
    pub catalog: Catalog,
    pub options: Options,
    pub role: Role,
    /// Where [`Inputs::role`] came from, for the report.
    pub role_from: String,
}

/// Files only a Kubernetes node has: the kubelet's configuration (kubeadm's paths and the
/// kubelet's default `--config`).
const KUBELET_FILES: [&str; 2] = [
    "/var/lib/kubelet/config.yaml",
    "/etc/kubernetes/kubelet.conf",
];

/// The host's role: `--role`, else the profile's `role:`, else a Kubernetes node when a
/// kubelet's configuration is there, else a server. A proxy is never guessed (nginx and
/// HAProxy also serve and terminate): a proxy host says so.
pub fn role_of(flag: Option<Role>, profile: Option<Role>, backend: &dyn Backend) -> (Role, String) {
    if let Some(r) = flag {
        return (r, "--role".into());
    }
    if let Some(r) = profile {
        return (r, "profile".into());
    }
    if backend.platform() == crate::host::Platform::Linux {
        if let Some(path) = KUBELET_FILES.iter().find(|p| backend.read(p).is_ok()) {
            return (Role::KubernetesNode, format!("detected: {path}"));
        }
    }
    (Role::Server, "default".into())
}

/// Inputs with the backend they were validated against.
pub struct HostInputs {
    pub inputs: Inputs,
    pub backend: Box<dyn Backend>,
}

/// Profile, catalog and options for a backend, with `--pid` and `--unit` validated against it.
pub fn inputs(t: &Target, backend: &dyn Backend) -> Result<Inputs> {
    let profile = profile::load(&t.profile)?;
    let known: BTreeSet<String> = profile.profile.variables().into_keys().collect();
    let (role, role_from) = role_of(t.role, profile.profile.role, backend);
    let catalog = catalog::load(backend.platform(), t.catalog.as_deref(), &known)?.for_role(role);
    if let Some(pid) = t.pid {
        if !backend.process_exists(pid) {
            match backend.platform() {
                crate::host::Platform::Linux => bail!("--pid {pid}: no such process (or its /proc/{pid}/limits is unreadable); pass the PID of the running server, e.g. from `pgrep -f NAME`"),
                crate::host::Platform::Windows => bail!("--pid {pid}: no such process on this host; pass the PID of the running server, e.g. from `Get-Process NAME` or `tasklist`"),
            }
        }
    }
    if let Some(unit) = &t.unit {
        if unit.is_empty() || unit.contains('/') {
            bail!("--unit '{unit}': not a systemd unit name; pass e.g. --unit myserver.service");
        }
        // A unit systemd does not know is a usage error; systemd not running is a skip.
        if let Err(ReadError::Other(msg)) = backend.systemd_property(unit, "LimitNOFILE") {
            bail!("--unit {unit}: {msg}");
        }
    }
    Ok(Inputs {
        profile,
        catalog,
        options: Options {
            pid: t.pid,
            unit: t.unit.clone(),
            watch: None,
        },
        role,
        role_from,
    })
}

/// Gather, evaluate and, with a `store`, report an interrupted or damaged journal entry and
/// compare the host with the last applied one.
pub fn report(r: &Inputs, backend: &dyn Backend, store: Option<&Store>) -> CheckReport {
    report_and_facts(r, backend, store).0
}

/// [`report`] and the host facts it was made from (what `apply`'s pure plan and `export`'s
/// values need too).
pub fn report_and_facts(
    r: &Inputs,
    backend: &dyn Backend,
    store: Option<&Store>,
) -> (CheckReport, HostFacts) {
    let facts = gather(&r.catalog, backend, &r.options);
    let mut results = evaluate(&r.catalog, &r.profile.profile.variables(), &facts);
    // The NIC checks follow what the watch measured (softirq time, softnet drops).
    crate::nic::advise(&r.catalog, &mut results);
    if let Some(s) = store {
        results.extend(crate::apply::journal_findings(s, backend));
    }
    let summary = Summary::of(&results);
    let report = CheckReport {
        schema_version: report::SCHEMA_VERSION,
        profile: ProfileRef {
            name: r.profile.profile.name.clone(),
            source: r.profile.source.clone(),
            connections: r.profile.profile.connections,
            role: r.role,
            role_from: r.role_from.clone(),
        },
        host: HostRef {
            platform: r.catalog.platform,
            info: facts.info.clone(),
        },
        results,
        summary,
    };
    (report, facts)
}

/// A load balancer's configuration to check beside the host (`check --lb-config`).
pub struct LbConfig {
    pub path: std::path::PathBuf,
    pub text: String,
    /// The running proxy whose fd limit counts (`--lb-pid`).
    pub pid: Option<u32>,
}

/// Add the load balancer's findings to a report. Err: `--lb-pid` unreadable.
pub fn add_lb(report: &mut CheckReport, lb: &LbConfig, profile: &profile::Profile) -> Result<()> {
    // This machine, not the checked host: the limits that matter are those of the proxy
    // running here; a `--root` tree holds no running proxy to measure.
    let machine = crate::host::Machine::live();
    let found = crate::lb::findings(&lb.path, &lb.text, profile, lb.pid, &machine)
        .map_err(anyhow::Error::msg)?;
    report.results.extend(found);
    report.summary = Summary::of(&report.results);
    Ok(())
}

/// What a server about to start on this host should be told: the failed findings (sysctl
/// boot views left out) as "id (current, needs op target)", and how many warnings.
pub fn host_check(report: &CheckReport) -> crate::selftest::report::HostCheck {
    let warnings = report
        .results
        .iter()
        .filter(|f| matches!(f.status, Status::Warn))
        .count();
    let failed: Vec<String> = report
        .results
        .iter()
        .filter(|f| matches!(f.status, Status::Fail) && !f.is_boot_view())
        .map(|f| {
            format!(
                "{} ({}, needs {} {})",
                f.id,
                f.current
                    .as_ref()
                    .map(|v| v.to_string())
                    .unwrap_or_default(),
                f.compare,
                f.target.as_ref().map(|v| v.to_string()).unwrap_or_default()
            )
        })
        .collect();
    crate::selftest::report::HostCheck {
        profile: report.profile.name.clone(),
        failed,
        warnings,
    }
}
