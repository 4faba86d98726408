//! The backplane's engines: `--cluster URL`'s scheme picks how the nodes of a cluster reach
//! each other, and every engine carries the same relay messages (`serve::cluster`'s wire
//! format) and presence heartbeats (`presence`).
//!
//! | URL | engine | no single point of failure because |
//! |---|---|---|
//! | `redis://HOST:PORT[/DB]` | one Redis, PUBLISH/SUBSCRIBE (`redis.rs`) | it has one |
//! | `redis+sentinel://[USER:PASS@]H1:26379,H2:26379/MASTER[/DB]` | the master Sentinel names (`redis.rs`, `sentinel.rs`) | a failover moves the master; the node follows |
//! | `redis+cluster://[USER:PASS@]H1:7000,H2:7001,...` | Redis Cluster sharded pub/sub, SPUBLISH/SSUBSCRIBE (`sharded.rs`) | the shard channels are spread over the masters, each with its replicas |
//! | `nats://[USER:PASS@]H1:4222[,H2:4222...]` | core NATS publish/subscribe (`nats.rs`) | any server of the NATS cluster will do |
//!
//! What every engine shares lives here: the relay hook on the hub (each node delivers its own
//! messages locally at once and queues them for the engine, bounded at `cluster::QUEUE`; past
//! it, or while the engine is down, a message is delivered here only and counted in
//! `ws_backplane_dropped_total`), the node id that makes each node skip its own messages, and
//! the presence heartbeat that makes `GET /api/channels/NAME` count every node.

#[cfg(feature = "nats")]
mod nats;
mod presence;
mod redis;
mod sentinel;
mod sharded;

use crate::serve::cluster;
use anyhow::{bail, Context, Result};
use embedded_server::hub::Relay;
use embedded_server::Hub;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::mpsc;

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

pub(super) fn url_host(h: &str) -> String {
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
pub fn parse(url: &str) -> Result<Target> {
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

/// One message for the engine: which shard channel it belongs on (only Redis Cluster shards;
/// the others ignore it) and the bytes.
pub(crate) struct Out {
    /// `shard_of` the message: a channel message by its channel's name, the rest on shard 0.
    pub shard: u16,
    /// `cluster::encode`d relay message, or a presence heartbeat.
    pub bytes: Vec<u8>,
}

/// What the engines' tasks share: the hub to deliver to, this node's id, the presence table.
pub(crate) struct Link {
    /// Where relayed messages are delivered.
    pub hub: Arc<Hub>,
    /// This node's id on the backplane (its own messages come back and are skipped).
    pub me: u64,
    /// What the other nodes last announced.
    pub presence: Arc<presence::Table>,
}

impl Link {
    /// A message from the backplane: a heartbeat updates the presence table, anything else is
    /// a relay message for this node's clients (skipped when it is our own).
    pub fn receive(&self, m: &[u8]) {
        if presence::is_heartbeat(m) {
            self.presence.record(self.me, m);
            self.count_nodes();
        } else {
            cluster::deliver(&self.hub, self.me, m);
        }
    }

    pub fn set_up(&self, up: bool) {
        self.hub.metrics.backplane_up.store(up as i64, Relaxed);
    }

    fn count_nodes(&self) {
        let n = self.presence.live() as i64 + 1;
        self.hub.metrics.backplane_nodes.store(n, Relaxed);
    }
}

/// Which shard channel a relay message goes on: a channel message by a hash of its channel's
/// name (so one busy channel loads one shard, and the shards share the channels), a broadcast
/// on shard 0.
pub(crate) fn shard_of(r: &Relay<'_>, shards: u16) -> u16 {
    match r {
        Relay::Broadcast { .. } => 0,
        // FNV-1a: stable across nodes and builds (the std hasher is seeded per process).
        Relay::Channel { channel, .. } | Relay::Sequence { channel, .. } => {
            let h = channel.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
            });
            (h % shards as u64) as u16
        }
    }
}

/// Install the relay and presence hooks on `hub` and start the engine `url` names.
pub fn start(url: &str, hub: Arc<Hub>) -> Result<()> {
    let target = parse(url)?;
    let me = cluster::node_id();
    let metrics = hub.metrics.clone();
    metrics.backplane_up.store(0, Relaxed);
    let (tx, rx) = mpsc::channel::<Out>(cluster::QUEUE);
    {
        let (metrics, tx) = (metrics.clone(), tx.clone());
        hub.relay().set(Box::new(move |r| {
            // While the backplane is down the message was delivered here only; queueing it for
            // later would replay stale messages after the outage.
            let out = Out {
                shard: shard_of(&r, sharded::SHARDS),
                bytes: cluster::encode(me, &r),
            };
            if metrics.backplane_up.load(Relaxed) != 1 || tx.try_send(out).is_err() {
                metrics.backplane_dropped.fetch_add(1, Relaxed);
            }
        }));
    }
    let table = Arc::new(presence::Table::default());
    {
        let table = table.clone();
        hub.presence()
            .set_remote(Box::new(move |name| table.lookup(me, name)));
    }
    let link = Arc::new(Link {
        hub,
        me,
        presence: table,
    });
    presence::start_heartbeat(link.clone(), tx);
    match target {
        Target::Redis(url) => {
            redis::start(redis::Locate::Fixed(::redis::Client::open(url)?), link, rx)
        }
        Target::Sentinel {
            sentinels,
            master,
            db,
            auth,
        } => {
            let s = sentinel::Sentinels::new(sentinels, master, db, auth);
            redis::start(redis::Locate::Sentinel(s), link, rx)
        }
        Target::Cluster(nodes) => sharded::start(nodes, link, rx),
        #[cfg(feature = "nats")]
        Target::Nats(servers) => nats::start(servers, link, rx),
        #[cfg(not(feature = "nats"))]
        Target::Nats(_) => unreachable!("parse refuses nats:// without the nats feature"),
    }
    Ok(())
}

/// `url` with any `USER:PASS@` shown as `***@`, for logs: a password in `--cluster` must not
/// end up in them.
pub fn redacted(url: &str) -> String {
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

/// A one-line description of the engine for the start-up line: the scheme and its channel.
pub fn describe(url: &str) -> String {
    match parse(url) {
        Ok(Target::Redis(_)) => format!("Redis channel {}", cluster::CHANNEL),
        Ok(Target::Sentinel { master, .. }) => {
            format!(
                "Redis Sentinel master {master}, channel {}",
                cluster::CHANNEL
            )
        }
        Ok(Target::Cluster(_)) => format!(
            "Redis Cluster, {} shard channels {}:{{0..{}}}",
            sharded::SHARDS,
            cluster::CHANNEL,
            sharded::SHARDS - 1
        ),
        Ok(Target::Nats(_)) => "NATS subject wstune.relay".to_string(),
        Err(_) => String::new(),
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
            let e = parse(url).unwrap_err().to_string();
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

    #[test]
    fn channel_messages_spread_over_shards_and_broadcasts_stay_on_one() {
        let shard = |c: &str| {
            shard_of(
                &Relay::Channel {
                    channel: c,
                    text: "",
                },
                16,
            )
        };
        assert_eq!(shard("prices"), shard("prices"), "stable");
        let used: std::collections::HashSet<u16> =
            (0..200).map(|i| shard(&format!("room-{i}"))).collect();
        assert_eq!(used.len(), 16, "200 channels use every shard");
        let b = Relay::Broadcast {
            op: embedded_server::frame::OpCode::Text,
            payload: b"x",
        };
        assert_eq!(shard_of(&b, 16), 0);
    }
}
