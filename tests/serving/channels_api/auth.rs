//! JWT auth on upgrade: token scopes per channel, 401 reasons, the close at expiry, lifetime,
//! audience and algorithm refusals, and bad secrets refused at start.

use crate::common;

use super::{connect, json, now, path, publish, secrets, send, subscribe, token, KEY, SECRET};
use common::tungstenite::next_text;
use futures_util::SinkExt;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

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
    s.assert_metrics(&[
        (r#"ws_channels_auth_failures_total{reason="expired"}"#, 1.0),
        (
            r#"ws_channels_auth_failures_total{reason="malformed"}"#,
            2.0,
        ),
        (
            r#"ws_channels_auth_failures_total{reason="bad_signature"}"#,
            1.0,
        ),
        (r#"ws_channels_auth_failures_total{reason="missing"}"#, 1.0),
        (r#"ws_channels_denied_total{op="subscribe"}"#, 1.0),
        (r#"ws_channels_denied_total{op="publish"}"#, 1.0),
    ]);
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

/// `wstune token` mints what the server accepts: its channels to subscribe, its publish
/// claim; the server refuses what the token does not allow. A lifetime over the server's cap
/// and a short secret are refused by `token` itself, in the server's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_from_wstune_token_is_what_the_server_accepts() {
    let d = secrets();
    let secret = path(&d, "jwt-secret");
    let s = common::serve(&[
        "--profile",
        "10k",
        "--app",
        "channels",
        "--auth-secret-file",
        &secret,
        "--auth-max-lifetime",
        "3600",
    ]);
    let mint = |extra: &[&str]| {
        let mut a = vec!["token", "--secret-file", secret.as_str()];
        a.extend_from_slice(extra);
        common::run(&a)
    };
    let o = mint(&[
        "--channels",
        "prices.*,chat.eu",
        "--publish",
        "chat.eu",
        "--ttl",
        "15m",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let t = common::stdout(&o).trim().to_string();
    let mut c = connect(s.port, "", Some(&t)).await.unwrap();
    assert!(subscribe(&mut c, "prices.eu").await.contains("subscribed"));
    assert!(subscribe(&mut c, "chat.eu").await.contains("subscribed"));
    assert_eq!(json(&subscribe(&mut c, "news").await)["op"], "error");
    // The publish claim: chat.eu reaches its subscriber, prices.eu is refused.
    let mut p = connect(s.port, "", Some(&t)).await.unwrap();
    p.send(Message::text(
        r#"{"op":"publish","channel":"chat.eu","data":1}"#,
    ))
    .await
    .unwrap();
    assert_eq!(
        next_text(&mut c).await.unwrap(),
        r#"{"channel":"chat.eu","data":1}"#
    );
    let refused = json(&send(&mut p, r#"{"op":"publish","channel":"prices.eu","data":1}"#).await);
    assert_eq!(refused["op"], "error");
    // The same token in the query, as a browser sends it.
    assert!(connect(s.port, &format!("?token={t}"), None).await.is_ok());
    // Another secret's token is refused by the server.
    std::fs::write(
        d.path().join("other"),
        "another-secret-that-is-32-bytes-long!!\n",
    )
    .unwrap();
    let o = common::run(&[
        "token",
        "--secret-file",
        &path(&d, "other"),
        "--channels",
        "a",
    ]);
    let other = common::stdout(&o).trim().to_string();
    let (status, _) = connect(s.port, "", Some(&other)).await.err().unwrap();
    assert_eq!(status, 401);
    // Over the server's cap: refused before it is printed.
    let o = mint(&["--channels", "a", "--ttl", "2h", "--max-lifetime", "3600"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(common::stderr(&o).contains("--ttl 7200 s is over --max-lifetime 3600 s"));
    assert!(common::stdout(&o).is_empty());
    std::fs::write(d.path().join("short"), "short\n").unwrap();
    let o = common::run(&[
        "token",
        "--secret-file",
        &path(&d, "short"),
        "--channels",
        "a",
    ]);
    assert_eq!(o.status.code(), Some(3));
    assert!(common::stderr(&o).contains("HS256 needs at least 32"));
}
