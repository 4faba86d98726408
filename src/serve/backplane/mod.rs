//! The cluster backplane: `serve --cluster URL` makes `broadcast` and `channels` span every
//! node of a cluster. The URL's scheme picks how the nodes reach each other, and every engine
//! carries the same relay messages (`wire`) and presence heartbeats (`presence`).
//!
//! | URL | engine | no single point of failure because |
//! |---|---|---|
//! | `redis://HOST:PORT[/DB]` | one Redis, PUBLISH/SUBSCRIBE (`redis.rs`) | it has one |
//! | `redis+sentinel://[USER:PASS@]H1:26379,H2:26379/MASTER[/DB]` | the master Sentinel names (`redis.rs`, `sentinel.rs`) | a failover moves the master; the node follows |
//! | `redis+cluster://[USER:PASS@]H1:7000,H2:7001,...` | Redis Cluster sharded pub/sub, SPUBLISH/SSUBSCRIBE (`sharded.rs`) | the shard channels are spread over the masters, each with its replicas |
//! | `nats://[USER:PASS@]H1:4222[,H2:4222...]` | core NATS publish/subscribe (`nats.rs`) | any server of the NATS cluster will do |
//!
//! This file is the wing's one entry: [`start`] installs what every engine shares on the hub
//! (each node delivers its own messages locally at once and queues them for the engine,
//! bounded at `wire::QUEUE`; past it, or while the engine is down, a message is delivered here
//! only and counted in `ws_backplane_dropped_total`; the presence heartbeat that makes
//! `GET /api/channels/NAME` count every node) and starts the engine the [`Target`] names. When
//! the backplane goes away the node keeps serving its own clients, reconnects with backoff,
//! and relays again once subscribed.
//!
//! The floors, from the bottom: `wire` and `snapshot` (bytes only), `target` (the URL),
//! `presence` (heartbeats and the table), `deliver` (a relayed message into this node),
//! `engine` (the trait and what engines share), the engines, then this file. Nothing below
//! imports what is above it; the `--processes` supervisor's local relay uses the same floors
//! (`wire`, `snapshot`, `deliver`).

pub mod deliver;
mod engine;
mod history;
#[cfg(feature = "nats")]
mod nats;
mod presence;
mod redis;
mod sentinel;
mod sharded;
pub mod snapshot;
mod target;
pub mod wire;

pub use target::{Cluster, Target};

use anyhow::Result;
use embedded_server::hub::Relay;
use embedded_server::Hub;
use engine::{Engine, Link, Out};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::mpsc;

/// The engine `target` names, ready to start: the one place a `Target` is matched.
fn engine(target: &Target) -> Result<Box<dyn Engine>> {
    Ok(match target {
        Target::Redis(url) => Box::new(redis::Locate::Fixed(::redis::Client::open(url.as_str())?)),
        Target::Sentinel {
            sentinels,
            master,
            db,
            auth,
        } => Box::new(redis::Locate::Sentinel(sentinel::Sentinels::new(
            sentinels.clone(),
            master.clone(),
            *db,
            auth.clone(),
        ))),
        Target::Cluster(nodes) => Box::new(sharded::Sharded::new(nodes.clone())),
        #[cfg(feature = "nats")]
        Target::Nats(servers) => Box::new(nats::Nats::new(servers.clone())),
        // `Cluster::parse` refuses nats:// in such a build; this is for the match only.
        #[cfg(not(feature = "nats"))]
        Target::Nats(_) => anyhow::bail!(
            "--cluster nats://: this wstune was built without NATS support (cargo feature `nats`)"
        ),
    })
}

/// Install the relay and presence hooks on `hub` and start the engine `cluster` names (on
/// the current tokio runtime). The backplane being unreachable now is not an error: the node
/// serves locally and connects when it can.
pub fn start(cluster: &Cluster, hub: Arc<Hub>) -> Result<()> {
    let engine = engine(cluster.target())?;
    let me = wire::node_id();
    let metrics = hub.metrics.clone();
    metrics.backplane_up.store(0, Relaxed);
    let (tx, rx) = mpsc::channel::<Out>(wire::QUEUE);
    {
        let (metrics, tx) = (metrics.clone(), tx.clone());
        hub.relay().set(Box::new(move |r| {
            // While the backplane is down the message was delivered here only; queueing it for
            // later would replay stale messages after the outage.
            let out = Out {
                shard: shard_of(&r, wire::SHARDS),
                bytes: wire::encode(me, &r, deliver::supervisor_names_publishers()),
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
    heartbeat(link.clone(), tx);
    engine.start(link, rx);
    Ok(())
}

/// Every `presence::INTERVAL`, while the engine is up: queue this node's heartbeat (its first
/// `MAX_CHANNELS` channels in byte order: one bounded walk of the hub's index) and refresh
/// `ws_backplane_nodes`. A full queue skips one heartbeat; the next one comes soon.
fn heartbeat(link: Arc<Link>, tx: mpsc::Sender<Out>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(presence::INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            link.count_nodes();
            if link.hub.metrics.backplane_up.load(Relaxed) != 1 {
                continue;
            }
            let page = link
                .hub
                .presence()
                .channel_page("", None, presence::MAX_CHANNELS + 1);
            let bytes = presence::encode(link.me, &page.counts);
            if tx
                .send_timeout(Out { shard: 0, bytes }, presence::INTERVAL)
                .await
                .is_err()
                && tx.is_closed()
            {
                return;
            }
        }
    });
}

/// Which shard channel a relay message goes on: a channel message by a hash of its channel's
/// name (so one busy channel loads one shard, and the shards share the channels), a broadcast
/// on shard 0.
fn shard_of(r: &Relay<'_>, shards: u16) -> u16 {
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

#[cfg(test)]
mod tests {
    use super::*;

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
