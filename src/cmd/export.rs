//! `wstune export`: check (to learn the targets and the host's current values), the same
//! value rule apply uses (`apply::plan::settings`), then one renderer from `crate::export`.

use crate::apply::plan;
use crate::engine::check::{report_and_facts, HostInputs};
use crate::export::{self, Export, Format};
use crate::outcome::Outcome;
use crate::output;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;

/// `export`, resolved: inputs and a Linux backend (this host or a `--root` tree), the form,
/// the unit a drop-in is for (a valid unit name), and where to write.
pub struct Request {
    pub host: HostInputs,
    pub to: Format,
    /// `--nic`: the NICs whose boot files are rendered (`--to nic`: every physical one when
    /// empty; `--to ansible`: none when empty).
    pub nics: Vec<String>,
    pub unit: String,
    /// `-o`: a file, or for the systemd units a directory; else standard output.
    pub output: Option<PathBuf>,
    /// `--to selftest-job|selftest-ansible`: the shards' run.
    pub shards: Option<crate::export::shards::ShardRun>,
    /// `--image`: what a Kubernetes workload runs.
    pub image: String,
}

pub fn run(a: Request) -> Result<Outcome> {
    let HostInputs { inputs, backend } = &a.host;
    let backend = backend.as_ref();
    let (report, facts) = report_and_facts(inputs, backend, None);
    let info = backend.describe();
    let e = Export {
        profile: inputs.profile.profile.name.clone(),
        source: inputs.profile.source.to_string(),
        connections: inputs.profile.profile.connections,
        stop_secs: inputs
            .profile
            .profile
            .server
            .drain
            .stop_secs(inputs.profile.profile.server.max_connections),
        host: if info.source == "live" {
            format!("host {}", info.hostname)
        } else {
            info.source.clone()
        },
        settings: plan::settings(&inputs.catalog, &report.results, &facts),
        nic: None,
        shards: a.shards.clone(),
        image: a.image.clone(),
    };
    let e = if a.to == Format::Nic || !a.nics.is_empty() {
        let files = nic_files(&a, &e.host)?;
        Export {
            nic: Some(files),
            ..e
        }
    } else {
        e
    };
    if a.to == Format::SystemdUnit {
        return units(&e, &a);
    }
    if a.to == Format::Nic {
        if let Some(dir) = a.output.as_deref() {
            return nic_tree(&e, dir);
        }
    }
    output::emit(a.output.as_deref(), &export::render(&e, a.to, &a.unit))?;
    Ok(Outcome::Ok)
}

/// The NICs' boot files, from the plan apply makes (matched by name, for other hosts), with
/// what another host must have for them to fit: this host's NIC model, CPUs and NUMA layout.
fn nic_files(a: &Request, host: &str) -> Result<export::nic::NicFiles> {
    use crate::apply::nic as apply_nic;
    use export::nic::{NicHardware, NicOrigin};
    let backend = a.host.backend.as_ref();
    let links = backend.links().unwrap_or_default();
    let found = || {
        if links.is_empty() {
            "none found".to_string()
        } else {
            format!(
                "found: {}",
                links
                    .iter()
                    .map(|l| l.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    };
    let chosen: Vec<&crate::host::Link> = if a.nics.is_empty() {
        let physical: Vec<_> = links.iter().filter(|l| l.physical).collect();
        if physical.is_empty() {
            bail!(
                "--to nic: {host} has no physical NIC ({}); the files are computed from a NIC's queues, CPUs and NUMA node, so run the export on a host of the fleet's hardware, or name a link with --nic NAME",
                found()
            );
        }
        physical
    } else {
        let mut v = Vec::new();
        for name in &a.nics {
            match links.iter().find(|l| &l.name == name) {
                Some(l) => v.push(l),
                None => bail!(
                    "--nic {name}: no such network interface on {host} ({}); `ip link` lists them. The files are computed from the named NIC's queues here, so run the export on a host that has it",
                    found()
                ),
            }
        }
        v
    };
    let nics: Vec<crate::nic::NicFacts> = chosen
        .iter()
        .map(|l| crate::nic::read(backend, &l.name, l.physical))
        .collect();
    let irqbalance = backend
        .systemd_property("irqbalance.service", "ActiveState")
        .ok()
        .map(|s| s.trim() == "active");
    let n = apply_nic::plan(&apply_nic::Inputs {
        profile: &a.host.inputs.profile.profile.nic,
        nics: &nics,
        named: true,
        evidence: &crate::nic::Evidence::default(),
        // Rendered whatever this host's own flow table holds.
        flow_entries: Some(0),
        irqbalance,
        rules_now: "",
        irq_script_now: "",
        // irqbalance's own file is each host's: not rendered for others.
        irq_policy_now: "",
        irqbalance_config: None,
        nic_sysctl_now: "",
        links_now: &[],
        // The receive budget follows a watch's evidence, which other hosts have their own of.
        budget: (None, None),
        scope: plan::Scope {
            runtime: false,
            persist: true,
        },
        for_other_hosts: true,
    });
    // Queues this host does not have yet: their RPS and XPS cannot be computed before they exist.
    for x in &n.actions {
        if let (plan::Op::NicLinkFile { nic }, Some(from)) = (&x.op, &x.from) {
            if *from != x.to {
                bail!(
                    "{nic} has {from} queues here and the profile's CPUs want {}: the queue settings of the other hosts' NICs are computed from this one's queues, so raise them first (sudo wstune apply --nic {nic}), then export again",
                    x.to
                );
            }
        }
    }
    if n.files.is_empty() {
        bail!(
            "the profile changes nothing at boot on {} here ({}): there are no NIC files to export",
            nics.iter()
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            n.notes.join("; ")
        );
    }
    let text = |p: &str| backend.read(p).ok().map(|t| t.trim().to_string());
    let nodes = backend
        .list("/sys/devices/system/node")
        .unwrap_or_default()
        .into_iter()
        .filter(|d| {
            d.strip_prefix("node")
                .is_some_and(|k| k.parse::<u32>().is_ok())
        })
        .filter_map(|d| {
            text(&format!("/sys/devices/system/node/{d}/cpulist")).map(|c| format!("{d} {c}"))
        })
        .collect();
    let hardware = nics
        .iter()
        .map(|nic| {
            let uevent =
                text(&format!("/sys/class/net/{}/device/uevent", nic.name)).unwrap_or_default();
            let field = |k: &str| {
                uevent
                    .lines()
                    .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
                    .map(str::to_string)
            };
            NicHardware {
                name: nic.name.clone(),
                physical: nic.physical,
                driver: field("DRIVER"),
                model: field("PCI_ID"),
                numa_node: nic.numa_node,
                local_cpus: crate::nic::cpu_list(&nic.local_cpus),
                rx: nic.rx.len(),
                tx: nic.tx.len(),
            }
        })
        .collect();
    let profile = a.host.inputs.profile.source.trim_start_matches("builtin:");
    let named: String = a.nics.iter().map(|n| format!(" --nic {n}")).collect();
    // The command that renders these files (the play carries the same ones).
    let origin = NicOrigin {
        command: format!("wstune export --profile {profile} --to nic{named}"),
        host: host.to_string(),
        cpus: nics
            .first()
            .map(|n| crate::nic::cpu_list(&n.cpus))
            .unwrap_or_default(),
        nodes,
        nics: hardware,
        notes: n.notes,
    };
    Ok(export::nic::with_headers(origin, n.files))
}

/// `--to nic -o DIR`: each file under DIR at its own path (DIR/etc/udev/rules.d/...), so
/// `cp -r DIR/. /` (or the Ansible play) installs them.
fn nic_tree(e: &Export, dir: &std::path::Path) -> Result<Outcome> {
    if !dir.is_dir() {
        bail!(
            "--to nic writes several files under -o DIR at their own paths (DIR/etc/udev/rules.d/...): {} is not an existing directory; create it first",
            dir.display()
        );
    }
    // Each file whole or not at all; on a failure, the ones already written are named, so
    // nothing half-done is installed from DIR unnoticed.
    let mut written: Vec<String> = Vec::new();
    for (path, text) in e.nic.iter().flat_map(|n| &n.files) {
        let at = dir.join(path.trim_start_matches('/'));
        let done = |w: &[String]| {
            if w.is_empty() {
                String::new()
            } else {
                format!(
                    " (already written: {}; remove them or write again)",
                    w.join(", ")
                )
            }
        };
        if let Some(parent) = at.parent() {
            crate::host::atomic::create_parents(&at)
                .with_context(|| format!("creating {}{}", parent.display(), done(&written)))?;
        }
        output::write_atomic(&at, text)
            .with_context(|| format!("writing {}{}", at.display(), done(&written)))?;
        // Scripts keep the executable bit through `cp -r DIR/. /`: irqbalance execs its
        // policy script.
        if text.starts_with("#!") {
            crate::host::atomic::make_executable(&at)
                .with_context(|| format!("making {} executable", at.display()))?;
        }
        written.push(at.display().to_string());
    }
    Ok(Outcome::Ok)
}

/// Four files, so `-o` names a directory.
fn units(e: &Export, a: &Request) -> Result<Outcome> {
    let Some(dir) = a.output.as_deref().filter(|d| d.is_dir()) else {
        bail!("--to systemd-unit writes four files (wstune-serve.service, wstune-serve.socket, wstune-check.service, wstune-check.timer): give an existing directory with -o DIR");
    };
    // ProtectHome=yes hides /root and /home from the service: a binary there cannot start.
    if let Ok(exe) = std::env::current_exe() {
        if exe.starts_with("/root") || exe.starts_with("/home") {
            eprintln!(
                "wstune: warning: ExecStart is {}, inside a home directory that the units' ProtectHome=yes hides: install wstune outside it first (sudo install -m 755 {} /usr/local/bin/) and export again with that binary",
                exe.display(),
                exe.display()
            );
        }
    }
    for (name, text) in [
        ("wstune-serve.service", export::serve_service(e)),
        ("wstune-serve.socket", export::serve_socket(e)),
        ("wstune-check.service", export::check_service(e)),
        ("wstune-check.timer", export::check_timer(e)),
    ] {
        let path = dir.join(name);
        output::write_atomic(&path, &text)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(Outcome::Ok)
}
