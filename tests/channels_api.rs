//! `serve --app channels` for backends: the HTTP publish API on the admin listener (API key),
//! JWT auth on upgrade, presence, the subscription cap, across Redis nodes and through the
//! `--processes` supervisor. Real `wstune serve` processes, real sockets; the clients are code
//! we did not write (curl for HTTP, tokio-tungstenite for WebSocket, jsonwebtoken mints the
//! tokens).

use crate::common;

use common::tungstenite::{next_text, Ws};
use common::ws::status_of;
use common::{free_port, Served};
use futures_util::SinkExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

const KEY: &str = "k3y-0f-the-backend-Zq81xv";
const SECRET: &str = "a-shared-jwt-secret-of-at-least-32-bytes";

/// A temporary directory holding the key and secret files (and curl's header file).
fn secrets() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("api-key"), format!("{KEY}\n")).unwrap();
    std::fs::write(d.path().join("jwt-secret"), format!("{SECRET}\n")).unwrap();
    // One shared secret file (the server warns), one private (it does not).
    use std::os::unix::fs::PermissionsExt;
    let mode = |n: &str, m: u32| {
        std::fs::set_permissions(d.path().join(n), std::fs::Permissions::from_mode(m)).unwrap()
    };
    mode("api-key", 0o644);
    mode("jwt-secret", 0o600);
    std::fs::write(
        d.path().join("auth-header"),
        format!("Authorization: Bearer {KEY}\n"),
    )
    .unwrap();
    std::fs::write(
        d.path().join("wrong-header"),
        "Authorization: Bearer not-the-key-at-all-0000\n",
    )
    .unwrap();
    d
}

fn path(d: &tempfile::TempDir, name: &str) -> String {
    d.path().join(name).to_str().unwrap().to_string()
}

/// curl METHOD http://127.0.0.1:PORT/PATH with `body` (from a file) and the headers of
/// `header_file` (so the key is on curl's command line neither): (status, body).
fn curl(
    port: u16,
    method: &str,
    url_path: &str,
    header_file: Option<&Path>,
    body: &str,
) -> (u16, String) {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let body_file = std::env::temp_dir().join(format!(
        "wstune-channels-api-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::write(&body_file, body).unwrap();
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "--max-time",
        "10",
        "-X",
        method,
        "-o",
        "-",
        "-w",
        "\n%{http_code}",
    ]);
    if let Some(h) = header_file {
        cmd.arg("-H").arg(format!("@{}", h.display()));
    }
    if method == "POST" {
        cmd.args(["-H", "Content-Type: application/json", "--data-binary"]);
        cmd.arg(format!("@{}", body_file.display()));
    }
    cmd.arg(format!("http://127.0.0.1:{port}{url_path}"));
    let out = common::run_bounded(&mut cmd, Duration::from_secs(15));
    let _ = std::fs::remove_file(&body_file);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    let code = code
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("curl: {text} {}", String::from_utf8_lossy(&out.stderr)));
    (code, body.to_string())
}

fn publish(s: &Served, d: &tempfile::TempDir, body: &str) -> (u16, String) {
    let h = d.path().join("auth-header");
    curl(s.admin, "POST", "/api/publish", Some(&h), body)
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn token(claims: serde_json::Value, secret: &str) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()).unwrap(),
    )
    .unwrap()
}

/// Connect with `token` in the query (Some) or none: the socket, or the refusal's
/// (status, body).
async fn connect(port: u16, query: &str, bearer: Option<&str>) -> Result<Ws, (u16, String)> {
    let mut req = format!("ws://127.0.0.1:{port}/{query}")
        .into_client_request()
        .unwrap();
    if let Some(t) = bearer {
        req.headers_mut()
            .insert("Authorization", format!("Bearer {t}").parse().unwrap());
    }
    match tokio_tungstenite::connect_async(req).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => Err((
            r.status().as_u16(),
            String::from_utf8_lossy(r.body().as_deref().unwrap_or_default()).into_owned(),
        )),
        Err(e) => panic!("upgrade failed without an HTTP answer: {e}"),
    }
}

async fn send(ws: &mut Ws, text: &str) -> String {
    ws.send(Message::text(text)).await.unwrap();
    next_text(ws).await.expect("a reply")
}

async fn subscribe(ws: &mut Ws, channel: &str) -> String {
    send(
        ws,
        &format!(r#"{{"op":"subscribe","channel":"{channel}"}}"#),
    )
    .await
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_publish_with_the_key_reaches_subscribers_and_without_it_gets_401() {
    let d = secrets();
    // Debug logs (every refusal and connection), so "the key is in no log line" covers them.
    let s = common::serve(&[
        "--profile",
        "10k",
        "--app",
        "channels",
        "--api-key-file",
        &path(&d, "api-key"),
        "--log-level",
        "debug",
        "--log-format",
        "json",
    ]);
    let mut sub = connect(s.port, "", None).await.unwrap();
    assert!(subscribe(&mut sub, "a").await.contains("subscribed"));
    let (code, body) = publish(&s, &d, r#"{"channel":"a","data":{"px":101}}"#);
    assert_eq!(
        (code, json(&body)),
        (
            200,
            serde_json::json!({"queued": 1, "dropped": 0, "delivered": 1})
        )
    );
    assert_eq!(
        next_text(&mut sub).await.unwrap(),
        r#"{"channel":"a","data":{"px":101}}"#
    );
    // Batch: every message, in order; queued (and its old name, delivered) counts each copy.
    let h = d.path().join("auth-header");
    let (code, body) = curl(
        s.admin,
        "POST",
        "/api/batch",
        Some(&h),
        r#"{"messages":[{"channel":"a","data":1},{"channel":"nobody","data":2},{"channel":"a","data":3}]}"#,
    );
    assert_eq!(
        (code, json(&body)),
        (
            200,
            serde_json::json!({"published": 3, "queued": 2, "dropped": 0, "delivered": 2})
        )
    );
    assert_eq!(
        next_text(&mut sub).await.unwrap(),
        r#"{"channel":"a","data":1}"#
    );
    assert_eq!(
        next_text(&mut sub).await.unwrap(),
        r#"{"channel":"a","data":3}"#
    );
    // Presence.
    let (code, body) = curl(s.admin, "GET", "/api/channels", Some(&h), "");
    assert_eq!(code, 200);
    assert_eq!(json(&body)["channels"], serde_json::json!({"a": 1}));
    let (_, body) = curl(s.admin, "GET", "/api/channels/a", Some(&h), "");
    assert_eq!(json(&body)["subscribers"], 1);
    // Names are percent-decoded from the path (a `+` stays a `+`).
    let mut odd = connect(s.port, "", None).await.unwrap();
    assert!(subscribe(&mut odd, "x+y/z").await.contains("subscribed"));
    for p in ["/api/channels/x%2By%2Fz", "/api/channels/x+y%2Fz"] {
        let (_, body) = curl(s.admin, "GET", p, Some(&h), "");
        assert_eq!(json(&body)["subscribers"], 1, "{p}: {body}");
    }
    drop(odd);
    // Without the key, or with another: 401, and nothing is delivered.
    let (code, body) = curl(
        s.admin,
        "POST",
        "/api/publish",
        None,
        r#"{"channel":"a","data":"x"}"#,
    );
    assert!(
        code == 401 && body.contains("API key required"),
        "{code} {body}"
    );
    let wrong = d.path().join("wrong-header");
    let (code, body) = curl(
        s.admin,
        "POST",
        "/api/publish",
        Some(&wrong),
        r#"{"channel":"a","data":"x"}"#,
    );
    assert!(
        code == 401 && body.contains("wrong API key"),
        "{code} {body}"
    );
    let (code, _) = curl(s.admin, "GET", "/api/channels", None, "");
    assert_eq!(code, 401);
    // X-API-Key works as well as Authorization.
    let body = r#"{"channel":"a","data":"y"}"#;
    let r = common::http(
        s.admin,
        format!(
            "POST /api/publish HTTP/1.1\r\nHost: x\r\nX-API-Key: {KEY}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    );
    assert_eq!(status_of(&r), 200, "{r}");
    assert_eq!(
        next_text(&mut sub).await.unwrap(),
        r#"{"channel":"a","data":"y"}"#
    );
    // Counted by route and status.
    assert_eq!(
        s.metric(r#"ws_api_requests_total{route="publish",code="401"}"#),
        2.0
    );
    assert_eq!(
        s.metric(r#"ws_api_requests_total{route="publish",code="200"}"#),
        2.0
    );
    assert_eq!(
        s.metric(r#"ws_api_requests_total{route="channels",code="401"}"#),
        1.0
    );
    // The key is in no process argument and no log line.
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", s.pid())).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains(KEY));
    assert!(
        s.log_text().contains(r#""level":"DEBUG""#),
        "debug events are logged: {}",
        s.log_text()
    );
    assert!(!s.log_text().contains(KEY), "{}", s.log_text());
    assert!(
        s.log_text().contains("api key"),
        "the settings table says a key is set"
    );
    assert!(
        s.log_text()
            .contains("every local user can read this secret"),
        "a world-readable key file is warned about: {}",
        s.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_for_a_gets_a_and_is_refused_b_and_bad_tokens_get_401() {
    let d = secrets();
    let s = common::serve_env(
        &[
            "--profile",
            "10k",
            "--app",
            "channels",
            "--auth-secret-file",
            &path(&d, "jwt-secret"),
            "--log-level",
            "debug",
            "--log-format",
            "json",
        ],
        // The API key from the environment this time.
        &[("WSTUNE_API_KEY", Some(KEY))],
    );
    let t = token(
        serde_json::json!({"exp": now() + 600, "channels": ["a", "news.*"]}),
        SECRET,
    );
    // The token in the query (browsers) ...
    let mut c = connect(s.port, &format!("?token={t}"), None).await.unwrap();
    assert!(subscribe(&mut c, "a").await.contains("subscribed"));
    assert!(subscribe(&mut c, "news.eu").await.contains("subscribed"));
    let refused = json(&subscribe(&mut c, "b").await);
    assert_eq!(refused["op"], "error");
    assert_eq!(refused["channel"], "b");
    assert!(
        refused["error"].as_str().unwrap().contains("not allowed"),
        "{refused}"
    );
    // ... publishing over the WebSocket needs a `publish` claim this token lacks ...
    let refused = json(&send(&mut c, r#"{"op":"publish","channel":"a","data":1}"#).await);
    assert_eq!(refused["op"], "error");
    // ... and the connection is still open: a's messages (from a backend) arrive, b's do not.
    let (code, _) = publish(&s, &d, r#"{"channel":"b","data":"not for you"}"#);
    assert_eq!(code, 200);
    let (code, _) = publish(&s, &d, r#"{"channel":"a","data":"for you"}"#);
    assert_eq!(code, 200);
    assert_eq!(
        next_text(&mut c).await.unwrap(),
        r#"{"channel":"a","data":"for you"}"#
    );
    // The token in the Authorization header, with a publish claim.
    let tp = token(
        serde_json::json!({"exp": now() + 600, "channels": ["a"], "publish": ["a"]}),
        SECRET,
    );
    let mut p = connect(s.port, "", Some(&tp)).await.unwrap();
    p.send(Message::text(
        r#"{"op":"publish","channel":"a","data":"ws"}"#,
    ))
    .await
    .unwrap();
    assert_eq!(
        next_text(&mut c).await.unwrap(),
        r#"{"channel":"a","data":"ws"}"#
    );
    // Refused upgrades: 401 with a short reason, each counted.
    let expired = token(
        serde_json::json!({"exp": now() - 3600, "channels": ["a"]}),
        SECRET,
    );
    let forged = token(
        serde_json::json!({"exp": now() + 600, "channels": ["*"]}),
        "another-secret-of-thirty-two-bytes-or-more",
    );
    for (query, reason, body) in [
        (format!("?token={expired}"), "expired", "token expired"),
        (
            "?token=not.a.jwt".to_string(),
            "malformed",
            "malformed token",
        ),
        ("?token=%%%".to_string(), "malformed", "malformed token"),
        (
            format!("?token={forged}"),
            "bad_signature",
            "bad token signature",
        ),
        (String::new(), "missing", "token required"),
    ] {
        let (status, text) = connect(s.port, &query, None)
            .await
            .err()
            .unwrap_or_else(|| panic!("{reason} accepted"));
        assert_eq!(status, 401, "{reason}");
        assert!(text.contains(body), "{reason}: {text}");
    }
    assert_eq!(
        s.metric(r#"ws_channels_auth_failures_total{reason="expired"}"#),
        1.0
    );
    assert_eq!(
        s.metric(r#"ws_channels_auth_failures_total{reason="malformed"}"#),
        2.0
    );
    assert_eq!(
        s.metric(r#"ws_channels_auth_failures_total{reason="bad_signature"}"#),
        1.0
    );
    assert_eq!(
        s.metric(r#"ws_channels_auth_failures_total{reason="missing"}"#),
        1.0
    );
    assert_eq!(s.metric(r#"ws_channels_denied_total{op="subscribe"}"#), 1.0);
    assert_eq!(s.metric(r#"ws_channels_denied_total{op="publish"}"#), 1.0);
    // The server kept serving: the first client still gets its messages.
    let (code, _) = publish(&s, &d, r#"{"channel":"news.eu","data":2}"#);
    assert_eq!(code, 200);
    assert_eq!(
        next_text(&mut c).await.unwrap(),
        r#"{"channel":"news.eu","data":2}"#
    );
    // The secret is in no process argument and no log line.
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", s.pid())).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains(SECRET));
    assert!(
        s.log_text().contains(r#""reason":"bad_signature""#),
        "the refusals are logged with their reason (at debug): {}",
        s.log_text()
    );
    // RFC 6750: the 401 names the scheme.
    let r = common::http(
        s.port,
        "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    );
    assert!(r.starts_with("HTTP/1.1 401"), "{r}");
    assert!(
        r.contains("WWW-Authenticate: Bearer error=\"invalid_token\""),
        "{r}"
    );
    assert!(!s.log_text().contains(SECRET) && !s.log_text().contains(KEY));
    assert!(!s.log_text().contains(&t), "no token in the log");
    assert!(
        !s.log_text().contains("every local user"),
        "a 0600 secret is not warned about"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_is_closed_1008_when_its_token_expires() {
    let d = secrets();
    let s = common::serve(&[
        "--profile",
        "10k",
        "--app",
        "channels",
        "--auth-secret-file",
        &path(&d, "jwt-secret"),
    ]);
    // Valid for about 4 s more thanks to the 5 s leeway; closed once exp + leeway + its share
    // of the 10 s spread passes.
    let t = token(
        serde_json::json!({"exp": now() - 1, "channels": ["a"]}),
        SECRET,
    );
    let mut c = connect(s.port, &format!("?token={t}"), None).await.unwrap();
    assert!(subscribe(&mut c, "a").await.contains("subscribed"));
    let started = std::time::Instant::now();
    use futures_util::StreamExt;
    let close = loop {
        match tokio::time::timeout(Duration::from_secs(25), c.next()).await {
            Ok(Some(Ok(Message::Close(f)))) => break f,
            Ok(Some(Ok(_))) => continue,
            other => panic!("no close frame: {other:?}"),
        }
    };
    let f = close.expect("a close code");
    assert_eq!(u16::from(f.code), 1008);
    assert_eq!(f.reason.as_str(), "token expired");
    assert!(started.elapsed() < Duration::from_secs(20));
    s.wait_metric(
        "ws_channels_token_expired_closes_total",
        Duration::from_secs(5),
        |v| v == 1.0,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_errors_counted_and_the_server_keeps_serving() {
    let d = secrets();
    let s = common::serve(&[
        "--profile",
        "10k",
        "--app",
        "channels",
        "--api-key-file",
        &path(&d, "api-key"),
        "--max-message",
        "4096",
        "--max-frame",
        "4096",
        "--max-subscriptions",
        "2",
    ]);
    let mut sub = connect(s.port, "", None).await.unwrap();
    assert!(subscribe(&mut sub, "a").await.contains("subscribed"));
    // Missing fields name the field.
    let (code, body) = publish(&s, &d, r#"{"data":1}"#);
    assert_eq!(
        (code, json(&body)["field"].as_str()),
        (400, Some("channel")),
        "{body}"
    );
    let (code, body) = publish(&s, &d, r#"{"channel":"a"}"#);
    assert_eq!(
        (code, json(&body)["field"].as_str()),
        (400, Some("data")),
        "{body}"
    );
    let (code, body) = publish(&s, &d, "{not json");
    assert!(code == 400 && body.contains("not JSON"), "{body}");
    // Oversized: 413, answered from the length alone.
    let big = format!(r#"{{"channel":"a","data":"{}"}}"#, "x".repeat(10_000));
    let (code, body) = publish(&s, &d, &big);
    assert!(code == 413 && body.contains("4096"), "{code} {body}");
    // The same sent at once by a client that does not wait for 100-continue: the 413 still
    // arrives (the unread body must not turn the close into a reset that destroys it).
    let r = common::http(
        s.admin,
        format!(
            "POST /api/publish HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
             Content-Length: {}\r\n\r\n{big}",
            big.len()
        ),
    );
    assert_eq!(status_of(&r), 413, "{r}");
    // No length, chunked: 411.
    let auth = format!("Authorization: Bearer {KEY}\r\n");
    let r = common::http(
        s.admin,
        format!("POST /api/publish HTTP/1.1\r\nHost: x\r\n{auth}\r\n"),
    );
    assert_eq!(status_of(&r), 411, "{r}");
    let r = common::http(
        s.admin,
        format!("POST /api/publish HTTP/1.1\r\nHost: x\r\n{auth}Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
    );
    assert!(status_of(&r) == 411 && r.contains("Content-Length"), "{r}");
    // Wrong method, unknown route, garbage.
    let (code, _) = curl(
        s.admin,
        "GET",
        "/api/publish",
        Some(&d.path().join("auth-header")),
        "",
    );
    assert_eq!(code, 405);
    let (code, _) = curl(
        s.admin,
        "GET",
        "/api/nothing",
        Some(&d.path().join("auth-header")),
        "",
    );
    assert_eq!(code, 404);
    assert_eq!(
        status_of(&common::http(s.admin, "\x16\x03\x01garbage\r\n\r\n")),
        400
    );
    // The subscription cap: the third channel is refused with an error op, counted.
    assert!(subscribe(&mut sub, "b").await.contains("subscribed"));
    let refused = json(&subscribe(&mut sub, "c").await);
    assert_eq!(refused["op"], "error");
    assert!(refused["error"]
        .as_str()
        .unwrap()
        .contains("too many subscriptions"));
    // Presence pages: a prefix, a limit, a cursor; a path name that is not UTF-8 is a 400.
    let h = d.path().join("auth-header");
    let (code, body) = curl(s.admin, "GET", "/api/channels?limit=1", Some(&h), "");
    let v = json(&body);
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        (
            v["channels"].clone(),
            v["truncated"].as_bool(),
            v["next"].as_str()
        ),
        (serde_json::json!({"a": 1}), Some(true), Some("a")),
        "{body}"
    );
    let (_, body) = curl(s.admin, "GET", "/api/channels?after=a", Some(&h), "");
    assert_eq!(
        json(&body)["channels"],
        serde_json::json!({"b": 1}),
        "{body}"
    );
    let (_, body) = curl(s.admin, "GET", "/api/channels?prefix=z", Some(&h), "");
    assert_eq!(json(&body)["channels"], serde_json::json!({}), "{body}");
    let (code, body) = curl(s.admin, "GET", "/api/channels/%ff%fe", Some(&h), "");
    assert!(code == 400 && body.contains("UTF-8"), "{code} {body}");
    let (code, body) = curl(s.admin, "GET", "/api/channels/a+b", Some(&h), "");
    assert!(code == 200 && body.contains(r#""channel":"a+b""#), "{body}");
    // Bad WebSocket input: an error op naming the problem, counted by reason.
    let long = format!(r#"{{"op":"subscribe","channel":"{}"}}"#, "n".repeat(300));
    for (msg, says) in [
        ("not json", "not a channels message"),
        (r#"{"op":"subscribe"}"#, "\"channel\" is required"),
        (long.as_str(), "too long: at most 256 bytes"),
        (r#"{"op":"dance","channel":"a"}"#, "unknown op 'dance'"),
    ] {
        let r = json(&send(&mut sub, msg).await);
        assert_eq!(r["op"], "error", "{msg}");
        assert!(r["error"].as_str().unwrap().contains(says), "{msg}: {r}");
    }
    for (reason, n) in [("bad_json", 1.0), ("bad_name", 2.0), ("unknown_op", 1.0)] {
        assert_eq!(
            s.metric(&format!(
                r#"ws_channels_protocol_errors_total{{reason="{reason}"}}"#
            )),
            n,
            "{reason}"
        );
    }
    // Still serving: a good publish is delivered.
    let (code, _) = publish(&s, &d, r#"{"channel":"a","data":"ok"}"#);
    assert_eq!(code, 200);
    assert_eq!(
        next_text(&mut sub).await.unwrap(),
        r#"{"channel":"a","data":"ok"}"#
    );
    assert_eq!(
        s.metric(r#"ws_api_requests_total{route="publish",code="400"}"#),
        3.0
    );
    assert_eq!(
        s.metric(r#"ws_api_requests_total{route="publish",code="413"}"#),
        2.0
    );
    assert_eq!(
        s.metric(r#"ws_api_requests_total{route="publish",code="411"}"#),
        2.0
    );
    assert_eq!(
        s.metric(r#"ws_api_requests_total{route="publish",code="405"}"#),
        1.0
    );
    assert_eq!(
        s.metric(r#"ws_api_requests_total{route="api_other",code="404"}"#),
        1.0
    );
    assert_eq!(s.metric("ws_channels_subscription_cap_total"), 1.0);

    // A server that does not run the channels app: 409 naming the fix.
    let echo = common::serve(&["--profile", "10k", "--api-key-file", &path(&d, "api-key")]);
    let (code, body) = publish(&echo, &d, r#"{"channel":"a","data":1}"#);
    assert!(
        code == 409 && body.contains("--app channels"),
        "{code} {body}"
    );
    assert_eq!(
        echo.metric(r#"ws_api_requests_total{route="publish",code="409"}"#),
        1.0
    );
    // No key configured: the API is off (403), whatever the listener's address.
    let open = common::serve_env(
        &["--profile", "10k", "--app", "channels"],
        &[("WSTUNE_API_KEY", None)],
    );
    let (code, body) = curl(
        open.admin,
        "POST",
        "/api/publish",
        None,
        r#"{"channel":"a","data":1}"#,
    );
    assert!(
        code == 403 && body.contains("--api-key-file"),
        "{code} {body}"
    );
}

#[test]
fn bad_secrets_are_refused_at_start_with_the_fix() {
    let d = secrets();
    std::fs::write(d.path().join("short"), "tooshort\n").unwrap();
    for (args, says) in [
        (
            vec![
                "--app",
                "channels",
                "--auth-secret-file",
                &*path(&d, "short"),
            ],
            "at least 32",
        ),
        (
            vec!["--app", "channels", "--api-key-file", &*path(&d, "short")],
            "at least 16",
        ),
        (
            vec!["--app", "channels", "--api-key-file", &*path(&d, "absent")],
            "cannot read",
        ),
        (
            vec!["--auth-secret-file", &*path(&d, "jwt-secret")],
            "--app channels",
        ),
    ] {
        let mut all = vec!["serve", "--profile", "10k", "--port", "0", "--admin", "off"];
        all.extend(args.iter().copied());
        let o = common::run(&all);
        assert_eq!(common::code(&o), 3, "{all:?}: {}", common::stderr(&o));
        assert!(
            common::stderr(&o).contains(says),
            "{all:?}: {}",
            common::stderr(&o)
        );
        assert!(
            !common::stderr(&o).contains("tooshort"),
            "the secret is never printed"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_publish_on_one_redis_node_reaches_subscribers_on_the_other() {
    let rp = free_port();
    let Some(_r) = common::redis(rp) else { return };
    let d = secrets();
    let url = format!("redis://127.0.0.1:{rp}/0");
    let node = || {
        common::serve(&[
            "--profile",
            "10k",
            "--app",
            "channels",
            "--cluster",
            &url,
            "--api-key-file",
            &path(&d, "api-key"),
        ])
    };
    let (a, b) = (node(), node());
    for n in [&a, &b] {
        common::wait_until("the backplane up", Duration::from_secs(20), || {
            common::get(n.admin, "/healthz").contains("\"backplane\":\"up\"")
        });
    }
    let mut on_a = connect(a.port, "", None).await.unwrap();
    let mut on_b = connect(b.port, "", None).await.unwrap();
    assert!(subscribe(&mut on_a, "prices").await.contains("subscribed"));
    assert!(subscribe(&mut on_b, "prices").await.contains("subscribed"));
    let (code, body) = publish(&a, &d, r#"{"channel":"prices","data":7}"#);
    assert_eq!(
        (code, json(&body)),
        (
            200,
            serde_json::json!({"queued": 1, "dropped": 0, "delivered": 1, "backplane": "up"})
        )
    );
    let (code, _) = publish(&a, &d, r#"{"channel":"prices","data":8}"#);
    assert_eq!(code, 200);
    // Each node's subscriber gets each message once (the next one is the next publish).
    for ws in [&mut on_a, &mut on_b] {
        assert_eq!(
            next_text(ws).await.unwrap(),
            r#"{"channel":"prices","data":7}"#
        );
        assert_eq!(
            next_text(ws).await.unwrap(),
            r#"{"channel":"prices","data":8}"#
        );
        nothing_more(ws).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_to_the_supervisor_reaches_subscribers_in_every_process() {
    let d = secrets();
    let s = common::serve(&[
        "--profile",
        "10k",
        "--app",
        "channels",
        "--processes",
        "2",
        "--api-key-file",
        &path(&d, "api-key"),
    ]);
    // Subscribers until both processes hold some (the kernel spreads connections by hash), so
    // the publish must cross the relay to reach them all.
    let mut subs = Vec::new();
    let per_process = |s: &Served| -> Vec<u64> {
        let h = json(common::body(&common::get(s.admin, "/healthz")));
        h["process"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["connections"].as_u64().unwrap_or(0))
            .collect()
    };
    while subs.len() < 4 || per_process(&s).contains(&0) {
        assert!(
            subs.len() < 64,
            "every connection went to one process: {:?}",
            per_process(&s)
        );
        let mut ws = connect(s.port, "", None).await.unwrap();
        assert!(subscribe(&mut ws, "a").await.contains("subscribed"));
        subs.push(ws);
    }
    let n = subs.len() as u64;
    let h = d.path().join("auth-header");
    let (code, body) = curl(s.admin, "GET", "/api/channels", Some(&h), "");
    let v = json(&body);
    assert_eq!(
        (code, v["channels"]["a"].as_u64(), v["processes"].as_u64()),
        (200, Some(n), Some(2)),
        "{body}"
    );
    let (code, body) = curl(
        s.admin,
        "GET",
        "/api/channels?prefix=a&limit=1",
        Some(&h),
        "",
    );
    assert_eq!(
        (code, json(&body)["channels"]["a"].as_u64()),
        (200, Some(n)),
        "{body}"
    );
    let (code, body) = publish(&s, &d, r#"{"channel":"a","data":"all"}"#);
    assert_eq!(code, 200, "{body}");
    assert!(json(&body)["process"].is_u64(), "{body}");
    let (code, _) = publish(&s, &d, r#"{"channel":"a","data":"again"}"#);
    assert_eq!(code, 200);
    // Everyone, in every process, once: the message after the first is the second publish.
    for ws in subs.iter_mut() {
        assert_eq!(
            next_text(ws).await.unwrap(),
            r#"{"channel":"a","data":"all"}"#
        );
        assert_eq!(
            next_text(ws).await.unwrap(),
            r#"{"channel":"a","data":"again"}"#
        );
    }
    for ws in subs.iter_mut() {
        nothing_more(ws).await;
    }
    // Without the key the supervisor refuses too.
    let (code, _) = curl(
        s.admin,
        "POST",
        "/api/publish",
        None,
        r#"{"channel":"a","data":1}"#,
    );
    assert_eq!(code, 401);
    assert_eq!(
        s.metric(r#"ws_supervisor_api_requests_total{route="publish",code="401"}"#),
        1.0
    );
    // The supervisor's own polling of its processes (every /healthz and /metrics above) is
    // not traffic: the summed counter holds the forwarded API calls only.
    let text = s.get("/metrics");
    for route in ["healthz", "metrics"] {
        assert!(
            !text.contains(&format!(r#"ws_api_requests_total{{route="{route}""#)),
            "{route} scrapes counted: {text}"
        );
    }
    assert_eq!(
        s.metric(r#"ws_api_requests_total{route="publish",code="200"}"#),
        2.0
    );
}

/// Regression: silent connections to the admin port took the slots scrapes needed (256
/// silent connections: 53 of 56 scrapes answered 503). A connection that has not sent its
/// request holds only a reading slot, which a newer connection takes over, and a scrape has
/// slots of its own: with the port full of silent connections a scrape answers 200, the
/// WebSocket port keeps upgrading, and every silent one is closed within the head timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_admin_connections_cannot_keep_a_scrape_out() {
    let s = common::serve(&["--profile", "10k", "--app", "channels"]);
    let mut held = Vec::new();
    for _ in 0..300 {
        held.push(std::net::TcpStream::connect(("127.0.0.1", s.admin)).unwrap());
    }
    // Scrapes now, well inside the head timeout (3 s) that would otherwise free the slots.
    let t0 = std::time::Instant::now();
    for _ in 0..5 {
        let r = common::get(s.admin, "/metrics");
        assert!(r.starts_with("HTTP/1.1 200 "), "{r}");
    }
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    let mut ws = connect(s.port, "", None).await.unwrap();
    assert!(subscribe(&mut ws, "a").await.contains("subscribed"));
    assert!(common::try_get_ok(s.port, "/healthz").is_some());
    // Within the head timeout plus slack, every held one is closed by the server (the oldest
    // ones at once, to make room; the rest when their time is up).
    let t0 = std::time::Instant::now();
    for c in held.iter_mut() {
        use std::io::Read;
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut b = Vec::new();
        match c.read_to_end(&mut b) {
            Ok(_) if b.is_empty() => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            r => panic!("a silent admin connection was not closed: {r:?} {b:?}"),
        }
    }
    assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
    assert!(common::try_get_ok(s.admin, "/healthz").is_some());
}

/// Asserts that no further text message arrives on `ws` within half a second (a duplicate
/// delivery would).
async fn nothing_more(ws: &mut Ws) {
    if let Ok(m) = tokio::time::timeout(Duration::from_millis(500), next_text(ws)).await {
        panic!("a message more than expected: {m:?}");
    }
}

/// Sends SIGCONT to a process on drop, so a failing test never leaves one stopped.
struct Resume(i32);

impl Drop for Resume {
    fn drop(&mut self) {
        // SAFETY: kill has no memory preconditions; the pid is the test's own server process.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// A process that took a publish and stopped answering is not bypassed by a retry on another
/// (which would deliver it twice once the first resumes): the supervisor answers 504 "may or
/// may not have been delivered", and after SIGCONT every subscriber gets the message once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_the_process_took_but_did_not_answer_is_a_504_not_a_duplicate() {
    let d = secrets();
    let s = common::serve(&[
        "--profile",
        "10k",
        "--app",
        "channels",
        "--processes",
        "2",
        "--api-key-file",
        &path(&d, "api-key"),
    ]);
    let health = |s: &Served| json(common::body(&common::get(s.admin, "/healthz")));
    let mut subs = Vec::new();
    while subs.len() < 2
        || health(&s)["process"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["connections"].as_u64().unwrap_or(0) == 0)
    {
        assert!(subs.len() < 64, "every connection went to one process");
        let mut ws = connect(s.port, "", None).await.unwrap();
        assert!(subscribe(&mut ws, "a").await.contains("subscribed"));
        subs.push(ws);
    }
    // The supervisor hands a publish to the lowest index that is up: process 0.
    let pid0 = health(&s)["process"][0]["pid"].as_i64().unwrap() as i32;
    // SAFETY: as in Resume::drop.
    unsafe { libc::kill(pid0, libc::SIGSTOP) };
    let resume = Resume(pid0);
    let t0 = std::time::Instant::now();
    let (code, body) = publish(&s, &d, r#"{"channel":"a","data":"once"}"#);
    assert_eq!(code, 504, "{body}");
    assert!(
        body.contains("may or may not have been delivered"),
        "{body}"
    );
    assert!(t0.elapsed() < Duration::from_secs(9), "{:?}", t0.elapsed());
    drop(resume);
    for ws in subs.iter_mut() {
        assert_eq!(
            next_text(ws).await.unwrap(),
            r#"{"channel":"a","data":"once"}"#
        );
    }
    for ws in subs.iter_mut() {
        nothing_more(ws).await;
    }
}

/// A raw HTTP exchange on the admin port: write `parts` (pausing `gap` between them), then
/// read until the server closes or `wait` passes: what it answered.
fn raw_admin(port: u16, parts: &[&[u8]], gap: Duration, wait: Duration) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            std::thread::sleep(gap);
        }
        // The server may have answered and closed already (431): the answer is what counts.
        let _ = c.write_all(p);
    }
    c.set_read_timeout(Some(wait)).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The admin port's limits, from a raw socket: a head that does not complete within 3 s is
/// dropped without an answer, one over 8 KiB gets 431, a body that stalls gets 400 after 10 s,
/// and `Expect: 100-continue` gets its 100 and then the answer.
#[test]
fn the_admin_port_limits_slow_and_large_requests_and_answers_100_continue() {
    let d = secrets();
    let s = common::serve(&[
        "--profile",
        "10k",
        "--app",
        "channels",
        "--api-key-file",
        &path(&d, "api-key"),
    ]);
    let port = s.admin;
    let auth = format!("Authorization: Bearer {KEY}\r\n");
    let slow_head = std::thread::spawn(move || {
        let t0 = std::time::Instant::now();
        let r = raw_admin(
            port,
            &[b"GET /healthz HTTP/1.1\r\nHost: x\r\n"],
            Duration::ZERO,
            Duration::from_secs(15),
        );
        (r, t0.elapsed())
    });
    let head2 = auth.clone();
    let stalled_body = std::thread::spawn(move || {
        let t0 = std::time::Instant::now();
        let head = format!("POST /api/publish HTTP/1.1\r\n{head2}Content-Length: 100\r\n\r\n");
        let r = raw_admin(
            port,
            &[head.as_bytes(), b"{\"channel\""],
            Duration::from_millis(100),
            Duration::from_secs(20),
        );
        (r, t0.elapsed())
    });
    let big = format!(
        "GET /healthz HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        "p".repeat(9000)
    );
    let r = raw_admin(
        port,
        &[big.as_bytes()],
        Duration::ZERO,
        Duration::from_secs(10),
    );
    assert!(r.starts_with("HTTP/1.1 431 "), "{r}");
    // Expect: 100-continue, the body sent only after the 100 (as curl does above 1 MiB).
    {
        use std::io::{Read, Write};
        let body = r#"{"channel":"a","data":1}"#;
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            c,
            "POST /api/publish HTTP/1.1\r\n{auth}Expect: 100-continue\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .unwrap();
        let mut got = [0u8; 25];
        c.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"HTTP/1.1 100 Continue\r\n\r\n");
        c.write_all(body.as_bytes()).unwrap();
        let mut rest = String::new();
        let _ = c.read_to_string(&mut rest);
        assert!(rest.starts_with("HTTP/1.1 200 "), "{rest}");
        assert!(rest.contains(r#""delivered":0"#), "{rest}");
    }
    let (r, took) = slow_head.join().unwrap();
    assert!(r.is_empty(), "a slow head is not answered: {r}");
    assert!(
        took >= Duration::from_millis(2500) && took < Duration::from_secs(10),
        "{took:?}"
    );
    let (r, took) = stalled_body.join().unwrap();
    assert!(r.starts_with("HTTP/1.1 400 "), "{r}");
    assert!(r.contains("stalled"), "{r}");
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(16),
        "{took:?}"
    );
    assert_eq!(
        s.metric(r#"ws_api_requests_total{route="other",code="431"}"#),
        1.0
    );
}

/// `--auth-max-lifetime` and `--auth-audience` refuse long-lived and foreign tokens, and a
/// token signed with another algorithm is told to use HS256, each counted by reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifetime_audience_and_algorithm_refusals_say_what_to_fix() {
    let d = secrets();
    let s = common::serve(&[
        "--profile",
        "10k",
        "--app",
        "channels",
        "--auth-secret-file",
        &path(&d, "jwt-secret"),
        "--auth-max-lifetime",
        "3600",
        "--auth-audience",
        "prices-ws",
    ]);
    let ok = token(
        serde_json::json!({"exp": now() + 600, "aud": "prices-ws", "channels": ["a"]}),
        SECRET,
    );
    assert!(connect(s.port, "", Some(&ok)).await.is_ok());
    let long = token(
        serde_json::json!({"exp": now() + 86400, "aud": "prices-ws", "channels": ["a"]}),
        SECRET,
    );
    let foreign = token(
        serde_json::json!({"exp": now() + 600, "aud": "billing", "channels": ["a"]}),
        SECRET,
    );
    let hs512 = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS512),
        &serde_json::json!({"exp": now() + 600, "aud": "prices-ws", "channels": ["a"]}),
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
    )
    .unwrap();
    for (t, reason, says) in [
        (long, "lifetime_too_long", "lifetime too long"),
        (foreign, "bad_audience", "audience"),
        (hs512, "bad_algorithm", "sign with HS256"),
    ] {
        let (status, body) = connect(s.port, "", Some(&t)).await.err().unwrap();
        assert!(
            status == 401 && body.contains(says),
            "{reason}: {status} {body}"
        );
        assert_eq!(
            s.metric(&format!(
                r#"ws_channels_auth_failures_total{{reason="{reason}"}}"#
            )),
            1.0
        );
    }
    assert!(s.log_text().contains("token audience"), "{}", s.log_text());
}

/// A restarted server process expects the key the supervisor presents: the supervisor hands
/// down its own copy (in the process's environment only) instead of letting the process
/// re-read a key file that may have changed since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_process_agrees_with_the_supervisor_on_the_api_key() {
    let d = secrets();
    let s = common::serve(&[
        "--profile",
        "10k",
        "--app",
        "channels",
        "--processes",
        "2",
        "--api-key-file",
        &path(&d, "api-key"),
    ]);
    let health = |s: &Served| json(common::body(&common::get(s.admin, "/healthz")));
    let pid0 = health(&s)["process"][0]["pid"].as_i64().unwrap() as i32;
    // The file is rotated; process 0 dies and is restarted.
    std::fs::write(
        d.path().join("api-key"),
        "a-rotated-key-nobody-has-yet-0000\n",
    )
    .unwrap();
    // SAFETY: kill has no memory preconditions; the pid is the test's own server process.
    unsafe { libc::kill(pid0, libc::SIGKILL) };
    common::wait_until("process 0 restarted", Duration::from_secs(20), || {
        let h = health(&s);
        let p = &h["process"][0];
        p["state"] == "up" && p["pid"].as_i64() != Some(pid0 as i64)
    });
    // The supervisor hands a publish to process 0, presenting the key it read at start.
    let (code, body) = publish(&s, &d, r#"{"channel":"a","data":1}"#);
    assert_eq!(
        (code, json(&body)["process"].as_u64()),
        (200, Some(0)),
        "{body}"
    );
    let child = health(&s)["process"][0]["pid"].as_i64().unwrap();
    let env = std::fs::read(format!("/proc/{child}/environ")).unwrap();
    assert!(String::from_utf8_lossy(&env).contains("WSTUNE_API_KEY="));
    let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains("--api-key-file"));
}

/// A subscriber that subscribes to `channel` and then never reads, with a small receive buffer
/// so its send queue on the server fills after a few messages.
fn stalled_subscriber(port: u16, channel: &str) -> std::net::TcpStream {
    use std::io::{Read, Write};
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_recv_buffer_size(4096).unwrap();
    let to: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    s.connect(&to.into()).unwrap();
    let mut s: std::net::TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    let payload = format!(r#"{{"op":"subscribe","channel":"{channel}"}}"#).into_bytes();
    let mask = [7u8, 1, 2, 3];
    let mut f = vec![0x81, 0x80 | payload.len() as u8];
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, c)| c ^ mask[i % 4]));
    s.write_all(&f).unwrap();
    // The "subscribed" answer: a short unmasked text frame.
    let mut h = [0u8; 2];
    s.read_exact(&mut h).unwrap();
    let mut reply = vec![0u8; (h[1] & 0x7f) as usize];
    s.read_exact(&mut reply).unwrap();
    assert!(String::from_utf8_lossy(&reply).contains("subscribed"));
    s
}

/// Regression: with one slow subscriber every publish answered {"delivered":1} while the
/// subscriber got only some of them and then a 1008 close. The answer now says for how many
/// subscribers each message was queued and for how many it was dropped, and the drops are
/// counted in ws_publish_dropped_total.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_to_a_slow_subscriber_reports_the_copies_it_dropped() {
    let d = secrets();
    let s = common::serve(&[
        "--profile",
        "10k",
        "--app",
        "channels",
        "--api-key-file",
        &path(&d, "api-key"),
        "--send-queue",
        "16384",
    ]);
    let _slow = stalled_subscriber(s.port, "slow");
    let mut fast = connect(s.port, "", None).await.unwrap();
    assert!(subscribe(&mut fast, "other").await.contains("subscribed"));
    // The kernel's buffers take a few MiB on loopback before the server's queue fills: batches
    // until a copy is dropped (or 16 MiB were offered).
    let data = "x".repeat(16000);
    let h = d.path().join("auth-header");
    let (mut queued, mut dropped, mut offered) = (0, 0, 0);
    let mut last = serde_json::Value::Null;
    for round in 0..10 {
        let messages: Vec<String> = (0..100)
            .map(|i| format!(r#"{{"channel":"slow","data":"{round}-{i}{data}"}}"#))
            .collect();
        let body = format!(r#"{{"messages":[{}]}}"#, messages.join(","));
        let (code, out) = curl(s.admin, "POST", "/api/batch", Some(&h), &body);
        assert_eq!(code, 200, "{out}");
        let v = json(&out);
        let (q, dr) = (
            v["queued"].as_u64().expect("queued"),
            v["dropped"].as_u64().expect("dropped"),
        );
        assert_eq!(q + dr, 100, "every copy is one or the other: {v}");
        assert_eq!(
            v["delivered"].as_u64(),
            Some(q),
            "the old name keeps its value"
        );
        (queued, dropped, offered, last) = (queued + q, dropped + dr, offered + 100, v);
        if dropped > 0 {
            break;
        }
    }
    assert!(
        dropped > 0,
        "the stalled subscriber was closed by backpressure: {last}"
    );
    assert!(queued < offered, "{last}");
    assert_eq!(s.metric("ws_publish_dropped_total"), dropped as f64);
    assert!(s.metric("ws_backpressure_closes_total") >= 1.0);
}
