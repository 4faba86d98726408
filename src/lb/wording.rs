//! The words of the `check --lb-config` findings, from `checks/lb.yaml` (compiled in): lb.rs
//! reads the proxy's configuration and decides each status; what people read is data, like the
//! host catalog's, with `{name}` placeholders filled per finding.

use super::Kind;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// checks/lb.yaml, as compiled in.
pub const YAML: &str = include_str!("../../checks/lb.yaml");

/// One check's words.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Def {
    pub id: String,
    pub title: String,
    pub why: Text,
    pub fix: Text,
    /// Put into `why` (at `{name}`) only in the case the name says; empty otherwise.
    #[serde(default)]
    pub parts: BTreeMap<String, String>,
    /// The proxies' own documentation the advice follows (as the host catalog's `refs`).
    #[serde(default)]
    pub refs: Vec<crate::catalog::Ref>,
}

/// The same for both proxies, or one text each.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Text {
    One(String),
    PerProxy { haproxy: String, nginx: String },
}

impl Text {
    /// The text for `kind` (a per-proxy text without a proxy: HAProxy's and nginx's, joined).
    pub fn for_kind(&self, kind: Option<Kind>) -> String {
        match (self, kind) {
            (Text::One(t), _) => t.clone(),
            (Text::PerProxy { haproxy, .. }, Some(Kind::Haproxy)) => haproxy.clone(),
            (Text::PerProxy { nginx, .. }, Some(Kind::Nginx)) => nginx.clone(),
            (Text::PerProxy { haproxy, nginx }, None) => {
                format!("HAProxy: {haproxy}; nginx: {nginx}")
            }
        }
    }
}

/// Every lb check, in the file's order.
pub fn defs() -> &'static [Def] {
    static DEFS: OnceLock<Vec<Def>> = OnceLock::new();
    DEFS.get_or_init(|| crate::catalog::words::load("checks/lb.yaml", YAML))
}

/// The words of check `id`, with the values of one finding.
pub fn words(id: &str, kind: Option<Kind>, vars: Vec<(&'static str, String)>) -> Words {
    let def = defs()
        .iter()
        .find(|d| d.id == id)
        .unwrap_or_else(|| panic!("checks/lb.yaml has no check {id} (a unit test checks each)"));
    let mut vars = vars;
    if let Some(k) = kind {
        vars.push((
            "proxy",
            match k {
                Kind::Haproxy => "haproxy",
                Kind::Nginx => "nginx",
            }
            .into(),
        ));
    }
    Words { def, kind, vars }
}

pub struct Words {
    def: &'static Def,
    kind: Option<Kind>,
    vars: Vec<(&'static str, String)>,
}

impl Words {
    pub fn title(&self) -> String {
        fill(&self.def.title, &self.vars)
    }

    /// `why`, with the parts named in `on` put in and the others left out.
    pub fn why(&self, on: &[&str]) -> String {
        let def: &'static Def = self.def;
        let mut vars = self.vars.clone();
        for (name, text) in &def.parts {
            let v = if on.contains(&name.as_str()) {
                fill(text, &self.vars)
            } else {
                String::new()
            };
            vars.push((name.as_str(), v));
        }
        fill(&self.def.why.for_kind(self.kind), &vars)
    }

    pub fn fix(&self) -> String {
        fill(&self.def.fix.for_kind(self.kind), &self.vars)
    }

    pub fn refs(&self) -> Vec<crate::catalog::Ref> {
        self.def.refs.clone()
    }
}

/// `{name}` -> its value; an unknown name is left as it is (a unit test finds those).
pub fn fill(text: &str, vars: &[(&str, String)]) -> String {
    let mut out = text.to_string();
    for (k, v) in vars {
        out = out.replace(&format!("{{{k}}}"), v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_parses_and_ids_are_unique_and_namespaced() {
        let ids: Vec<&str> = defs().iter().map(|d| d.id.as_str()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len(), "{ids:?}");
        assert!(ids.iter().all(|i| i.starts_with("lb.")), "{ids:?}");
        assert!(
            defs().iter().all(|d| !d.refs.is_empty()),
            "every lb check names the documentation it follows"
        );
        for id in [
            "lb.config",
            "lb.idle_timeout",
            "lb.max_connections",
            "lb.backlog",
            "lb.fd_limit",
        ] {
            assert!(ids.contains(&id), "{id} missing");
        }
    }

    #[test]
    fn parts_go_in_only_when_named() {
        let w = words(
            "lb.idle_timeout",
            Some(Kind::Nginx),
            vec![
                ("interval", "25".into()),
                ("timeout", "60".into()),
                ("want", "85".into()),
                ("file", "x.conf".into()),
            ],
        );
        assert_eq!(
            w.title(),
            "nginx: idle timeout of upgraded connections outlasts the ping interval"
        );
        assert!(!w.why(&[]).contains("little margin"));
        assert!(w
            .why(&["little_margin"])
            .contains("cuts every idle client; this one"));
        assert!(w
            .fix()
            .starts_with("set proxy_read_timeout (and proxy_send_timeout) 85s in x.conf"));
    }

    /// Every placeholder a finding uses is filled, in every case the checks distinguish.
    #[test]
    fn findings_leave_no_placeholder_unfilled() {
        let p = crate::profile::load("100k").unwrap().profile;
        let opts = super::super::ProxySpec {
            backends: vec!["127.0.0.1:9001".into()],
            bind: "0.0.0.0:80".into(),
            tls_cert: None,
            tls_key: None,
            sticky: None,
            check_port: None,
        };
        let mut configs = vec!["nothing to see".to_string()];
        for kind in [Kind::Haproxy, Kind::Nginx] {
            let good = super::super::generate(kind, &p, &opts).unwrap();
            configs.push(good.clone());
            // Short timeouts, a cap without headroom, listens without backlog=.
            configs.push(
                good.replace("timeout tunnel", "timeout tunnel 30s #")
                    .replace("proxy_read_timeout", "proxy_read_timeout 10s; #")
                    .replace("backlog=", "x="),
            );
            configs.push("http { upstream b { server 1.2.3.4; } server { location / { proxy_pass http://b; } } }".into());
        }
        let limits = crate::lb::ProcLimits {
            soft: 1024,
            hard: 4096,
            raise_to: None,
            source: "test".into(),
        };
        for text in &configs {
            for l in [Ok(limits.clone()), Err("unreadable".to_string())] {
                for f in super::super::findings_with(std::path::Path::new("lb.conf"), text, &p, l) {
                    let all = format!(
                        "{} {} {} {}",
                        f.title,
                        f.why,
                        f.fix.runtime.unwrap_or_default(),
                        f.fix.persistent.unwrap_or_default()
                    );
                    assert!(!all.contains('{'), "{}: {all}", f.id);
                    assert!(
                        defs().iter().any(|d| d.id == f.id),
                        "{} is not in checks/lb.yaml",
                        f.id
                    );
                }
            }
        }
    }

    /// lb.fd_limit is worded in lb/proxy_fds.rs; its listed title must be the one it reports.
    #[test]
    fn fd_limit_title_matches_the_finding() {
        for kind in [Kind::Haproxy, Kind::Nginx] {
            let f = super::super::proxy_fds::finding(
                kind,
                &super::super::read(""),
                Err("x".into()),
                "f",
            );
            assert_eq!(f.title, words("lb.fd_limit", Some(kind), vec![]).title());
        }
    }
}
