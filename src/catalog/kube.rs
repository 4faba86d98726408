//! Where Kubernetes lets a sysctl be set: the one list both the check report (a remark under
//! each fix that names a sysctl) and `wstune export` (which keys a pod spec may carry) read.
//!
//! Kubernetes sorts sysctls three ways ("Using sysctls in a Kubernetes Cluster",
//! kubernetes.io/docs/tasks/administer-cluster/sysctl-cluster/): *safe* ones, namespaced and
//! isolated, any pod may set in `securityContext.sysctls`; other *namespaced* ones a pod may set
//! only on a node whose kubelet allows them (`--allowed-unsafe-sysctls`, `allowedUnsafeSysctls`),
//! else the pod is scheduled but never starts; and *node-level* ones, not namespaced, set on the
//! node itself. Whether a key is namespaced is the catalog's `scope` (`netns`); the safe list
//! is the kubelet's, below.

use super::Scope;
use serde::Serialize;

/// Where a sysctl can be set in Kubernetes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kube {
    /// Per network namespace and on the kubelet's safe list: any pod may set it.
    Safe,
    /// Per network namespace, but the kubelet refuses it unless started with
    /// `--allowed-unsafe-sysctls` (or `allowedUnsafeSysctls` in its configuration).
    Unsafe,
    /// Kernel-wide: set on the node (a privileged DaemonSet or the node pool's config).
    Node,
}

impl Kube {
    /// The class in words, for the remark under a fix.
    pub fn words(self) -> &'static str {
        match self {
            Kube::Safe => "safe: any pod may set it (securityContext.sysctls)",
            Kube::Unsafe => {
                "namespaced but unsafe: a pod may set it only where the kubelet allows it (--allowed-unsafe-sysctls)"
            }
            Kube::Node => "node-level: set it on the node, never in a pod",
        }
    }
}

/// The kubelet's safe sysctls, as the Kubernetes page lists them (1.32: tcp_rmem and
/// tcp_wmem joined in 1.32, tcp_fin_timeout and the keepalives in 1.29,
/// ip_local_reserved_ports in 1.27).
pub const KUBE_SAFE: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

/// The class of `key`, whose catalog scope is `scope` (netns: namespaced).
pub fn kube_class(key: &str, scope: Scope) -> Kube {
    match scope {
        Scope::Netns if KUBE_SAFE.contains(&key) => Kube::Safe,
        Scope::Netns => Kube::Unsafe,
        _ => Kube::Node,
    }
}

/// The class of a sysctl the built-in Linux catalog checks (its scope decides namespaced or
/// not); None for a key it does not know.
pub fn class_of(key: &str) -> Option<Kube> {
    scopes()
        .iter()
        .find(|(k, _)| k == key)
        .map(|(k, s)| kube_class(k, *s))
}

/// Every sysctl key the built-in Linux catalog reads, with its scope.
pub fn scopes() -> &'static [(String, Scope)] {
    static SCOPES: std::sync::OnceLock<Vec<(String, Scope)>> = std::sync::OnceLock::new();
    SCOPES.get_or_init(|| {
        let mut out: Vec<(String, Scope)> = Vec::new();
        for (file, text) in super::EMBEDDED {
            if !file.ends_with("linux.yaml") {
                continue;
            }
            let v: serde_yaml_ng::Value =
                serde_yaml_ng::from_str(text).expect("the built-in catalogs parse");
            for check in v["checks"].as_sequence().into_iter().flatten() {
                // A sysctl source, or a fact that is a sysctl read under a condition.
                let fact =
                    serde_yaml_ng::from_value::<crate::host::Fact>(check["source"]["fact"].clone())
                        .ok()
                        .and_then(crate::host::Fact::sysctl);
                let (Some(key), Some(scope)) = (
                    check["source"]["sysctl"].as_str().or(fact),
                    check["scope"].as_str(),
                ) else {
                    continue;
                };
                let scope = if scope == "netns" {
                    Scope::Netns
                } else {
                    Scope::Global
                };
                if !out.iter().any(|(k, _)| k == key) {
                    out.push((key.to_string(), scope));
                }
            }
        }
        out
    })
}

/// The sysctls a fix text names (`sysctl -w KEY=...`, `KEY = ...`, or the key in words), each
/// once, in order: those the built-in catalog knows, by full name.
pub fn keys_named(text: &str) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for token in
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-'))
    {
        let token = token.trim_matches('.');
        if let Some((k, _)) = scopes().iter().find(|(k, _)| k == token) {
            if !out.contains(&k.as_str()) {
                out.push(k.as_str());
            }
        }
    }
    out
}

/// The remark under a fix that names sysctls: each key's Kubernetes class, one line per
/// class. Empty when the fix names none.
pub fn remark(text: &str) -> Vec<String> {
    let keys = keys_named(text);
    let mut by_class: Vec<(Kube, Vec<&str>)> = Vec::new();
    for k in keys {
        let Some(c) = class_of(k) else { continue };
        match by_class.iter_mut().find(|(x, _)| *x == c) {
            Some((_, ks)) => ks.push(k),
            None => by_class.push((c, vec![k])),
        }
    }
    by_class.sort_by_key(|(c, _)| *c);
    by_class
        .into_iter()
        .map(|(c, ks)| {
            let words = if ks.len() == 1 {
                format!("is {}", c.words())
            } else {
                format!("are {}", c.words().replace(" it ", " them "))
            };
            format!("Kubernetes: {} {words}", ks.join(", "))
        })
        .collect()
}

/// Each sysctl a fix names with its class, for the JSON report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyClass {
    pub key: String,
    pub class: Kube,
}

/// [`remark`]'s data: each named key with its class.
pub fn classes(text: &str) -> Vec<KeyClass> {
    keys_named(text)
        .into_iter()
        .filter_map(|k| {
            class_of(k).map(|class| KeyClass {
                key: k.to_string(),
                class,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_classes() {
        assert_eq!(kube_class("net.core.somaxconn", Scope::Netns), Kube::Unsafe);
        assert_eq!(
            kube_class("net.ipv4.ip_local_port_range", Scope::Netns),
            Kube::Safe
        );
        assert_eq!(kube_class("net.ipv4.tcp_rmem", Scope::Netns), Kube::Safe);
        assert_eq!(
            kube_class("net.core.netdev_max_backlog", Scope::Global),
            Kube::Node
        );
        // From the catalog's own scopes.
        assert_eq!(class_of("net.core.somaxconn"), Some(Kube::Unsafe));
        assert_eq!(class_of("net.ipv4.tcp_fin_timeout"), Some(Kube::Safe));
        assert_eq!(class_of("net.ipv4.tcp_mem"), Some(Kube::Node));
        assert_eq!(class_of("net.netfilter.nf_conntrack_max"), Some(Kube::Node));
        assert_eq!(class_of("no.such.key"), None);
    }

    #[test]
    fn a_fix_names_its_keys_and_each_gets_its_class() {
        let fix = "sudo sysctl -w net.core.somaxconn=65535; echo 'net.ipv4.tcp_fin_timeout = 30' | sudo tee -a f; raise net.ipv4.tcp_mem";
        assert_eq!(
            keys_named(fix),
            [
                "net.core.somaxconn",
                "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_mem"
            ]
        );
        let r = remark(fix);
        assert_eq!(r.len(), 3, "{r:?}");
        assert!(r[0].starts_with("Kubernetes: net.ipv4.tcp_fin_timeout is safe"));
        assert!(r[1].contains("net.core.somaxconn is namespaced but unsafe"));
        assert!(r[2].contains("net.ipv4.tcp_mem is node-level"));
        assert!(remark("add memory").is_empty());
    }
}
