//! Finding the master through Redis Sentinel, as the Sentinel client spec asks
//! (redis.io/docs/latest/develop/reference/sentinel-clients): try the Sentinels in order with
//! a short timeout, move the first that answers to the front, ask it
//! `SENTINEL get-master-addr-by-name`, then check with `ROLE` that the address really is a
//! master (during a failover it may still be a replica, which would accept PUBLISH but relay
//! nothing to the other nodes). A task also subscribes to `+switch-master` on a Sentinel, so
//! a failover moves every connection at once rather than when each next fails.

use super::engine::backoff;
use super::target::url_host;
use anyhow::{bail, Result};
use futures_util::StreamExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// A Sentinel that does not answer within this is skipped for the next one.
const ASK: Duration = Duration::from_millis(500);

/// The Sentinels of one master group.
pub(crate) struct Sentinels {
    /// In the order to try; the last one that answered first.
    addrs: Mutex<Vec<(String, u16)>>,
    /// The master group's name.
    master: String,
    /// The master's database.
    db: i64,
    /// `USER:PASS@` for the master (empty without).
    auth: String,
    /// Bumped on every `+switch-master` for our master.
    moved: watch::Sender<u64>,
}

fn is_master(role: &redis::Value) -> bool {
    use redis::Value::*;
    match role {
        Array(v) => match v.first() {
            Some(BulkString(b)) => b == b"master",
            Some(SimpleString(s)) => s == "master",
            _ => false,
        },
        _ => false,
    }
}

async fn connect(h: &str, p: u16) -> Result<redis::aio::MultiplexedConnection> {
    let c = redis::Client::open(format!("redis://{}:{p}", url_host(h)))?;
    Ok(tokio::time::timeout(ASK, c.get_multiplexed_async_connection()).await??)
}

impl Sentinels {
    pub fn new(
        addrs: Vec<(String, u16)>,
        master: String,
        db: i64,
        auth: Option<String>,
    ) -> Arc<Self> {
        Arc::new(Sentinels {
            addrs: Mutex::new(addrs),
            master,
            db,
            auth: auth.map(|a| format!("{a}@")).unwrap_or_default(),
            moved: watch::channel(0).0,
        })
    }

    pub fn moved(&self) -> watch::Receiver<u64> {
        self.moved.subscribe()
    }

    /// The master's address, from the first Sentinel that knows it.
    async fn ask(&self) -> Result<(String, u16)> {
        let list = self.addrs.lock().unwrap().clone();
        for (i, (h, p)) in list.iter().enumerate() {
            let r = tokio::time::timeout(ASK, async {
                let mut conn = connect(h, *p).await?;
                let a: Option<(String, u16)> = redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&self.master)
                    .query_async(&mut conn)
                    .await?;
                Ok::<_, anyhow::Error>(a)
            })
            .await;
            if let Ok(Ok(Some(a))) = r {
                if i > 0 {
                    let mut addrs = self.addrs.lock().unwrap();
                    if let Some(j) = addrs.iter().position(|x| x == &list[i]) {
                        let s = addrs.remove(j);
                        addrs.insert(0, s);
                    }
                }
                return Ok(a);
            }
        }
        bail!(
            "no Sentinel of {} answered for master {}",
            list.iter()
                .map(|(h, p)| format!("{h}:{p}"))
                .collect::<Vec<_>>()
                .join(","),
            self.master
        )
    }

    /// A client for the master now, once `ROLE` says it is one.
    pub async fn master_client(&self) -> Result<redis::Client> {
        let (h, p) = self.ask().await?;
        let c = redis::Client::open(format!(
            "redis://{}{}:{p}/{}",
            self.auth,
            url_host(&h),
            self.db
        ))?;
        let mut conn = c.get_multiplexed_async_connection().await?;
        let role: redis::Value = redis::cmd("ROLE").query_async(&mut conn).await?;
        if !is_master(&role) {
            bail!(
                "{h}:{p}, named master of {} by Sentinel, is not a master (yet)",
                self.master
            );
        }
        Ok(c)
    }

    /// Subscribe to `+switch-master` on one Sentinel after another, for as long as the node
    /// runs; a notice for our master bumps `moved`.
    pub fn watch(self: Arc<Self>) {
        tokio::spawn(async move {
            let mut attempt = 0;
            loop {
                let list = self.addrs.lock().unwrap().clone();
                for (h, p) in &list {
                    let sub = async {
                        let c = redis::Client::open(format!("redis://{}:{p}", url_host(h)))?;
                        let mut ps = c.get_async_pubsub().await?;
                        ps.subscribe("+switch-master").await?;
                        Ok::<_, anyhow::Error>(ps)
                    };
                    let Ok(Ok(mut ps)) = tokio::time::timeout(ASK, sub).await else {
                        continue;
                    };
                    attempt = 0;
                    let mut stream = ps.on_message();
                    while let Some(m) = stream.next().await {
                        // "<master name> <old ip> <old port> <new ip> <new port>"
                        let text: String = m.get_payload().unwrap_or_default();
                        if text.split(' ').next() == Some(self.master.as_str()) {
                            tracing::info!(
                                "cluster backplane: Sentinel says +switch-master {text}"
                            );
                            self.moved.send_modify(|g| *g += 1);
                        }
                    }
                }
                tokio::time::sleep(backoff(attempt)).await;
                attempt += 1;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_master_role_is_a_master() {
        use redis::Value::*;
        assert!(is_master(&Array(vec![
            BulkString(b"master".to_vec()),
            Int(0)
        ])));
        assert!(!is_master(&Array(vec![BulkString(b"slave".to_vec())])));
        assert!(!is_master(&Nil));
    }
}
