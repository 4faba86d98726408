//! Each example, started as it runs (its `server()`), on 127.0.0.1, driven by a
//! tokio-tungstenite client: what a reader of the examples would try first.

#[allow(dead_code)]
#[path = "../examples/echo.rs"]
mod echo;

#[allow(dead_code)]
#[path = "../examples/chat.rs"]
mod chat;

#[allow(dead_code)]
#[path = "../examples/offload_db.rs"]
mod offload_db;

use embedded_server::{Handler, Server};
use futures_util::{SinkExt, StreamExt};
use std::net::SocketAddr;
use std::time::Duration;
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest, Message as Ws};

type Client =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Every wait is bounded: a broken example fails the test instead of hanging it.
const WAIT: Duration = Duration::from_secs(10);

/// Run `server` on a free port; the sender stops it.
fn start<H: Handler>(server: Server<H>) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listeners = embedded_server::bind("127.0.0.1:0".parse().unwrap(), false, 1).unwrap();
    let addr = listeners[0].local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        server
            .run(listeners, async {
                let _ = rx.await;
            })
            .await
    });
    (addr, tx)
}

async fn connect(url: &str) -> Result<Client, tungstenite::Error> {
    let req = url.into_client_request().unwrap();
    tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(req))
        .await
        .expect("the upgrade is answered")
        .map(|(ws, _)| ws)
}

/// The next data message (pings are answered by the client itself).
async fn next(ws: &mut Client) -> Ws {
    loop {
        let m = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a message within the wait")
            .expect("the stream is open")
            .expect("a valid frame");
        if matches!(m, Ws::Text(_) | Ws::Binary(_) | Ws::Close(_)) {
            return m;
        }
    }
}

fn json(m: Ws) -> serde_json::Value {
    match m {
        Ws::Text(t) => serde_json::from_str(&t).expect("JSON"),
        other => panic!("expected a text message, got {other:?}"),
    }
}

fn refused_status(e: tungstenite::Error) -> u16 {
    match e {
        tungstenite::Error::Http(resp) => resp.status().as_u16(),
        other => panic!("expected an HTTP refusal, got {other}"),
    }
}

#[tokio::test]
async fn echo_answers_text_and_binary_in_order() {
    let (addr, _stop) = start(echo::server());
    let mut ws = connect(&format!("ws://{addr}/")).await.unwrap();
    for i in 0..20 {
        ws.send(Ws::text(format!("hello {i}"))).await.unwrap();
    }
    ws.send(Ws::binary(vec![0u8, 1, 2, 255])).await.unwrap();
    for i in 0..20 {
        assert_eq!(next(&mut ws).await, Ws::text(format!("hello {i}")));
    }
    assert_eq!(next(&mut ws).await, Ws::binary(vec![0u8, 1, 2, 255]));
    ws.close(None).await.unwrap();
}

#[tokio::test]
async fn chat_checks_the_token_on_upgrade_and_fans_out_per_room() {
    let (addr, _stop) = start(chat::server("alice:a-secret,bob:b-secret").unwrap());
    let base = format!("ws://{addr}/chat");
    // Refused before any WebSocket exists: no token, a wrong one, a path that is no room.
    let e = connect(&format!("{base}/lobby")).await.unwrap_err();
    assert_eq!(refused_status(e), 401);
    let e = connect(&format!("{base}/lobby?token=b-secreT"))
        .await
        .unwrap_err();
    assert_eq!(refused_status(e), 401);
    let e = connect(&format!("ws://{addr}/elsewhere?token=a-secret"))
        .await
        .unwrap_err();
    assert_eq!(refused_status(e), 404);

    let mut alice = connect(&format!("{base}/lobby?token=a-secret"))
        .await
        .unwrap();
    assert_eq!(
        json(next(&mut alice).await),
        serde_json::json!({"room": "lobby", "event": "joined", "user": "alice"})
    );
    // Bob authenticates with a header instead, and asks for the subprotocol.
    let mut req = format!("{base}/lobby").into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", "Bearer b-secret".parse().unwrap());
    req.headers_mut()
        .insert("sec-websocket-protocol", "chat.v1".parse().unwrap());
    let (mut bob, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
    assert_eq!(
        resp.headers()
            .get("sec-websocket-protocol")
            .map(|v| v.to_str().unwrap()),
        Some("chat.v1")
    );
    // Someone in another room hears nothing of the lobby.
    let mut carol = connect(&format!("{base}/kitchen?token=a-secret"))
        .await
        .unwrap();
    assert_eq!(json(next(&mut carol).await)["room"], "kitchen");

    let joined = serde_json::json!({"room": "lobby", "event": "joined", "user": "bob"});
    assert_eq!(json(next(&mut alice).await), joined);
    assert_eq!(json(next(&mut bob).await), joined);
    bob.send(Ws::text("hi alice")).await.unwrap();
    let said = serde_json::json!({"room": "lobby", "from": "bob", "text": "hi alice"});
    assert_eq!(json(next(&mut alice).await), said);
    assert_eq!(json(next(&mut bob).await), said);

    // Bob leaves: the room is told (on_close publishes after the hub dropped him).
    bob.close(None).await.unwrap();
    assert_eq!(
        json(next(&mut alice).await),
        serde_json::json!({"room": "lobby", "event": "left", "user": "bob"})
    );
    // Binary is refused with 1003 and a reason.
    alice.send(Ws::binary(vec![1u8])).await.unwrap();
    match next(&mut alice).await {
        Ws::Close(Some(f)) => {
            assert_eq!(u16::from(f.code), 1003);
            assert_eq!(f.reason.as_str(), "this chat speaks text");
        }
        other => panic!("expected a close, got {other:?}"),
    }
    carol.send(Ws::text("still here")).await.unwrap();
    assert_eq!(json(next(&mut carol).await)["text"], "still here");
}

#[tokio::test]
async fn offload_db_answers_from_the_pool_in_parallel_and_times_it() {
    let latency = Duration::from_millis(50);
    let server = offload_db::server(8, latency);
    let hub = server.hub();
    let (addr, _stop) = start(server);
    let mut ws = connect(&format!("ws://{addr}/")).await.unwrap();
    let started = std::time::Instant::now();
    for i in 0..16 {
        ws.send(Ws::text(format!("get user:{}", i % 4)))
            .await
            .unwrap();
    }
    let mut answers = Vec::new();
    for _ in 0..16 {
        answers.push(json(next(&mut ws).await));
    }
    let took = started.elapsed();
    // 16 queries of 50 ms on 8 threads: about 100 ms, not the 800 ms of one after another
    // (and the I/O thread was never the one waiting).
    assert!(
        took < latency * 8,
        "16 blocking queries took {took:?}: not run in parallel on the pool"
    );
    let ada = answers.iter().filter(|a| a["value"] == "Ada").count();
    let missing = answers.iter().filter(|a| a["value"].is_null()).count();
    assert_eq!((ada, missing), (4, 4), "{answers:?}");
    // The pool's timing covers the application's jobs: what `wstune pool --measure` reads.
    // A job is counted once it returns, just after its reply went out: wait for the last.
    let m = &hub.metrics;
    let jobs = || m.offload_jobs.load(std::sync::atomic::Ordering::Relaxed);
    let deadline = std::time::Instant::now() + WAIT;
    while jobs() < 16 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(jobs(), 16);
    let (wall_sum, count) = m.handler_wall.totals();
    assert_eq!(count, 16);
    assert!(wall_sum >= 16.0 * 0.045, "handler wall time {wall_sum} s");
    // A request the handler does not know gets an error, not a closed connection.
    ws.send(Ws::text("put x")).await.unwrap();
    assert!(json(next(&mut ws).await)["error"]
        .as_str()
        .unwrap()
        .contains("unknown request"));
}
