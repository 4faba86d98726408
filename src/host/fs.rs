//! A host read through its file system: the live Linux host (root `/`), or a captured tree
//! (`--root DIR`) laid out the same way. Optionally records every read so `wstune snapshot` can
//! copy exactly the files the catalog needed.

use super::{registry_file::RegistryFile, Backend, HostInfo, Link, ReadError, WriteError};
use super::{Platform, RegType};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

/// Where Windows keeps the TCP/IP stack's settings, and the host name.
const TCPIP_PARAMETERS: &str = r"HKLM\SYSTEM\CurrentControlSet\Services\Tcpip\Parameters";

pub struct FsBackend {
    root: PathBuf,
    /// The running host itself: links come from netlink, units from systemctl.
    live: bool,
    /// `--prefix`: where /etc and /var/lib/wstune live instead (the files wstune writes).
    prefix: Option<PathBuf>,
    /// A Windows tree's registry.yaml, changed in memory and saved whole on every write.
    registry: Option<RefCell<RegistryFile>>,
    recorder: Option<RefCell<Recording>>,
}

/// What a snapshot must reproduce.
#[derive(Debug, Default)]
pub struct Recording {
    pub files: BTreeMap<String, String>,
    /// Directory -> (entry, is_dir).
    pub dirs: BTreeMap<String, Vec<(String, bool)>>,
    /// (unit, property) -> value.
    pub systemd: BTreeMap<String, BTreeMap<String, String>>,
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

impl FsBackend {
    /// The live host.
    pub fn live() -> FsBackend {
        FsBackend {
            root: PathBuf::from("/"),
            live: true,
            prefix: None,
            registry: None,
            recorder: None,
        }
    }

    /// A captured tree; refuses a directory that is not one, so a typo cannot pass as a host
    /// whose every value is missing.
    pub fn rooted(dir: &Path) -> Result<FsBackend, RootError> {
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
        Ok(FsBackend {
            root: dir.to_path_buf(),
            live: false,
            prefix: None,
            registry: registry.map(RefCell::new),
            recorder: None,
        })
    }

    /// The live host, reading /sys for links (so the listing is recorded) and recording
    /// everything for `wstune snapshot`.
    pub fn recording() -> FsBackend {
        FsBackend {
            root: PathBuf::from("/"),
            live: false,
            prefix: None,
            registry: None,
            recorder: Some(RefCell::new(Recording::default())),
        }
    }

    pub fn take_recording(&self) -> Option<Recording> {
        self.recorder
            .as_ref()
            .map(|r| std::mem::take(&mut *r.borrow_mut()))
    }

    fn is_live_host(&self) -> bool {
        self.live || self.recorder.is_some()
    }

    /// Read and write the configuration files wstune owns (/etc, /var/lib/wstune) under `dir`.
    pub fn with_prefix(mut self, dir: &Path) -> FsBackend {
        self.prefix = Some(dir.to_path_buf());
        self
    }

    fn host_path(&self, path: &str) -> PathBuf {
        match &self.prefix {
            Some(p) if is_prefixed(path) => p.join(path.trim_start_matches('/')),
            _ => self.root.join(path.trim_start_matches('/')),
        }
    }

    /// The directory a rooted backend's read of `path` must stay in: the tree, or `--prefix`
    /// for the files it moves. The live host follows its links (sysfs is made of them).
    fn confine_dir(&self, path: &str) -> Option<&Path> {
        if self.is_live_host() {
            return None;
        }
        match &self.prefix {
            Some(p) if is_prefixed(path) => Some(p),
            _ => Some(&self.root),
        }
    }

    fn exists(&self, path: &str) -> bool {
        self.host_path(path).exists()
    }

    /// Links from /sys/class/net: how a captured tree (and a snapshot) sees them.
    fn sysfs_links(&self) -> Result<Vec<Link>, ReadError> {
        let mut out = Vec::new();
        for name in self.list("/sys/class/net")? {
            let base = format!("/sys/class/net/{name}");
            let physical = self.list(&format!("{base}/device")).is_ok();
            let queues = self.list(&format!("{base}/queues")).unwrap_or_default();
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

    fn meta(&self, key: &str) -> Option<String> {
        let shown = format!("/{META_DIR}/host.yaml");
        let text = read_regular(&self.root.join(META_DIR).join("host.yaml"), &shown, None).ok()?;
        let map: BTreeMap<String, serde_yaml_ng::Value> = serde_yaml_ng::from_str(&text).ok()?;
        match map.get(key)? {
            serde_yaml_ng::Value::String(s) => Some(s.clone()),
            serde_yaml_ng::Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }
}

impl Backend for FsBackend {
    fn platform(&self) -> Platform {
        if self.registry.is_some() {
            Platform::Windows
        } else {
            Platform::Linux
        }
    }

    fn describe(&self) -> HostInfo {
        if self.is_live_host() {
            return super::live_describe();
        }
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
            source: format!("snapshot:{}", self.root.display()),
        }
    }

    fn read(&self, path: &str) -> Result<String, ReadError> {
        // A captured tree must answer from its own files: a link out of it would report the
        // machine wstune runs on as if it were the captured host.
        let text = read_regular(&self.host_path(path), path, self.confine_dir(path))?;
        if let Some(rec) = &self.recorder {
            rec.borrow_mut()
                .files
                .insert(path.to_string(), text.clone());
        }
        Ok(text)
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, ReadError> {
        let full = self.host_path(dir);
        let mut entries: Vec<(String, bool)> = std::fs::read_dir(&full)
            .map_err(|e| ReadError::from_io(dir, &e))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name() != KEEP)
            .map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                // Follow symlinks: /sys/class/net/eth0 is a link to a directory.
                let is_dir = full.join(&name).is_dir();
                (name, is_dir)
            })
            .collect();
        entries.sort();
        if let Some(rec) = &self.recorder {
            rec.borrow_mut()
                .dirs
                .insert(dir.to_string(), entries.clone());
        }
        Ok(entries.into_iter().map(|(n, _)| n).collect())
    }

    fn links(&self) -> Result<Vec<Link>, ReadError> {
        if let Some(reg) = &self.registry {
            return Ok(reg.borrow().adapters());
        }
        if self.live {
            let mut links = super::netlink_links()?;
            for l in &mut links {
                l.physical = self.exists(&format!("/sys/class/net/{}/device", l.name));
            }
            return Ok(links);
        }
        self.sysfs_links()
    }

    fn systemd_property(&self, unit: &str, property: &str) -> Result<String, ReadError> {
        if !self.is_live_host() {
            let path = format!("/{META_DIR}/systemd/{unit}.show");
            let text = self.read(&path).map_err(|_| {
                ReadError::NotFound(format!("{path} (the snapshot has no systemd unit {unit})"))
            })?;
            return parse_show(&text, unit, property);
        }
        if !Path::new("/run/systemd/system").exists() {
            return Err(ReadError::NotFound(
                "systemd (not running: no /run/systemd/system)".into(),
            ));
        }
        let out = std::process::Command::new("systemctl")
            .args(["show", "-p", "LoadState", "-p", property, unit])
            .output()
            .map_err(|e| ReadError::Other(format!("cannot run systemctl: {e}")))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if let Some(rec) = &self.recorder {
            let mut rec = rec.borrow_mut();
            let entry = rec.systemd.entry(unit.to_string()).or_default();
            for line in text.lines() {
                if let Some((k, v)) = line.split_once('=') {
                    entry.insert(k.to_string(), v.to_string());
                }
            }
        }
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

    fn dynamic_ports(
        &self,
        ip: super::IpVersion,
    ) -> Result<super::dynamic_ports::PortRange, ReadError> {
        match &self.registry {
            Some(reg) => reg.borrow().dynamic_ports(ip),
            None => Err(ReadError::Unsupported(format!(
                "the {} dynamic port range exists only on Windows hosts",
                ip.as_str()
            ))),
        }
    }

    fn write_runtime(&self, path: &str, value: &str) -> Result<(), WriteError> {
        use std::io::Write;
        let full = self.host_path(path);
        // Never create: a key this kernel lacks must fail, not appear in a captured tree.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&full)
            .map_err(|e| WriteError::from_io(path, value, &e))?;
        f.write_all(format!("{value}\n").as_bytes())
            .map_err(|e| WriteError::from_io(path, value, &e))
    }

    fn set_nofile(&self, pid: u32, soft: u64, hard: u64) -> Result<(), WriteError> {
        if self.is_live_host() {
            return super::prlimit_nofile(pid, soft, hard);
        }
        // A captured tree: rewrite the line /proc/PID/limits shows.
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
        crate::output::write_atomic(&self.host_path(&path), &new)
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
        crate::output::write_atomic(&self.root.join("registry.yaml"), &text)
            .map_err(|e| WriteError::Other(format!("{e:#}")))
    }

    fn privileged(&self) -> bool {
        if self.is_live_host() {
            super::is_root()
        } else {
            true
        }
    }

    fn page_size(&self) -> u64 {
        if self.is_live_host() {
            return super::live_page_size();
        }
        self.meta("page_size")
            .and_then(|p| p.parse().ok())
            .unwrap_or(4096)
    }

    fn host_fact(
        &self,
        fact: crate::catalog::Fact,
        pid: Option<u32>,
    ) -> Option<Result<i64, ReadError>> {
        self.registry.as_ref()?.borrow().fact(fact, pid)
    }

    fn process_exists(&self, pid: u32) -> bool {
        match &self.registry {
            Some(reg) => reg.borrow().processes.contains_key(&pid),
            None => self.read(&format!("/proc/{pid}/limits")).is_ok(),
        }
    }
}

/// Read a host file whole, refusing what would hang or exhaust memory: anything but a regular
/// file (a FIFO blocks open and read forever, /dev/zero never ends), a file over
/// [`MAX_READ_BYTES`], and, with `confine`, a file whose real path leaves that directory.
/// `shown` is the host path (`/proc/meminfo`) used for a missing file, as checks name it; a
/// refusal names the file on disk, which is what the operator must fix.
pub fn read_regular(full: &Path, shown: &str, confine: Option<&Path>) -> Result<String, ReadError> {
    use crate::input::{read_bounded, Refused};
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

/// The paths `--prefix` moves: the configuration and state wstune writes.
pub fn is_prefixed(path: &str) -> bool {
    path == "/etc" || path.starts_with("/etc/") || path.starts_with("/var/lib/wstune")
}

/// `systemctl show` output (KEY=VALUE lines) -> one property; a unit systemd does not know is
/// an error naming it.
fn parse_show(text: &str, unit: &str, property: &str) -> Result<String, ReadError> {
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

    #[test]
    fn rooted_refuses_what_is_not_a_tree() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            FsBackend::rooted(&dir.path().join("nope")),
            Err(RootError::Missing(_))
        ));
        assert!(matches!(
            FsBackend::rooted(dir.path()),
            Err(RootError::NotATree(_))
        ));
        std::fs::create_dir(dir.path().join("proc")).unwrap();
        assert!(FsBackend::rooted(dir.path()).is_ok());
    }
}
