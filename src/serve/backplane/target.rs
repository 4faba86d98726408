//! `--cluster URL`, read once: `cli::resolve` turns the URL into a [`Cluster`] (the engine it
//! names, with its parts checked) and the backplane starts what it names; a bad URL is refused
//! while the flags are resolved, before the server binds anything.
//!
//! A child server (`--processes`) gets the URL as typed in its configuration's JSON and reads
//! it back here, so the hand-over stays the text the user gave.

use super::wire::{CHANNEL, SHARDS, SUBJECT};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// The engine a `--cluster` URL names, with its parts checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `redis://` or `rediss://`: one Redis server (the URL as the redis crate reads it).
    Redis(String),
    /// `redis+sentinel://`: the master that the Sentinels name `master`.
    Sentinel {
        /// Sentinels to ask, in order (host, port); the one that answers moves to the front.
        sentinels: Vec<(String, u16)>,
        /// The master group's name in the Sentinels' configuration.
        master: String,
        /// The master's database.
        db: i64,
        /// `USER:PASS` for the master, as typed (percent-encoded), when given.
        auth: Option<String>,
    },
    /// `redis+cluster://`: seed nodes of a Redis Cluster, as `redis://` URLs.
    Cluster(Vec<String>),
    /// `nats://`: servers of a NATS cluster, as `nats://` URLs.
    Nats(Vec<String>),
}

/// `--cluster URL`, resolved: the URL as typed (shown redacted, handed to child servers) and
/// the engine it names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Cluster {
    url: String,
    target: Target,
}

impl Cluster {
    /// Read a `--cluster` URL; the error names the flag, what is wrong and the accepted forms.
    pub fn parse(url: &str) -> Result<Cluster> {
        Ok(Cluster {
            url: url.to_string(),
            target: parse(url)?,
        })
    }

    /// The engine to start.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The URL's scheme as typed (`redis`, `redis+cluster`, ...).
    pub fn scheme(&self) -> &str {
        self.url.split_once("://").map_or("", |(s, _)| s)
    }

    /// Whether channel history can span the nodes: it lives in Redis Streams, positioned by a
    /// Lua script that publishes on the backplane's one Redis channel, which Redis Cluster's
    /// sharded pub/sub and NATS do not have.
    pub fn carries_history(&self) -> bool {
        matches!(self.target, Target::Redis(_) | Target::Sentinel { .. })
    }

    /// The URL with any `USER:PASS@` shown as `***@`, for logs.
    pub fn redacted(&self) -> String {
        redacted(&self.url)
    }

    /// A one-line description of the engine for the start-up line: the scheme and its channel.
    pub fn describe(&self) -> String {
        match &self.target {
            Target::Redis(_) => format!("Redis channel {CHANNEL}"),
            Target::Sentinel { master, .. } => {
                format!("Redis Sentinel master {master}, channel {CHANNEL}")
            }
            Target::Cluster(_) => format!(
                "Redis Cluster, {SHARDS} shard channels {CHANNEL}:{{0..{}}}",
                SHARDS - 1
            ),
            Target::Nats(_) => format!("NATS subject {SUBJECT}"),
        }
    }
}

impl From<Cluster> for String {
    fn from(c: Cluster) -> String {
        c.url
    }
}

impl TryFrom<String> for Cluster {
    type Error = anyhow::Error;

    fn try_from(url: String) -> Result<Cluster> {
        Cluster::parse(&url)
    }
}

const FORMS: &str =
    "redis://HOST:PORT[/DB], redis+sentinel://HOST:PORT[,HOST:PORT...]/MASTER[/DB], \
                     redis+cluster://HOST:PORT[,HOST:PORT...] or nats://HOST:PORT[,HOST:PORT...]";

/// `HOST[:PORT]` or `[V6]:PORT`, with `default` for a missing port.
fn host_port(s: &str, default: u16) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        match after.strip_prefix(':') {
            Some(p) => (h, Some(p)),
            None if after.is_empty() => (h, None),
            None => return None,
        }
    } else {
        match s.split_once(':') {
            Some((h, p)) if !p.contains(':') => (h, Some(p)),
            Some(_) => return None,
            None => (s, None),
        }
    };
    if host.is_empty() || host.contains(['/', '@', ' ']) {
        return None;
    }
    let port = match port {
        Some(p) => p.parse().ok().filter(|p| *p > 0)?,
        None => default,
    };
    Some((host.to_string(), port))
}

/// A host as a URL writes it: an IPv6 address in brackets.
pub(crate) fn url_host(h: &str) -> String {
    if h.contains(':') {
        format!("[{h}]")
    } else {
        h.to_string()
    }
}

/// A URL's parts after the scheme: (userinfo, hosts with ports, path).
type Parts = (Option<String>, Vec<(String, u16)>, String);

/// `[USERINFO@]HOSTS[/PATH]` after the scheme.
fn split_hosts(rest: &str, default: u16) -> Option<Parts> {
    let (auth, rest) = match rest.rsplit_once('@') {
        Some((a, r)) => (Some(a.to_string()), r),
        None => (None, rest),
    };
    let (hosts, path) = match rest.split_once('/') {
        Some((h, p)) => (h, p.to_string()),
        None => (rest, String::new()),
    };
    let hosts: Option<Vec<_>> = hosts.split(',').map(|h| host_port(h, default)).collect();
    let hosts = hosts.filter(|h| !h.is_empty())?;
    Some((auth, hosts, path))
}

/// Read a `--cluster` URL; the error names the flag, what is wrong and the accepted forms.
fn parse(url: &str) -> Result<Target> {
    let shown = redacted(url);
    let bad = |why: &str| anyhow::anyhow!("--cluster {shown}: {why} (use {FORMS})");
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| bad("not a Redis URL or a backplane URL"))?;
    match scheme {
        "redis" | "rediss" => {
            ::redis::Client::open(url).with_context(|| {
                format!("--cluster {shown}: not a Redis URL (like redis://127.0.0.1:6379/0)")
            })?;
            Ok(Target::Redis(url.to_string()))
        }
        "redis+sentinel" => {
            let (auth, sentinels, path) =
                split_hosts(rest, 26379).ok_or_else(|| bad("a bad Sentinel address list"))?;
            let mut parts = path.split('/').filter(|p| !p.is_empty());
            let master = parts
                .next()
                .ok_or_else(|| bad("the master's name is missing after the Sentinels"))?
                .to_string();
            let db = match parts.next() {
                Some(d) => d
                    .parse()
                    .map_err(|_| bad(&format!("the database '{d}' is not a number")))?,
                None => 0,
            };
            if parts.next().is_some() {
                return Err(bad("more path than /MASTER/DB"));
            }
            Ok(Target::Sentinel {
                sentinels,
                master,
                db,
                auth,
            })
        }
        "redis+cluster" => {
            let (auth, hosts, path) =
                split_hosts(rest, 6379).ok_or_else(|| bad("a bad node address list"))?;
            if !path.is_empty() {
                bail!(bad("a Redis Cluster has one database: no /DB"));
            }
            let auth = auth.map(|a| format!("{a}@")).unwrap_or_default();
            Ok(Target::Cluster(
                hosts
                    .iter()
                    .map(|(h, p)| format!("redis://{auth}{}:{p}", url_host(h)))
                    .collect(),
            ))
        }
        "nats" if cfg!(not(feature = "nats")) => Err(bad(
            "this wstune was built without NATS support (cargo feature `nats`)",
        )),
        "nats" => {
            let (auth, hosts, path) =
                split_hosts(rest, 4222).ok_or_else(|| bad("a bad server address list"))?;
            if !path.is_empty() {
                return Err(bad("a NATS URL has no path"));
            }
            let auth = auth.map(|a| format!("{a}@")).unwrap_or_default();
            Ok(Target::Nats(
                hosts
                    .iter()
                    .map(|(h, p)| format!("nats://{auth}{}:{p}", url_host(h)))
                    .collect(),
            ))
        }
        _ => Err(bad(&format!(
            "not a Redis URL or a backplane URL: unknown scheme {scheme}://"
        ))),
    }
}

/// `url` with any `USER:PASS@` shown as `***@`, for logs: a password in `--cluster` must not
/// end up in them.
fn redacted(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('/').unwrap_or((rest, "")) {
            (hosts, path) if hosts.contains('@') => {
                let hosts = hosts.rsplit_once('@').map_or(hosts, |(_, h)| h);
                let path = if rest.contains('/') {
                    format!("/{path}")
                } else {
                    String::new()
                };
                format!("{scheme}://***@{hosts}{path}")
            }
            _ => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_engine_and_bad_ones_say_what_is_wrong() {
        assert_eq!(
            parse("redis://127.0.0.1:6379/0").unwrap(),
            Target::Redis("redis://127.0.0.1:6379/0".into())
        );
        assert_eq!(
            parse("redis+sentinel://a:26380,b/mymaster/2").unwrap(),
            Target::Sentinel {
                sentinels: vec![("a".into(), 26380), ("b".into(), 26379)],
                master: "mymaster".into(),
                db: 2,
                auth: None,
            }
        );
        assert_eq!(
            parse("redis+cluster://u:p@h1:7000,[::1]:7001").unwrap(),
            Target::Cluster(vec![
                "redis://u:p@h1:7000".into(),
                "redis://u:p@[::1]:7001".into()
            ])
        );
        #[cfg(feature = "nats")]
        assert_eq!(
            parse("nats://n1,n2:4333").unwrap(),
            Target::Nats(vec!["nats://n1:4222".into(), "nats://n2:4333".into()])
        );
        for (url, why) in [
            ("http://nope", "not a Redis URL"),
            ("redis+sentinel://a:1", "master's name is missing"),
            ("redis+sentinel://a:1/m/x", "'x' is not a number"),
            ("redis+cluster://a:1/0", "no /DB"),
            ("redis+cluster://a:port", "bad node address"),
            #[cfg(feature = "nats")]
            ("nats://", "bad server address"),
            #[cfg(not(feature = "nats"))]
            ("nats://h", "without NATS support"),
            ("nope", "not a Redis URL"),
        ] {
            let e = Cluster::parse(url).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(url), "{url}: {e}");
        }
    }

    #[test]
    fn passwords_are_redacted_for_logs() {
        assert_eq!(
            redacted("redis+sentinel://u:secret@a:1,b:2/m/0"),
            "redis+sentinel://***@a:1,b:2/m/0"
        );
        assert_eq!(redacted("nats://:tok@n:4222"), "nats://***@n:4222");
        assert_eq!(redacted("redis://h:6379/0"), "redis://h:6379/0");
    }

    /// A child server reads the URL its parent was given, as it was typed.
    #[test]
    fn a_cluster_crosses_to_a_child_as_the_url_typed() {
        let url = "redis+sentinel://u:p@a,b:26380/m/1";
        let c = Cluster::parse(url).unwrap();
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(json, format!("\"{url}\""));
        assert_eq!(serde_json::from_str::<Cluster>(&json).unwrap(), c);
        assert!(serde_json::from_str::<Cluster>("\"http://nope\"").is_err());
        assert_eq!(c.scheme(), "redis+sentinel");
        assert!(c.carries_history());
        assert!(!Cluster::parse("redis+cluster://h:7000")
            .unwrap()
            .carries_history());
    }
}
