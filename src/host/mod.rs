//! The one place that touches the operating system.
//!
//! The engine asks a [`Backend`] for raw text (a /proc or /sys file, a directory listing, a
//! registry value, a systemd property) and for the list of network links; everything else is
//! parsing and evaluation, which is pure. Implementations:
//! - `linux::LinuxBackend` (not on Windows): this host (netlink for links, systemctl for
//!   units, prlimit, sysinfo for its description), optionally recording for `wstune snapshot`;
//! - [`fixture::FixtureBackend`] at `--root DIR`: a captured tree (from `wstune snapshot` or a
//!   test fixture), with `DIR/registry.yaml` making it a Windows host;
//! - `memory::MemoryBackend`: in-memory values for tests (unit tests, and the `memory-backend`
//!   feature for the fuzz harness), never in a release build;
//! - `windows` (cfg(windows) only): the live registry.

pub mod atomic;
pub mod containers;
pub mod dynamic_ports;
pub mod fixture;
pub mod fs;
pub mod input;
pub mod layout;
#[cfg(not(windows))]
pub mod linux;
pub mod machine;
#[cfg(any(test, feature = "memory-backend"))]
pub mod memory;
pub mod process;
pub mod process_group;
pub mod procfs;
pub mod registry_file;
pub mod signals;
pub mod snapshot;
pub mod socket_options;
pub mod sockets;
pub mod store;
pub mod stream;
pub mod tcp_table;
pub mod temp;
pub mod timer;
mod types;
#[cfg(windows)]
pub mod windows;
pub mod windows_errors;

use dynamic_ports::PortRange;
pub use machine::Machine;
use serde::Serialize;
pub use types::{Fact, IpVersion, Platform, RegType};

/// The files wstune owns on a Linux host (host paths; `--prefix` moves them). `gather` reads
/// them as facts, `apply` plans and writes them, `export` names them.
pub mod owned {
    /// The sysctl file wstune owns.
    pub const SYSCTL_FILE: &str = "/etc/sysctl.d/60-wstune.conf";
    /// The PAM limits file wstune owns.
    pub const LIMITS_FILE: &str = "/etc/security/limits.d/60-wstune.conf";

    /// The systemd drop-in wstune writes for `unit`.
    pub fn unit_dropin(unit: &str) -> String {
        format!("/etc/systemd/system/{unit}.d/60-wstune.conf")
    }

    /// The udev rule that writes each tuned NIC's queue settings when it appears.
    pub const NIC_RULES_FILE: &str = "/etc/udev/rules.d/60-wstune-nic.rules";
    /// The boot script that pins the NICs' queue interrupts by name, and the unit that runs it.
    pub const NIC_IRQ_SCRIPT: &str = "/etc/wstune/nic-irq.sh";
    pub const NIC_IRQ_UNIT: &str = "/etc/systemd/system/wstune-nic-irq.service";
    /// RFS's flow table size, set with the NICs' RPS, and the receive budget.
    pub const NIC_SYSCTL_FILE: &str = "/etc/sysctl.d/60-wstune-nic.conf";
    /// The receive softirq's budget, which the NIC plan raises when time_squeeze grew: not a
    /// catalog check's setting, so named here for the journal (a rollback restores these).
    pub const NIC_SYSCTLS: [&str; 2] = ["net.core.netdev_budget", "net.core.netdev_budget_usecs"];
    /// irqbalance's policy script: `ban=true` for the NIC queue interrupts wstune pins.
    pub const IRQBALANCE_POLICY: &str = "/etc/wstune/irqbalance-policy.sh";
    /// irqbalance's environment file (IRQBALANCE_ARGS): Debian's, then RHEL's. Apply edits
    /// the one that exists, keeping every other line; rollback puts its bytes back.
    pub const IRQBALANCE_CONFIGS: [&str; 2] =
        ["/etc/default/irqbalance", "/etc/sysconfig/irqbalance"];

    /// The systemd .link file that gives `nic` its channel counts at boot (udev's
    /// net_setup_link applies it). 10- sorts before systemd's 99-default.link: the first
    /// matching .link file is the only one applied.
    pub fn nic_link_file(nic: &str) -> String {
        format!("/etc/systemd/network/10-wstune-{nic}.link")
    }

    /// An interface name as the kernel allows it: 1-15 bytes, no '/' or whitespace, not "."
    /// or "..".
    pub fn nic_name_ok(nic: &str) -> bool {
        (1..=15).contains(&nic.len())
            && nic != "."
            && nic != ".."
            && nic.bytes().all(|b| b.is_ascii_graphic() && b != b'/')
    }

    /// Whether `path` is a NIC queue or interrupt setting apply may write (and rollback put
    /// back): a queue's rps_cpus, rps_flow_cnt or xps_cpus, or an interrupt's
    /// smp_affinity_list. Nothing else outside /proc/sys is ever written at runtime.
    pub fn nic_runtime_path(path: &str) -> bool {
        let digits =
            |s: &str| !s.is_empty() && s.len() <= 6 && s.bytes().all(|b| b.is_ascii_digit());
        if let Some(rest) = path.strip_prefix("/proc/irq/") {
            return rest.strip_suffix("/smp_affinity_list").is_some_and(digits);
        }
        let Some(rest) = path.strip_prefix("/sys/class/net/") else {
            return false;
        };
        let parts: Vec<&str> = rest.split('/').collect();
        let [nic, "queues", queue, attr] = parts.as_slice() else {
            return false;
        };
        let nic_ok = nic_name_ok(nic);
        let q = |prefix: &str| queue.strip_prefix(prefix).is_some_and(digits);
        nic_ok
            && match *attr {
                "rps_cpus" | "rps_flow_cnt" => q("rx-"),
                "xps_cpus" => q("tx-"),
                _ => false,
            }
    }
}

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

/// Why a change to the host failed. The message says what the OS answered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WriteError {
    /// The kernel refused the value (EINVAL): out of its range or malformed.
    #[error("the kernel rejected {value:?} for {path} (EINVAL: out of range or malformed)")]
    Rejected { path: String, value: String },
    #[error("{0} is read-only here (a container mounts /proc/sys read-only; set it from the container runtime)")]
    ReadOnly(String),
    #[error("permission denied writing {0} (run as root)")]
    Denied(String),
    /// Denied although wstune runs as root, in what looks like a child network namespace: most
    /// likely the kernel makes the key read-only there (a kernel-wide key, a container); a
    /// security module or a missing capability says the same errno.
    #[error("{0} cannot be changed from this network namespace, although wstune runs as root: most likely the kernel makes it read-only in a child namespace (a kernel-wide key, or a container: set it on the host itself); a security module (SELinux, AppArmor) or a missing capability can refuse it too (see the audit log: journalctl -k, ausearch -m avc)")]
    DeniedInNamespace(String),
    /// Denied although wstune runs as root in the host's own network namespace: a security
    /// module or a capability the process lacks.
    #[error("{0}: permission denied although wstune runs as root: a security module (SELinux, AppArmor) or a missing capability (CAP_SYS_ADMIN or CAP_NET_ADMIN dropped, as a container runtime does) refuses it; see the audit log (journalctl -k, ausearch -m avc)")]
    DeniedAsRoot(String),
    /// Windows' access denied on HKLM: the process is not elevated.
    #[error("permission denied writing {0} (run from an elevated prompt: Run as administrator)")]
    NotElevated(String),
    #[error("{0} does not exist on this host")]
    NotFound(String),
    #[error("{0}")]
    Other(String),
}

impl WriteError {
    /// Classify a failed write by its errno (Linux numbering: the only OS that writes files
    /// here; Windows writes go to the registry).
    pub fn from_io(path: &str, value: &str, e: &std::io::Error) -> WriteError {
        match e.raw_os_error() {
            Some(22) => WriteError::Rejected {
                path: path.into(),
                value: value.trim().into(),
            },
            Some(30) => WriteError::ReadOnly(path.into()),
            Some(1) | Some(13) if path.starts_with("/proc/sys/") && running_as_root() => {
                if in_child_netns() {
                    WriteError::DeniedInNamespace(path.into())
                } else {
                    WriteError::DeniedAsRoot(path.into())
                }
            }
            Some(1) | Some(13) => WriteError::Denied(path.into()),
            Some(2) => WriteError::NotFound(path.into()),
            _ => WriteError::Other(format!("cannot write {value:?} to {path}: {e}")),
        }
    }
}

/// Whether this process looks to be in a child network namespace: not PID 1's, or (PID 1 in
/// a container shares it) not one the kernel numbers as the initial one (0xEFFFFFF9 since
/// 6.x; 4026531992 is what older kernels gave it). A guess for the wording of an error only.
fn in_child_netns() -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        let ino = |p: &str| std::fs::metadata(p).ok().map(|m| m.ino());
        let Some(me) = ino("/proc/self/ns/net") else {
            return false;
        };
        if ino("/proc/1/ns/net").is_some_and(|init| init != me) {
            return true;
        }
        !matches!(me, 0xEFFF_FFF9 | 4_026_531_992)
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Whether this process runs as root (never on Windows, whose writes go to the registry).
fn running_as_root() -> bool {
    #[cfg(not(windows))]
    {
        linux::is_root()
    }
    #[cfg(windows)]
    {
        false
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

/// A NIC's channel counts (`ethtool -l`): its queues, and how many the hardware allows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Channels {
    pub rx: u32,
    pub tx: u32,
    pub combined: u32,
    pub max_rx: u32,
    pub max_tx: u32,
    pub max_combined: u32,
}

/// Who a network interface is beyond its name, which an operator or udev may change: what the
/// journal records for each NIC apply changes, so that rollback finds that NIC again (under a
/// new name) and never another one that took its name.
///
/// A NIC on a bus is its device (`BUS:NAME`, the parent device's bus and bus id, unique on that
/// bus: `pci:0000:3b:00.0`) and port on it (`dev_port`, for a function with several ports), and
/// its permanent hardware address (ethtool's permaddr: IFLA_PERM_ADDRESS, else the address
/// when `addr_assign_type` says it is the permanent one). A virtual link (a veth, a bridge) has
/// neither: its address is random and it has no device, so it is its interface index in its
/// network namespace during one boot (`ifindex` + `netns` + `boot`): the kernel does not hand
/// an index out again while the namespace lives, and a virtual link does not outlive a reboot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicIdentity {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ifindex: Option<u32>,
    /// The permanent hardware address, lowercase `aa:bb:...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permaddr: Option<String>,
    /// The device it belongs to, `BUS:NAME` (`pci:0000:3b:00.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Its port on that device (`dev_port`), for a device with several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev_port: Option<u32>,
    /// The network namespace the index belongs to (its inode, `ip netns identify`'s `net:[N]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<u64>,
    /// The boot it was read in (`/proc/sys/kernel/random/boot_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<String>,
}

impl NicIdentity {
    /// Whether it names the hardware (device or permanent address), which outlives a rename,
    /// a driver reload and a reboot; else only its index names it.
    pub fn stable(&self) -> bool {
        self.device.is_some() || self.permaddr.is_some()
    }

    /// Whether anything beyond the name is known.
    pub fn known(&self) -> bool {
        self.stable() || self.ifindex.is_some()
    }

    /// The identity in words, for messages: `device pci:0000:3b:00.0 port 1, permanent
    /// address 52:54:00:12:34:56` or `ifindex 7`.
    pub fn words(&self) -> String {
        let mut w = Vec::new();
        if let Some(d) = &self.device {
            w.push(match self.dev_port.filter(|p| *p > 0) {
                Some(p) => format!("device {d} port {p}"),
                None => format!("device {d}"),
            });
        }
        if let Some(a) = &self.permaddr {
            w.push(format!("permanent address {a}"));
        }
        if w.is_empty() {
            if let Some(i) = self.ifindex {
                w.push(format!("ifindex {i}"));
            }
        }
        if w.is_empty() {
            "no identity".into()
        } else {
            w.join(", ")
        }
    }
}

/// A NIC's receive interrupt coalescing (`ethtool -c`): how long, and after how many frames, it
/// waits before raising a receive interrupt, and whether the driver adapts both to the load.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Coalesce {
    pub adaptive_rx: bool,
    pub rx_usecs: u32,
    pub rx_max_frames: u32,
}

impl std::fmt::Display for Coalesce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "adaptive-rx {}, rx-usecs {}, rx-frames {}",
            if self.adaptive_rx { "on" } else { "off" },
            self.rx_usecs,
            self.rx_max_frames
        )
    }
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
    /// Windows' TCP dynamic port range for one IP version (`netsh int ipv4 show dynamicport
    /// tcp`). Only Windows hosts have one.
    fn dynamic_ports(&self, ip: IpVersion) -> Result<PortRange, ReadError> {
        Err(ReadError::Unsupported(format!(
            "the {} dynamic port range exists only on Windows hosts",
            ip.as_str()
        )))
    }
    fn page_size(&self) -> u64;
    /// A host fact this backend reads its own way: Windows from its API (GetSystemInfo,
    /// GlobalMemoryStatusEx, GetProcessHandleCount of `pid`), a registry.yaml tree from its
    /// `host:` and `processes:` sections. None: read it from /proc and /sys (Linux).
    fn host_fact(&self, _fact: Fact, _pid: Option<u32>) -> Option<Result<i64, ReadError>> {
        None
    }
    /// Set a runtime kernel value: write `value` to an existing /proc/sys file. Never creates.
    fn write_runtime(&self, path: &str, value: &str) -> Result<(), WriteError>;
    /// A NIC's channel counts (ethtool netlink). Only the live Linux host has them.
    fn channels(&self, nic: &str) -> Result<Channels, ReadError> {
        Err(ReadError::Unsupported(format!(
            "{nic}'s channel counts are read over ethtool netlink, on the live host only"
        )))
    }
    /// Visit this network namespace's TCP sockets in `which` states (`wstune watch`). The live
    /// Linux host asks netlink sock_diag, Windows GetExtendedTcpTable; a captured tree has no
    /// sockets.
    fn tcp_sockets(
        &self,
        _which: sockets::Which,
        _visit: &mut dyn FnMut(&sockets::Sock),
    ) -> Result<(), ReadError> {
        Err(ReadError::Unsupported(
            "the socket table is read from the live host only".into(),
        ))
    }
    /// Cumulative TCP counters by the names /proc/net/netstat and /proc/net/snmp give them
    /// (`TcpExt.ListenOverflows`, `Tcp.ActiveOpens`), those of `names` this host counts, and
    /// why the others are missing (`wstune watch`). Linux reads those two files; Windows asks
    /// GetTcpStatisticsEx2, which has the MIB-II `Tcp.*` counters and none of Linux's `TcpExt`.
    fn tcp_counters(&self, names: &[&str]) -> sockets::TcpCounters {
        let mut out = sockets::TcpCounters::default();
        let netstat = self.read("/proc/net/netstat");
        let snmp = self.read("/proc/net/snmp");
        for name in names {
            let Some((group, field)) = name.split_once('.') else {
                continue;
            };
            let text = if group == "TcpExt" { &netstat } else { &snmp };
            if let Ok(t) = text {
                if let Some(v) = procfs::header_values(t, group, field) {
                    out.values.insert(name.to_string(), v.max(0) as u64);
                }
            }
        }
        if let Err(e) = netstat {
            out.unavailable.insert("netstat".into(), e);
        }
        if let Err(e) = snmp {
            out.unavailable.insert("snmp".into(), e);
        }
        out
    }
    /// The local ports outbound TCP connections take their source port from, first and last:
    /// Linux's net.ipv4.ip_local_port_range, Windows' IPv4 dynamic port range.
    fn ephemeral_ports(&self) -> Result<(u16, u16), ReadError> {
        let path = procfs::sysctl_path("net.ipv4.ip_local_port_range");
        let t = self.read(&path)?;
        let v: Vec<u16> = t
            .split_whitespace()
            .filter_map(|x| x.parse::<u16>().ok())
            .collect();
        match v.as_slice() {
            [first, last] => Ok((*first, *last)),
            _ => Err(ReadError::Other(format!(
                "{path}: not two ports: {}",
                t.trim()
            ))),
        }
    }
    /// A process's open descriptors: how many, and the inodes of those that are sockets
    /// (`/proc/PID/fd`, what `--pid` ties listeners to). Only the live Linux host; a
    /// process of another user needs root (or CAP_SYS_PTRACE).
    fn process_fds(&self, pid: u32) -> Result<(u64, Vec<u64>), ReadError> {
        Err(ReadError::Unsupported(format!(
            "the descriptors of process {pid} are read from the live host only"
        )))
    }
    /// A NIC's interrupt coalescing (`ethtool -c`). Only the live Linux host, or a tree's
    /// ethtool file.
    fn coalesce(&self, nic: &str) -> Result<Coalesce, ReadError> {
        Err(ReadError::Unsupported(format!(
            "{nic}'s interrupt coalescing is read over ethtool netlink, on the live host only"
        )))
    }
    /// A NIC's driver statistics, as `ethtool -S NIC` lists them (ETHTOOL_GSTATS): name and
    /// value, in the driver's order. The live Linux host, or a tree's `ethtool -S` capture.
    fn nic_stats(&self, nic: &str) -> Result<Vec<(String, u64)>, ReadError> {
        Err(ReadError::Unsupported(format!(
            "{nic}'s driver statistics are read with ETHTOOL_GSTATS, on the live host only"
        )))
    }
    /// A NIC's receive ring size and its maximum (`ethtool -g`). Only the live Linux host.
    fn rx_ring(&self, nic: &str) -> Result<(u32, u32), ReadError> {
        Err(ReadError::Unsupported(format!(
            "{nic}'s ring sizes are read over ethtool netlink, on the live host only"
        )))
    }
    /// Every network interface of this host (of this network namespace, on the live host)
    /// with its identity ([`NicIdentity`]). Read from /sys/class/net by default (a captured
    /// tree's files); the live host asks rtnetlink, which answers for the namespace it runs
    /// in whatever sysfs shows.
    fn nic_identities(&self) -> Result<Vec<NicIdentity>, ReadError> {
        fs::sysfs_identities(self)
    }
    /// Set a NIC's channel counts (None: left as they are).
    fn set_channels(
        &self,
        nic: &str,
        _rx: Option<u32>,
        _tx: Option<u32>,
        _combined: Option<u32>,
    ) -> Result<(), WriteError> {
        Err(WriteError::Other(format!(
            "{nic}'s channel counts are set over ethtool netlink, on the live host only"
        )))
    }
    /// Set a NIC's receive ring size (`ethtool -G NIC rx N`; the driver reallocates the ring
    /// and the link drops for a moment).
    fn set_rx_ring(&self, nic: &str, _rx: u32) -> Result<(), WriteError> {
        Err(WriteError::Other(format!(
            "{nic}'s receive ring is set over ethtool netlink, on the live host only"
        )))
    }
    /// `systemctl try-restart UNIT`: restart a service only if it runs, so that it reads its
    /// changed configuration. A captured tree runs no services.
    fn try_restart(&self, unit: &str) -> Result<(), WriteError> {
        Err(WriteError::Other(format!(
            "{unit} is restarted on a live Linux host only"
        )))
    }
    /// Restart a network adapter, so that it reads its changed registry keywords (what
    /// Set-NetAdapterRss does after writing them; the link drops for a moment). Windows only.
    fn restart_adapter(&self, name: &str) -> Result<(), WriteError> {
        Err(WriteError::Other(format!(
            "{name}: adapters are restarted on a live Windows host only"
        )))
    }
    /// Set RLIMIT_NOFILE of a running process (prlimit(2)).
    fn set_nofile(&self, pid: u32, soft: u64, hard: u64) -> Result<(), WriteError>;
    /// Set a registry value (`Some(data)`, REG_DWORD in decimal) or delete it (`None`).
    fn set_registry(
        &self,
        key: &str,
        value: &str,
        kind: RegType,
        data: Option<&str>,
    ) -> Result<(), WriteError>;
    /// Whether this process may change the host (root). Captured trees answer true: their
    /// files' permissions decide.
    fn privileged(&self) -> bool;
    /// Whether process `pid` exists (for `--pid` validation).
    fn process_exists(&self, pid: u32) -> bool {
        self.read(&format!("/proc/{pid}/limits")).is_ok()
    }
    /// Remove the temporary files a killed write of this backend left (a captured tree's
    /// values are written by the atomic writer, beside the file they replace); the host paths
    /// removed. The caller holds the journal lock, so no write is running. The live host
    /// writes its values in place: nothing to remove.
    fn remove_temporaries(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Environment variable `name`, read once and then removed from this process's environment,
/// so nothing it starts later (a hook, a helper) inherits it by accident: what a child needs
/// is handed to it explicitly. Note that /proc/PID/environ keeps showing the environment the
/// process was started with. A value that is not UTF-8 is an error naming the variable.
pub fn take_env(name: &str) -> Result<Option<String>, String> {
    let Some(v) = std::env::var_os(name) else {
        return Ok(None);
    };
    std::env::remove_var(name);
    v.into_string()
        .map(Some)
        .map_err(|_| format!("${name} is not UTF-8 text"))
}

/// A secret file a user named (`--api-key-file`, `--auth-secret-file`), read whole.
pub fn read_secret_file(p: &std::path::Path) -> std::io::Result<String> {
    std::fs::read_to_string(p)
}

/// Whether every local user may read `p` (its mode's "other" read bit; never on Windows,
/// where access is the ACL's).
pub fn readable_by_everyone(p: &std::path::Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o004 != 0)
    }
    #[cfg(not(unix))]
    {
        let _ = p;
        false
    }
}

/// Raise this process's soft open-file limit to its hard limit (what a server should do at
/// start); returns the (soft, hard) limits in force afterwards.
/// Whether this build runs on Windows, for what says so without touching the OS (the serve
/// settings table names the I/O driver: IOCP there).
pub const IS_WINDOWS: bool = cfg!(windows);

/// Whether `serve --processes N` can run N server processes here: its supervisor forks and
/// shares a port with SO_REUSEPORT's load balancing, which is Linux's; elsewhere a server is
/// one process.
pub const MANY_SERVER_PROCESSES: bool = cfg!(target_os = "linux");

#[cfg(not(windows))]
pub fn raise_nofile() -> (u64, u64) {
    linux::raise_nofile()
}

#[cfg(windows)]
pub fn raise_nofile() -> (u64, u64) {
    (u64::MAX, u64::MAX)
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

/// Where the live host keeps wstune's state (the journal) when it is not `/var/lib/wstune`.
#[cfg(not(windows))]
pub fn live_state_dir() -> Option<std::path::PathBuf> {
    None
}

/// `%ProgramData%\wstune` (C:\ProgramData\wstune), where Windows keeps machine-wide service state.
#[cfg(windows)]
pub fn live_state_dir() -> Option<std::path::PathBuf> {
    Some(windows::state_dir())
}

/// The backend for the host wstune runs on; `prefix` moves the files wstune owns.
pub fn live(prefix: Option<&std::path::Path>) -> Box<dyn Backend> {
    live_at(&layout(None, prefix))
}

#[cfg(not(windows))]
fn live_at(layout: &layout::Layout) -> Box<dyn Backend + Send> {
    Box::new(linux::LinuxBackend::live().with_layout(layout.clone()))
}

/// The live registry has no layout: `--prefix` only moves the journal (the store's).
#[cfg(windows)]
fn live_at(_layout: &layout::Layout) -> Box<dyn Backend + Send> {
    Box::new(windows::WindowsBackend::live())
}

/// Where the host's files are for `--root` and `--prefix`: the one mapping of those flags,
/// which [`open`]'s backend and the [`store::Store`] of wstune's own files both take.
pub fn layout(root: Option<&std::path::Path>, prefix: Option<&std::path::Path>) -> layout::Layout {
    let l = match root {
        Some(r) => layout::Layout::captured(r),
        None => layout::Layout::at(std::path::Path::new("/")),
    };
    let l = match prefix {
        Some(p) => l.with_prefix(p),
        None => l,
    };
    match (root.or(prefix), live_state_dir()) {
        (None, Some(state)) => l.with_state_dir(&state),
        _ => l,
    }
}

/// The host to read and write as `layout` places it: its captured tree (host/fixture.rs),
/// else the live host.
pub fn open(layout: &layout::Layout) -> Result<Box<dyn Backend>, fixture::RootError> {
    Ok(match layout.tree() {
        Some(dir) => Box::new(fixture::FixtureBackend::open(dir)?.with_layout(layout.clone())),
        None => live_at(layout),
    })
}
