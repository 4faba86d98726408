//! The HTTP/1.1 upgrade (RFC 6455 section 4.2): validate the request, pick a subprotocol,
//! compute Sec-WebSocket-Accept, or refuse with the status the RFC asks for.
//!
//! A pure function of the request's bytes and the few settings it reads ([`Settings`]): no
//! socket, no server configuration, so every case is a unit test and the fuzzer drives it
//! directly. Reading the socket, the abuse limits and the application's say are the
//! connection's acceptance (accept/upgrade.rs), which calls [`respond`].

use crate::deflate::DeflateSettings;
use crate::metrics::Reject;
use base64::Engine;
use sha1::{Digest, Sha1};

const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// A request that became a WebSocket.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    /// The 101 response to write.
    pub response: Vec<u8>,
    /// The request's path (with its query).
    pub path: String,
    /// The subprotocol chosen from the configured list, if any.
    pub protocol: Option<String>,
    /// Sec-WebSocket-Extensions offers, for the extension negotiation.
    pub extensions: Vec<String>,
    /// permessage-deflate parameters, when negotiated.
    pub deflate: Option<crate::deflate::Agreed>,
    /// The Sec-WebSocket-Accept value.
    pub accept: String,
}

impl Accepted {
    /// The 101 response answering with `protocol` instead of the configured choice (the
    /// application's `on_upgrade` chose it).
    pub fn response_with(&self, protocol: Option<&str>) -> Vec<u8> {
        switching(&self.accept, protocol, self.deflate.as_ref())
    }
}

fn switching(
    accept: &str,
    protocol: Option<&str>,
    deflate: Option<&crate::deflate::Agreed>,
) -> Vec<u8> {
    let mut response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n"
    );
    if let Some(p) = protocol {
        response.push_str(&format!("Sec-WebSocket-Protocol: {p}\r\n"));
    }
    if let Some(d) = deflate {
        response.push_str(&format!("Sec-WebSocket-Extensions: {}\r\n", d.response));
    }
    response.push_str("\r\n");
    response.into_bytes()
}

/// A refused request: why (for metrics) and the HTTP response to write before closing.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    /// Why (the metrics label).
    pub reason: Reject,
    /// The HTTP response to write.
    pub response: Vec<u8>,
}

/// What the handshake reads of the server's configuration, borrowed from it (the server builds
/// one from its `ServerConfig` for each upgrade; `&ServerConfig` converts into it).
#[derive(Debug, Clone, Copy)]
pub struct Settings<'a> {
    /// Origins allowed to upgrade (any case); empty: any origin, or none.
    pub allowed_origins: &'a [String],
    /// Subprotocols the server speaks, in its order of preference; empty: none is chosen.
    pub subprotocols: &'a [String],
    /// permessage-deflate's settings for the negotiation.
    pub deflate: &'a DeflateSettings,
}

/// Where the request header ends (after "\r\n\r\n"), if it has arrived.
pub fn header_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// Sec-WebSocket-Accept for a Sec-WebSocket-Key (RFC 6455 4.2.2).
pub fn accept_key(key: &str) -> String {
    let mut h = Sha1::new();
    h.update(key.as_bytes());
    h.update(GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(h.finalize())
}

pub use crate::http::error as http_error;

/// The most items of one list-valued field (`Sec-WebSocket-Protocol`, `-Extensions`,
/// `Connection`, `Upgrade`, every line of it together) that are read; later ones are ignored.
/// Real clients offer a handful; 64 leaves room for any of them.
pub const MAX_LIST_ITEMS: usize = 64;

/// The items of every `name` field, trimmed, empty ones skipped, at most [`MAX_LIST_ITEMS`].
pub fn list_items<'h>(
    headers: &'h [httparse::Header<'h>],
    name: &'static str,
) -> impl Iterator<Item = &'h str> + 'h {
    headers
        .iter()
        .filter(move |h| h.name.eq_ignore_ascii_case(name))
        .filter_map(|h| std::str::from_utf8(h.value).ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .take(MAX_LIST_ITEMS)
}

/// Decide on a complete request header with `settings` (a [`Settings`], or anything that
/// converts into one, such as `&ServerConfig`). `full` means max_connections is reached.
pub fn respond<'a>(
    req: &[u8],
    settings: impl Into<Settings<'a>>,
    full: bool,
) -> Result<Accepted, Refused> {
    let cfg: Settings<'a> = settings.into();
    let bad = |msg: &str| Refused {
        reason: Reject::BadRequest,
        response: http_error(400, "Bad Request", "", &format!("{msg}\n")),
    };
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Request::new(&mut headers);
    match r.parse(req) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(bad("incomplete request")),
        Err(e) => return Err(bad(&format!("malformed request: {e}"))),
    }
    if r.method != Some("GET") {
        return Err(Refused {
            reason: Reject::BadRequest,
            response: http_error(
                405,
                "Method Not Allowed",
                "Allow: GET\r\n",
                "a WebSocket upgrade is a GET\n",
            ),
        });
    }
    if r.version != Some(1) {
        return Err(bad("a WebSocket upgrade needs HTTP/1.1"));
    }
    let get = |name: &str| -> Option<&str> {
        r.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
            .map(str::trim)
    };
    // List-valued fields, read lazily and at most MAX_LIST_ITEMS items each: a client that
    // sends thousands of items (0.33 us each when they were all copied) buys no more work.
    let all = |name: &'static str| list_items(r.headers, name);
    // Fields that carry one value must come once: with two `Sec-WebSocket-Key`s the accept key
    // would answer only one of them, with two versions the one we check may not be the one the
    // client speaks, and two `Host`s are a request smuggling vector (RFC 6455 11.3.1/11.3.5,
    // RFC 7230 5.4). Lists (Upgrade, Connection, Sec-WebSocket-Protocol and -Extensions) may
    // legally repeat: their values are combined.
    for name in ["Host", "Sec-WebSocket-Key", "Sec-WebSocket-Version"] {
        match r
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .count()
        {
            0 if name == "Host" => {
                return Err(bad("the request has no Host header (RFC 7230 5.4)"))
            }
            0 | 1 => {}
            _ => return Err(bad(&format!("{name} appears more than once"))),
        }
    }
    let upgrade = all("Upgrade").any(|u| u.eq_ignore_ascii_case("websocket"));
    let connection = all("Connection").any(|c| c.eq_ignore_ascii_case("upgrade"));
    if !upgrade || !connection {
        return Err(Refused {
            reason: Reject::BadRequest,
            response: http_error(
                426,
                "Upgrade Required",
                "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n",
                "this endpoint speaks WebSocket only\n",
            ),
        });
    }
    if get("Sec-WebSocket-Version") != Some("13") {
        return Err(Refused {
            reason: Reject::Version,
            response: http_error(
                426,
                "Upgrade Required",
                "Sec-WebSocket-Version: 13\r\n",
                "only WebSocket version 13 is supported\n",
            ),
        });
    }
    let key = match get("Sec-WebSocket-Key") {
        Some(k)
            if base64::engine::general_purpose::STANDARD
                .decode(k)
                .is_ok_and(|d| d.len() == 16) =>
        {
            k.to_string()
        }
        _ => return Err(bad("Sec-WebSocket-Key must be 16 bytes in base64")),
    };
    if !cfg.allowed_origins.is_empty() {
        let ok = get("Origin").is_some_and(|o| {
            cfg.allowed_origins
                .iter()
                .any(|a| a.eq_ignore_ascii_case(o))
        });
        if !ok {
            return Err(Refused {
                reason: Reject::Origin,
                response: http_error(403, "Forbidden", "", "origin not allowed\n"),
            });
        }
    }
    if full {
        return Err(Refused {
            reason: Reject::Full,
            response: http_error(
                503,
                "Service Unavailable",
                "Retry-After: 1\r\n",
                "connection limit reached\n",
            ),
        });
    }
    // With no subprotocol configured there is nothing to choose: the offer is not read at all.
    let protocol = if cfg.subprotocols.is_empty() {
        None
    } else {
        let offered: Vec<&str> = all("Sec-WebSocket-Protocol").collect();
        cfg.subprotocols
            .iter()
            .find(|p| offered.iter().any(|o| o == *p))
            .cloned()
    };
    let extensions: Vec<String> = all("Sec-WebSocket-Extensions")
        .map(str::to_string)
        .collect();
    let deflate = crate::deflate::negotiate(&extensions, cfg.deflate);
    let accept = accept_key(&key);
    Ok(Accepted {
        response: switching(&accept, protocol.as_deref(), deflate.as_ref()),
        accept,
        path: r.path.unwrap_or("/").to_string(),
        protocol,
        extensions,
        deflate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The settings, owned (the server's come borrowed from its configuration).
    #[derive(Default)]
    struct Cfg {
        allowed_origins: Vec<String>,
        subprotocols: Vec<String>,
        deflate: DeflateSettings,
    }

    impl<'a> From<&'a Cfg> for Settings<'a> {
        fn from(c: &'a Cfg) -> Settings<'a> {
            Settings {
                allowed_origins: &c.allowed_origins,
                subprotocols: &c.subprotocols,
                deflate: &c.deflate,
            }
        }
    }

    /// An upgrade offering `items` subprotocols p0, p1, ... in one field.
    fn offering(items: usize) -> String {
        let list: Vec<String> = (0..items).map(|i| format!("p{i}")).collect();
        format!(
            "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Protocol: {}\r\n\r\n",
            list.join(",")
        )
    }

    #[test]
    fn list_fields_are_read_up_to_their_bound() {
        let cfg = |p: &str| Cfg {
            subprotocols: vec![p.into()],
            ..Cfg::default()
        };
        let req = offering(200);
        let chosen = |p: &str| respond(req.as_bytes(), &cfg(p), false).unwrap().protocol;
        assert_eq!(chosen("p3").as_deref(), Some("p3"));
        assert_eq!(
            chosen(&format!("p{}", MAX_LIST_ITEMS - 1)).as_deref(),
            Some("p63")
        );
        assert_eq!(
            chosen(&format!("p{MAX_LIST_ITEMS}")),
            None,
            "past the bound"
        );
    }

    /// Regression: a 3,900-item Sec-WebSocket-Protocol cost 1,299 us per upgrade against 76 us
    /// (every item copied into a String) with no subprotocol configured. Now the offer is not
    /// read then: the long request costs what the same bytes cost in a field nobody reads.
    /// The best of several runs of each, compared, so a busy machine does not decide.
    #[test]
    fn a_long_subprotocol_offer_costs_nothing_without_subprotocols() {
        let cfg = Cfg::default();
        let long = offering(3_900);
        let short = long.replace("Sec-WebSocket-Protocol:", "X-Unread-Filler:");
        let best = |req: &str| {
            (0..30)
                .map(|_| {
                    let t = std::time::Instant::now();
                    for _ in 0..20 {
                        assert!(respond(req.as_bytes(), &cfg, false).is_ok());
                    }
                    t.elapsed()
                })
                .min()
                .unwrap()
        };
        let (l, s) = (best(&long), best(&short));
        let ratio = l.as_secs_f64() / s.as_secs_f64();
        eprintln!("3,900 offers: {l:?} per 20, the same bytes unread: {s:?} per 20 (x{ratio:.2})");
        assert!(
            ratio < 1.6,
            "a long offer costs x{ratio:.2} the same bytes unread"
        );
    }

    const REQ: &str = "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: chat, superchat\r\nOrigin: https://a.example\r\n\r\n";

    #[test]
    fn rfc_example_accept() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        let cfg = Cfg {
            subprotocols: vec!["superchat".into()],
            ..Cfg::default()
        };
        let a = respond(REQ.as_bytes(), &cfg, false).unwrap();
        let text = String::from_utf8(a.response).unwrap();
        assert!(text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"));
        assert!(text.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
        assert!(text.contains("Sec-WebSocket-Protocol: superchat\r\n"));
        assert_eq!(a.path, "/chat");
    }

    fn status(req: &str, cfg: &Cfg, full: bool) -> u16 {
        match respond(req.as_bytes(), cfg, full) {
            Ok(_) => 101,
            Err(r) => String::from_utf8(r.response).unwrap()[9..12]
                .parse()
                .unwrap(),
        }
    }

    #[test]
    fn refusals() {
        let cfg = Cfg::default();
        assert_eq!(
            status("GET / HTTP/1.1\r\nHost: x\r\n\r\n", &cfg, false),
            426
        );
        assert_eq!(
            status(&REQ.replace("Version: 13", "Version: 8"), &cfg, false),
            426
        );
        assert_eq!(
            status(
                &REQ.replace("dGhlIHNhbXBsZSBub25jZQ==", "short"),
                &cfg,
                false
            ),
            400
        );
        assert_eq!(status(&REQ.replace("GET", "POST"), &cfg, false), 405);
        assert_eq!(
            status(&REQ.replace("HTTP/1.1", "HTTP/1.0"), &cfg, false),
            400
        );
        assert_eq!(status("\x16\x03\x01garbage\r\n\r\n", &cfg, false), 400);
        assert_eq!(status(&REQ.replace("Host: x\r\n", ""), &cfg, false), 400);
        assert_eq!(
            status(&REQ.replace("Host: x\r\n", "Host:\r\n"), &cfg, false),
            101
        );
        for dup in [
            "Host: y\r\n",
            "Sec-WebSocket-Key: AQIDBAUGBwgJCgsMDQ4PEA==\r\n",
            "sec-websocket-version: 8\r\n",
        ] {
            assert_eq!(
                status(
                    &REQ.replace("\r\n\r\n", &format!("\r\n{dup}\r\n")),
                    &cfg,
                    false
                ),
                400,
                "{dup}"
            );
        }
        let lists = REQ.replace(
            "\r\n\r\n",
            "\r\nSec-WebSocket-Protocol: x\r\nSec-WebSocket-Extensions: x\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(status(&lists, &cfg, false), 101);
        assert_eq!(status(REQ, &cfg, true), 503);
        let only_b = Cfg {
            allowed_origins: vec!["https://b.example".into()],
            ..Cfg::default()
        };
        assert_eq!(status(REQ, &only_b, false), 403);
        let only_a = Cfg {
            allowed_origins: vec!["https://a.example".into()],
            ..Cfg::default()
        };
        assert_eq!(status(REQ, &only_a, false), 101);
    }
}
