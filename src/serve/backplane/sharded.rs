//! `redis+cluster://`: Redis Cluster with sharded pub/sub (Redis 7: SPUBLISH/SSUBSCRIBE).
//!
//! Plain PUBLISH in a Redis Cluster is sent to every node of the cluster, so its cost grows
//! with the cluster; a shard channel lives in one hash slot and only that slot's master and
//! replicas carry it (redis.io, "Sharded Pub/Sub"). The relay uses `SHARDS` shard channels
//! `wstune:relay:{0}` .. `wstune:relay:{15}` (`wire::shard_channel`), so the load spreads over the masters: a channel message goes on the shard its
//! channel's name hashes to, broadcasts and heartbeats on shard 0, and every node subscribes
//! to all of them: the shape of Centrifugo PRO's `redis_num_cluster_shards` and of Socket.IO's
//! sharded Redis adapter.
//!
//! The slot map is read here (`CLUSTER SLOTS` from the first seed that answers, and
//! `CLUSTER KEYSLOT` for each shard channel), and each shard is published to and subscribed
//! on its master directly, over plain connections (RESP3 for the subscriptions: their
//! messages arrive as pushes). Any error (a connection lost, a master killed, `MOVED` after a
//! failover or a resharding, Redis unsubscribing a shard channel whose slot moved) makes the
//! side that met it read the slot map again and reconnect. A subscription that looks made is
//! not proof that it carries messages (during a failover a shard can be subscribed on a node
//! that no longer serves it), so every node also sends itself a probe on each shard every
//! `PROBE_EVERY`: the backplane is up only once every shard's probe came back, and a shard
//! silent for `PROBE_LOST` rebuilds the subscriptions.

use super::engine::{backoff, Engine, Link, Out};
use super::target::url_host;
use super::wire::{shard_channel, CHANNEL, QUEUE, SHARDS};
use anyhow::{bail, Result};
use redis::aio::MultiplexedConnection;
use redis::{PushInfo, PushKind, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Notify};

/// Longest wait to read the slot map, connect and subscribe every shard before backing off.
const CONNECT: Duration = Duration::from_secs(5);
/// Longest wait for one connection or one answer.
const ONE: Duration = Duration::from_secs(2);
/// Between two probes on every shard.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// A shard whose probe has not come back for this long is lost.
const PROBE_LOST: Duration = Duration::from_secs(4);
/// The probe's kind byte after the node id (relay decoding skips it as unknown).
const KIND_PROBE: u8 = 0x51;

/// The shard of `wstune:relay:{K}`.
fn shard_of_channel(name: &[u8]) -> Option<usize> {
    let k = name.strip_prefix(format!("{CHANNEL}:{{").as_bytes())?;
    let k = std::str::from_utf8(k.strip_suffix(b"}")?).ok()?;
    k.parse().ok().filter(|k| *k < SHARDS as usize)
}

fn probe(me: u64) -> Vec<u8> {
    let mut v = me.to_le_bytes().to_vec();
    v.push(KIND_PROBE);
    v
}

/// When each shard last carried one of our own probes back, in ms since `start`.
struct Probes {
    start: std::time::Instant,
    seen: [AtomicU64; SHARDS as usize],
}

impl Probes {
    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64 + 1
    }

    /// Whether every shard carried a probe back since `since` (ms, `now()`'s clock).
    fn all_since(&self, since: u64) -> bool {
        self.seen.iter().all(|t| t.load(Relaxed) >= since)
    }
}

/// The seeds, and the `USER:PASS@` they carry (for the nodes the slot map names).
struct Seeds {
    urls: Vec<String>,
    auth: String,
}

impl Seeds {
    fn new(urls: Vec<String>) -> Seeds {
        let auth = urls
            .first()
            .and_then(|u| u.strip_prefix("redis://"))
            .and_then(|r| r.rsplit_once('@'))
            .map(|(a, _)| format!("{a}@"))
            .unwrap_or_default();
        Seeds { urls, auth }
    }

    /// `redis://` URL of a node `host:port`.
    fn url(&self, addr: &str, resp3: bool) -> String {
        let q = if resp3 { "?protocol=resp3" } else { "" };
        format!("redis://{}{addr}/{q}", self.auth)
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// Each shard's master (`host:port`), from `CLUSTER SLOTS` and `CLUSTER KEYSLOT` on the
/// first seed that answers.
async fn owners(seeds: &Seeds) -> Result<Vec<String>> {
    let mut last = None;
    for seed in &seeds.urls {
        let r = tokio::time::timeout(ONE, async {
            let mut conn = redis::Client::open(seed.as_str())?
                .get_multiplexed_async_connection()
                .await?;
            let map: Value = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query_async(&mut conn)
                .await?;
            let mut slots = Vec::with_capacity(SHARDS as usize);
            for k in 0..SHARDS {
                let s: i64 = redis::cmd("CLUSTER")
                    .arg("KEYSLOT")
                    .arg(shard_channel(k))
                    .query_async(&mut conn)
                    .await?;
                slots.push(s);
            }
            Ok::<_, anyhow::Error>((map, slots))
        })
        .await;
        let (map, slots) = match r {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                last = Some(e.to_string());
                continue;
            }
            Err(_) => {
                last = Some(format!("{seed}: timed out"));
                continue;
            }
        };
        // [[start, end, [ip, port, id, ..], replicas..], ..]
        let mut ranges = Vec::new();
        if let Value::Array(items) = &map {
            for it in items {
                let Value::Array(f) = it else { continue };
                let (Some(lo), Some(hi)) = (f.first().and_then(int), f.get(1).and_then(int)) else {
                    continue;
                };
                let Some(Value::Array(m)) = f.get(2) else {
                    continue;
                };
                let (Some(host), Some(port)) = (m.first().and_then(text), m.get(1).and_then(int))
                else {
                    continue;
                };
                ranges.push((lo, hi, format!("{}:{port}", url_host(&host))));
            }
        }
        let owners: Option<Vec<String>> = slots
            .iter()
            .map(|s| {
                ranges
                    .iter()
                    .find(|(lo, hi, _)| lo <= s && s <= hi)
                    .map(|r| r.2.clone())
            })
            .collect();
        match owners {
            Some(o) => return Ok(o),
            None => last = Some(format!("{seed}: a shard channel's slot has no master")),
        }
    }
    bail!(
        "no Redis Cluster seed gave a slot map ({})",
        last.unwrap_or_default()
    )
}

/// The engine: the seed nodes it reads the slot map from.
pub(crate) struct Sharded {
    seeds: Seeds,
}

impl Sharded {
    pub fn new(nodes: Vec<String>) -> Sharded {
        Sharded {
            seeds: Seeds::new(nodes),
        }
    }
}

impl Engine for Sharded {
    fn start(self: Box<Self>, link: Arc<Link>, rx: mpsc::Receiver<Out>) {
        let seeds = Arc::new(self.seeds);
        {
            let (seeds, link) = (seeds.clone(), link.clone());
            tokio::spawn(async move { publisher(&seeds, &link, rx).await });
        }
        tokio::spawn(async move { subscriber(&seeds, link).await });
    }
}

/// The publisher's connections: one per master, by `host:port`.
struct Masters<'a> {
    seeds: &'a Seeds,
    owners: Vec<String>,
    conns: HashMap<String, MultiplexedConnection>,
}

impl Masters<'_> {
    async fn spublish(&mut self, shard: u16, bytes: &[u8]) -> Result<()> {
        let owner = &self.owners[(shard % SHARDS) as usize];
        if !self.conns.contains_key(owner) {
            let c = redis::Client::open(self.seeds.url(owner, false))?;
            let conn = tokio::time::timeout(ONE, c.get_multiplexed_async_connection()).await??;
            self.conns.insert(owner.clone(), conn);
        }
        let conn = self.conns.get_mut(owner).unwrap();
        let r = tokio::time::timeout(
            ONE,
            redis::cmd("SPUBLISH")
                .arg(shard_channel(shard % SHARDS))
                .arg(bytes)
                .query_async::<i64>(conn),
        )
        .await;
        match r {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => bail!("SPUBLISH on {owner}: {e}"),
            Err(_) => bail!("SPUBLISH on {owner}: timed out"),
        }
    }
}

/// Each message to its shard's master; every `PROBE_EVERY` a probe on every shard. An error
/// reads the slot map again (the message that met it is sent once more after that).
async fn publisher(seeds: &Seeds, link: &Link, mut rx: mpsc::Receiver<Out>) {
    let metrics = link.hub.metrics.clone();
    let mut attempt = 0;
    let mut retry: Option<Out> = None;
    let mut tick = tokio::time::interval(PROBE_EVERY);
    loop {
        let mut m = match owners(seeds).await {
            Ok(owners) => Masters {
                seeds,
                owners,
                conns: HashMap::new(),
            },
            Err(_) => {
                tokio::time::sleep(backoff(attempt)).await;
                attempt += 1;
                if attempt > 3 && retry.take().is_some() {
                    metrics.backplane_dropped.fetch_add(1, Relaxed);
                }
                continue;
            }
        };
        loop {
            let out = match retry.take() {
                Some(o) => o,
                None => tokio::select! {
                    o = rx.recv() => match o {
                        Some(o) => o,
                        None => return,
                    },
                    _ = tick.tick() => {
                        let mut failed = None;
                        for k in 0..SHARDS {
                            if let Err(e) = m.spublish(k, &probe(link.me)).await {
                                failed = Some(e);
                                break;
                            }
                        }
                        match failed {
                            None => continue,
                            Some(e) => {
                                tracing::debug!("cluster backplane: probe failed ({e}); reading the slot map again");
                                break;
                            }
                        }
                    }
                },
            };
            match m.spublish(out.shard, &out.bytes).await {
                Ok(()) => {
                    attempt = 0;
                    metrics.backplane_published.fetch_add(1, Relaxed);
                }
                Err(e) => {
                    tracing::warn!("cluster backplane: {e}; reading the slot map again");
                    retry = Some(out);
                    attempt += 1;
                    break;
                }
            }
        }
        tokio::time::sleep(backoff(attempt.min(3))).await;
    }
}

async fn subscriber(seeds: &Seeds, link: Arc<Link>) {
    let probes = Arc::new(Probes {
        start: std::time::Instant::now(),
        seen: Default::default(),
    });
    // Pushes arrive on the connections' readers; they are handed over (bounded) so that
    // delivery to this node's clients never stalls Redis's connections.
    let (in_tx, mut in_rx) = mpsc::channel::<Vec<u8>>(QUEUE);
    {
        let link = link.clone();
        tokio::spawn(async move {
            while let Some(m) = in_rx.recv().await {
                link.receive(&m);
            }
        });
    }
    let mut attempt = 0;
    loop {
        // A fresh signal per subscription: the old connections' last pushes, as they are
        // dropped, must not end the new one.
        let lost = Arc::new(Notify::new());
        let push = {
            let (lost, in_tx, metrics) = (lost.clone(), in_tx.clone(), link.hub.metrics.clone());
            let (probes, me) = (probes.clone(), link.me.to_le_bytes());
            move |p: PushInfo| -> Result<(), ()> {
                match p.kind {
                    PushKind::SMessage => {
                        if let (Some(Value::BulkString(c)), Some(Value::BulkString(b))) =
                            (p.data.first(), p.data.get(1))
                        {
                            if b.get(8) == Some(&KIND_PROBE) {
                                if b[..8] == me {
                                    if let Some(k) = shard_of_channel(c) {
                                        probes.seen[k].store(probes.now(), Relaxed);
                                    }
                                }
                            } else if in_tx.try_send(b.clone()).is_err() {
                                metrics.backplane_dropped.fetch_add(1, Relaxed);
                            }
                        }
                    }
                    PushKind::Disconnection | PushKind::SUnsubscribe => lost.notify_one(),
                    _ => {}
                }
                Ok(())
            }
        };
        let since = probes.now();
        let sub = async {
            let owners = owners(seeds).await?;
            let mut by_master: BTreeMap<&str, Vec<u16>> = BTreeMap::new();
            for (k, o) in owners.iter().enumerate() {
                by_master.entry(o).or_default().push(k as u16);
            }
            let mut held = Vec::new();
            for (addr, shards) in by_master {
                let cfg = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(ONE))
                    .set_response_timeout(Some(ONE))
                    .set_push_sender(push.clone());
                let mut conn = redis::Client::open(seeds.url(addr, true))?
                    .get_multiplexed_async_connection_with_config(&cfg)
                    .await?;
                for k in shards {
                    redis::cmd("SSUBSCRIBE")
                        .arg(shard_channel(k))
                        .exec_async(&mut conn)
                        .await?;
                }
                held.push(conn);
            }
            // Up once every shard carried our probe back.
            while !probes.all_since(since) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok::<_, anyhow::Error>(held)
        };
        let held = match tokio::time::timeout(CONNECT + PROBE_EVERY, sub).await {
            Ok(Ok(c)) => c,
            r => {
                if attempt == 0 {
                    let why = match r {
                        Ok(Err(e)) => e.to_string(),
                        _ => "not every shard carried a probe back in time".into(),
                    };
                    tracing::warn!(
                        "cluster backplane: cannot subscribe to the Redis Cluster ({why}); serving local clients only, retrying"
                    );
                }
                tokio::time::sleep(backoff(attempt)).await;
                attempt += 1;
                continue;
            }
        };
        attempt = 0;
        link.set_up(true);
        tracing::info!("cluster backplane: subscribed to {SHARDS} shard channels");
        loop {
            tokio::select! {
                _ = lost.notified() => break,
                _ = tokio::time::sleep(PROBE_EVERY) => {
                    let t = probes.now().saturating_sub(PROBE_LOST.as_millis() as u64);
                    if !probes.all_since(t) {
                        break;
                    }
                }
            }
        }
        link.set_up(false);
        drop(held);
        tracing::warn!(
            "cluster backplane: a Redis Cluster master went away, a shard moved or fell silent; resubscribing"
        );
        tokio::time::sleep(backoff(0)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_channels_name_their_shard() {
        assert_eq!(shard_channel(3), "wstune:relay:{3}");
        assert_eq!(shard_of_channel(b"wstune:relay:{15}"), Some(15));
        assert_eq!(shard_of_channel(b"wstune:relay:{16}"), None);
        assert_eq!(shard_of_channel(b"other:{1}"), None);
        let s = Seeds::new(vec!["redis://u:p@h:7000".into()]);
        assert_eq!(
            s.url("10.0.0.2:7001", true),
            "redis://u:p@10.0.0.2:7001/?protocol=resp3"
        );
    }
}
