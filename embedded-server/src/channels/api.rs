//! The backend's HTTP API on the admin listener (`crate::admin` parses the HTTP and checks the
//! key; this answers):
//!
//! | Request | Answer |
//! |---|---|
//! | `POST /api/publish` `{"channel":"news","data":ANY}` | 200 `{"delivered":N}` |
//! | `POST /api/batch` `{"messages":[{"channel":..,"data":..},..]}` (1..=1000) | 200 `{"published":M,"delivered":N}` |
//! | `GET /api/channels` | 200 `{"channels":{"news":3,..},"subscriptions":N}` |
//! | `GET /api/channels/NAME` | 200 `{"channel":"NAME","subscribers":N}` |
//!
//! `delivered` is the number of this node's subscribers the message was queued for. A publish
//! goes through [`Hub::publish`], the path a WebSocket publish takes, so with a cluster
//! backplane it is also relayed (once) to the other nodes, whose subscribers are not in `N`;
//! the answer then carries `"backplane":"up"` (or `"down"`: delivered here only). Errors are
//! `{"error":"..."}` (with `"field"` when one field is at fault): 400 for a body that is not
//! what the route takes, 409 when the server does not run the channels app.

use crate::hub::Hub;
use serde_json::{json, Value};
use sha1::{Digest, Sha1};
use std::sync::atomic::Ordering::Relaxed;
use subtle::ConstantTimeEq;

/// The most messages one batch may carry.
pub const MAX_BATCH: usize = 1000;

/// The shortest API key accepted, bytes.
pub const MIN_KEY_BYTES: usize = 16;

/// One of the API's routes (the path is known; the admin listener checked the method).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /api/publish`.
    Publish,
    /// `POST /api/batch`.
    Batch,
    /// `GET /api/channels`.
    Channels,
    /// `GET /api/channels/NAME` (NAME percent-decoded).
    Channel(String),
}

impl Endpoint {
    /// The route label of `ws_api_requests_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Endpoint::Publish => "publish",
            Endpoint::Batch => "batch",
            Endpoint::Channels => "channels",
            Endpoint::Channel(_) => "channel",
        }
    }

    /// Whether the route takes a body (POST).
    pub fn is_post(&self) -> bool {
        matches!(self, Endpoint::Publish | Endpoint::Batch)
    }
}

/// An authorised API request with its whole body.
#[derive(Debug, Clone)]
pub struct ApiCall {
    /// What was asked for.
    pub endpoint: Endpoint,
    /// The request body (empty for GET).
    pub body: Vec<u8>,
}

/// The key backends present (`Authorization: Bearer KEY` or `X-API-Key: KEY`). Only its
/// SHA-1 digest is kept, and a presented key is compared digest to digest in constant time, so
/// neither the key's bytes nor its length leak through timing.
#[derive(Clone)]
pub struct ApiKey {
    digest: [u8; 20],
    /// The key itself, for a process that forwards requests (the `--processes` supervisor).
    raw: std::sync::Arc<str>,
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(redacted)")
    }
}

impl ApiKey {
    /// A key from its text (surrounding whitespace, like a file's last newline, dropped). The
    /// error says what is wrong.
    pub fn new(text: &str) -> Result<ApiKey, String> {
        let k = text.trim();
        if k.len() < MIN_KEY_BYTES {
            return Err(format!(
                "the API key is {} bytes; use at least {MIN_KEY_BYTES} (make one with \
                 `head -c 32 /dev/urandom | base64`)",
                k.len()
            ));
        }
        if k.bytes().any(|b| b.is_ascii_control() || b == b' ') {
            return Err(
                "the API key holds spaces or control characters; an HTTP header cannot \
                        carry it: use printable ASCII (base64 or hex)"
                    .into(),
            );
        }
        Ok(ApiKey {
            digest: Sha1::digest(k.as_bytes()).into(),
            raw: k.into(),
        })
    }

    /// Whether `presented` is this key (constant time).
    pub fn matches(&self, presented: &[u8]) -> bool {
        let d: [u8; 20] = Sha1::digest(presented).into();
        d.ct_eq(&self.digest).into()
    }

    /// The key, to send it on (`Authorization: Bearer`); never log it.
    pub fn expose(&self) -> &str {
        &self.raw
    }
}

/// An error answer.
pub fn error(status: u16, msg: &str) -> (u16, String) {
    (status, format!("{}\n", json!({ "error": msg })))
}

fn field_error(field: &str, msg: String) -> (u16, String) {
    (
        400,
        format!("{}\n", json!({ "error": msg, "field": field })),
    )
}

/// One `{"channel":..,"data":..}` checked: the channel and the data, or the 400.
fn message<'a>(v: &'a Value, at: &str) -> Result<(&'a str, &'a Value), (u16, String)> {
    let Some(o) = v.as_object() else {
        return Err(error(
            400,
            &format!("{at}expected a JSON object like {{\"channel\":\"news\",\"data\":{{..}}}}"),
        ));
    };
    let channel = match o.get("channel") {
        None => {
            return Err(field_error(
                "channel",
                format!("{at}missing field \"channel\" (the channel's name)"),
            ))
        }
        Some(Value::String(s)) => s.as_str(),
        Some(_) => {
            return Err(field_error(
                "channel",
                format!("{at}field \"channel\" must be a string"),
            ))
        }
    };
    if let Err(e) = super::check_name(channel) {
        return Err(field_error(
            "channel",
            format!("{at}field \"channel\": {e}"),
        ));
    }
    let Some(data) = o.get("data") else {
        return Err(field_error(
            "data",
            format!("{at}missing field \"data\" (any JSON value; null is one)"),
        ));
    };
    Ok((channel, data))
}

/// Answer `call` for the channels app on `hub`: (status, JSON body). `app` names the
/// application the server runs when it is not the channels app (the answer is then 409).
pub fn answer(hub: &Hub, call: &ApiCall, app: Option<&str>) -> (u16, String) {
    if let Some(app) = app {
        return error(
            409,
            &format!("this server runs {app}; the channels API needs --app channels"),
        );
    }
    let parse = || -> Result<Value, (u16, String)> {
        serde_json::from_slice(&call.body)
            .map_err(|e| error(400, &format!("the body is not JSON: {e}")))
    };
    let backplane = match hub.metrics.backplane_up.load(Relaxed) {
        -1 => None,
        1 => Some("up"),
        _ => Some("down"),
    };
    let with_backplane = |mut v: Value| {
        if let Some(b) = backplane {
            v["backplane"] = b.into();
        }
        (200, format!("{v}\n"))
    };
    match &call.endpoint {
        Endpoint::Publish => {
            let v = match parse() {
                Ok(v) => v,
                Err(e) => return e,
            };
            let (channel, data) = match message(&v, "") {
                Ok(m) => m,
                Err(e) => return e,
            };
            let delivered = hub.subscriber_count(channel);
            hub.publish(channel, data);
            with_backplane(json!({ "delivered": delivered }))
        }
        Endpoint::Batch => {
            let v = match parse() {
                Ok(v) => v,
                Err(e) => return e,
            };
            let Some(list) = v.get("messages").and_then(Value::as_array) else {
                return field_error(
                    "messages",
                    "missing field \"messages\" (a list of {\"channel\",\"data\"} objects)".into(),
                );
            };
            if list.is_empty() || list.len() > MAX_BATCH {
                return field_error(
                    "messages",
                    format!(
                        "a batch carries 1..={MAX_BATCH} messages, not {}",
                        list.len()
                    ),
                );
            }
            // Every message is checked before any is published: a bad batch publishes nothing.
            let mut checked = Vec::with_capacity(list.len());
            for (i, m) in list.iter().enumerate() {
                match message(m, &format!("messages[{i}]: ")) {
                    Ok(m) => checked.push(m),
                    Err(e) => return e,
                }
            }
            let mut delivered = 0;
            for (channel, data) in &checked {
                delivered += hub.subscriber_count(channel);
                hub.publish(channel, data);
            }
            with_backplane(json!({ "published": checked.len(), "delivered": delivered }))
        }
        Endpoint::Channels => {
            let counts = hub.channel_counts();
            let total: usize = counts.iter().map(|(_, n)| n).sum();
            let map: serde_json::Map<String, Value> =
                counts.into_iter().map(|(c, n)| (c, n.into())).collect();
            (
                200,
                format!("{}\n", json!({ "channels": map, "subscriptions": total })),
            )
        }
        Endpoint::Channel(name) => {
            if let Err(e) = super::check_name(name) {
                return error(400, e);
            }
            (
                200,
                format!(
                    "{}\n",
                    json!({ "channel": name, "subscribers": hub.subscriber_count(name) })
                ),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_matches_only_itself() {
        let k = ApiKey::new("0123456789abcdef-key\n").unwrap();
        assert!(k.matches(b"0123456789abcdef-key"));
        assert!(!k.matches(b"0123456789abcdef-kez"));
        assert!(!k.matches(b""));
        assert!(!format!("{k:?}").contains("0123"));
        assert!(ApiKey::new("short").unwrap_err().contains("at least 16"));
        assert!(ApiKey::new("0123456789 abcdef").is_err());
    }

    #[test]
    fn publish_bodies_name_the_missing_or_bad_field() {
        let hub = Hub::new(
            crate::ServerConfig::default(),
            std::sync::Arc::new(crate::metrics::Metrics::default()),
        );
        let call = |e: Endpoint, b: &str| {
            answer(
                &hub,
                &ApiCall {
                    endpoint: e,
                    body: b.as_bytes().to_vec(),
                },
                None,
            )
        };
        let (s, b) = call(Endpoint::Publish, r#"{"data":1}"#);
        assert_eq!(s, 400);
        assert!(b.contains("\"field\":\"channel\""), "{b}");
        let (s, b) = call(Endpoint::Publish, r#"{"channel":"a"}"#);
        assert!(s == 400 && b.contains("\"field\":\"data\""), "{b}");
        let (s, b) = call(Endpoint::Publish, r#"{"channel":7,"data":1}"#);
        assert!(s == 400 && b.contains("must be a string"), "{b}");
        let (s, _) = call(Endpoint::Publish, "not json");
        assert_eq!(s, 400);
        let (s, b) = call(Endpoint::Publish, r#"{"channel":"a","data":null}"#);
        assert_eq!((s, b.trim()), (200, r#"{"delivered":0}"#));
        let (s, b) = call(
            Endpoint::Batch,
            r#"{"messages":[{"channel":"a","data":1},{"data":2}]}"#,
        );
        assert!(s == 400 && b.contains("messages[1]: missing field"), "{b}");
        let (s, b) = call(Endpoint::Batch, r#"{"messages":[]}"#);
        assert!(s == 400 && b.contains("1..=1000"), "{b}");
        let (s, b) = answer(
            &hub,
            &ApiCall {
                endpoint: Endpoint::Channels,
                body: vec![],
            },
            Some("--app echo"),
        );
        assert!(s == 409 && b.contains("--app channels"), "{b}");
    }
}
