//! The Redis engines with one master at a time: `redis://` (a fixed server) and
//! `redis+sentinel://` (the master the Sentinels name, followed across failovers).
//!
//! Two tasks, each on its own connection: the publisher (one multiplexed connection, PUBLISH
//! on `wire::CHANNEL`, or the channel history's script: `history.rs`) and the subscriber
//! (SUBSCRIBE on it); the backplane is up while the subscription stands. Either one that loses its connection asks `Locate` again, so with
//! Sentinel a reconnect goes to whatever master the Sentinels name now; a `+switch-master`
//! notice (sentinel.rs) also makes both reconnect at once, without waiting for an error.

use super::engine::{backoff, Engine, Link, Out};
use super::history;
use super::sentinel::Sentinels;
use super::wire::CHANNEL;
use futures_util::StreamExt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Longest wait for a connection (and a Sentinel's answer) before backing off.
const CONNECT: Duration = Duration::from_secs(2);

/// Where the master is: the engine of both schemes.
pub(crate) enum Locate {
    /// `redis://`: always this server.
    Fixed(redis::Client),
    /// `redis+sentinel://`: ask the Sentinels.
    Sentinel(Arc<Sentinels>),
}

impl Locate {
    async fn client(&self) -> anyhow::Result<redis::Client> {
        match self {
            Locate::Fixed(c) => Ok(c.clone()),
            Locate::Sentinel(s) => s.master_client().await,
        }
    }

    /// Bumped when the master moved (never, for a fixed server).
    fn moved(&self, fixed: &watch::Sender<u64>) -> watch::Receiver<u64> {
        match self {
            Locate::Fixed(_) => fixed.subscribe(),
            Locate::Sentinel(s) => s.moved(),
        }
    }
}

/// Sleep `d`, or less when the master moves meanwhile.
async fn pause(d: Duration, moved: &mut watch::Receiver<u64>) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = moved.changed() => {}
    }
}

impl Engine for Locate {
    fn start(self: Box<Self>, link: Arc<Link>, rx: mpsc::Receiver<Out>) {
        start(*self, link, rx)
    }
}

fn start(locate: Locate, link: Arc<Link>, rx: mpsc::Receiver<Out>) {
    if let Locate::Sentinel(s) = &locate {
        s.clone().watch();
    }
    let locate = Arc::new(locate);
    {
        // Channel history in Redis Streams, read from wherever the master is now.
        let locate = locate.clone();
        history::start(
            &link.hub,
            Arc::new(move || {
                let locate = locate.clone();
                Box::pin(async move { locate.client().await })
            }),
        );
    }
    // Kept for the tasks' lifetime: a fixed server's "moved" never fires.
    let (fixed, _) = watch::channel(0u64);
    let fixed = Arc::new(fixed);
    {
        let (locate, link, fixed) = (locate.clone(), link.clone(), fixed.clone());
        tokio::spawn(async move { publisher(&locate, &link, rx, locate.moved(&fixed)).await });
    }
    tokio::spawn(async move {
        let moved = locate.moved(&fixed);
        subscriber(&locate, &link, moved).await
    });
}

/// One multiplexed connection, rebuilt after an error or a failover. A connection that died
/// with Redis is only found out on its next use, so the message that finds it out is sent
/// again on the new connection rather than lost.
async fn publisher(
    locate: &Locate,
    link: &Link,
    mut rx: mpsc::Receiver<Out>,
    mut moved: watch::Receiver<u64>,
) {
    let metrics = link.hub.metrics.clone();
    let mut attempt = 0;
    let mut retry: Option<Vec<u8>> = None;
    loop {
        moved.borrow_and_update();
        let conn = tokio::time::timeout(CONNECT, async {
            let c = locate.client().await?;
            Ok::<_, anyhow::Error>(c.get_multiplexed_async_connection().await?)
        })
        .await;
        let Ok(Ok(mut conn)) = conn else {
            pause(backoff(attempt), &mut moved).await;
            attempt += 1;
            // The backplane stays away: what waited is stale now (delivered locally).
            if attempt > 3 && retry.take().is_some() {
                metrics.backplane_dropped.fetch_add(1, Relaxed);
            }
            continue;
        };
        attempt = 0;
        loop {
            let msg = match retry.take() {
                Some(m) => m,
                None => tokio::select! {
                    m = rx.recv() => match m {
                        Some(m) => m.bytes,
                        None => return,
                    },
                    _ = moved.changed() => break,
                },
            };
            // With channel history on, a publish to position goes through Redis's script.
            let r = history::send(&mut conn, &link.hub, &msg, CHANNEL).await;
            match r {
                Ok(_) => {
                    metrics.backplane_published.fetch_add(1, Relaxed);
                }
                Err(e) => {
                    tracing::warn!("cluster backplane: publish failed ({e}); reconnecting");
                    retry = Some(msg);
                    break;
                }
            }
        }
    }
}

/// The backplane is "up" while this subscription stands.
async fn subscriber(locate: &Locate, link: &Link, mut moved: watch::Receiver<u64>) {
    let mut attempt = 0;
    loop {
        moved.borrow_and_update();
        let sub = async {
            let c = locate.client().await?;
            let mut ps = c.get_async_pubsub().await?;
            ps.subscribe(CHANNEL).await?;
            Ok::<_, anyhow::Error>(ps)
        };
        let mut ps = match tokio::time::timeout(CONNECT, sub).await {
            Ok(Ok(ps)) => ps,
            r => {
                if attempt == 0 {
                    let why = match r {
                        Ok(Err(e)) => e.to_string(),
                        _ => "timed out".into(),
                    };
                    tracing::warn!(
                        "cluster backplane: cannot subscribe ({why}); serving local clients only, retrying"
                    );
                }
                pause(backoff(attempt), &mut moved).await;
                attempt += 1;
                continue;
            }
        };
        attempt = 0;
        link.set_up(true);
        tracing::info!("cluster backplane: subscribed to {CHANNEL}");
        let mut stream = ps.on_message();
        loop {
            tokio::select! {
                m = stream.next() => match m {
                    Some(msg) => link.receive(msg.get_payload_bytes()),
                    None => break,
                },
                _ = moved.changed() => {
                    tracing::info!("cluster backplane: the master moved; resubscribing");
                    break;
                }
            }
        }
        link.set_up(false);
        tracing::warn!("cluster backplane: lost Redis; serving local clients only, reconnecting");
    }
}
