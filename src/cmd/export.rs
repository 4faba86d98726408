//! `wstune export`: check (to learn the targets and the host's current values), the same
//! value rule apply uses (`apply::plan::settings`), then one renderer from `crate::export`.

use crate::apply::plan;
use crate::engine::check::{report_and_facts, Resolved};
use crate::export::{self, Export, Format};
use crate::outcome::Outcome;
use crate::output;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;

/// `export`, resolved: inputs and a Linux backend (this host or a `--root` tree), the form,
/// the unit a drop-in is for (a valid unit name), and where to write.
pub struct Request {
    pub host: Resolved,
    pub to: Format,
    pub unit: String,
    /// `-o`: a file, or for the systemd units a directory; else standard output.
    pub output: Option<PathBuf>,
}

pub fn run(a: Request) -> Result<Outcome> {
    let Resolved { inputs, backend } = &a.host;
    let backend = backend.as_ref();
    let (report, facts) = report_and_facts(inputs, backend, None);
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
    if a.to == Format::SystemdUnit {
        return units(&e, &a);
    }
    output::emit(a.output.as_deref(), &export::render(&e, a.to, &a.unit))?;
    Ok(Outcome::Ok)
}

/// Three files, so `-o` names a directory.
fn units(e: &Export, a: &Request) -> Result<Outcome> {
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
    Ok(Outcome::Ok)
}
