//! The one place that touches the operating system.
//!
//! The engine asks a [`Backend`] for raw text (a /proc or /sys file, a directory listing, a
//! registry value, a systemd property) and for the list of network links; everything else is
//! parsing and evaluation, which is pure. Implementations:
//! - [`fs::FsBackend`] rooted at `/` with `live` set: this Linux host (netlink for links,
//!   systemctl for units, sysinfo for its description);
//! - the same rooted at `--root DIR`: a captured tree (from `wstune snapshot` or a test fixture),
//!   with `DIR/registry.yaml` making it a Windows host;
//! - [`memory::MemoryBackend`]: in-memory values for unit tests;
//! - `windows` (cfg(windows) only): the live registry.

pub mod fs;
pub mod memory;
pub mod registry_file;
#[cfg(windows)]
pub mod windows;

use crate::catalog::{Platform, RegType};
use serde::Serialize;

/// Why a value could not be read. `NotFound` is often meaningful (a module not loaded, a key
/// removed from the kernel), the others are skips.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReadError {
    #[error("{0} does not exist")]
    NotFound(String),
    #[error("permission denied reading {0}")]
    Denied(String),
    #[error("{0}")]
    Other(String),
    #[error("{0}")]
    Unsupported(String),
}

impl ReadError {
    pub fn from_io(path: &str, e: &std::io::Error) -> ReadError {
        match e.kind() {
            std::io::ErrorKind::NotFound => ReadError::NotFound(path.to_string()),
            std::io::ErrorKind::PermissionDenied => ReadError::Denied(path.to_string()),
            _ => ReadError::Other(format!("cannot read {path}: {e}")),
        }
    }
}

/// A network interface as the checks see it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Link {
    pub name: String,
    /// Backed by hardware (has /sys/class/net/NAME/device); virtual links are not checked.
    pub physical: bool,
    pub rx_queues: Option<u32>,
    pub tx_queues: Option<u32>,
    /// Windows: the adapter's subkey under the network class key (e.g. `0001`).
    pub registry_key: Option<String>,
}

/// Who the host is, for the report header.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HostInfo {
    pub hostname: String,
    pub os: String,
    pub kernel: String,
    /// `live` or `snapshot:DIR`.
    pub source: String,
}

/// The OS boundary. Paths are absolute host paths (`/proc/sys/net/core/somaxconn`); a rooted
/// backend maps them under its root.
pub trait Backend {
    fn platform(&self) -> Platform;
    fn describe(&self) -> HostInfo;
    fn read(&self, path: &str) -> Result<String, ReadError>;
    /// Entry names of a directory, sorted.
    fn list(&self, dir: &str) -> Result<Vec<String>, ReadError>;
    fn links(&self) -> Result<Vec<Link>, ReadError>;
    /// One property of a systemd unit, as `systemctl show -p PROP --value UNIT` prints it.
    fn systemd_property(&self, unit: &str, property: &str) -> Result<String, ReadError>;
    /// A registry value as text (REG_DWORD in decimal).
    fn registry(&self, key: &str, value: &str, kind: RegType) -> Result<String, ReadError>;
    fn page_size(&self) -> u64;
    /// Whether process `pid` exists (for `--pid` validation).
    fn process_exists(&self, pid: u32) -> bool {
        self.read(&format!("/proc/{pid}/limits")).is_ok()
    }
}

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
use linux::{live_page_size, netlink_links};

#[cfg(not(target_os = "linux"))]
fn netlink_links() -> Result<Vec<Link>, ReadError> {
    Err(ReadError::Unsupported(
        "netlink exists only on Linux".into(),
    ))
}

#[cfg(not(target_os = "linux"))]
fn live_page_size() -> u64 {
    4096
}

/// The running host's identity, from sysinfo (portable across the OSes wstune runs on).
fn live_describe() -> HostInfo {
    HostInfo {
        hostname: sysinfo::System::host_name().unwrap_or_default(),
        os: sysinfo::System::long_os_version().unwrap_or_default(),
        kernel: sysinfo::System::kernel_version().unwrap_or_default(),
        source: "live".into(),
    }
}

/// The backend for the host wstune runs on.
#[cfg(not(windows))]
pub fn live() -> Box<dyn Backend> {
    Box::new(fs::FsBackend::live())
}

/// The backend for the host wstune runs on.
#[cfg(windows)]
pub fn live() -> Box<dyn Backend> {
    Box::new(windows::WindowsBackend)
}
