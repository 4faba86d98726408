//! The backend's HTTP API on the admin listener (the admin module parses the HTTP and checks
//! the key; this answers):
//!
//! | Request | Answer |
//! |---|---|
//! | `POST /api/publish` `{"channel":"news","data":ANY}` | 200 `{"queued":N,"dropped":D,"delivered":N}` (+ `"offset":N,"epoch":"E"` with history on) |
//! | `POST /api/batch` `{"messages":[{"channel":..,"data":..},..]}` (1..=1000) | 200 `{"published":M,"queued":N,"dropped":D,"delivered":N}` |
//! | `GET /api/channels[?prefix=P&after=C&limit=N]` | 200 `{"channels":{"news":3,..},"subscriptions":N,"truncated":false}` (+ `"next":C` when truncated) |
//! | `GET /api/channels/NAME` | 200 `{"channel":"NAME","subscribers":N}` (+ `"offset":N,"epoch":"E","history":K` with history on; with a cluster backplane N is the sum over the live nodes, and `"local"`, `"node"` (this node's id), `"nodes"` (id: count), `"live_nodes"`, `"partial"` follow) |
//!
//! `queued` is the number of this node's subscribers the message was queued for (or written to
//! the socket of, when nothing was waiting). It is not a receipt: a slow subscriber whose queue
//! later passes its cap is closed (1008 or 1013) and loses what was still queued for it (see
//! `ws_backpressure_closes_total`). `dropped` is the number it could not be queued for: over
//! their cap (closed by backpressure by this very publish), already closing, or gone; the sum
//! over every publish is `ws_publish_dropped_total`. `delivered` is the old name of `queued`,
//! kept with the same value so existing clients keep working; read `queued`, as `delivered`
//! may be removed in a later release. A publish goes through the hub's broker
//! (`Broker::publish`), the path a WebSocket publish takes,
//! so with a cluster backplane it is also relayed (once) to the other nodes, whose
//! subscribers are not in `N`;
//! the answer then carries `"backplane":"up"` (or `"down"`: delivered here only). Errors are
//! `{"error":"..."}` (with `"field"` when one field is at fault): 400 for a body that is not
//! what the route takes, 409 when the server does not run the channels app.

use crate::hub::Hub;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use sha1::{Digest, Sha1};
use std::borrow::Cow;
use std::sync::atomic::Ordering::Relaxed;
use subtle::ConstantTimeEq;

/// The most messages one batch may carry.
pub const MAX_BATCH: usize = 1000;

/// A batch yields its I/O thread after this many publishes.
const YIELD_EVERY: usize = 16;

/// The most channels one `GET /api/channels` lists when the request sets no `limit`.
pub const DEFAULT_LIST_LIMIT: usize = 1000;
/// The largest `limit` a `GET /api/channels` may ask for.
pub const MAX_LIST_LIMIT: usize = 10_000;

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
    /// The query string after `?` (empty when none), undecoded.
    pub query: String,
}

/// Percent-decode one URL component. `plus_is_space`: a query's rule (`+` is a space); in a
/// path a `+` is itself. None for a bad escape or bytes that are not UTF-8 (the caller
/// answers 400 rather than guessing at a name).
pub fn decode_component(s: &str, plus_is_space: bool) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' if plus_is_space => out.push(b' '),
            b'%' => {
                let hex = |c: Option<&u8>| c.and_then(|c| (*c as char).to_digit(16));
                let (h, l) = (hex(b.get(i + 1))?, hex(b.get(i + 2))?);
                out.push((h * 16 + l) as u8);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// What `GET /api/channels` lists: names starting with `prefix`, after the cursor `after`
/// (the `next` of the previous page), in byte order, at most `limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Only names starting with this.
    pub prefix: String,
    /// Only names after this one (exclusive).
    pub after: Option<String>,
    /// The most names in one answer.
    pub limit: usize,
}

impl ListQuery {
    /// Parse `prefix`, `after` and `limit` from a query string; the 400 otherwise.
    pub fn parse(query: &str) -> Result<ListQuery, (u16, String)> {
        let mut q = ListQuery {
            prefix: String::new(),
            after: None,
            limit: DEFAULT_LIST_LIMIT,
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = decode_component(v, true).ok_or_else(|| {
                error(
                    400,
                    &format!("query parameter {k}: a bad %-escape or not UTF-8"),
                )
            })?;
            match k {
                "prefix" => q.prefix = v,
                "after" => q.after = Some(v),
                "limit" => {
                    q.limit = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_LIST_LIMIT).contains(n))
                        .ok_or_else(|| {
                            error(
                                400,
                                &format!("limit must be 1..={MAX_LIST_LIMIT}, not '{v}'"),
                            )
                        })?
                }
                other => {
                    return Err(error(
                        400,
                        &format!("unknown query parameter '{other}': use prefix, after, limit"),
                    ))
                }
            }
        }
        Ok(q)
    }

    /// The query string that asks for this (for a process the supervisor forwards to).
    pub fn to_query(&self) -> String {
        let enc = |s: &str| {
            let mut o = String::with_capacity(s.len());
            for b in s.bytes() {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    o.push(b as char);
                } else {
                    o.push_str(&format!("%{b:02X}"));
                }
            }
            o
        };
        let mut q = format!("limit={}", self.limit);
        if !self.prefix.is_empty() {
            q += &format!("&prefix={}", enc(&self.prefix));
        }
        if let Some(a) = &self.after {
            q += &format!("&after={}", enc(a));
        }
        q
    }
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

/// A message's fields as they came (their JSON text), for [`message`] to check. Bodies are
/// never built into a tree of values: a tree costs tens of times the text (a 16 MiB array of
/// zeros is half a gigabyte), and the data only passes through.
#[derive(serde::Deserialize)]
struct Fields<'a> {
    #[serde(default, borrow, deserialize_with = "super::protocol::present")]
    channel: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "super::protocol::present")]
    data: Option<&'a RawValue>,
}

/// `raw` starts a JSON object (it is valid JSON: the first byte says which kind).
fn is_object(raw: &RawValue) -> bool {
    raw.get().trim_start().starts_with('{')
}

/// One `{"channel":..,"data":..}` checked: the channel and the data's compact text, or the
/// 400.
fn message<'a>(v: &'a RawValue, at: &str) -> Result<(String, Cow<'a, str>), (u16, String)> {
    let expected = || {
        error(
            400,
            &format!("{at}expected a JSON object like {{\"channel\":\"news\",\"data\":{{..}}}}"),
        )
    };
    if !is_object(v) {
        return Err(expected());
    }
    let o: Fields = serde_json::from_str(v.get()).map_err(|e| error(400, &format!("{at}{e}")))?;
    let channel = match o.channel {
        None => {
            return Err(field_error(
                "channel",
                format!("{at}missing field \"channel\" (the channel's name)"),
            ))
        }
        Some(c) => match serde_json::from_str::<String>(c.get()) {
            Ok(s) => s,
            Err(_) => {
                return Err(field_error(
                    "channel",
                    format!("{at}field \"channel\" must be a string"),
                ))
            }
        },
    };
    if let Err(e) = super::check_name(&channel) {
        return Err(field_error(
            "channel",
            format!("{at}field \"channel\": {e}"),
        ));
    }
    let Some(data) = o.data else {
        return Err(field_error(
            "data",
            format!("{at}missing field \"data\" (any JSON value; null is one)"),
        ));
    };
    let data = super::protocol::compact(data.get())
        .map_err(|e| field_error("data", format!("{at}{e}")))?;
    Ok((channel, data))
}

/// A batch's `messages`: the first [`MAX_BATCH`] as they came, and how many there were in
/// all (those past the cap only counted, never kept).
struct Listed<'a> {
    items: Vec<&'a RawValue>,
    total: usize,
}

impl<'de> serde::Deserialize<'de> for Listed<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Listed<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Listed<'de>, A::Error> {
                let mut items = Vec::new();
                while items.len() < MAX_BATCH {
                    match seq.next_element::<&'de RawValue>()? {
                        Some(v) => items.push(v),
                        None => {
                            let total = items.len();
                            return Ok(Listed { items, total });
                        }
                    }
                }
                let mut total = items.len();
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    total += 1;
                }
                Ok(Listed { items, total })
            }
        }
        d.deserialize_seq(V)
    }
}

/// Answer `call` for the channels app on `hub`: (status, JSON body). `app` names the
/// application the server runs when it is not the channels app (the answer is then 409).
pub async fn answer(hub: &Hub, call: &ApiCall, app: Option<&str>) -> (u16, String) {
    if let Some(app) = app {
        return error(
            409,
            &format!("this server runs {app}; the channels API needs --app channels"),
        );
    }
    match &call.endpoint {
        Endpoint::Publish => publish(hub, call),
        Endpoint::Batch => batch(hub, call).await,
        Endpoint::Channels => channels(hub, call),
        Endpoint::Channel(name) => channel(hub, name),
    }
}

/// The body as JSON, checked without building it (see `Fields`).
fn parse(call: &ApiCall) -> Result<&RawValue, (u16, String)> {
    serde_json::from_slice(&call.body)
        .map_err(|e| error(400, &format!("the body is not JSON: {e}")))
}

/// The cluster backplane's state for a publish's answer (None: there is none). Read before
/// the publish, so a batch reports the state it started in.
fn backplane(hub: &Hub) -> Option<&'static str> {
    match hub.metrics.backplane_up.load(Relaxed) {
        -1 => None,
        1 => Some("up"),
        _ => Some("down"),
    }
}

/// A publish's 200, saying whether the cluster backplane is up when there is one.
fn with_backplane(backplane: Option<&str>, mut v: Value) -> (u16, String) {
    if let Some(b) = backplane {
        v["backplane"] = b.into();
    }
    (200, format!("{v}\n"))
}

/// `POST /api/publish`: one message.
fn publish(hub: &Hub, call: &ApiCall) -> (u16, String) {
    let backplane = backplane(hub);
    let v = match parse(call) {
        Ok(v) => v,
        Err(e) => return e,
    };
    let (channel, data) = match message(v, "") {
        Ok(m) => m,
        Err(e) => return e,
    };
    let (p, pos) = hub.broker().publish_json_with_position(&channel, &data);
    let mut v = json!({ "queued": p.queued, "dropped": p.dropped, "delivered": p.queued });
    if let Some(pos) = pos {
        v["offset"] = pos.offset.into();
        v["epoch"] = (&*pos.epoch).into();
    }
    with_backplane(backplane, v)
}

/// `POST /api/batch`: up to [`MAX_BATCH`] messages, all checked before any is published.
async fn batch(hub: &Hub, call: &ApiCall) -> (u16, String) {
    let backplane = backplane(hub);
    let v = match parse(call) {
        Ok(v) => v,
        Err(e) => return e,
    };
    #[derive(serde::Deserialize)]
    struct Batch<'a> {
        #[serde(default, borrow)]
        messages: Option<&'a RawValue>,
    }
    let missing = || {
        field_error(
            "messages",
            "missing field \"messages\" (a list of {\"channel\",\"data\"} objects)".into(),
        )
    };
    let list = match is_object(v)
        .then(|| serde_json::from_str::<Batch>(v.get()))
        .and_then(Result::ok)
        .and_then(|b| b.messages)
        .map(|m| serde_json::from_str::<Listed>(m.get()))
    {
        Some(Ok(list)) => list,
        _ => return missing(),
    };
    if list.total == 0 || list.total > MAX_BATCH {
        return field_error(
            "messages",
            format!(
                "a batch carries 1..={MAX_BATCH} messages, not {}",
                list.total
            ),
        );
    }
    // Every message is checked before any is published: a bad batch publishes nothing.
    let mut checked = Vec::with_capacity(list.items.len());
    for (i, m) in list.items.iter().enumerate() {
        match message(m, &format!("messages[{i}]: ")) {
            Ok(m) => checked.push(m),
            Err(e) => return e,
        }
    }
    let (mut queued, mut dropped) = (0, 0);
    for (i, (channel, data)) in checked.iter().enumerate() {
        // A batch of 1000 fan-outs runs on an I/O thread: let its other connections
        // run between every few, so one batch is not one long stall for them.
        if i > 0 && i % YIELD_EVERY == 0 {
            tokio::task::yield_now().await;
        }
        let p = hub.broker().publish_json_with_position(channel, data).0;
        queued += p.queued;
        dropped += p.dropped;
    }
    with_backplane(
        backplane,
        json!({
            "published": checked.len(),
            "queued": queued,
            "dropped": dropped,
            "delivered": queued,
        }),
    )
}

/// `GET /api/channels`: one page of the channels with subscribers on this node.
fn channels(hub: &Hub, call: &ApiCall) -> (u16, String) {
    let q = match ListQuery::parse(&call.query) {
        Ok(q) => q,
        Err(e) => return e,
    };
    let page = hub
        .presence()
        .channel_page(&q.prefix, q.after.as_deref(), q.limit);
    let next = page
        .truncated
        .then(|| page.counts.last().map(|(c, _)| c.to_string()));
    let map: serde_json::Map<String, Value> = page
        .counts
        .into_iter()
        .map(|(c, n)| (c.to_string(), n.into()))
        .collect();
    let mut v = json!({
        "channels": map,
        "subscriptions": page.subscriptions,
        "truncated": page.truncated,
    });
    if let Some(Some(n)) = next {
        v["next"] = n.into();
    }
    (200, format!("{v}\n"))
}

/// `GET /api/channels/NAME`: one channel's subscribers (every node's, with a backplane) and
/// its stream position.
fn channel(hub: &Hub, name: &str) -> (u16, String) {
    if let Err(e) = super::check_name(name) {
        return error(400, e);
    }
    let local = hub.presence().subscriber_count(name);
    let mut v = json!({ "channel": name, "subscribers": local });
    // With a cluster backplane: the sum over every live node, and each node's count.
    if let Some(r) = hub.presence().remote(name) {
        let mut nodes = serde_json::Map::new();
        nodes.insert(format!("{:016x}", r.me), local.into());
        for (id, n) in &r.nodes {
            nodes.insert(format!("{id:016x}"), (*n).into());
        }
        v["subscribers"] = (local + r.subscribers()).into();
        v["local"] = local.into();
        v["node"] = format!("{:016x}", r.me).into();
        v["nodes"] = nodes.into();
        v["live_nodes"] = (r.live + 1).into();
        v["partial"] = r.partial.into();
    }
    if hub.history().enabled() {
        let (offset, epoch, kept) = match hub.history().peek(name) {
            Some((pos, kept)) => (pos.offset, pos.epoch.to_string(), kept),
            None => (0, String::new(), 0),
        };
        v["offset"] = offset.into();
        v["epoch"] = epoch.into();
        v["history"] = kept.into();
    }
    (200, format!("{v}\n"))
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

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn publish_bodies_name_the_missing_or_bad_field() {
        let hub = Hub::new(
            crate::ServerConfig::default(),
            std::sync::Arc::new(crate::metrics::Metrics::default()),
        );
        let call = |e: Endpoint, b: &str| {
            block_on(answer(
                &hub,
                &ApiCall {
                    endpoint: e,
                    body: b.as_bytes().to_vec(),
                    query: String::new(),
                },
                None,
            ))
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
        assert_eq!(
            (s, b.trim()),
            (200, r#"{"delivered":0,"dropped":0,"queued":0}"#)
        );
        let (s, b) = call(
            Endpoint::Batch,
            r#"{"messages":[{"channel":"a","data":1},{"data":2}]}"#,
        );
        assert!(s == 400 && b.contains("messages[1]: missing field"), "{b}");
        let (s, b) = call(Endpoint::Batch, r#"{"messages":[]}"#);
        assert!(s == 400 && b.contains("1..=1000"), "{b}");
        // Past the cap the rest are counted, never kept.
        let many = format!(r#"{{"messages":[{}0]}}"#, "0,".repeat(1499));
        let (s, b) = call(Endpoint::Batch, &many);
        assert!(s == 400 && b.contains("not 1500"), "{b}");
        let (s, b) = call(Endpoint::Batch, r#"{"messages":"x"}"#);
        assert!(s == 400 && b.contains("\"field\":\"messages\""), "{b}");
        let deep = format!(
            r#"{{"channel":"a","data":{}{}}}"#,
            "[".repeat(129),
            "]".repeat(129)
        );
        let (s, b) = call(Endpoint::Publish, &deep);
        assert!(
            s == 400 && b.contains("\"field\":\"data\"") && b.contains("deeper than 128"),
            "{b}"
        );
        let (s, b) = call(Endpoint::Publish, r#"[{"channel":"a","data":1}]"#);
        assert!(s == 400 && b.contains("expected a JSON object"), "{b}");
        // The data goes out as it came, less the whitespace between tokens.
        let c = hub.registry().register();
        hub.broker().subscribe(&c, "keys");
        let (s, _) = call(
            Endpoint::Publish,
            "{\"channel\":\"keys\",\"data\": {\"b\" : 1,\n \"a\":\"x y\"}}",
        );
        assert_eq!(s, 200);
        let (s, b) = block_on(answer(
            &hub,
            &ApiCall {
                endpoint: Endpoint::Channels,
                body: vec![],
                query: String::new(),
            },
            Some("--app echo"),
        ));
        assert!(s == 409 && b.contains("--app channels"), "{b}");
    }

    #[test]
    fn components_decode_strictly_and_lists_page_by_prefix_and_cursor() {
        assert_eq!(decode_component("a+b%2Fc", false).as_deref(), Some("a+b/c"));
        assert_eq!(decode_component("a+b", true).as_deref(), Some("a b"));
        assert_eq!(decode_component("%ff%fe", false), None);
        assert_eq!(decode_component("%4", false), None);
        assert_eq!(decode_component("%zz", false), None);
        assert_eq!(decode_component("%C3%A9", false).as_deref(), Some("é"));
        let hub = Hub::new(
            crate::ServerConfig::default(),
            std::sync::Arc::new(crate::metrics::Metrics::default()),
        );
        let c = hub.registry().register();
        for n in ["news.a", "news.b", "news.c", "other"] {
            hub.broker().subscribe(&c, n);
        }
        let list = |q: &str| {
            let (s, b) = block_on(answer(
                &hub,
                &ApiCall {
                    endpoint: Endpoint::Channels,
                    body: vec![],
                    query: q.into(),
                },
                None,
            ));
            (s, serde_json::from_str::<Value>(&b).unwrap())
        };
        let (s, v) = list("prefix=news.&limit=2");
        assert_eq!(s, 200);
        assert_eq!(v["channels"], json!({"news.a": 1, "news.b": 1}));
        assert_eq!(
            (v["truncated"].as_bool(), v["next"].as_str()),
            (Some(true), Some("news.b"))
        );
        assert_eq!(v["subscriptions"], 4);
        let (_, v) = list("prefix=news.&limit=2&after=news.b");
        assert_eq!(v["channels"], json!({"news.c": 1}));
        assert_eq!(v["truncated"], false);
        assert!(v.get("next").is_none());
        assert_eq!(list("").1["channels"].as_object().unwrap().len(), 4);
        assert_eq!(list("limit=0").0, 400);
        assert_eq!(list("limit=x").0, 400);
        assert_eq!(list("color=red").0, 400);
        let q = ListQuery::parse("prefix=a%20b&after=x%2By&limit=5").unwrap();
        assert_eq!(ListQuery::parse(&q.to_query()).unwrap(), q);
    }

    #[test]
    fn a_batch_counts_what_the_fan_out_queued_across_its_yields() {
        let hub = Hub::new(
            crate::ServerConfig::default(),
            std::sync::Arc::new(crate::metrics::Metrics::default()),
        );
        let (a, b) = (hub.registry().register(), hub.registry().register());
        hub.broker().subscribe(&a, "x");
        hub.broker().subscribe(&b, "x");
        // b's close is requested: still in the channel, but nothing is queued for it.
        b.request_close(1000);
        let msgs: Vec<String> = (0..100)
            .map(|i| format!(r#"{{"channel":"x","data":{i}}}"#))
            .collect();
        let body = format!(r#"{{"messages":[{}]}}"#, msgs.join(","));
        let (s, out) = block_on(answer(
            &hub,
            &ApiCall {
                endpoint: Endpoint::Batch,
                body: body.into_bytes(),
                query: String::new(),
            },
            None,
        ));
        assert_eq!(s, 200, "{out}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            (v["published"].as_u64(), v["delivered"].as_u64()),
            (Some(100), Some(100))
        );
    }
}
