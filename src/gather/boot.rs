//! The boot view: the sysctl configuration the next boot applies, read as `sysctl --system`
//! reads it, so a check can judge the value the host will have after a reboot.

use crate::catalog::facts::{BootConfig, BootEntry, Reading, SYSCTL_CONF, SYSCTL_DIRS};
use crate::host::{Backend, ReadError};
use std::collections::BTreeMap;

/// The boot-time sysctl configuration in the order `sysctl --system` applies it
/// ([`SYSCTL_DIRS`]: `*.conf` by name, the earlier directory winning a name; /etc/sysctl.conf
/// last), each file read once.
pub fn read_boot_config(backend: &dyn Backend) -> BootConfig {
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut any = false;
    for dir in SYSCTL_DIRS {
        let Ok(entries) = backend.list(dir) else {
            continue;
        };
        any = true;
        for name in entries.into_iter().filter(|n| n.ends_with(".conf")) {
            names
                .entry(name.clone())
                .or_insert_with(|| format!("{dir}/{name}"));
        }
    }
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    let listed = names.len();
    for (i, path) in names
        .into_values()
        .chain([SYSCTL_CONF.to_string()])
        .enumerate()
    {
        match backend.read(&path) {
            Ok(text) => {
                any |= path == SYSCTL_CONF;
                files.push((path, text));
            }
            // /etc/sysctl.conf is optional; a listed file that cannot be read (not UTF-8, a
            // link loop, no permission) is named: what it sets at boot is unknown.
            Err(ReadError::NotFound(_)) if i == listed => {}
            Err(e) => skipped.push((path, e.to_string())),
        }
    }
    BootConfig {
        files,
        any,
        skipped,
    }
}

/// The entry that sets `key` at the next boot (a single lookup; `gather` reads the whole
/// configuration once instead).
pub fn boot_entry(backend: &dyn Backend, key: &str) -> Reading<BootEntry> {
    read_boot_config(backend).entry(key)
}
