//! Channel history across `--cluster` nodes, in Redis Streams: every node's publish is
//! positioned by Redis, so a client recovers on any node with the position it had.
//!
//! The approach is Centrifugo's Redis engine (centrifugal/centrifuge,
//! `internal/redis_lua/broker_history_add_stream.lua`): one Lua script, atomic per channel,
//! takes the channel's epoch (created when missing), increments its top offset, appends the
//! publication to the channel's stream (`XADD ... MAXLEN ~ size`, the offset as its entry id),
//! refreshes both keys' expiry to the history's age bound, and publishes the positioned
//! publication on the backplane's channel, so every node, the publisher's included, receives
//! the publications of a channel in offset order. Each node keeps a copy as it delivers
//! (`hub.history().deliver_positioned`); a node that cannot serve a recovery (it restarted) reads the
//! stream after the position (`XRANGE`) and merges it before the subscribe completes.
//!
//! A channel's two keys share a `{channel}` hash tag, so they sit in one Redis Cluster slot
//! and the script may touch both; everything is written against
//! `redis::aio::ConnectionLike`, so it runs over a cluster connection too.

use super::wire::{decode, Incoming, SUPERVISOR};
use embedded_server::hub::{FetchRequest, StreamPosition};
use embedded_server::Hub;
use redis::aio::ConnectionLike;
use std::sync::Arc;

/// KEYS: the stream, the meta hash. ARGV: the channel's name, the envelope up to the
/// offset (`{"channel":..,"data":..,"offset":`), the size bound, the age bound (seconds), a
/// fresh epoch (used when the channel has none), the backplane's Redis channel. Returns the
/// offset and the epoch.
const PUBLISH: &str = r#"
local epoch = redis.call('HGET', KEYS[2], 'epoch')
if not epoch then
  epoch = ARGV[5]
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[2], 'epoch', epoch, 'top', 0)
end
local offset = redis.call('HINCRBY', KEYS[2], 'top', 1)
local text = ARGV[2] .. offset .. ',"epoch":"' .. epoch .. '"}'
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], offset .. '-0', 't', text)
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('EXPIRE', KEYS[2], ARGV[4])
local function le(n, bytes)
  local s = ''
  for _ = 1, bytes do
    s = s .. string.char(n % 256)
    n = math.floor(n / 256)
  end
  return s
end
local name = ARGV[1]
local frame = string.rep(string.char(255), 8) .. string.char(3) .. le(#name, 2) .. name
  .. le(offset, 8) .. string.char(#epoch) .. epoch .. text
redis.call('PUBLISH', ARGV[6], frame)
return {offset, epoch}
"#;

/// KEYS: the stream, the meta hash. ARGV: the first offset wanted, the most entries. Returns
/// the epoch (false when the channel has none), the top offset, and the entries' texts with
/// their ids.
const SINCE: &str = r#"
local epoch = redis.call('HGET', KEYS[2], 'epoch')
if not epoch then return {false, 0, {}} end
local top = tonumber(redis.call('HGET', KEYS[2], 'top'))
return {epoch, top, redis.call('XRANGE', KEYS[1], ARGV[1] .. '-0', '+', 'COUNT', ARGV[2])}
"#;

/// A channel's stream and meta keys: one `{channel}` hash tag, one Cluster slot.
pub fn keys(channel: &str) -> (String, String) {
    (
        format!("wstune:history:{{{channel}}}:stream"),
        format!("wstune:history:{{{channel}}}:meta"),
    )
}

/// Position `data` (JSON text) in `channel`, keep it and publish it on `relay_channel`:
/// the offset and epoch it got.
pub async fn publish<C: ConnectionLike>(
    conn: &mut C,
    channel: &str,
    data: &str,
    size: usize,
    ttl_secs: u64,
    relay_channel: &str,
) -> redis::RedisResult<(u64, String)> {
    let (stream, meta) = keys(channel);
    let name = serde_json::to_string(channel).expect("a string serializes");
    let head = format!(r#"{{"channel":{name},"data":{data},"offset":"#);
    let epoch = format!("{:016x}", embedded_server::hub::random_seed());
    redis::cmd("EVAL")
        .arg(PUBLISH)
        .arg(2)
        .arg(stream)
        .arg(meta)
        .arg(channel)
        .arg(head)
        .arg(size)
        .arg(ttl_secs)
        .arg(epoch)
        .arg(relay_channel)
        .query_async(conn)
        .await
}

/// `channel`'s position and the publications it keeps after `after` (at most `max`): None
/// when Redis has no stream for it.
pub async fn since<C: ConnectionLike>(
    conn: &mut C,
    channel: &str,
    after: u64,
    max: usize,
) -> redis::RedisResult<Option<(StreamPosition, Vec<(u64, String)>)>> {
    let (stream, meta) = keys(channel);
    type Entry = (String, Vec<(String, String)>);
    let (epoch, top, entries): (Option<String>, u64, Vec<Entry>) = redis::cmd("EVAL")
        .arg(SINCE)
        .arg(2)
        .arg(stream)
        .arg(meta)
        .arg(after.saturating_add(1))
        .arg(max)
        .query_async(conn)
        .await?;
    let Some(epoch) = epoch else { return Ok(None) };
    let pubs = entries
        .into_iter()
        .filter_map(|(id, mut fields)| {
            let offset = id.split('-').next()?.parse().ok()?;
            Some((offset, fields.pop()?.1))
        })
        .collect();
    let pos = StreamPosition {
        offset: top,
        epoch: epoch.into(),
    };
    Ok(Some((pos, pubs)))
}

/// Recoveries that may read Redis at once. Past this a recovery is answered from what the node
/// keeps (`recovered:false` when that is not enough): resubscribing with positions the node
/// does not keep must not let a client open connections or queue reads without bound.
const FETCHES: usize = 32;
/// Longest wait for Redis on a recovery (a connection, then the read) before it is answered
/// from what the node keeps.
const FETCH_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How the node reaches the Redis that holds the streams now: a fixed server, or the master
/// the Sentinels name (asked again after a failure, so a failover is followed).
pub type Locator = Arc<
    dyn Fn() -> futures_util::future::BoxFuture<'static, anyhow::Result<redis::Client>>
        + Send
        + Sync,
>;

/// With history on, make `hub` a node whose positions Redis assigns: its publishes go
/// through [`publish`] (the backplane's publisher sends a `Relay::Sequence` that way), and a
/// recovery it cannot serve reads the stream first, over one connection shared by every
/// recovery (rebuilt after a failure) and at most [`FETCHES`] at a time.
pub fn start(hub: &Arc<Hub>, locate: Locator) {
    let Some(settings) = hub.history().settings() else {
        return;
    };
    hub.history().sequence_elsewhere();
    let weak = Arc::downgrade(hub);
    let max = settings.recover_max.saturating_add(1);
    let slots = Arc::new(tokio::sync::Semaphore::new(FETCHES));
    let shared = Arc::new(tokio::sync::Mutex::new(
        None::<redis::aio::MultiplexedConnection>,
    ));
    hub.history().set_fetch(Box::new(move |r: FetchRequest| {
        let Some(hub) = weak.upgrade() else { return };
        let answer = move |hub: &Hub, r: &FetchRequest| {
            let reply = embedded_server::channels::protocol::subscribe(
                hub,
                &r.conn,
                &r.channel,
                r.cap,
                r.max_bytes,
                Some(&r.from),
            );
            if let Some(reply) = reply {
                hub.broker().send_text_to(&r.conn, &reply);
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            answer(&hub, &r);
            return;
        };
        let (locate, shared) = (locate.clone(), shared.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let fetched = tokio::time::timeout(FETCH_WAIT, async {
                let mut slot = shared.lock().await;
                let mut conn = match slot.take() {
                    Some(c) => c,
                    None => locate()
                        .await
                        .ok()?
                        .get_multiplexed_async_connection()
                        .await
                        .ok()?,
                };
                // A multiplexed connection serves every recovery at once: give it back first.
                *slot = Some(conn.clone());
                drop(slot);
                match since(&mut conn, &r.channel, r.from.offset, max).await {
                    Ok(found) => found,
                    Err(_) => {
                        // Rebuilt (and the master asked for again) by the next recovery.
                        shared.lock().await.take();
                        None
                    }
                }
            })
            .await
            .ok()
            .flatten();
            if let Some((top, pubs)) = fetched {
                hub.history().merge(&r.channel, &top, pubs);
            }
            answer(&hub, &r);
        });
    }));
}

/// Send one backplane message: a publish to position goes through [`publish`] (which
/// publishes it positioned), anything else is published as it is.
pub async fn send<C: ConnectionLike>(
    conn: &mut C,
    hub: &Hub,
    msg: &[u8],
    relay_channel: &str,
) -> redis::RedisResult<()> {
    // Decoded as the supervisor would (the one id no node has), so our own message counts.
    if let (Some(h), Some(Incoming::Sequence(channel, data, _))) =
        (hub.history().settings(), decode(SUPERVISOR, msg))
    {
        publish(conn, channel, data, h.size, h.ttl_secs, relay_channel).await?;
        return Ok(());
    }
    redis::cmd("PUBLISH")
        .arg(relay_channel)
        .arg(msg)
        .query_async::<i64>(conn)
        .await?;
    Ok(())
}
