//! `serve --app channels` for backends: the HTTP publish API on the admin listener (API key),
//! JWT auth on upgrade, presence, the subscription cap, across Redis nodes and through the
//! `--processes` supervisor. Real `wstune serve` processes, real sockets; the clients are code
//! we did not write (curl for HTTP, tokio-tungstenite for WebSocket, jsonwebtoken mints the
//! tokens). One submodule per idea: `http_api`, `auth`, `processes`; the helpers they share
//! are here.

use crate::common;

use common::tungstenite::{next_text, Ws};
use common::Served;
use futures_util::SinkExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

mod auth;
mod history;
mod http_api;
mod processes;

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

/// Asserts that no further text message arrives on `ws` within half a second (a duplicate
/// delivery would).
async fn nothing_more(ws: &mut Ws) {
    if let Ok(m) = tokio::time::timeout(Duration::from_millis(500), next_text(ws)).await {
        panic!("a message more than expected: {m:?}");
    }
}
