//! What the live Linux backend (host/linux/) and the fixture backend (host/fixture.rs) share:
//! reading a host file safely, listing a directory, the link list from /sys, `systemctl show`
//! output, writing an existing kernel file. Both read the same formats; only where the bytes
//! come from differs.

use super::{Backend, Link, NicIdentity, ReadError, WriteError};
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

/// The PCI address of a link's device (`PCI_SLOT_NAME` in `device/uevent`, `0000:3b:00.0`);
/// None for a virtual link or a device on another bus.
pub fn pci_slot<B: Backend + ?Sized>(host: &B, name: &str) -> Option<String> {
    host.read(&format!("/sys/class/net/{name}/device/uevent"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("PCI_SLOT_NAME="))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Every link under /sys/class/net with the identity its files give ([`NicIdentity`]): the
/// index (`ifindex`), the address when `addr_assign_type` says it is the permanent one (0,
/// NET_ADDR_PERM), the PCI device (`PCI_SLOT_NAME` in `device/uevent`) and its port
/// (`dev_port`), and the boot (`boot_id`) where the tree has one. What a file does not say is
/// left unknown.
pub fn sysfs_identities<B: Backend + ?Sized>(host: &B) -> Result<Vec<NicIdentity>, ReadError> {
    let text = |p: &str| {
        host.read(p)
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
    };
    let boot = text("/proc/sys/kernel/random/boot_id");
    let mut out = Vec::new();
    for name in host.list("/sys/class/net")? {
        let base = format!("/sys/class/net/{name}");
        let permaddr = text(&format!("{base}/address"))
            .filter(|_| text(&format!("{base}/addr_assign_type")).as_deref() == Some("0"))
            .and_then(|a| hardware_address(&a));
        let device = pci_slot(host, &name).map(|slot| format!("pci:{slot}"));
        let dev_port = device
            .as_ref()
            .and_then(|_| text(&format!("{base}/dev_port")))
            .and_then(|p| p.parse().ok());
        out.push(NicIdentity {
            ifindex: text(&format!("{base}/ifindex")).and_then(|i| i.parse().ok()),
            permaddr,
            device,
            dev_port,
            netns: None,
            boot: boot.clone(),
            name,
        });
    }
    Ok(out)
}

/// A hardware address as identity: lowercase, None when it is empty or all zeros (no
/// address: a tunnel, or a driver that reports none).
pub fn hardware_address(text: &str) -> Option<String> {
    let a = text.trim().to_ascii_lowercase();
    let zero = a.bytes().all(|b| b == b'0' || b == b':');
    (!a.is_empty() && !zero).then_some(a)
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

    /// A captured tree's files give a NIC's identity: the address only where the kernel calls
    /// it permanent (a veth's random one is no identity), the PCI device and port.
    #[test]
    fn identities_come_from_sysfs_files_and_a_random_address_is_none() {
        let b = crate::host::memory::MemoryBackend::default()
            .file("/proc/sys/kernel/random/boot_id", "b1\n")
            .file("/sys/class/net/eth0/ifindex", "2\n")
            .file("/sys/class/net/eth0/address", "52:54:00:AB:CD:EF\n")
            .file("/sys/class/net/eth0/addr_assign_type", "0\n")
            .file("/sys/class/net/eth0/dev_port", "1\n")
            .file(
                "/sys/class/net/eth0/device/uevent",
                "DRIVER=ixgbe\nPCI_SLOT_NAME=0000:3b:00.1\n",
            )
            .file("/sys/class/net/veth0/ifindex", "7\n")
            .file("/sys/class/net/veth0/address", "b6:86:37:50:04:ef\n")
            .file("/sys/class/net/veth0/addr_assign_type", "1\n");
        let ids = sysfs_identities(&b).unwrap();
        assert_eq!(ids.len(), 2);
        let eth0 = &ids[0];
        assert_eq!(eth0.permaddr.as_deref(), Some("52:54:00:ab:cd:ef"));
        assert_eq!(eth0.device.as_deref(), Some("pci:0000:3b:00.1"));
        assert_eq!((eth0.dev_port, eth0.ifindex), (Some(1), Some(2)));
        assert_eq!(
            eth0.words(),
            "device pci:0000:3b:00.1 port 1, permanent address 52:54:00:ab:cd:ef"
        );
        let veth = &ids[1];
        assert!(!veth.stable() && veth.known(), "{veth:?}");
        assert_eq!((veth.ifindex, veth.boot.as_deref()), (Some(7), Some("b1")));
        assert_eq!(veth.words(), "ifindex 7");
        assert_eq!(hardware_address("00:00:00:00:00:00"), None);
    }

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
