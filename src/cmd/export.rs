//! `wstune export`: check (to learn the targets and the host's current values), the same
//! value rule apply uses (`apply::plan::settings`), then one renderer from `crate::export`.

use crate::apply::plan;
use crate::cli::args::{ExportArgs, ExportFormat, TargetArgs};
use crate::cli::{exit, resolve};
use crate::cmd::check::make_report_and_facts;
use crate::export::{self, Export, Format};
use crate::output;
use anyhow::{bail, Context, Result};

pub fn run(a: &ExportArgs) -> Result<u8> {
    let backend = resolve::backend(a.root.as_deref(), None)?;
    let backend = backend.as_ref();
    let target = TargetArgs {
        profile: a.profile.clone(),
        pid: None,
        unit: None,
        catalog: a.catalog.clone(),
    };
    let inputs = resolve::inputs(&target, backend)?;
    if inputs.catalog.platform != crate::catalog::Platform::Linux {
        bail!(
            "export writes Linux settings; {} is not a Linux host (use `wstune apply` on Windows)",
            backend.describe().source
        );
    }
    if a.unit.is_empty() || a.unit.contains('/') {
        bail!(
            "--unit '{}': not a systemd unit name; pass e.g. --unit myserver.service",
            a.unit
        );
    }
    let (report, facts) = make_report_and_facts(&inputs, backend, None);
    let info = backend.describe();
    let e = Export {
        profile: inputs.profile.profile.name.clone(),
        source: inputs.profile.source.to_string(),
        connections: inputs.profile.profile.connections,
        host: if info.source == "live" {
            format!("host {}", info.hostname)
        } else {
            info.source.clone()
        },
        settings: plan::settings(&inputs.catalog, &report.results, &facts),
    };
    let format = match a.to {
        ExportFormat::Sysctl => Format::Sysctl,
        ExportFormat::Limits => Format::Limits,
        ExportFormat::Systemd => Format::Systemd,
        ExportFormat::SystemdUnit => return units(&e, a),
        ExportFormat::Ansible => Format::Ansible,
        ExportFormat::Kubernetes => Format::Kubernetes,
        ExportFormat::Docker => Format::Docker,
        ExportFormat::Compose => Format::Compose,
        ExportFormat::Json => Format::Json,
    };
    output::emit(a.output.as_deref(), &export::render(&e, format, &a.unit))?;
    Ok(exit::OK)
}

/// Three files, so `-o` names a directory.
fn units(e: &Export, a: &ExportArgs) -> Result<u8> {
    let Some(dir) = a.output.as_deref().filter(|d| d.is_dir()) else {
        bail!("--to systemd-unit writes three files (wstune-serve.service, wstune-check.service, wstune-check.timer): give an existing directory with -o DIR");
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
        ("wstune-check.service", export::check_service(e)),
        ("wstune-check.timer", export::check_timer(e)),
    ] {
        let path = dir.join(name);
        output::write_atomic(&path, &text)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(exit::OK)
}
