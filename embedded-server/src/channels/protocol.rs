//! The channels protocol (text frames, JSON), parsed and authorised here; the hub keeps the
//! subscriptions and fans publishes out:
//! - `{"op":"subscribe","channel":"prices"}` -> `{"op":"subscribed","channel":"prices"}`
//! - `{"op":"unsubscribe","channel":"prices"}` -> `{"op":"unsubscribed","channel":"prices"}`
//! - `{"op":"publish","channel":"prices","data":ANY}` -> every subscriber (the publisher too, if
//!   subscribed) gets `{"channel":"prices","data":ANY}`, encoded once per publish.
//! - anything else -> `{"op":"error","error":"..."}` (the connection stays open).
//!
//! With history on (`ChannelsSettings::history`, `serve --history-size`), every publication
//! carries its stream position, `{"channel":"prices","data":ANY,"offset":N,"epoch":"E"}`;
//! `subscribed` carries the channel's position now (`"offset":N,"epoch":"E"`), and a subscribe
//! with the client's last position, `{"op":"subscribe","channel":"prices",
//! "recover":{"offset":N,"epoch":"E"}}`, is answered `"recovered":true` followed by every
//! publication after N, in order, before any live one (no gap, no duplicate), or
//! `"recovered":false,"reason":R` when it cannot be (R: `epoch`, the stream is not the one
//! the position is from; `too_old`, publications after it are gone; `too_many` or
//! `too_large`, more than one recovery returns; `off`, history is off): the client then
//! reloads its state. A channel with no stream yet (nothing published to it) answers
//! `"offset":0` and a stamp as its epoch, and a recovery from it asks for every publication
//! since. See
//! `hub::history` for the model (Centrifugo's).
//!
//! A subscribe past the per-connection caps ([`ChannelsSettings`]'s), or,
//! under token auth ([`auth`](super::auth)), to a channel the token does not allow, gets
//! `{"op":"error","error":"...","channel":"prices"}`; a publish the token does not allow too.

use super::{check_name, ChannelsSettings, Grant, ProtocolError};
use crate::hub::{Hub, StreamPosition, Subscribed};
use crate::outbox::Shared;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Handle one channels-protocol message (see the module's documentation) from a
/// connection no token restricts, with the default caps; returns a reply for the sender, if
/// any.
pub fn message(hub: &Hub, me: &Arc<Shared>, payload: &[u8]) -> Option<String> {
    message_as(hub, me, payload, None, &ChannelsSettings::default())
}

/// Handle one channels-protocol message from a connection whose token granted `grant`
/// (None: no auth, everything allowed). Subscriptions are capped per connection by
/// `settings`.
pub fn message_as(
    hub: &Hub,
    me: &Arc<Shared>,
    payload: &[u8],
    grant: Option<&Grant>,
    settings: &ChannelsSettings,
) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Msg {
        op: String,
        channel: Option<String>,
        #[serde(default)]
        data: serde_json::Value,
        recover: Option<Recover>,
    }
    #[derive(serde::Deserialize)]
    struct Recover {
        offset: u64,
        epoch: String,
    }
    let m = &hub.channel_metrics;
    let err = |why: ProtocolError, e: &str| {
        m.protocol_error(why);
        Some(serde_json::json!({"op": "error", "error": e}).to_string())
    };
    let msg: Msg = match serde_json::from_slice(payload) {
        Ok(m) => m,
        Err(e) => {
            return err(
                ProtocolError::BadJson,
                &format!("not a channels message: {e}"),
            )
        }
    };
    let channel = match msg.channel {
        None => {
            return err(
                ProtocolError::BadName,
                "\"channel\" is required: a name of 1..256 bytes",
            )
        }
        Some(c) => match check_name(&c) {
            Ok(()) => c,
            Err(e) => return err(ProtocolError::BadName, e),
        },
    };
    let denied = |e: String| {
        Some(serde_json::json!({"op": "error", "error": e, "channel": channel}).to_string())
    };
    match msg.op.as_str() {
        "subscribe" => {
            if grant.is_some_and(|g| !g.may_subscribe(&channel)) {
                m.subscribe_denied.fetch_add(1, Relaxed);
                return denied(format!(
                    "not allowed: the token does not allow subscribing to '{channel}'"
                ));
            }
            let from = msg.recover.map(|r| StreamPosition {
                offset: r.offset,
                epoch: r.epoch.into(),
            });
            if let Some(from) = &from {
                // Not kept here (a node that restarted): fetched from the shared store
                // first, then this same subscribe runs (`subscribe`).
                let (cap, max_bytes) =
                    (settings.max_subscriptions, settings.max_subscription_bytes);
                if hub.fetch_then_subscribe(me, &channel, from, cap, max_bytes) {
                    return None;
                }
            }
            subscribe(
                hub,
                me,
                &channel,
                settings.max_subscriptions,
                settings.max_subscription_bytes,
                from.as_ref(),
            )
        }
        "unsubscribe" => {
            hub.unsubscribe(me, &channel);
            Some(serde_json::json!({"op": "unsubscribed", "channel": channel}).to_string())
        }
        "publish" => {
            if grant.is_some_and(|g| !g.may_publish(&channel)) {
                m.publish_denied.fetch_add(1, Relaxed);
                return denied(format!(
                    "not allowed: the token does not allow publishing to '{channel}'"
                ));
            }
            hub.publish_from(me, &channel, &msg.data);
            None
        }
        other => err(
            ProtocolError::UnknownOp,
            &format!("unknown op '{other}': use subscribe, unsubscribe or publish"),
        ),
    }
}

/// A subscribe the token allows: joined within the caps `cap` and `budget` (bytes of names),
/// recovering from `from` with history on; the reply for the sender, if any (with history on
/// the hub queues the answer itself, before any live publication). Public for a history
/// fetch that finishes the subscribe later (`Hub::fetch_then_subscribe`).
pub fn subscribe(
    hub: &Hub,
    me: &Arc<Shared>,
    channel: &str,
    cap: usize,
    budget: usize,
    from: Option<&StreamPosition>,
) -> Option<String> {
    let m = &hub.channel_metrics;
    let denied = |e: String| {
        Some(serde_json::json!({"op": "error", "error": e, "channel": channel}).to_string())
    };
    let refused = match hub.subscribe_recovering(me, channel, cap, budget, from) {
        // With history on the hub has queued the answer itself (before any live
        // publication).
        Ok(_) if hub.history_enabled() => return None,
        Ok(_) => Subscribed::Added,
        Err(refused) => refused,
    };
    match refused {
        Subscribed::Full => {
            m.subscription_cap.fetch_add(1, Relaxed);
            return denied(format!(
                "too many subscriptions: a connection may hold {cap}; unsubscribe \
                 first"
            ));
        }
        Subscribed::NamesFull => {
            m.subscription_cap.fetch_add(1, Relaxed);
            return denied(format!(
                "too many subscriptions: the names of a connection's channels may \
                 total {budget} bytes; unsubscribe first (or use shorter names)"
            ));
        }
        Subscribed::OverBudget => {
            return denied(
                "server busy: its memory budget has no room for another \
                 subscription; try again later"
                    .to_string(),
            );
        }
        // The connection closed meanwhile (a recovery that waited for the shared store):
        // nobody to answer.
        Subscribed::Ended => return None,
        _ => {}
    }
    if from.is_some() {
        m.recovery("off");
        return Some(
            serde_json::json!({"op": "subscribed", "channel": channel,
                "recovered": false, "reason": "off"})
            .to_string(),
        );
    }
    Some(serde_json::json!({"op": "subscribed", "channel": channel}).to_string())
}
