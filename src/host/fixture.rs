//! A captured host: a tree laid out like the live one (`--root DIR`, from `wstune snapshot`
//! or a test fixture), with `DIR/registry.yaml` making it a Windows host. It answers only
//! from its own files: nothing here asks the machine wstune runs on (no netlink, systemctl,
//! prlimit, geteuid), and a file linked out of the tree is refused. Parsing is shared with
//! the live backend (host/fs.rs, host/procfs.rs).

use super::fs::{list_dir, parse_show, read_regular, sysfs_links, META_DIR};
use super::layout::Layout;
use super::{registry_file::RegistryFile, Backend, HostInfo, Link, ReadError, WriteError};
use super::{IpVersion, Platform, RegType};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;

/// Where Windows keeps the TCP/IP stack's settings, and the host name.
const TCPIP_PARAMETERS: &str = r"HKLM\SYSTEM\CurrentControlSet\Services\Tcpip\Parameters";

pub struct FixtureBackend {
    layout: Layout,
    /// A Windows tree's registry.yaml, changed in memory and saved whole on every write.
    registry: Option<RefCell<RegistryFile>>,
}

#[derive(Debug, thiserror::Error)]
pub enum RootError {
    #[error("--root {0}: no such directory; pass a tree made by `wstune snapshot DIR`")]
    Missing(String),
    #[error("--root {0}: neither proc/ nor registry.yaml is inside; pass a tree made by `wstune snapshot DIR`")]
    NotATree(String),
    #[error("--root {0}: {1}")]
    BadRegistry(String, String),
}

impl FixtureBackend {
    /// A captured tree; refuses a directory that is not one, so a typo cannot pass as a host
    /// whose every value is missing.
    pub fn open(dir: &Path) -> Result<FixtureBackend, RootError> {
        let shown = dir.display().to_string();
        if !dir.is_dir() {
            return Err(RootError::Missing(shown));
        }
        let registry = dir.join("registry.yaml");
        // Any entry by that name, a FIFO too: load refuses it with the reason, rather than the
        // tree being called "not a tree".
        let registry = if std::fs::symlink_metadata(&registry).is_ok() {
            Some(
                RegistryFile::load(&registry)
                    .map_err(|e| RootError::BadRegistry(shown.clone(), e))?,
            )
        } else {
            None
        };
        if registry.is_none() && !dir.join("proc").is_dir() {
            return Err(RootError::NotATree(shown));
        }
        Ok(FixtureBackend {
            layout: Layout::at(dir),
            registry: registry.map(RefCell::new),
        })
    }

    /// Read and write through `layout` (host::layout: the tree and `--prefix`), the same one
    /// the store of wstune's own files uses.
    pub fn with_layout(mut self, layout: Layout) -> FixtureBackend {
        self.layout = layout;
        self
    }

    fn meta(&self, key: &str) -> Option<String> {
        let shown = format!("/{META_DIR}/host.yaml");
        let text = read_regular(&self.layout.path(&shown), &shown, None).ok()?;
        let map: BTreeMap<String, serde_yaml_ng::Value> = serde_yaml_ng::from_str(&text).ok()?;
        match map.get(key)? {
            serde_yaml_ng::Value::String(s) => Some(s.clone()),
            serde_yaml_ng::Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }
}

/// A NIC's ethtool settings in a captured tree: `wstune/ethtool/NIC`, one `key: number` line
/// each (`rx`, `tx`, `combined`, `max_rx`, `max_tx`, `max_combined`: its channels; `rx_ring`,
/// `rx_ring_max`: its receive ring; `adaptive_rx` (0 or 1), `rx_usecs`, `rx_frames`: its
/// receive interrupt coalescing). Read and written through the same [`Backend`] methods as
/// the live host's ethtool netlink; a write changes only the numbers of its lines.
const CHANNEL_KEYS: [&str; 6] = ["rx", "tx", "combined", "max_rx", "max_tx", "max_combined"];

impl FixtureBackend {
    fn ethtool_path(nic: &str) -> Option<String> {
        super::owned::nic_name_ok(nic).then(|| format!("/{META_DIR}/ethtool/{nic}"))
    }

    fn ethtool(&self, nic: &str) -> Result<BTreeMap<String, u32>, ReadError> {
        let path = Self::ethtool_path(nic)
            .ok_or_else(|| ReadError::Other(format!("{nic:?} is not an interface name")))?;
        let text = self.read(&path).map_err(|_| {
            ReadError::Unsupported(format!(
                "{nic}'s ethtool settings are not in this tree ({path})"
            ))
        })?;
        let mut out = BTreeMap::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            let parsed = line
                .split_once(':')
                .and_then(|(k, v)| Some((k.trim().to_string(), v.trim().parse::<u32>().ok()?)));
            let Some((k, v)) = parsed else {
                return Err(ReadError::Other(format!(
                    "{path}:{}: expected `key: number`, found {line:?}",
                    n + 1
                )));
            };
            out.insert(k, v);
        }
        Ok(out)
    }

    /// Rewrite the numbers of `set`'s keys (a key the file lacks is an error: the tree says
    /// the driver has no such setting).
    fn set_ethtool(&self, nic: &str, set: &[(&str, u32)]) -> Result<(), WriteError> {
        let path = Self::ethtool_path(nic)
            .ok_or_else(|| WriteError::Other(format!("{nic:?} is not an interface name")))?;
        let text = self
            .read(&path)
            .map_err(|_| WriteError::NotFound(path.clone()))?;
        let mut out = String::new();
        let mut done: Vec<&str> = Vec::new();
        for line in text.lines() {
            let key = line.split_once(':').map(|(k, _)| k.trim());
            match set.iter().find(|(k, _)| Some(*k) == key) {
                Some((k, v)) => {
                    out.push_str(&format!("{k}: {v}\n"));
                    done.push(k);
                }
                None => {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        if let Some((k, _)) = set.iter().find(|(k, _)| !done.contains(k)) {
            return Err(WriteError::Other(format!(
                "{nic} has no {k} in {path}: the driver of this captured NIC does not have it"
            )));
        }
        super::atomic::write(
            &self.layout.path(&path),
            out.as_bytes(),
            super::atomic::Mode::LikeExisting,
        )
        .map_err(|e| WriteError::Other(format!("{e:#}")))
    }
}

impl Backend for FixtureBackend {
    fn platform(&self) -> Platform {
        if self.registry.is_some() {
            Platform::Windows
        } else {
            Platform::Linux
        }
    }

    fn describe(&self) -> HostInfo {
        let file = |p: &str| self.read(p).ok().map(|s| s.trim().to_string());
        let os = self.meta("os").or_else(|| {
            file("/etc/os-release")?.lines().find_map(|l| {
                l.strip_prefix("PRETTY_NAME=")
                    .map(|v| v.trim_matches('"').to_string())
            })
        });
        let registry_hostname = self.registry.as_ref().and_then(|r| {
            r.borrow()
                .get(TCPIP_PARAMETERS, "Hostname", RegType::Sz)
                .ok()
        });
        HostInfo {
            hostname: self
                .meta("hostname")
                .or(registry_hostname)
                .or_else(|| file("/proc/sys/kernel/hostname"))
                .unwrap_or_default(),
            os: os.unwrap_or_else(|| {
                if self.registry.is_some() {
                    "Windows".into()
                } else {
                    "Linux".into()
                }
            }),
            kernel: self
                .meta("kernel")
                .or_else(|| file("/proc/sys/kernel/osrelease"))
                .unwrap_or_default(),
            source: format!("snapshot:{}", self.layout.root().display()),
        }
    }

    fn read(&self, path: &str) -> Result<String, ReadError> {
        // A captured tree must answer from its own files: a link out of it would report the
        // machine wstune runs on as if it were the captured host.
        read_regular(&self.layout.path(path), path, Some(self.layout.base(path)))
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, ReadError> {
        Ok(list_dir(&self.layout.path(dir), dir)?
            .into_iter()
            .map(|(n, _)| n)
            .collect())
    }

    fn links(&self) -> Result<Vec<Link>, ReadError> {
        match &self.registry {
            Some(reg) => Ok(reg.borrow().adapters()),
            None => sysfs_links(self),
        }
    }

    fn systemd_property(&self, unit: &str, property: &str) -> Result<String, ReadError> {
        let path = format!("/{META_DIR}/systemd/{unit}.show");
        let text = self.read(&path).map_err(|_| {
            ReadError::NotFound(format!("{path} (the snapshot has no systemd unit {unit})"))
        })?;
        parse_show(&text, unit, property)
    }

    fn registry(&self, key: &str, value: &str, kind: RegType) -> Result<String, ReadError> {
        match &self.registry {
            Some(reg) => reg.borrow().get(key, value, kind),
            None => Err(ReadError::Unsupported(
                "the Windows registry exists only on Windows hosts".into(),
            )),
        }
    }

    fn dynamic_ports(&self, ip: IpVersion) -> Result<super::dynamic_ports::PortRange, ReadError> {
        match &self.registry {
            Some(reg) => reg.borrow().dynamic_ports(ip),
            None => Err(ReadError::Unsupported(format!(
                "the {} dynamic port range exists only on Windows hosts",
                ip.as_str()
            ))),
        }
    }

    /// A captured tree's value is a plain file, replaced atomically like every file wstune
    /// writes: a kill midway leaves the old value or the new one, never an emptied file that
    /// a rollback would take for a hand change (and refuse without --force). As in /proc/sys,
    /// only an existing file this process may write is written; a link is written through to
    /// its target, which must be in the tree.
    fn write_runtime(&self, path: &str, value: &str) -> Result<(), WriteError> {
        let full = self.layout.path(path);
        let io = |e: std::io::Error| WriteError::from_io(path, value, &e);
        if !std::fs::metadata(&full).map_err(io)?.is_file() {
            return Err(WriteError::Other(format!(
                "{}: not a regular file; a host tree holds plain files",
                full.display()
            )));
        }
        // Opened for writing, not truncated: refused where the file may not be written.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&full)
            .map_err(io)?;
        let real = full.canonicalize().map_err(io)?;
        let base = self.layout.base(path);
        if !real.starts_with(base.canonicalize().unwrap_or_else(|_| base.to_path_buf())) {
            return Err(WriteError::Other(format!(
                "{} is a link to {}, outside the tree; a captured tree holds its own files",
                full.display(),
                real.display()
            )));
        }
        super::atomic::write(
            &real,
            format!("{value}\n").as_bytes(),
            super::atomic::Mode::LikeExisting,
        )
        .map_err(|e| WriteError::Other(format!("{e:#}")))
    }

    fn channels(&self, nic: &str) -> Result<super::Channels, ReadError> {
        let v = self.ethtool(nic)?;
        if !CHANNEL_KEYS.iter().any(|k| v.contains_key(*k)) {
            return Err(ReadError::Unsupported(format!(
                "{nic} has no channel counts in this tree"
            )));
        }
        let get = |k: &str| v.get(k).copied().unwrap_or(0);
        Ok(super::Channels {
            rx: get("rx"),
            tx: get("tx"),
            combined: get("combined"),
            max_rx: get("max_rx"),
            max_tx: get("max_tx"),
            max_combined: get("max_combined"),
        })
    }

    fn coalesce(&self, nic: &str) -> Result<super::Coalesce, ReadError> {
        let v = self.ethtool(nic)?;
        if !["adaptive_rx", "rx_usecs", "rx_frames"]
            .iter()
            .any(|k| v.contains_key(*k))
        {
            return Err(ReadError::Unsupported(format!(
                "{nic} has no interrupt coalescing in this tree"
            )));
        }
        let get = |k: &str| v.get(k).copied().unwrap_or(0);
        Ok(super::Coalesce {
            adaptive_rx: get("adaptive_rx") != 0,
            rx_usecs: get("rx_usecs"),
            rx_max_frames: get("rx_frames"),
        })
    }

    /// `wstune/ethtool/NIC.stats`: what `ethtool -S NIC` printed on the captured host.
    fn nic_stats(&self, nic: &str) -> Result<Vec<(String, u64)>, ReadError> {
        let path = Self::ethtool_path(nic)
            .map(|p| format!("{p}.stats"))
            .ok_or_else(|| ReadError::Other(format!("{nic:?} is not an interface name")))?;
        let text = self.read(&path).map_err(|_| {
            ReadError::Unsupported(format!(
                "{nic}'s driver statistics (ethtool -S) are not in this tree ({path})"
            ))
        })?;
        Ok(super::procfs::ethtool_stats(&text))
    }

    /// A captured process's descriptors: `/proc/PID/fd/N` holds what the link reads on the
    /// live host (`socket:[INODE]`, a path), as a tree keeps no links.
    fn process_fds(&self, pid: u32) -> Result<(u64, Vec<u64>), ReadError> {
        let dir = format!("/proc/{pid}/fd");
        let names = self.list(&dir)?;
        let mut sockets = Vec::new();
        for name in &names {
            if let Ok(target) = self.read(&format!("{dir}/{name}")) {
                if let Some(inode) = super::procfs::socket_inode(target.trim()) {
                    sockets.push(inode);
                }
            }
        }
        Ok((names.len() as u64, sockets))
    }

    fn rx_ring(&self, nic: &str) -> Result<(u32, u32), ReadError> {
        let v = self.ethtool(nic)?;
        match (v.get("rx_ring"), v.get("rx_ring_max")) {
            (Some(now), Some(max)) if *max > 0 => Ok((*now, *max)),
            _ => Err(ReadError::Unsupported(format!(
                "{nic} has no receive ring in this tree"
            ))),
        }
    }

    fn set_channels(
        &self,
        nic: &str,
        rx: Option<u32>,
        tx: Option<u32>,
        combined: Option<u32>,
    ) -> Result<(), WriteError> {
        let set: Vec<(&str, u32)> = [("rx", rx), ("tx", tx), ("combined", combined)]
            .into_iter()
            .filter_map(|(k, v)| Some((k, v?)))
            .collect();
        self.set_ethtool(nic, &set)
    }

    fn set_rx_ring(&self, nic: &str, rx: u32) -> Result<(), WriteError> {
        let (_, max) = self
            .rx_ring(nic)
            .map_err(|e| WriteError::Other(e.to_string()))?;
        if rx > max {
            // What the kernel answers (EINVAL) for a size over the driver's maximum.
            return Err(WriteError::Rejected {
                path: format!("{nic}'s receive ring (maximum {max})"),
                value: rx.to_string(),
            });
        }
        self.set_ethtool(nic, &[("rx_ring", rx)])
    }

    /// A captured tree runs no services: nothing to restart.
    fn try_restart(&self, _unit: &str) -> Result<(), WriteError> {
        Ok(())
    }

    /// A captured tree has no processes to prlimit: rewrite the line /proc/PID/limits shows.
    fn set_nofile(&self, pid: u32, soft: u64, hard: u64) -> Result<(), WriteError> {
        let path = format!("/proc/{pid}/limits");
        let text = self
            .read(&path)
            .map_err(|_| WriteError::NotFound(path.clone()))?;
        let fmt = |v: u64| {
            if v >= i64::MAX as u64 {
                "unlimited".to_string()
            } else {
                v.to_string()
            }
        };
        let new: String = text
            .lines()
            .map(|l| {
                if l.starts_with("Max open files") {
                    format!(
                        "{:<26}{:<21}{:<21}files     \n",
                        "Max open files",
                        fmt(soft),
                        fmt(hard)
                    )
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        super::atomic::write(
            &self.layout.path(&path),
            new.as_bytes(),
            super::atomic::Mode::LikeExisting,
        )
        .map_err(|e| WriteError::Other(format!("{e:#}")))
    }

    fn set_registry(
        &self,
        key: &str,
        value: &str,
        kind: RegType,
        data: Option<&str>,
    ) -> Result<(), WriteError> {
        let Some(reg) = &self.registry else {
            return Err(WriteError::Other(
                "the Windows registry exists only on Windows hosts".into(),
            ));
        };
        reg.borrow_mut()
            .set(key, value, kind, data)
            .map_err(WriteError::Other)?;
        let text = reg.borrow().to_yaml();
        super::atomic::write(
            &self.layout.root().join("registry.yaml"),
            text.as_bytes(),
            super::atomic::Mode::LikeExisting,
        )
        .map_err(|e| WriteError::Other(format!("{e:#}")))
    }

    /// A captured tree's own file permissions decide what may change.
    fn privileged(&self) -> bool {
        true
    }

    /// Every directory of the tree (links not followed): a value, a process's limits, a
    /// NIC's ethtool file or registry.yaml may each have been written when the kill came.
    fn remove_temporaries(&self) -> Vec<String> {
        fn sweep(dir: &Path, shown: &str, out: &mut Vec<String>) {
            out.extend(
                super::atomic::remove_temporaries(dir)
                    .into_iter()
                    .map(|n| format!("{shown}/{n}")),
            );
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for e in entries.filter_map(|e| e.ok()) {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let name = e.file_name().to_string_lossy().into_owned();
                    sweep(&e.path(), &format!("{shown}/{name}"), out);
                }
            }
        }
        let mut out = Vec::new();
        sweep(self.layout.root(), "", &mut out);
        out
    }

    fn page_size(&self) -> u64 {
        self.meta("page_size")
            .and_then(|p| p.parse().ok())
            .unwrap_or(4096)
    }

    fn host_fact(&self, fact: super::Fact, pid: Option<u32>) -> Option<Result<i64, ReadError>> {
        self.registry.as_ref()?.borrow().fact(fact, pid)
    }

    fn process_exists(&self, pid: u32) -> bool {
        match &self.registry {
            Some(reg) => reg.borrow().processes.contains_key(&pid),
            None => self.read(&format!("/proc/{pid}/limits")).is_ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_refuses_what_is_not_a_tree() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            FixtureBackend::open(&dir.path().join("nope")),
            Err(RootError::Missing(_))
        ));
        assert!(matches!(
            FixtureBackend::open(dir.path()),
            Err(RootError::NotATree(_))
        ));
        std::fs::create_dir(dir.path().join("proc")).unwrap();
        assert!(FixtureBackend::open(dir.path()).is_ok());
    }

    /// The fixture answers from its tree only: links from its /sys, units from its
    /// wstune/systemd, its page size from wstune/host.yaml, and a file linked out of the tree
    /// is refused rather than read from the machine the test runs on.
    #[cfg(unix)]
    #[test]
    fn a_fixture_never_asks_the_machine_it_runs_on() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path();
        for d in [
            "proc/sys/net/core",
            "sys/class/net/eth9/device",
            "sys/class/net/eth9/queues/rx-0",
            "wstune/systemd",
        ] {
            std::fs::create_dir_all(t.join(d)).unwrap();
        }
        std::fs::write(t.join("proc/sys/net/core/somaxconn"), "4096\n").unwrap();
        std::fs::write(
            t.join("wstune/host.yaml"),
            "page_size: 16384\nhostname: captured\n",
        )
        .unwrap();
        std::fs::write(
            t.join("wstune/systemd/app.service.show"),
            "LoadState=loaded\nLimitNOFILE=777\n",
        )
        .unwrap();
        std::os::unix::fs::symlink("/proc/self/status", t.join("proc/sys/net/core/escape"))
            .unwrap();
        let b = FixtureBackend::open(t).unwrap();
        assert_eq!(b.read("/proc/sys/net/core/somaxconn").unwrap(), "4096\n");
        assert!(b.read("/proc/sys/net/core/escape").is_err());
        let links = b.links().unwrap();
        assert_eq!(links.len(), 1);
        assert_eq!(
            (
                links[0].name.as_str(),
                links[0].physical,
                links[0].rx_queues
            ),
            ("eth9", true, Some(1))
        );
        assert_eq!(
            b.systemd_property("app.service", "LimitNOFILE").unwrap(),
            "777"
        );
        assert_eq!(b.page_size(), 16384);
        assert_eq!(b.describe().hostname, "captured");
        assert!(b.privileged());
        b.write_runtime("/proc/sys/net/core/somaxconn", "65535")
            .unwrap();
        assert_eq!(b.read("/proc/sys/net/core/somaxconn").unwrap(), "65535\n");
        assert!(matches!(
            b.write_runtime("/proc/sys/net/core/nope", "1"),
            Err(WriteError::NotFound(_))
        ));
    }

    /// A tree's `wstune/ethtool/NIC` answers the ethtool methods; a write changes only its
    /// numbers, a size over the maximum is refused as the kernel refuses it, and a line that
    /// is not `key: number` is an error naming the file and line.
    #[test]
    fn a_trees_ethtool_file_holds_channels_and_ring() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path();
        std::fs::create_dir_all(t.join("proc")).unwrap();
        std::fs::create_dir_all(t.join("wstune/ethtool")).unwrap();
        let text = "# captured\nrx_ring: 512\nrx_ring_max: 4096\ncombined: 2\nmax_combined: 8\n";
        std::fs::write(t.join("wstune/ethtool/eth0"), text).unwrap();
        let b = FixtureBackend::open(t).unwrap();
        assert_eq!(b.rx_ring("eth0").unwrap(), (512, 4096));
        assert_eq!(
            (
                b.channels("eth0").unwrap().combined,
                b.channels("eth0").unwrap().max_combined
            ),
            (2, 8)
        );
        b.set_rx_ring("eth0", 4096).unwrap();
        b.set_channels("eth0", None, None, Some(8)).unwrap();
        assert_eq!(
            std::fs::read_to_string(t.join("wstune/ethtool/eth0")).unwrap(),
            "# captured\nrx_ring: 4096\nrx_ring_max: 4096\ncombined: 8\nmax_combined: 8\n"
        );
        assert!(matches!(
            b.set_rx_ring("eth0", 8192),
            Err(WriteError::Rejected { .. })
        ));
        assert!(
            b.set_channels("eth0", Some(2), None, None).is_err(),
            "no rx line"
        );
        assert!(matches!(b.rx_ring("eth1"), Err(ReadError::Unsupported(_))));
        assert!(b.rx_ring("../x").is_err());
        std::fs::write(t.join("wstune/ethtool/eth0"), "rx_ring: many\n").unwrap();
        let e = b.rx_ring("eth0").unwrap_err().to_string();
        assert!(e.contains("/wstune/ethtool/eth0:1"), "{e}");
    }
}
