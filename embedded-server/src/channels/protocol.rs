//! The channels protocol (text frames, JSON), parsed and authorised here; the hub keeps the
//! subscriptions and fans publishes out:
//! - `{"op":"subscribe","channel":"prices"}` -> `{"op":"subscribed","channel":"prices"}`
//! - `{"op":"unsubscribe","channel":"prices"}` -> `{"op":"unsubscribed","channel":"prices"}`
//! - `{"op":"publish","channel":"prices","data":ANY}` -> every subscriber (the publisher too, if
//!   subscribed) gets `{"channel":"prices","data":ANY}`, encoded once per publish. `ANY` goes
//!   out as it came, less the whitespace between its tokens ([`compact`]): checked as JSON,
//!   never built into a tree of values, and nested at most [`MAX_DATA_DEPTH`] levels deep.
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
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// A field's JSON text when the field is there, `null` included (`Option`'s own
/// deserializer would read a `null` as a missing field); `#[serde(default)]` gives None.
pub(crate) fn present<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue as serde::Deserialize>::deserialize(d).map(Some)
}

/// How deep a publish's data may nest: what `serde_json` allows when it builds values, so
/// data that subscribers' parsers may refuse (or overflow their stack on) is refused here,
/// as it was when the server built it.
pub const MAX_DATA_DEPTH: usize = 128;

/// `json`, one valid JSON value's text, without the whitespace between its tokens: what
/// `serde_json` would write for it, without building it (strings, numbers and the order of
/// keys stay as they came). Borrowed when there is none, the usual case. Subscribers get the
/// compact form they always got, one line whatever the publisher's layout. The error: it
/// nests deeper than [`MAX_DATA_DEPTH`].
pub fn compact(json: &str) -> Result<Cow<'_, str>, String> {
    let b = json.as_bytes();
    let (mut in_string, mut escaped) = (false, false);
    let mut depth = 0usize;
    let mut out: Option<Vec<u8>> = None;
    for (i, &c) in b.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
            }
        } else if c == b'"' {
            in_string = true;
        } else if matches!(c, b'[' | b'{') {
            depth += 1;
            if depth > MAX_DATA_DEPTH {
                return Err(format!(
                    "\"data\" nests deeper than {MAX_DATA_DEPTH} levels of [ and {{: flatten it"
                ));
            }
        } else if matches!(c, b']' | b'}') {
            depth = depth.saturating_sub(1);
        } else if matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
            out.get_or_insert_with(|| {
                let mut o = Vec::with_capacity(b.len());
                o.extend_from_slice(&b[..i]);
                o
            });
            continue;
        }
        if let Some(o) = &mut out {
            o.push(c);
        }
    }
    Ok(match out {
        None => Cow::Borrowed(json),
        // Only ASCII whitespace was taken out of UTF-8 text: still UTF-8.
        Some(o) => Cow::Owned(
            String::from_utf8(o)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
        ),
    })
}

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
    // `data` is kept as the text it came as (checked, never built into a tree of values):
    // what it holds is the publisher's business, and a tree of a large message costs tens of
    // times its size (a 16 MiB array of zeros is half a gigabyte as values).
    #[derive(serde::Deserialize)]
    struct Msg<'a> {
        op: String,
        channel: Option<String>,
        #[serde(default, borrow, deserialize_with = "present")]
        data: Option<&'a RawValue>,
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
                if hub
                    .history()
                    .fetch_then_subscribe(me, &channel, from, cap, max_bytes)
                {
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
            hub.broker().unsubscribe(me, &channel);
            Some(serde_json::json!({"op": "unsubscribed", "channel": channel}).to_string())
        }
        "publish" => {
            if grant.is_some_and(|g| !g.may_publish(&channel)) {
                m.publish_denied.fetch_add(1, Relaxed);
                return denied(format!(
                    "not allowed: the token does not allow publishing to '{channel}'"
                ));
            }
            let data = match compact(msg.data.map_or("null", RawValue::get)) {
                Ok(d) => d,
                Err(e) => return err(ProtocolError::BadJson, &e),
            };
            hub.broker().publish_from(me, &channel, &data);
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
/// fetch that finishes the subscribe later (`HubHistory::fetch_then_subscribe`).
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
    let refused = match hub
        .broker()
        .subscribe_recovering(me, channel, cap, budget, from)
    {
        // With history on the hub has queued the answer itself (before any live
        // publication).
        Ok(_) if hub.history().enabled() => return None,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_takes_out_whitespace_between_tokens_only() {
        assert!(matches!(compact(r#"{"a":[1,2]}"#), Ok(Cow::Borrowed(_))));
        assert_eq!(
            compact("{ \"a b\" : [ 1 ,\n\t2 ], \"c\\\" d\" : \" x \" }\r\n").unwrap(),
            r#"{"a b":[1,2],"c\" d":" x "}"#
        );
        assert_eq!(compact(r#" "\\" "#).unwrap(), r#""\\""#);
        // Brackets in strings do not nest; 128 levels do, 129 are refused.
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(compact(&format!("[\"{}\"]", "[".repeat(500))).is_ok());
        assert!(compact(&deep(MAX_DATA_DEPTH)).is_ok());
        assert!(compact(&deep(MAX_DATA_DEPTH + 1))
            .unwrap_err()
            .contains("deeper than 128"));
    }
}
