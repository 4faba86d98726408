//! An in-memory host for unit tests: files by path, links, registry values. Directory listings
//! are derived from the file paths, so a test states only the files it cares about.

use super::{registry_file::RegistryFile, Backend, HostInfo, Link, ReadError};
use crate::catalog::{Platform, RegType};
use std::collections::BTreeMap;

#[derive(Debug, Default, Clone)]
pub struct MemoryBackend {
    pub files: BTreeMap<String, String>,
    pub links: Vec<Link>,
    pub registry: Option<RegistryFile>,
    pub units: BTreeMap<(String, String), String>,
}

impl MemoryBackend {
    pub fn file(mut self, path: &str, text: &str) -> Self {
        self.files.insert(path.to_string(), text.to_string());
        self
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
            .get(path)
            .cloned()
            .ok_or_else(|| ReadError::NotFound(path.to_string()))
    }
    fn list(&self, dir: &str) -> Result<Vec<String>, ReadError> {
        let prefix = format!("{}/", dir.trim_end_matches('/'));
        let mut names: Vec<String> = self
            .files
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
            Some(r) => Ok(r.adapters()),
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
            Some(r) => r.get(key, value, kind),
            None => Err(ReadError::Unsupported("no registry".into())),
        }
    }
    fn page_size(&self) -> u64 {
        4096
    }
}
