//! Args -> loaded inputs: the profile, the catalog for the host's platform, and the backend.
//! Every input is validated here, before anything runs, so a bad flag is one clear error.

use super::args::{CheckArgs, TargetArgs};
use crate::apply::store::Store;
use crate::catalog::{self, Catalog};
use crate::gather::Options;
use crate::host::{Backend, ReadError};
use crate::profile::{self, Loaded};
use anyhow::{bail, Result};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

/// Everything a command needs besides the backend.
pub struct Inputs {
    pub profile: Loaded,
    pub catalog: Catalog,
    pub options: Options,
}

pub struct Resolved {
    pub inputs: Inputs,
    pub backend: Box<dyn Backend>,
}

pub fn check(a: &CheckArgs) -> Result<Resolved> {
    let backend = backend(a.root.as_deref(), a.prefix.as_deref())?;
    let mut inputs = inputs(&a.target, backend.as_ref())?;
    inputs.options.watch = a.watch.map(Duration::from_secs);
    Ok(Resolved { inputs, backend })
}

/// The host to read and write: a captured tree or the live host, with `--prefix` moving the
/// files wstune owns.
pub fn backend(root: Option<&Path>, prefix: Option<&Path>) -> Result<Box<dyn Backend>> {
    if let Some(p) = prefix {
        if !p.is_dir() {
            bail!(
                "--prefix {}: no such directory; create it first (mkdir -p {})",
                p.display(),
                p.display()
            );
        }
    }
    Ok(crate::host::open(root, prefix)?)
}

/// Where the files wstune owns are written: `--prefix`, else the `--root` tree, else `/` (on a
/// live Windows host: the journal in `%ProgramData%\wstune`).
pub fn store(root: Option<&Path>, prefix: Option<&Path>) -> Store {
    Store::for_host(root, prefix)
}

/// Profile, catalog and options for a backend, with `--pid` and `--unit` validated against it.
pub fn inputs(t: &TargetArgs, backend: &dyn Backend) -> Result<Inputs> {
    let profile = profile::load(&t.profile)?;
    let known: BTreeSet<String> = profile.profile.variables().into_keys().collect();
    let catalog = catalog::load(backend.platform(), t.catalog.as_deref(), &known)?;
    if let Some(pid) = t.pid {
        if !backend.process_exists(pid) {
            match backend.platform() {
                catalog::Platform::Linux => bail!("--pid {pid}: no such process (or its /proc/{pid}/limits is unreadable); pass the PID of the running server, e.g. from `pgrep -f NAME`"),
                catalog::Platform::Windows => bail!("--pid {pid}: no such process on this host; pass the PID of the running server, e.g. from `Get-Process NAME` or `tasklist`"),
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
    })
}
