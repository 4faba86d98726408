//! The OS vocabulary every backend speaks: which platform a host is, a registry value's type,
//! an IP version. The catalog names the same things (it re-exports these), but they belong to
//! the boundary: a backend must not need the catalog to say what it is.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    Linux,
    Windows,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IpVersion {
    Ipv4,
    Ipv6,
}

impl IpVersion {
    /// The word netsh uses (`netsh int ipv4 ...`).
    pub fn as_str(self) -> &'static str {
        match self {
            IpVersion::Ipv4 => "ipv4",
            IpVersion::Ipv6 => "ipv6",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum RegType {
    #[serde(rename = "REG_DWORD")]
    Dword,
    #[serde(rename = "REG_SZ")]
    Sz,
}
