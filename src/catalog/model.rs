//! The check catalog as data (checks/*.yaml). One entry describes one setting: where its value
//! comes from, how it is compared with a target written over the profile, how bad a miss is,
//! why it matters and how to fix it. The engine has no knowledge of any particular setting.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

// The OS vocabulary the backend speaks lives with it (host/); the catalog names it the same way.
// The dependency runs one way: the catalog uses host's types, host never the catalog's.
pub use crate::host::Fact;
use crate::host::{IpVersion, Platform, RegType};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogFile {
    pub platform: Platform,
    /// The words of the notes checks name (`note: NAME`), by name.
    #[serde(default)]
    pub notes: BTreeMap<String, NoteDef>,
    pub checks: Vec<Check>,
}

/// A note that counts what a finding's value alone does not say (how many ports a range
/// holds, how many server processes a low fd limit calls for): the code counts, the catalog
/// words it. A check names one with `note: NAME`; it is shown when no other note is.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoteDef {
    /// What is counted, which decides the cases and the placeholders the words may use.
    pub counts: NoteCount,
    /// A profile variable the count also needs (`proxy_addresses`: the profile's port count).
    #[serde(default)]
    pub variable: Option<String>,
    /// The words per case ([`NoteCount::cases`]), with `{name}` placeholders for the counts.
    pub words: BTreeMap<String, String>,
}

/// What a note counts. Each count has fixed cases (which words apply) and placeholders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoteCount {
    /// The ports a `[first, last]` range holds, and the target range's when it is missed.
    PortRange,
    /// For a missed fd limit: the fewest server processes whose share of the connections fits
    /// under it, and whether raising the limit fits this host (`host.can_raise_nofile`).
    Processes,
    /// The proxy source addresses the profile's connections need through as many ports as the
    /// current value (a dynamic port count), and with the profile's own count (`variable`).
    ProxyAddresses,
    /// The `--pid` server's threads (the current value) beside its sockets (`host.pid_sockets`).
    Threads,
    /// The socket buffers charged to the server's cgroup now (memory.stat `sock`), beside its
    /// memory.max.
    CgroupSocket,
}

impl NoteCount {
    /// The cases the words must give, each once.
    pub fn cases(self) -> &'static [&'static str] {
        match self {
            NoteCount::PortRange => &["held", "held_and_wanted"],
            NoteCount::Processes => &["none_fit", "processes_only", "raise_or_processes"],
            NoteCount::ProxyAddresses => &["addresses", "with_profile_ports"],
            NoteCount::Threads => &["per_connection", "shared"],
            NoteCount::CgroupSocket => &["charged"],
        }
    }

    /// The placeholders the words may use.
    pub fn placeholders(self) -> &'static [&'static str] {
        match self {
            NoteCount::PortRange => &["ports", "first", "last", "wanted_ports"],
            NoteCount::Processes => &[
                "current",
                "connections",
                "max_processes",
                "processes",
                "per_process",
            ],
            NoteCount::ProxyAddresses => &[
                "current",
                "connections",
                "reach",
                "addresses",
                "profile_ports",
                "profile_addresses",
            ],
            NoteCount::Threads => &["threads", "sockets"],
            NoteCount::CgroupSocket => &["sock_mib", "share"],
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// Stable id, dotted, e.g. `linux.net.core.somaxconn`. Reports, JUnit and dashboards key on it.
    pub id: String,
    pub title: String,
    #[serde(with = "serde_yaml_ng::with::singleton_map")]
    pub source: Source,
    /// Select one value of a multi-value setting (0-based), e.g. tcp_mem's high mark is 2.
    #[serde(default)]
    pub field: Option<usize>,
    /// Where the setting lives: per network namespace, global, per process, ...
    pub scope: Scope,
    pub compare: Compare,
    /// A number, a list, a version string, or an expression over the profile and host.
    #[serde(default)]
    pub target: Option<serde_yaml_ng::Value>,
    pub severity: Severity,
    /// The kernel's default at boot, for the boot-time view of sysctl checks. Absent when the
    /// kernel computes it from RAM (then only an explicit entry can be judged).
    #[serde(default)]
    pub default: Option<serde_yaml_ng::Value>,
    /// Whether sysctl checks also get a boot-time finding (`ID.boot`). Default: yes for sysctls.
    #[serde(default)]
    pub boot: Option<bool>,
    /// Run once per physical NIC (`{nic}` in paths is replaced).
    #[serde(default)]
    pub each: Option<Each>,
    /// Only meaningful with an option (`--pid`, `--unit`); skipped with a hint otherwise.
    #[serde(default)]
    pub requires: Option<Requirement>,
    /// What a value that does not exist means (e.g. a module that is not loaded).
    #[serde(default)]
    pub if_missing: Option<IfMissing>,
    /// A note of the file's `notes` that counts what the value alone does not say.
    #[serde(default)]
    pub note: Option<String>,
    /// Judged only when an earlier check missed its target (the limits a thread-per-connection
    /// server hits, after the check that finds it is one); skipped with `otherwise` when that
    /// check passed, and with its note when it was not judged.
    #[serde(default)]
    pub only_if_missed: Option<MissedGate>,
    /// What the kernel makes of a value (tcp_orphan_retries: 0 means 8): the value judged in
    /// its place, shown as read.
    #[serde(default)]
    pub means: BTreeMap<i64, i64>,
    pub why: String,
    pub fix: Fix,
    /// The public sources the target and the why follow (kernel documentation, vendor guides,
    /// well-known write-ups). Every built-in check has at least one; an operator's own
    /// catalog may leave them out.
    #[serde(default)]
    pub refs: Vec<Ref>,
    /// What changes on a host of another role (`role:` of the profile, `--role`): a skip with
    /// its reason, or another target, comparison, severity or why. Roles not named take the
    /// check as written.
    #[serde(default)]
    pub roles: BTreeMap<crate::profile::Role, RoleOverride>,
}

/// The check another check's verdict depends on (`only_if_missed`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MissedGate {
    /// An earlier check's id.
    pub check: String,
    /// Why this check does not apply when that one passed (the finding's note).
    pub otherwise: String,
}

/// A check as one role needs it. `skip` excludes the others.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleOverride {
    /// Not needed on this role, and why (shown as the finding's note).
    #[serde(default)]
    pub skip: Option<String>,
    #[serde(default)]
    pub compare: Option<Compare>,
    #[serde(default)]
    pub target: Option<serde_yaml_ng::Value>,
    #[serde(default)]
    pub severity: Option<Severity>,
    /// Replaces `why` for this role.
    #[serde(default)]
    pub why: Option<String>,
    #[serde(default)]
    pub fix: Option<Fix>,
}

/// One source a check follows: where it is, and the part of it that says so.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Ref {
    /// An https:// address.
    pub url: String,
    /// The heading, sysctl entry or paragraph the recommendation rests on.
    pub section: String,
}

/// What a softirq check reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SoftirqField {
    /// Each CPU's share of time in softirq (/proc/stat).
    PerCpu,
    /// Each CPU's share of the receive softirqs (/proc/softirqs' NET_RX row).
    NetRx,
}

/// The /proc/net/softnet_stat counters a check can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SoftnetField {
    /// Packets dropped because a CPU's input backlog was full.
    Dropped,
    /// Times the receive softirq stopped with packets left (its budget ran out).
    TimeSqueeze,
}

impl SoftnetField {
    /// Its column in the file (0 is packets processed).
    pub fn column(self) -> usize {
        match self {
            SoftnetField::Dropped => 1,
            SoftnetField::TimeSqueeze => 2,
        }
    }
}

/// Where a check's current value comes from.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Source {
    /// A sysctl by its dotted name (read from /proc/sys).
    Sysctl(String),
    /// A resource limit of this process or of `--pid` (read from /proc/PID/limits).
    Rlimit(RlimitSource),
    /// A property of the systemd unit named by `--unit` (`systemctl show`).
    Systemd(String),
    /// A file under /proc or /sys, its whole content as one value.
    File(String),
    /// A counter from /proc/net/netstat or /proc/net/snmp as `Group.Name`.
    Netstat(String),
    /// A field of /proc/net/sockstat as `PROTO.field`, e.g. `TCP.tw`.
    Sockstat(String),
    /// A column of /proc/net/softnet_stat summed over CPUs: `dropped` or `time_squeeze`.
    Softnet(SoftnetField),
    /// A column of /proc/net/stat/nf_conntrack, by its header name (`drop`, `early_drop`,
    /// `insert_failed`), summed over CPUs.
    ConntrackStat(String),
    /// `per_cpu`: each CPU's share of time in softirq during `--watch` (/proc/stat, read at
    /// both ends), busiest first; unreadable without --watch (a share needs an interval).
    Softirq(SoftirqField),
    /// A value the engine computes from several files.
    Fact(Fact),
    /// The line in the sysctl.d boot configuration that sets a key, if any.
    BootEntry(String),
    /// A Windows registry value.
    Registry(RegistrySource),
    /// Windows' TCP dynamic (ephemeral) port range for one IP version, as `netsh int ipv4|ipv6
    /// show dynamicport tcp` reports it; the value is the range `[first, last]`.
    DynamicPorts(IpVersion),
    /// How many ports that range holds: what one proxy address can open to one backend.
    DynamicPortCount(IpVersion),
    /// One of a NIC's driver statistics by the name `ethtool -S NIC` gives it (ETHTOOL_GSTATS;
    /// ENA's `pps_allowance_exceeded`); missing on a NIC whose driver has no such counter.
    NicStat(String),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RlimitSource {
    pub resource: Resource,
    pub limit: LimitKind,
    pub process: Process,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    Nofile,
    /// RLIMIT_NPROC: the threads and processes of the process's real user, together.
    Nproc,
    /// RLIMIT_STACK: the main thread's stack, and glibc's default for every new thread's.
    Stack,
}

impl Resource {
    /// Its line in /proc/PID/limits.
    pub fn limits_line(self) -> &'static str {
        match self {
            Resource::Nofile => "Max open files",
            Resource::Nproc => "Max processes",
            Resource::Stack => "Max stack size",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    Soft,
    Hard,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Process {
    /// wstune itself: what a server started from this shell inherits.
    #[serde(rename = "self")]
    Current,
    /// The process named by `--pid`.
    Pid,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistrySource {
    /// Full key path starting with HKLM\ (`{nic_key}` is replaced per adapter).
    pub key: String,
    pub value: String,
    #[serde(rename = "type")]
    pub kind: RegType,
    /// Enumerated values shown by name (e.g. *RSSProfile "3" -> NUMAScaling).
    #[serde(default)]
    pub names: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Per network namespace: a container sees its own value.
    Netns,
    /// Kernel-wide.
    Global,
    /// Per process (rlimits).
    Process,
    /// A systemd unit's setting.
    Unit,
    /// A hardware or boot property of the host.
    Host,
    /// The boot-time configuration files.
    Boot,
    /// A Windows registry value.
    Registry,
    /// The load balancer's configuration in front of the server (`check --lb-config`).
    Proxy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Compare {
    #[serde(rename = ">=")]
    AtLeast,
    #[serde(rename = "<=")]
    AtMost,
    #[serde(rename = "==")]
    Equal,
    /// The current [low, high] range contains the target range.
    #[serde(rename = "covers")]
    Covers,
    /// A port list (`30000-32767,10250`, as net.ipv4.ip_local_reserved_ports reads) holds
    /// every port of the target list.
    #[serde(rename = "reserves")]
    Reserves,
    /// Current version (dotted) is at least the target version.
    #[serde(rename = "version>=")]
    VersionAtLeast,
    /// The value must not exist (e.g. a leftover setting).
    #[serde(rename = "absent")]
    Absent,
    /// A cumulative counter: only its growth during `--watch` matters.
    #[serde(rename = "no_growth")]
    NoGrowth,
    /// Shown for information, never judged.
    #[serde(rename = "report")]
    Report,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warn,
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Each {
    Nic,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Requirement {
    Pid,
    Unit,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IfMissing {
    pub status: MissingStatus,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissingStatus {
    Pass,
    Skip,
    Info,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Fix {
    /// Takes effect now; `{target}`, `{unit}`, `{pid}`, `{nic}`, `{location}` are filled in.
    #[serde(default)]
    pub runtime: Option<String>,
    /// Survives a reboot.
    #[serde(default)]
    pub persistent: Option<String>,
}
