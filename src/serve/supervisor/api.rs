//! The channels HTTP API on the supervisor's admin listener (`serve --processes N`).
//!
//! - `POST /api/publish` and `/api/batch` are handed, as they came, to one process that is up
//!   (the lowest index): it delivers to its own subscribers and relays to the other processes
//!   (the supervisor's relay, or Redis with `--cluster`), exactly as when a WebSocket client
//!   publishes on it. Its answer is passed back with `"process": i` added; its `queued`,
//!   `dropped` (and `delivered`, the old name of `queued`) count that process's subscribers
//!   only. Only a process that never got the request
//!   (connection refused) is skipped for the next one; one that got it and does not answer
//!   within 5 s gets a 504 saying the publish may or may not have been delivered: a blind
//!   retry on another process would deliver it twice once the first one resumes.
//! - `GET /api/channels` and `/api/channels/NAME` ask every process that is up and add the
//!   counts; `"processes"` says how many answered. With `--cluster` a process's
//!   `/api/channels/NAME` already counts every node (each process is one): their per-node
//!   counts are merged, not added.
//!
//! The supervisor checked the key already; it presents the same key to the process (which
//! read it from the same file or variable).

use embedded_server::channels::api::{error, ApiCall, Endpoint, ListQuery};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the API needs from the supervisor.
pub trait Process {
    /// The API key (always set when a request gets this far: the admin listener refuses
    /// every API request with 403 when there is none).
    fn api_key(&self) -> Option<&str>;
    /// The admin listeners of the processes that are up, by index.
    fn up_admins(&self) -> Vec<(usize, SocketAddr)>;
    /// The supervisor is stopping (SIGTERM/SIGINT): not ready, whatever the processes say.
    fn stopping(&self) -> bool;
}

/// `GET /readyz` of the supervisor: 503 while it stops; else 200 when at least one process
/// that is up answers its own `/readyz` with 200 (a load balancer may still send clients
/// there), as `/healthz` is "ok" or "degraded" while one process serves.
pub async fn readyz<P: Process>(p: &P) -> (u16, String) {
    if p.stopping() {
        return (
            503,
            "{\"status\":\"draining\",\"reason\":\"stopping\"}\n".into(),
        );
    }
    let up = p.up_admins();
    let answers = futures_util::future::join_all(
        up.iter()
            .map(|(_, a)| request(*a, "GET", "/readyz", None, b"", Duration::from_secs(2))),
    )
    .await;
    let ready = answers.iter().filter(|a| matches!(a, Ok((200, _)))).count();
    let status = if ready > 0 { "ready" } else { "draining" };
    let body = json!({"status": status, "ready": ready, "up": up.len()});
    (if ready > 0 { 200 } else { 503 }, format!("{body}\n"))
}

/// `POST /api/drain` of the supervisor: every process that is up begins its drain (the same
/// `over`); 202 when one did, with the connections summed; 409 when every one was draining
/// already. The supervisor itself stays up (and not ready) until SIGTERM, as the processes do.
pub async fn drain<P: Process>(p: &P, over: Option<Duration>) -> (u16, String) {
    let key = p.api_key().unwrap_or_default();
    let up = p.up_admins();
    if up.is_empty() {
        return error(503, "no server process is up; nothing to drain");
    }
    let path = match over {
        Some(o) => format!("/api/drain?over={}", o.as_secs_f64()),
        None => "/api/drain".to_string(),
    };
    let answers =
        futures_util::future::join_all(up.iter().map(|(_, a)| call(*a, "POST", &path, key, b"")))
            .await;
    let (mut began, mut connections) = (0, 0u64);
    let mut each = Vec::new();
    for ((i, _), a) in up.iter().zip(answers) {
        let (status, v) = match a {
            Ok((s, b)) => (s, serde_json::from_str::<Value>(&b).unwrap_or(Value::Null)),
            Err(_) => (504, Value::Null),
        };
        if status == 202 {
            began += 1;
            connections += v["connections"].as_u64().unwrap_or(0);
        }
        each.push(json!({"process": i, "status": status, "answer": v}));
    }
    let body =
        json!({"draining": true, "began": began, "connections": connections, "processes": each});
    (if began > 0 { 202 } else { 409 }, format!("{body}\n"))
}

/// Why a request to a process's admin listener got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    /// The request never reached the process whole (refused connection, a write that failed):
    /// it cannot have acted on it, so another process may take it.
    NotSent,
    /// The request was sent but no answer came in time (a stopped or overloaded process):
    /// it may still act on it.
    NoAnswer,
}

/// The header that marks the supervisor's own scrapes of a process's `/metrics` and
/// `/healthz`, which the process leaves out of its `ws_api_requests_total` (they are not
/// traffic anyone sent; summed, they would grow with every scrape of the supervisor).
pub const INTERNAL_HEADER: &str = embedded_server::admin::INTERNAL_HEADER;

/// The supervisor's one HTTP client for its processes' admin listeners: `method path` with
/// `body` (and the API key when given), answered within `limit`: (status, body), or why not.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: &[u8],
    limit: Duration,
) -> Result<(u16, String), Failed> {
    let auth = key.map_or(String::new(), |k| format!("Authorization: Bearer {k}\r\n"));
    // Health and metrics are the supervisor's own polling; API calls are forwarded traffic.
    let internal = if key.is_none() {
        format!("{INTERNAL_HEADER}: 1\r\n")
    } else {
        String::new()
    };
    let send = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}{internal}\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).await.ok()?;
        s.write_all(body).await.ok()?;
        Some(s)
    };
    let deadline = tokio::time::Instant::now() + limit;
    let mut s = match tokio::time::timeout_at(deadline, send).await {
        Ok(Some(s)) => s,
        // A connect that cannot complete, or a write that stalls: the body is incomplete on
        // the other side (Content-Length), so the process cannot act on it.
        _ => return Err(Failed::NotSent),
    };
    let read = async {
        let mut r = Vec::new();
        s.read_to_end(&mut r).await.ok()?;
        let r = String::from_utf8_lossy(&r);
        let (head, body) = r.split_once("\r\n\r\n")?;
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, body.to_string()))
    };
    match tokio::time::timeout_at(deadline, read).await {
        Ok(Some(a)) => Ok(a),
        _ => Err(Failed::NoAnswer),
    }
}

/// An API request forwarded to a process (5 s to answer).
async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    key: &str,
    body: &[u8],
) -> Result<(u16, String), Failed> {
    request(addr, method, path, Some(key), body, Duration::from_secs(5)).await
}

/// A channel name as one path segment.
fn encode_segment(name: &str) -> String {
    let mut o = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

/// Answer an authorised API request for the supervisor `p`.
pub async fn answer<P: Process>(p: &P, c: ApiCall) -> (u16, String) {
    // The admin listener answered 403 already when no key is configured.
    let key = p.api_key().unwrap_or_default();
    let up = p.up_admins();
    if up.is_empty() {
        return error(503, "no server process is up; try again");
    }
    match &c.endpoint {
        Endpoint::Publish | Endpoint::Batch => {
            let path = if c.endpoint == Endpoint::Publish {
                "/api/publish"
            } else {
                "/api/batch"
            };
            // The first process that takes the request answers it. One that is gone (nothing
            // sent) is skipped; one that took the request and did not answer is NOT retried
            // elsewhere: it may still deliver, and a retry would deliver twice.
            for (i, addr) in up {
                match call(addr, "POST", path, key, &c.body).await {
                    Ok((status, body)) => {
                        return match serde_json::from_str::<Value>(&body) {
                            Ok(mut v) if v.is_object() => {
                                v["process"] = i.into();
                                (status, format!("{v}\n"))
                            }
                            _ => (status, body),
                        };
                    }
                    Err(Failed::NotSent) => continue,
                    Err(Failed::NoAnswer) => {
                        return error(
                            504,
                            &format!(
                                "server process {i} took the publish but did not answer within \
                                 5 s: it may or may not have been delivered; retry only if a \
                                 duplicate is acceptable (or make the message idempotent)"
                            ),
                        )
                    }
                }
            }
            error(
                503,
                "no server process is reachable; nothing was published; try again",
            )
        }
        Endpoint::Channels | Endpoint::Channel(_) => {
            let list = match &c.endpoint {
                Endpoint::Channels => match ListQuery::parse(&c.query) {
                    Ok(q) => Some(q),
                    Err(e) => return e,
                },
                _ => None,
            };
            let path = match (&c.endpoint, &list) {
                (Endpoint::Channel(name), _) => {
                    format!("/api/channels/{}", encode_segment(name))
                }
                (_, Some(q)) => format!("/api/channels?{}", q.to_query()),
                _ => "/api/channels".to_string(),
            };
            let answers = futures_util::future::join_all(
                up.iter().map(|(_, a)| call(*a, "GET", &path, key, b"")),
            )
            .await;
            let mut counts: BTreeMap<String, u64> = BTreeMap::new();
            let (mut answered, mut subscribers, mut total) = (0, 0u64, 0u64);
            let mut truncated = false;
            // With channel history: the most advanced process's position (they all hold the
            // supervisor's; one may still be delivering the latest).
            let mut position: Option<Value> = None;
            // With `--cluster` each process is a node that already counts the whole cluster:
            // merge their per-node views (a process's own count, fresh, over what the others
            // heard of it) instead of adding up totals that overlap.
            let (mut heard, mut own) = (BTreeMap::<String, u64>::new(), BTreeMap::new());
            for (status, body) in answers.into_iter().flatten() {
                let Ok(v) = serde_json::from_str::<Value>(&body) else {
                    continue;
                };
                if status != 200 {
                    // The same error from every process (a bad name, not the channels app).
                    return (status, body);
                }
                answered += 1;
                if let Some(o) = v["offset"].as_u64() {
                    if position
                        .as_ref()
                        .is_none_or(|p| p["offset"].as_u64() < Some(o))
                    {
                        position = Some(json!({
                            "offset": o, "epoch": v["epoch"], "history": v["history"],
                        }));
                    }
                }
                subscribers += v["subscribers"].as_u64().unwrap_or(0);
                if let (Some(me), Some(nodes)) = (v["node"].as_str(), v["nodes"].as_object()) {
                    own.insert(me.to_string(), v["local"].as_u64().unwrap_or(0));
                    for (id, n) in nodes {
                        heard.insert(id.clone(), n.as_u64().unwrap_or(0));
                    }
                }
                total += v["subscriptions"].as_u64().unwrap_or(0);
                truncated |= v["truncated"].as_bool().unwrap_or(false);
                if let Some(m) = v["channels"].as_object() {
                    for (name, n) in m {
                        *counts.entry(name.clone()).or_default() += n.as_u64().unwrap_or(0);
                    }
                }
            }
            if !own.is_empty() {
                heard.extend(own);
                subscribers = heard.values().sum();
            }
            let v = match &c.endpoint {
                Endpoint::Channel(name) => {
                    let mut v = json!({
                        "channel": name, "subscribers": subscribers, "processes": answered,
                    });
                    if let Some(Value::Object(p)) = position {
                        v.as_object_mut().expect("an object").extend(p);
                    }
                    v
                }
                _ => {
                    // Each process listed its first `limit` names after the cursor, so the
                    // first `limit` of their union are exactly the whole's (a name in it is
                    // in every page of a process that has it): exact counts, one cursor.
                    let limit = list.as_ref().map_or(usize::MAX, |q| q.limit);
                    truncated |= counts.len() > limit;
                    let counts: BTreeMap<String, u64> = counts.into_iter().take(limit).collect();
                    let mut v = json!({
                        "channels": counts, "subscriptions": total, "processes": answered,
                        "truncated": truncated,
                    });
                    if truncated {
                        if let Some(last) = counts.keys().next_back() {
                            v["next"] = last.clone().into();
                        }
                    }
                    v
                }
            };
            (200, format!("{v}\n"))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn channel_names_become_one_path_segment() {
        assert_eq!(super::encode_segment("news.eu"), "news.eu");
        assert_eq!(super::encode_segment("a/b c?"), "a%2Fb%20c%3F");
    }
}
