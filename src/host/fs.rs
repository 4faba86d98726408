//! What the live Linux backend (host/linux/) and the fixture backend (host/fixture.rs) share:
//! reading a host file safely, listing a directory, the link list from /sys, `systemctl show`
//! output, writing an existing kernel file. Both read the same formats; only where the bytes
//! come from differs.

use super::{Backend, Link, ReadError, WriteError};
use std::path::Path;

/// Where a captured tree keeps what is not a file on the live host (host identity, systemd
/// properties). Written by `wstune snapshot`, optional in hand-made fixtures.
pub const META_DIR: &str = "wstune";

/// A marker a snapshot leaves in directories it records as empty, so the tree survives git and
/// tar (neither keeps empty directories). Listings never show it.
pub const KEEP: &str = ".keep";

/// The largest file wstune reads from a host, live or captured. The biggest real one is
/// /proc/interrupts: about 11 bytes per CPU on each of a few hundred IRQ lines, ~3 MB on a
/// 512-CPU host; every sysctl is under a page. 8 MiB leaves room for that and bounds what a
/// broken tree (a file linked to /dev/zero, a runaway capture) can make wstune hold in memory.
pub const MAX_READ_BYTES: u64 = 8 << 20;

/// The entries of directory `full` (host path `shown`), sorted, each with whether it is a
/// directory (following links: /sys/class/net/eth0 is a link to one); [`KEEP`] left out.
pub fn list_dir(full: &Path, shown: &str) -> Result<Vec<(String, bool)>, ReadError> {
    let mut entries: Vec<(String, bool)> = std::fs::read_dir(full)
        .map_err(|e| ReadError::from_io(shown, &e))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name() != KEEP)
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let is_dir = full.join(&name).is_dir();
            (name, is_dir)
        })
        .collect();
    entries.sort();
    Ok(entries)
}

/// Links from /sys/class/net: how a captured tree (and a snapshot) sees them.
pub fn sysfs_links(host: &dyn Backend) -> Result<Vec<Link>, ReadError> {
    let mut out = Vec::new();
    for name in host.list("/sys/class/net")? {
        let base = format!("/sys/class/net/{name}");
        let physical = host.list(&format!("{base}/device")).is_ok();
        let queues = host.list(&format!("{base}/queues")).unwrap_or_default();
        let count = |p: &str| {
            Some(queues.iter().filter(|q| q.starts_with(p)).count() as u32).filter(|n| *n > 0)
        };
        out.push(Link {
            name,
            physical,
            rx_queues: count("rx-"),
            tx_queues: count("tx-"),
            registry_key: None,
        });
    }
    Ok(out)
}

/// Write `value` to the existing kernel file `full` (host path `shown`). Never creates: a key
/// this kernel lacks must fail, not appear in a captured tree.
pub fn write_existing(full: &Path, shown: &str, value: &str) -> Result<(), WriteError> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(full)
        .map_err(|e| WriteError::from_io(shown, value, &e))?;
    crate::failpoint::pause_in_write();
    f.write_all(format!("{value}\n").as_bytes())
        .map_err(|e| WriteError::from_io(shown, value, &e))
}

/// Read a host file whole, refusing what would hang or exhaust memory: anything but a regular
/// file (a FIFO blocks open and read forever, /dev/zero never ends), a file over
/// [`MAX_READ_BYTES`], and, with `confine`, a file whose real path leaves that directory.
/// `shown` is the host path (`/proc/meminfo`) used for a missing file, as checks name it; a
/// refusal names the file on disk, which is what the operator must fix.
pub fn read_regular(full: &Path, shown: &str, confine: Option<&Path>) -> Result<String, ReadError> {
    use crate::host::input::{read_bounded, Refused};
    let refuse = |why: String| ReadError::Other(format!("{}: {why}", full.display()));
    read_bounded(full, MAX_READ_BYTES, confine).map_err(|r| match r {
        Refused::Io(e) => ReadError::from_io(shown, &e),
        Refused::Directory | Refused::NotRegular => refuse(
            "not a regular file (a device, pipe or socket); a host tree holds plain files".into(),
        ),
        Refused::Outside(real) => refuse(format!(
            "is a link to {}, outside the tree; a captured tree holds its own files",
            real.display()
        )),
        Refused::TooLarge(cap) => refuse(format!(
            "larger than {} MiB, which no /proc or /sys file is; recapture it with `wstune snapshot`",
            cap >> 20
        )),
        Refused::NotUtf8 => refuse("is not UTF-8 text, which /proc and /sys files are".into()),
    })
}

/// `systemctl show` output (KEY=VALUE lines) -> one property; a unit systemd does not know is
/// an error naming it.
pub fn parse_show(text: &str, unit: &str, property: &str) -> Result<String, ReadError> {
    let get = |k: &str| {
        text.lines().find_map(|l| {
            l.strip_prefix(k)
                .and_then(|r| r.strip_prefix('='))
                .map(str::to_string)
        })
    };
    if get("LoadState").as_deref() == Some("not-found") {
        return Err(ReadError::Other(format!(
            "systemd has no unit '{unit}' (systemctl list-units shows the names)"
        )));
    }
    get(property).ok_or_else(|| ReadError::NotFound(format!("{property} of {unit}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn show_parsing() {
        assert_eq!(
            parse_show("LoadState=loaded\nLimitNOFILE=524288\n", "x", "LimitNOFILE"),
            Ok("524288".into())
        );
        assert!(
            matches!(parse_show("LoadState=not-found\nLimitNOFILE=1\n", "x", "LimitNOFILE"), Err(ReadError::Other(m)) if m.contains("no unit 'x'"))
        );
    }
}
