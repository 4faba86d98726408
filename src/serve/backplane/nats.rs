//! `nats://`: core NATS publish/subscribe on one subject (at most once, as Centrifugo's NATS
//! broker). The async-nats client keeps the connection: it tries the listed servers (and
//! those the cluster announces), reconnects with our backoff and subscribes again by itself;
//! its connection events set `ws_backplane_up`.

use super::engine::{backoff, Engine, Link, Out};
use super::wire::{QUEUE, SUBJECT};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// The engine: the servers to try first (as `nats://` URLs).
pub(crate) struct Nats {
    servers: Vec<String>,
}

impl Nats {
    pub fn new(servers: Vec<String>) -> Nats {
        Nats { servers }
    }
}

impl Engine for Nats {
    fn start(self: Box<Self>, link: Arc<Link>, rx: mpsc::Receiver<Out>) {
        start(self.servers, link, rx)
    }
}

fn start(servers: Vec<String>, link: Arc<Link>, mut rx: mpsc::Receiver<Out>) {
    let events = link.clone();
    let opts = async_nats::ConnectOptions::new()
        .name("wstune serve")
        .retry_on_initial_connect()
        .max_reconnects(None)
        .connection_timeout(Duration::from_secs(2))
        .ping_interval(Duration::from_secs(10))
        // Bounded: past these the client reports a slow consumer and drops.
        .subscription_capacity(QUEUE)
        .client_capacity(QUEUE)
        .reconnect_delay_callback(|attempts| backoff(attempts.min(30) as u32))
        .event_callback(move |e| {
            let link = events.clone();
            async move {
                match e {
                    async_nats::Event::Connected => {
                        link.set_up(true);
                        tracing::info!("cluster backplane: connected to NATS");
                    }
                    async_nats::Event::Disconnected => {
                        link.set_up(false);
                        tracing::warn!(
                            "cluster backplane: lost NATS; serving local clients only, reconnecting"
                        );
                    }
                    async_nats::Event::SlowConsumer(_) => {
                        link.hub.metrics.backplane_dropped.fetch_add(1, Relaxed);
                    }
                    _ => {}
                }
            }
        });
    tokio::spawn(async move {
        let client = match opts.connect(servers.clone()).await {
            Ok(c) => c,
            Err(e) => {
                tracing::error!("cluster backplane: NATS {servers:?}: {e}");
                return;
            }
        };
        let mut sub = match client.subscribe(SUBJECT).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("cluster backplane: NATS subscribe: {e}");
                return;
            }
        };
        {
            let link = link.clone();
            tokio::spawn(async move {
                use futures_util::StreamExt;
                while let Some(m) = sub.next().await {
                    link.receive(&m.payload);
                }
            });
        }
        let metrics = link.hub.metrics.clone();
        while let Some(out) = rx.recv().await {
            match client.publish(SUBJECT, out.bytes.into()).await {
                Ok(()) => metrics.backplane_published.fetch_add(1, Relaxed),
                Err(_) => metrics.backplane_dropped.fetch_add(1, Relaxed),
            };
        }
    });
}
