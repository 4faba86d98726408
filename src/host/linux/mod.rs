//! The live host wstune runs on (Linux; other Unix hosts get the same file reads without the
//! Linux-only calls): /proc and /sys read in place, links over netlink, units from systemctl,
//! prlimit(2) for a running process, geteuid for privilege. `--prefix` moves only the files
//! wstune owns (host/layout.rs). Parsing is shared with the fixture backend (host/fs.rs,
//! host/procfs.rs).
//!
//! With a recording (`wstune snapshot`), every read, listing and unit property is kept so the
//! snapshot can copy exactly what the checks needed; links are then read from /sys, so their
//! listing is recorded too.

#[cfg(target_os = "linux")]
mod ethtool;
#[cfg(target_os = "linux")]
mod gstats;
#[cfg(target_os = "linux")]
mod sock_diag;
mod sys;

use super::fs::{list_dir, parse_show, read_regular, sysfs_links};
use super::layout::Layout;
use super::{Backend, HostInfo, Link, Platform, ReadError, RegType, WriteError};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;

pub struct LinuxBackend {
    layout: Layout,
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
    /// NIC -> what ethtool netlink answered (channels, ring, coalescing), as a captured tree's
    /// `wstune/ethtool/NIC` holds it (host/fixture.rs).
    pub ethtool: BTreeMap<String, BTreeMap<String, u32>>,
    /// NIC -> its driver statistics (`ethtool -S`), as `wstune/ethtool/NIC.stats` holds them.
    pub nic_stats: BTreeMap<String, Vec<(String, u64)>>,
}

impl LinuxBackend {
    pub fn live() -> LinuxBackend {
        LinuxBackend {
            layout: Layout::at(Path::new("/")),
            recorder: None,
        }
    }

    /// The live host, recording everything for `wstune snapshot`.
    pub fn recording() -> LinuxBackend {
        LinuxBackend {
            recorder: Some(RefCell::new(Recording::default())),
            ..LinuxBackend::live()
        }
    }

    /// Read and write through `layout` (host::layout: `--prefix` moves the files wstune owns),
    /// the same one the store of wstune's own files uses.
    pub fn with_layout(mut self, layout: Layout) -> LinuxBackend {
        self.layout = layout;
        self
    }

    /// Keep what ethtool netlink answered for `nic`, when recording.
    fn record_ethtool(&self, nic: &str, values: &[(&str, u32)]) {
        if let Some(r) = &self.recorder {
            let mut r = r.borrow_mut();
            let e = r.ethtool.entry(nic.to_string()).or_default();
            for (k, v) in values {
                e.insert(k.to_string(), *v);
            }
        }
    }

    pub fn take_recording(&self) -> Option<Recording> {
        self.recorder
            .as_ref()
            .map(|r| std::mem::take(&mut *r.borrow_mut()))
    }
}

impl Backend for LinuxBackend {
    fn platform(&self) -> Platform {
        Platform::Linux
    }

    fn describe(&self) -> HostInfo {
        super::live_describe()
    }

    fn read(&self, path: &str) -> Result<String, ReadError> {
        // The live host follows its links (sysfs is made of them): nothing to confine to.
        let text = read_regular(&self.layout.path(path), path, None)?;
        if let Some(rec) = &self.recorder {
            rec.borrow_mut()
                .files
                .insert(path.to_string(), text.clone());
        }
        Ok(text)
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, ReadError> {
        let entries = list_dir(&self.layout.path(dir), dir)?;
        if let Some(rec) = &self.recorder {
            rec.borrow_mut()
                .dirs
                .insert(dir.to_string(), entries.clone());
        }
        Ok(entries.into_iter().map(|(n, _)| n).collect())
    }

    fn links(&self) -> Result<Vec<Link>, ReadError> {
        if self.recorder.is_some() {
            return sysfs_links(self);
        }
        let mut links = netlink_links()?;
        for l in &mut links {
            l.physical = self
                .layout
                .path(&format!("/sys/class/net/{}/device", l.name))
                .exists();
        }
        Ok(links)
    }

    #[cfg(target_os = "linux")]
    fn tcp_sockets(
        &self,
        which: crate::host::sockets::Which,
        visit: &mut dyn FnMut(&crate::host::sockets::Sock),
    ) -> Result<(), ReadError> {
        let Some(rec) = &self.recorder else {
            return sock_diag::tcp_sockets(which, visit);
        };
        // A snapshot keeps the listening sockets as /proc/net/tcp and tcp6 rows (what a
        // captured tree answers with), so SO_REUSEPORT groups survive into `check --root`.
        let mut rows = crate::host::containers::ListenerRows::default();
        sock_diag::tcp_sockets(which, &mut |s| {
            if s.state == crate::host::sockets::TcpState::Listen {
                rows.push(s);
            }
            visit(s)
        })?;
        let mut rec = rec.borrow_mut();
        for (path, text) in rows.files() {
            rec.files.entry(path.to_string()).or_insert(text);
        }
        Ok(())
    }

    fn process_fds(&self, pid: u32) -> Result<(u64, Vec<u64>), ReadError> {
        let dir = format!("/proc/{pid}/fd");
        let entries = std::fs::read_dir(&dir).map_err(|e| ReadError::from_io(&dir, &e))?;
        let (mut count, mut sockets) = (0u64, Vec::new());
        for e in entries.flatten() {
            count += 1;
            if let Ok(target) = std::fs::read_link(e.path()) {
                if let Some(inode) = crate::host::procfs::socket_inode(&target.to_string_lossy()) {
                    sockets.push(inode);
                }
            }
        }
        Ok((count, sockets))
    }

    fn nic_identities(&self) -> Result<Vec<super::NicIdentity>, ReadError> {
        if self.recorder.is_some() {
            return super::fs::sysfs_identities(self);
        }
        netlink_identities()
    }

    fn systemd_property(&self, unit: &str, property: &str) -> Result<String, ReadError> {
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

    fn registry(&self, _key: &str, _value: &str, _kind: RegType) -> Result<String, ReadError> {
        Err(ReadError::Unsupported(
            "the Windows registry exists only on Windows hosts".into(),
        ))
    }

    fn write_runtime(&self, path: &str, value: &str) -> Result<(), WriteError> {
        super::fs::write_existing(&self.layout.path(path), path, value)
    }

    fn set_nofile(&self, pid: u32, soft: u64, hard: u64) -> Result<(), WriteError> {
        prlimit_nofile(pid, soft, hard)
    }

    fn channels(&self, nic: &str) -> Result<super::Channels, ReadError> {
        let c = ethtool::channels(nic)?;
        self.record_ethtool(
            nic,
            &[
                ("rx", c.rx),
                ("tx", c.tx),
                ("combined", c.combined),
                ("max_rx", c.max_rx),
                ("max_tx", c.max_tx),
                ("max_combined", c.max_combined),
            ],
        );
        Ok(c)
    }

    fn rx_ring(&self, nic: &str) -> Result<(u32, u32), ReadError> {
        let (now, max) = ethtool::rx_ring(nic)?;
        self.record_ethtool(nic, &[("rx_ring", now), ("rx_ring_max", max)]);
        Ok((now, max))
    }

    fn nic_stats(&self, nic: &str) -> Result<Vec<(String, u64)>, ReadError> {
        let stats = gstats::nic_stats(nic)?;
        if let Some(rec) = &self.recorder {
            rec.borrow_mut()
                .nic_stats
                .insert(nic.to_string(), stats.clone());
        }
        Ok(stats)
    }

    fn coalesce(&self, nic: &str) -> Result<super::Coalesce, ReadError> {
        let c = ethtool::coalesce(nic)?;
        self.record_ethtool(
            nic,
            &[
                ("adaptive_rx", c.adaptive_rx as u32),
                ("rx_usecs", c.rx_usecs),
                ("rx_frames", c.rx_max_frames),
            ],
        );
        Ok(c)
    }

    fn set_rx_ring(&self, nic: &str, rx: u32) -> Result<(), WriteError> {
        ethtool::set_rx_ring(nic, rx)
    }

    fn try_restart(&self, unit: &str) -> Result<(), WriteError> {
        let out = std::process::Command::new("systemctl")
            .args(["try-restart", unit])
            .output()
            .map_err(|e| WriteError::Other(format!("systemctl try-restart {unit}: {e}")))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(WriteError::Other(format!(
                "systemctl try-restart {unit}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    }

    fn set_channels(
        &self,
        nic: &str,
        rx: Option<u32>,
        tx: Option<u32>,
        combined: Option<u32>,
    ) -> Result<(), WriteError> {
        ethtool::set_channels(nic, rx, tx, combined)
    }

    fn set_registry(
        &self,
        _key: &str,
        _value: &str,
        _kind: RegType,
        _data: Option<&str>,
    ) -> Result<(), WriteError> {
        Err(WriteError::Other(
            "the Windows registry exists only on Windows hosts".into(),
        ))
    }

    fn privileged(&self) -> bool {
        is_root()
    }

    fn page_size(&self) -> u64 {
        live_page_size()
    }
}

#[cfg(target_os = "linux")]
pub(crate) use sys::is_root;
use sys::{live_page_size, netlink_identities, netlink_links, prlimit_nofile};

#[cfg(target_os = "linux")]
pub use sys::raise_nofile;

#[cfg(not(target_os = "linux"))]
fn netlink_links() -> Result<Vec<Link>, ReadError> {
    Err(ReadError::Unsupported(
        "netlink exists only on Linux".into(),
    ))
}

#[cfg(not(target_os = "linux"))]
fn netlink_identities() -> Result<Vec<super::NicIdentity>, ReadError> {
    Err(ReadError::Unsupported(
        "netlink exists only on Linux".into(),
    ))
}

#[cfg(not(target_os = "linux"))]
fn live_page_size() -> u64 {
    4096
}

#[cfg(not(target_os = "linux"))]
pub fn raise_nofile() -> (u64, u64) {
    (u64::MAX, u64::MAX)
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn is_root() -> bool {
    false
}

#[cfg(not(target_os = "linux"))]
fn prlimit_nofile(_pid: u32, _soft: u64, _hard: u64) -> Result<(), WriteError> {
    Err(WriteError::Other("prlimit exists only on Linux".into()))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The live backend reads this machine: its own limits, netlink's links (loopback left
    /// out), and --prefix moves only wstune's files.
    #[test]
    fn the_live_backend_reads_this_machine_and_the_prefix_moves_only_owned_files() {
        let b = LinuxBackend::live();
        assert!(b
            .read("/proc/self/limits")
            .unwrap()
            .contains("Max open files"));
        assert!(b.links().unwrap().iter().all(|l| l.name != "lo"));
        assert_eq!(b.describe().source, "live");
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("etc")).unwrap();
        std::fs::write(dir.path().join("etc/hostname"), "in-prefix\n").unwrap();
        let p =
            LinuxBackend::live().with_layout(Layout::at(Path::new("/")).with_prefix(dir.path()));
        assert_eq!(p.read("/etc/hostname").unwrap(), "in-prefix\n");
        assert!(
            p.read("/proc/self/limits").is_ok(),
            "/proc stays the host's"
        );
    }

    #[test]
    fn a_recording_keeps_what_was_read_and_listed() {
        let b = LinuxBackend::recording();
        b.read("/proc/sys/kernel/osrelease").unwrap();
        let _ = b.links();
        let rec = b.take_recording().unwrap();
        assert!(rec.files.contains_key("/proc/sys/kernel/osrelease"));
        assert!(rec.dirs.contains_key("/sys/class/net"));
    }
}
