//! A Windows registry as a YAML file: how a captured Windows host (`--root DIR` with
//! `DIR/registry.yaml`) and the tests present registry values on any OS.
//!
//! ```yaml
//! values:
//!   'HKLM\SYSTEM\CurrentControlSet\Services\Tcpip\Parameters':
//!     TcpTimedWaitDelay: {type: REG_DWORD, data: 30}
//! adapters:
//!   - {name: Ethernet, key: "0001"}
//! # `netsh int ipv4|ipv6 show dynamicport tcp`: not a plain registry value (see dynamic_ports.rs)
//! dynamic_ports:
//!   ipv4: {start: 49152, count: 16384}
//!   ipv6: {start: 49152, count: 16384}
//! # What the Windows API answers (GetSystemInfo, GlobalMemoryStatusEx); --pid processes'
//! # handle counts (GetProcessHandleCount)
//! host: {cpus: 16, mem_bytes: 68719476736}
//! processes:
//!   4242: {name: wstune.exe, handles: 100512}
//! ```

use super::dynamic_ports::PortRange;
use super::{IpVersion, RegType};
use super::{Link, ReadError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryFile {
    #[serde(default)]
    pub values: BTreeMap<String, BTreeMap<String, RegEntry>>,
    #[serde(default)]
    pub adapters: Vec<Adapter>,
    /// TCP dynamic port range per IP version, as netsh shows it. Absent in trees captured
    /// before wstune read it: the check is then skipped, never guessed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dynamic_ports: BTreeMap<IpVersion, PortRange>,
    /// Processor count and physical memory, as the Windows API reports them. Absent: those
    /// checks are skipped.
    #[serde(default, skip_serializing_if = "HostFacts::is_empty")]
    pub host: HostFacts,
    /// Processes `--pid` may name, by PID.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub processes: BTreeMap<u32, ProcessFacts>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostFacts {
    /// Logical processors (GetSystemInfo's dwNumberOfProcessors, all groups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// Physical memory in bytes (GlobalMemoryStatusEx's ullTotalPhys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_bytes: Option<u64>,
}

impl HostFacts {
    fn is_empty(&self) -> bool {
        *self == HostFacts::default()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessFacts {
    /// The image name, for the reader of the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Open handles (GetProcessHandleCount).
    pub handles: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegEntry {
    #[serde(rename = "type")]
    pub kind: RegType,
    pub data: serde_yaml_ng::Value,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Adapter {
    pub name: String,
    /// Subkey under the network adapter class key.
    pub key: String,
}

impl RegistryFile {
    pub fn load(path: &Path) -> Result<RegistryFile, String> {
        use crate::host::input::{io_words, read_bounded, Refused};
        // Confined to the tree it describes, and capped: a captured file is not to be trusted.
        let tree = path.parent().unwrap_or(Path::new("."));
        let text = read_bounded(path, super::fs::MAX_READ_BYTES, Some(tree)).map_err(|r| {
            let why = match r {
                Refused::Io(e) => io_words(&e),
                Refused::Directory | Refused::NotRegular => {
                    "not a regular file (a device, pipe or socket)".into()
                }
                Refused::Outside(real) => {
                    format!("a link to {}, outside the tree", real.display())
                }
                Refused::TooLarge(cap) => format!(
                    "larger than {} MiB, which no registry capture is",
                    cap >> 20
                ),
                Refused::NotUtf8 => "not UTF-8 text".into(),
            };
            format!("cannot read {}: {why}", path.display())
        })?;
        let file: RegistryFile =
            serde_yaml_ng::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        // A range netsh would refuse cannot be a captured host: say so instead of judging it.
        for (ip, r) in &file.dynamic_ports {
            PortRange::new(r.start, r.count).map_err(|e| {
                format!(
                    "{}: dynamic_ports.{}: {e}; write {{start: 49152, count: 16384}} as `netsh int {} show dynamicport tcp` shows",
                    path.display(),
                    ip.as_str(),
                    ip.as_str()
                )
            })?;
        }
        Ok(file)
    }

    /// The dynamic port range recorded for `ip`.
    pub fn dynamic_ports(&self, ip: IpVersion) -> Result<PortRange, ReadError> {
        self.dynamic_ports.get(&ip).copied().ok_or_else(|| {
            ReadError::NotFound(format!(
                "registry.yaml's dynamic_ports.{} (`netsh int {} show dynamicport tcp` on the host shows it)",
                ip.as_str(),
                ip.as_str()
            ))
        })
    }

    /// A host fact from the `host:` and `processes:` sections; None for facts a Windows host
    /// does not answer this way.
    pub fn fact(&self, fact: super::Fact, pid: Option<u32>) -> Option<Result<i64, ReadError>> {
        use super::Fact;
        let missing = |what: &str| ReadError::NotFound(format!("registry.yaml's {what}"));
        Some(match fact {
            Fact::Cpus => self
                .host
                .cpus
                .map(i64::from)
                .ok_or_else(|| missing("host.cpus")),
            Fact::MemBytes => self
                .host
                .mem_bytes
                .map(|b| b.min(i64::MAX as u64) as i64)
                .ok_or_else(|| missing("host.mem_bytes")),
            Fact::ProcessHandles => match pid {
                None => Err(ReadError::Other("needs --pid".into())),
                Some(p) => self
                    .processes
                    .get(&p)
                    .map(|pr| i64::from(pr.handles))
                    .ok_or_else(|| missing(&format!("processes.{p}"))),
            },
            _ => return None,
        })
    }

    /// Key paths compare case-insensitively, as in the registry.
    pub fn get(&self, key: &str, value: &str, kind: RegType) -> Result<String, ReadError> {
        let entries = self
            .values
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
            .ok_or_else(|| ReadError::NotFound(format!("{key}\\{value}")))?;
        let entry = entries
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(value))
            .map(|(_, v)| v)
            .ok_or_else(|| ReadError::NotFound(format!("{key}\\{value}")))?;
        if entry.kind != kind {
            return Err(ReadError::Other(format!(
                "{key}\\{value} is {:?}, expected {kind:?}",
                entry.kind
            )));
        }
        match (&entry.data, kind) {
            (serde_yaml_ng::Value::Number(n), RegType::Dword)
                if n.as_u64().is_some_and(|v| v <= u32::MAX as u64) =>
            {
                Ok(n.to_string())
            }
            (serde_yaml_ng::Value::String(s), RegType::Sz) => Ok(s.clone()),
            (other, _) => Err(ReadError::Other(format!(
                "{key}\\{value}: {other:?} is not a valid {kind:?}"
            ))),
        }
    }

    /// Set (`Some`) or delete (`None`) a value, creating the key as the registry would.
    pub fn set(
        &mut self,
        key: &str,
        value: &str,
        kind: RegType,
        data: Option<&str>,
    ) -> Result<(), String> {
        let existing = self
            .values
            .keys()
            .find(|k| k.eq_ignore_ascii_case(key))
            .cloned();
        let key = existing.unwrap_or_else(|| key.to_string());
        let entries = self.values.entry(key).or_default();
        let name = entries
            .keys()
            .find(|k| k.eq_ignore_ascii_case(value))
            .cloned()
            .unwrap_or_else(|| value.to_string());
        match data {
            None => {
                entries.remove(&name);
            }
            Some(d) => {
                let data = match kind {
                    RegType::Dword => serde_yaml_ng::Value::Number(
                        d.trim()
                            .parse::<u32>()
                            .map_err(|_| format!("{d:?} is not a REG_DWORD (0..4294967295)"))?
                            .into(),
                    ),
                    RegType::Sz => serde_yaml_ng::Value::String(d.to_string()),
                };
                entries.insert(name, RegEntry { kind, data });
            }
        }
        Ok(())
    }

    pub fn to_yaml(&self) -> String {
        serde_yaml_ng::to_string(self).expect("a registry file always serializes")
    }

    pub fn adapters(&self) -> Vec<Link> {
        self.adapters
            .iter()
            .map(|a| Link {
                name: a.name.clone(),
                physical: true,
                rx_queues: None,
                tx_queues: None,
                registry_key: Some(a.key.clone()),
            })
            .collect()
    }
}
