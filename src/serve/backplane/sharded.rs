//! `redis+cluster://`: Redis Cluster with sharded pub/sub (Redis 7: SPUBLISH/SSUBSCRIBE).
//!
//! Plain PUBLISH in a Redis Cluster is sent to every node of the cluster, so its cost grows
//! with the cluster; a shard channel lives in one hash slot and only that slot's master and
//! replicas carry it (redis.io, "Sharded Pub/Sub"). The relay uses `SHARDS` shard channels
//! `wstune:relay:{0}` .. `wstune:relay:{15}` (the braces are a hash tag: the slot is the
//! number's), so the load spreads over the masters: a channel message goes on the shard its
//! channel's name hashes to, broadcasts and heartbeats on shard 0, and every node subscribes
//! to all of them: the shape of Centrifugo PRO's `redis_num_cluster_shards` and of Socket.IO's
//! sharded Redis adapter.
//!
//! The subscriber is one cluster connection (RESP3: its messages arrive as pushes). When a
//! node's connection drops (a master killed, a failover) or Redis unsubscribes a shard
//! channel (its slot moved), the whole subscription is rebuilt from the seed nodes, which
//! reads the slot map afresh (MOVED is followed by the client's own slot refresh for the
//! publisher); the backplane is up only while every shard is subscribed.

use super::{Link, Out};
use crate::serve::cluster::{backoff, CHANNEL, QUEUE};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::{PushInfo, PushKind, Value};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Notify};

/// Shard channels: enough to spread over a few masters; each node holds one subscription per
/// shard on the cluster's nodes.
pub const SHARDS: u16 = 16;

/// Longest wait to connect and subscribe every shard before backing off.
const CONNECT: Duration = Duration::from_secs(5);

fn shard_channel(k: u16) -> String {
    format!("{CHANNEL}:{{{k}}}")
}

fn builder(nodes: &[String]) -> ClusterClientBuilder {
    ClusterClientBuilder::new(nodes.to_vec())
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
}

pub(crate) fn start(nodes: Vec<String>, link: Arc<Link>, rx: mpsc::Receiver<Out>) {
    {
        let (nodes, link) = (nodes.clone(), link.clone());
        tokio::spawn(async move { publisher(&nodes, &link, rx).await });
    }
    tokio::spawn(async move { subscriber(&nodes, link).await });
}

async fn publisher(nodes: &[String], link: &Link, mut rx: mpsc::Receiver<Out>) {
    let metrics = link.hub.metrics.clone();
    let mut attempt = 0;
    let mut retry: Option<Out> = None;
    loop {
        let conn = tokio::time::timeout(CONNECT, async {
            let c: ClusterClient = builder(nodes).build()?;
            c.get_async_connection().await
        })
        .await;
        let Ok(Ok(mut conn)) = conn else {
            tokio::time::sleep(backoff(attempt)).await;
            attempt += 1;
            if attempt > 3 && retry.take().is_some() {
                metrics.backplane_dropped.fetch_add(1, Relaxed);
            }
            continue;
        };
        attempt = 0;
        loop {
            let out = match retry.take() {
                Some(m) => m,
                None => match rx.recv().await {
                    Some(m) => m,
                    None => return,
                },
            };
            let r: redis::RedisResult<i64> = redis::cmd("SPUBLISH")
                .arg(shard_channel(out.shard % SHARDS))
                .arg(&out.bytes)
                .query_async(&mut conn)
                .await;
            match r {
                Ok(_) => {
                    metrics.backplane_published.fetch_add(1, Relaxed);
                }
                Err(e) => {
                    tracing::warn!("cluster backplane: SPUBLISH failed ({e}); reconnecting");
                    retry = Some(out);
                    break;
                }
            }
        }
    }
}

async fn subscriber(nodes: &[String], link: Arc<Link>) {
    // Pushes arrive on the client's reader; they are handed over (bounded) so that delivery
    // to this node's clients never stalls Redis's connection.
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
        // A fresh signal per subscription: the old connection's last pushes, as it is
        // dropped, must not end the new one.
        let lost = Arc::new(Notify::new());
        let push = {
            let (lost, in_tx, metrics) = (lost.clone(), in_tx.clone(), link.hub.metrics.clone());
            move |p: PushInfo| -> Result<(), ()> {
                match p.kind {
                    PushKind::SMessage => {
                        if let Some(Value::BulkString(b)) = p.data.get(1) {
                            if in_tx.try_send(b.clone()).is_err() {
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
        let sub = async {
            let c = builder(nodes)
                .use_protocol(redis::ProtocolVersion::RESP3)
                .push_sender(push)
                .build()?;
            let mut conn = c.get_async_connection().await?;
            // One SSUBSCRIBE per shard: each is its own slot.
            for k in 0..SHARDS {
                conn.ssubscribe(shard_channel(k)).await?;
            }
            Ok::<_, redis::RedisError>(conn)
        };
        let conn = match tokio::time::timeout(CONNECT, sub).await {
            Ok(Ok(c)) => c,
            r => {
                if attempt == 0 {
                    let why = match r {
                        Ok(Err(e)) => e.to_string(),
                        _ => "timed out".into(),
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
        lost.notified().await;
        link.set_up(false);
        drop(conn);
        tracing::warn!(
            "cluster backplane: a Redis Cluster node went away or a shard moved; resubscribing"
        );
        tokio::time::sleep(backoff(0)).await;
    }
}
