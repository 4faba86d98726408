//! An in-memory host for unit tests: files by path, links, registry values. Directory listings
//! are derived from the file paths, so a test states only the files it cares about.

use super::{registry_file::RegistryFile, Backend, HostInfo, Link, ReadError, WriteError};
use super::{Platform, RegType};
use std::cell::RefCell;
use std::collections::BTreeMap;

#[derive(Debug, Default, Clone)]
pub struct MemoryBackend {
    pub files: RefCell<BTreeMap<String, String>>,
    pub links: Vec<Link>,
    pub registry: Option<RefCell<RegistryFile>>,
    pub units: BTreeMap<(String, String), String>,
    /// Writes to this path (or registry value name) fail, to test undo.
    pub fail_writes_to: Option<String>,
    /// Writes done, in order, as "path=value".
    pub writes: RefCell<Vec<String>>,
}

impl MemoryBackend {
    pub fn file(self, path: &str, text: &str) -> Self {
        self.files
            .borrow_mut()
            .insert(path.to_string(), text.to_string());
        self
    }

    pub fn with_registry(mut self, reg: RegistryFile) -> Self {
        self.registry = Some(RefCell::new(reg));
        self
    }

    fn failing(&self, what: &str) -> Result<(), WriteError> {
        match &self.fail_writes_to {
            Some(f) if f == what => Err(WriteError::Rejected {
                path: what.to_string(),
                value: "(injected)".into(),
            }),
            _ => Ok(()),
        }
    }
}

impl Backend for MemoryBackend {
    fn platform(&self) -> Platform {
        if self.registry.is_some() {
            Platform::Windows
        } else {
            Platform::Linux
        }
    }
    fn describe(&self) -> HostInfo {
        HostInfo {
            hostname: "memory".into(),
            os: "test".into(),
            kernel: String::new(),
            source: "memory".into(),
        }
    }
    fn read(&self, path: &str) -> Result<String, ReadError> {
        self.files
            .borrow()
            .get(path)
            .cloned()
            .ok_or_else(|| ReadError::NotFound(path.to_string()))
    }
    fn list(&self, dir: &str) -> Result<Vec<String>, ReadError> {
        let prefix = format!("{}/", dir.trim_end_matches('/'));
        let files = self.files.borrow();
        let mut names: Vec<String> = files
            .keys()
            .filter_map(|p| p.strip_prefix(&prefix))
            .map(|rest| rest.split('/').next().unwrap_or(rest).to_string())
            .collect();
        names.dedup();
        if names.is_empty() {
            return Err(ReadError::NotFound(dir.to_string()));
        }
        Ok(names)
    }
    fn links(&self) -> Result<Vec<Link>, ReadError> {
        match &self.registry {
            Some(r) => Ok(r.borrow().adapters()),
            None => Ok(self.links.clone()),
        }
    }
    fn systemd_property(&self, unit: &str, property: &str) -> Result<String, ReadError> {
        self.units
            .get(&(unit.to_string(), property.to_string()))
            .cloned()
            .ok_or_else(|| ReadError::NotFound(format!("{property} of {unit}")))
    }
    fn registry(&self, key: &str, value: &str, kind: RegType) -> Result<String, ReadError> {
        match &self.registry {
            Some(r) => r.borrow().get(key, value, kind),
            None => Err(ReadError::Unsupported("no registry".into())),
        }
    }
    fn dynamic_ports(
        &self,
        ip: super::IpVersion,
    ) -> Result<super::dynamic_ports::PortRange, ReadError> {
        match &self.registry {
            Some(r) => r.borrow().dynamic_ports(ip),
            None => Err(ReadError::Unsupported("no registry".into())),
        }
    }
    fn write_runtime(&self, path: &str, value: &str) -> Result<(), WriteError> {
        self.failing(path)?;
        let mut files = self.files.borrow_mut();
        let Some(slot) = files.get_mut(path) else {
            return Err(WriteError::NotFound(path.to_string()));
        };
        *slot = format!("{value}\n");
        self.writes.borrow_mut().push(format!("{path}={value}"));
        Ok(())
    }
    fn set_nofile(&self, pid: u32, soft: u64, hard: u64) -> Result<(), WriteError> {
        self.writes
            .borrow_mut()
            .push(format!("nofile[{pid}]={soft}:{hard}"));
        Ok(())
    }
    fn set_registry(
        &self,
        key: &str,
        value: &str,
        kind: RegType,
        data: Option<&str>,
    ) -> Result<(), WriteError> {
        self.failing(value)?;
        let Some(r) = &self.registry else {
            return Err(WriteError::Other("no registry".into()));
        };
        r.borrow_mut()
            .set(key, value, kind, data)
            .map_err(WriteError::Other)?;
        self.writes
            .borrow_mut()
            .push(format!("{key}\\{value}={data:?}"));
        Ok(())
    }
    fn privileged(&self) -> bool {
        true
    }
    fn page_size(&self) -> u64 {
        4096
    }
}
