//! Host facts: everything the pure evaluator and the pure plan know about a host, read once by
//! [`crate::gather::gather`] through the backend. Nothing here reads anything: these are plain
//! values, so a test builds them by hand (catalog/eval.rs and apply/plan.rs tests do).
//!
//! Values stay typed from the read to the decision: a sysctl is a [`Value`], a boot-time
//! assignment is a [`BootEntry`] (file, line, value), never a `"FILE:LINE = VALUE"` string that
//! someone must split apart again.

use crate::host::{HostInfo, Link};
use crate::value::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// What the user asked the facts to cover beyond the profile: the server process (`--pid`),
/// its systemd unit (`--unit`) and how long to watch the counters (`--watch`).
#[derive(Debug, Clone, Default)]
pub struct FactsRequest {
    pub pid: Option<u32>,
    pub unit: Option<String>,
    /// Re-read cumulative counters after this long and judge their growth.
    pub watch: Option<Duration>,
}

/// One read: a value, a meaningful absence, or a reason it could not be read.
#[derive(Debug, Clone, PartialEq)]
pub enum Reading<T = Value> {
    Value(T),
    /// The thing does not exist (module not loaded, key removed from the kernel).
    Missing(String),
    /// It exists but could not be read (permissions, format, unsupported here).
    Unreadable(String),
}

impl<T> Reading<T> {
    pub fn value(&self) -> Option<&T> {
        match self {
            Reading::Value(v) => Some(v),
            _ => None,
        }
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Reading<U> {
        match self {
            Reading::Value(v) => Reading::Value(f(v)),
            Reading::Missing(m) => Reading::Missing(m),
            Reading::Unreadable(u) => Reading::Unreadable(u),
        }
    }
}

/// The line of the boot-time sysctl configuration that sets a key: the last assignment in the
/// order `sysctl --system` applies the files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootEntry {
    /// The host path of the file (`/etc/sysctl.d/99-tune.conf`).
    pub file: String,
    /// 1-based.
    pub line: usize,
    /// The value as written (`1024`, `4096 87380 6291456`).
    pub value: String,
}

impl BootEntry {
    /// `FILE:LINE`, how people and editors name a line.
    pub fn location(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// How a report shows the entry: `FILE:LINE = VALUE` (the text of `linux.boot.*` findings).
impl fmt::Display for BootEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{} = {}", self.file, self.line, self.value)
    }
}

/// The sysctl.conf-format files applied at boot, in the order `sysctl --system` applies them,
/// with their text: read once, then every key's [`BootEntry`] is computed from it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BootConfig {
    /// (host path, text) in application order; a later file overrides an earlier one.
    pub files: Vec<(String, String)>,
    /// Whether this host has any boot configuration at all (a sysctl.d directory or
    /// /etc/sysctl.conf); a container usually has none, and then nothing is "missing".
    pub any: bool,
    /// Files that should be applied at boot but could not be read (not UTF-8, a link loop, no
    /// permission): (host path, why). What they set is unknown, and every answer says so.
    pub skipped: Vec<(String, String)>,
}

/// Boot-time configuration directories in the order `sysctl --system` and systemd-sysctl use:
/// all `*.conf` files sorted by name; for equal names the earlier directory wins; later
/// assignments override earlier ones. /etc/sysctl.conf is applied last (procps), which matches
/// the usual 99-sysctl.conf symlink to it on systemd distributions.
pub const SYSCTL_DIRS: &[&str] = &[
    "/etc/sysctl.d",
    "/run/sysctl.d",
    "/usr/local/lib/sysctl.d",
    "/usr/lib/sysctl.d",
    "/lib/sysctl.d",
];

/// Applied after every sysctl.d file.
pub const SYSCTL_CONF: &str = "/etc/sysctl.conf";

impl BootConfig {
    /// The entry that sets `key` at the next boot, or Missing (Unreadable when this host has
    /// no boot configuration at all).
    pub fn entry(&self, key: &str) -> Reading<BootEntry> {
        let mut found = None;
        for (file, text) in &self.files {
            if let Some((line, value)) = last_assignment(text, key) {
                found = Some(BootEntry {
                    file: file.clone(),
                    line,
                    value,
                });
            }
        }
        match found {
            Some(e) => Reading::Value(e),
            None if !self.any => Reading::Unreadable(
                "no /etc/sysctl.conf or sysctl.d directory: nothing applies sysctls at boot here (in a container the runtime does: docker --sysctl, Kubernetes securityContext.sysctls)".into(),
            ),
            None if !self.skipped.is_empty() => Reading::Missing(format!(
                "no sysctl.d file wstune could read sets {key}; {}",
                self.skipped_note()
            )),
            None => Reading::Missing(format!("no sysctl.d file sets {key}")),
        }
    }

    /// The files skipped, in words: "could not read F (why); ...: what they set is unknown".
    pub fn skipped_note(&self) -> String {
        let list: Vec<String> = self
            .skipped
            .iter()
            .map(|(p, why)| format!("{p} ({why})"))
            .collect();
        format!(
            "could not read {}: what they set at boot is unknown",
            list.join(", ")
        )
    }

    /// This configuration with `path` holding `text` (replacing a same-named file: a file in
    /// /etc/sysctl.d masks its namesakes further down [`SYSCTL_DIRS`]): how `apply` checks that
    /// the file it is about to write would really win at boot.
    pub fn with_file(&self, path: &str, text: &str) -> BootConfig {
        let name = |p: &str| p.rsplit_once('/').map_or(p, |(_, n)| n).to_string();
        let ours = name(path);
        let mut files: Vec<(String, String)> = self
            .files
            .iter()
            .filter(|(p, _)| p == SYSCTL_CONF || name(p) != ours)
            .cloned()
            .collect();
        // Sorted by name, sysctl.conf last, as [`crate::gather`] orders them.
        let at = files
            .iter()
            .position(|(p, _)| p == SYSCTL_CONF || name(p) > ours)
            .unwrap_or(files.len());
        files.insert(at, (path.to_string(), text.to_string()));
        BootConfig {
            files,
            any: true,
            skipped: self.skipped.clone(),
        }
    }
}

impl BootConfig {
    /// The line that sets `key` in a file applied after `path` (placed in the order as
    /// [`BootConfig::with_file`] would): what overrides any line `path` has for it at boot.
    pub fn set_after(&self, path: &str, key: &str) -> Option<BootEntry> {
        let with = self.with_file(path, "");
        let at = with.files.iter().position(|(p, _)| p == path)?;
        let later = BootConfig {
            files: with.files[at + 1..].to_vec(),
            any: true,
            skipped: vec![],
        };
        later.entry(key).value().cloned()
    }
}

/// The last line of a sysctl.conf-format text that assigns `key` (either `a.b.c` or `a/b/c`,
/// optionally prefixed with `-`), as (1-based line, value).
pub fn last_assignment(text: &str, key: &str) -> Option<(usize, String)> {
    let mut found = None;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let k = k.trim().trim_start_matches('-').replace('/', ".");
        if k == key {
            found = Some((i + 1, v.trim().to_string()));
        }
    }
    found
}

/// One check applied to one object (the host, or one NIC).
#[derive(Debug, Clone)]
pub struct Instance {
    /// Index into the catalog's checks.
    pub check: usize,
    pub nic: Option<Link>,
    /// The value; for a `boot_entry` check, the entry as the report shows it.
    pub reading: Reading,
    /// The second reading of a counter after `--watch`.
    pub after: Option<Reading>,
    /// The boot-time configuration entry: of a sysctl check's key (its boot view), or the
    /// entry a `boot_entry` check looks for.
    pub boot: Option<Reading<BootEntry>>,
    /// The value was absent and the check's documented default stands in for it.
    pub defaulted: bool,
}

#[derive(Debug, Clone)]
pub struct HostFacts {
    pub info: HostInfo,
    /// `host.*` and `sysctl.*` variables for target expressions; absent when unreadable.
    pub vars: BTreeMap<String, Value>,
    /// Each NIC's own variables for per-NIC targets (`nic.rss_queues`), by its name: what a
    /// NIC instance's target adds to `vars` ([`super::NIC_VARS`]).
    pub nic_vars: BTreeMap<String, BTreeMap<String, Value>>,
    pub instances: Vec<Instance>,
    /// The whole current value of every sysctl the catalog reads (tcp_rmem's three numbers,
    /// not only the field one check looks at): what `apply` changes and restates.
    pub sysctls: BTreeMap<String, Reading>,
    /// The boot-time sysctl configuration, when a check looks at it.
    pub boot: BootConfig,
    /// The text of each file wstune owns that exists now (host path -> text): `apply` leaves
    /// a file that already says what it would write alone, and merges into its sysctl file.
    pub owned: BTreeMap<String, String>,
    /// Why per-NIC checks have no instance, when there is no NIC to check.
    pub no_nics: Option<String>,
    pub watched: Option<Duration>,
    pub request: FactsRequest,
}

impl HostFacts {
    /// Facts with nothing read: the start of a hand-made host in tests.
    pub fn empty(info: HostInfo) -> HostFacts {
        HostFacts {
            info,
            vars: BTreeMap::new(),
            nic_vars: BTreeMap::new(),
            instances: Vec::new(),
            sysctls: BTreeMap::new(),
            boot: BootConfig::default(),
            owned: BTreeMap::new(),
            no_nics: None,
            watched: None,
            request: FactsRequest::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctl_conf_parsing() {
        let text =
            "# c\nnet.core.somaxconn = 1024\n-net/core/somaxconn=2048\nnet.core.somaxconnx = 1\n";
        assert_eq!(
            last_assignment(text, "net.core.somaxconn"),
            Some((3, "2048".into()))
        );
        assert_eq!(last_assignment(text, "fs.file-max"), None);
    }

    #[test]
    fn our_file_takes_its_place_in_the_order_and_masks_its_namesake() {
        let cfg = BootConfig {
            skipped: vec![],
            files: vec![
                ("/usr/lib/sysctl.d/50-a.conf".into(), "k = 1\n".into()),
                ("/usr/lib/sysctl.d/60-wstune.conf".into(), "k = 2\n".into()),
                ("/etc/sysctl.d/70-b.conf".into(), "j = 3\n".into()),
                (SYSCTL_CONF.into(), "\n".into()),
            ],
            any: true,
        };
        let with = cfg.with_file("/etc/sysctl.d/60-wstune.conf", "k = 9\n");
        let paths: Vec<&str> = with.files.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/usr/lib/sysctl.d/50-a.conf",
                "/etc/sysctl.d/60-wstune.conf",
                "/etc/sysctl.d/70-b.conf",
                SYSCTL_CONF
            ]
        );
        assert_eq!(
            with.entry("k"),
            Reading::Value(BootEntry {
                file: "/etc/sysctl.d/60-wstune.conf".into(),
                line: 1,
                value: "9".into()
            })
        );
        assert_eq!(
            with.entry("k").value().unwrap().to_string(),
            "/etc/sysctl.d/60-wstune.conf:1 = 9"
        );
        assert_eq!(
            cfg.set_after("/etc/sysctl.d/60-wstune.conf", "j")
                .map(|e| e.location()),
            Some("/etc/sysctl.d/70-b.conf:1".into())
        );
        assert_eq!(cfg.set_after("/etc/sysctl.d/60-wstune.conf", "k"), None);
        assert!(matches!(
            BootConfig::default().entry("k"),
            Reading::Unreadable(_)
        ));
    }
}
