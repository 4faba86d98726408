//! The Handler API's promises, over real sockets on 127.0.0.1 with a tokio-tungstenite client:
//! what on_upgrade sees and how a refusal looks, a Conn that outlives its connection, sends and
//! closes from other tasks, a panicking callback, on_close's code and reason.

use embedded_server::{
    Closed, Conn, Handler, Message, OffloadError, Request, Server, ServerConfig, Upgrade,
};
use futures_util::{SinkExt, StreamExt};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest, Message as Ws};

type Client =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

const WAIT: Duration = Duration::from_secs(10);

/// What the test handler saw, for the test to check.
#[derive(Default)]
struct Seen {
    /// Connections kept past their end.
    kept: Vec<Conn<String>>,
    /// on_close's (code, reason), in order.
    closes: Vec<(u16, String)>,
    /// What a send after the handler's own close returned (asserted by the test, not inside
    /// the callback, where a panic is caught and could not fail the test).
    after_close: Option<Result<(), Closed>>,
}

/// State: who the connection is (from the query, the cookie, the peer).
struct Probe {
    seen: Arc<Mutex<Seen>>,
}

impl Handler for Probe {
    type State = String;

    fn on_upgrade(&self, req: &Request<'_>) -> Upgrade<String> {
        match req.path() {
            "/deny" => return Upgrade::reject_with(403, "not you"),
            "/weird-status" => return Upgrade::reject(200),
            "/bad-protocol" => return Upgrade::accept(String::new()).with_protocol("nobody-asked"),
            "/panic" => panic!("on_upgrade blew up"),
            _ => {}
        }
        let who = format!(
            "path={} name={} cookie={} peer-ip={} protocols={}",
            req.path(),
            req.query_param("name").unwrap_or_default(),
            req.cookie("sid").unwrap_or("-"),
            req.peer().ip(),
            req.protocols().collect::<Vec<_>>().join("|"),
        );
        let up = Upgrade::accept(who);
        if req.protocols().any(|p| p == "v2") {
            up.with_protocol("v2")
        } else {
            up
        }
    }

    fn on_open(&self, conn: &Conn<String>) {
        let _ = conn.send_text(&format!("hello {}", conn.state()));
    }

    fn on_message(&self, conn: &Conn<String>, msg: Message<'_>) {
        match msg {
            Message::Text("keep") => {
                self.seen.lock().unwrap().kept.push(conn.clone());
                let _ = conn.send_text("kept");
            }
            Message::Text("later") => {
                // From another task, after this callback returned: a send, then a close.
                let c = conn.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    c.send_text("from a task").unwrap();
                    c.close(4001, "done from a task").unwrap();
                });
            }
            Message::Text("ack then publish") => {
                // The sender is subscribed: its ack (corked) must still arrive first.
                let _ = conn.subscribe("room");
                let _ = conn.send_text("ack");
                conn.publish("room", Message::Text("published"));
            }
            Message::Text("boom") => panic!("on_message blew up"),
            Message::Text("bye") => {
                let _ = conn.send_text("last words");
                let _ = conn.close(4002, "bye from the handler");
                // After the close nothing more goes out: recorded for the test to assert.
                let late = conn.send_text("too late");
                self.seen.lock().unwrap().after_close = Some(late);
            }
            other => {
                let _ = conn.send(other);
            }
        }
    }

    fn on_close(&self, _conn: &Conn<String>, code: u16, reason: &str) {
        self.seen
            .lock()
            .unwrap()
            .closes
            .push((code, reason.to_string()));
    }
}

fn start(seen: Arc<Mutex<Seen>>) -> (SocketAddr, Arc<embedded_server::Hub>) {
    let server = Server::with_handler(ServerConfig::default(), Probe { seen }).unwrap();
    let hub = server.hub();
    let listeners = embedded_server::bind("127.0.0.1:0".parse().unwrap(), false, 1).unwrap();
    let addr = listeners[0].local_addr().unwrap();
    tokio::spawn(async move { server.run(listeners, std::future::pending()).await });
    (addr, hub)
}

async fn connect(
    req: tungstenite::handshake::client::Request,
) -> Result<(Client, tungstenite::handshake::client::Response), tungstenite::Error> {
    tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(req))
        .await
        .expect("the upgrade is answered")
}

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

fn close_of(m: Ws) -> (u16, String) {
    match m {
        Ws::Close(Some(f)) => (u16::from(f.code), f.reason.to_string()),
        other => panic!("expected a close, got {other:?}"),
    }
}

/// Poll (bounded) until `f` holds.
async fn until(mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "condition not met in time"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn on_upgrade_sees_the_request_and_its_refusals_are_http_statuses() {
    let (addr, hub) = start(Arc::default());
    let mut req = format!("ws://{addr}/room?name=a%20b")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("cookie", "x=1; sid=s3cr3t".parse().unwrap());
    req.headers_mut()
        .insert("sec-websocket-protocol", "v1, v2".parse().unwrap());
    let (mut ws, resp) = connect(req).await.unwrap();
    assert_eq!(
        resp.headers().get("sec-websocket-protocol").unwrap(),
        "v2",
        "the handler's subprotocol"
    );
    assert_eq!(
        next(&mut ws).await,
        Ws::text("hello path=/room name=a b cookie=s3cr3t peer-ip=127.0.0.1 protocols=v1|v2")
    );

    let status = |e: tungstenite::Error| match e {
        tungstenite::Error::Http(r) => {
            let body = String::from_utf8(r.body().clone().unwrap_or_default()).unwrap();
            (r.status().as_u16(), body)
        }
        other => panic!("expected an HTTP refusal, got {other}"),
    };
    let refuse = |path: &str| format!("ws://{addr}{path}").into_client_request().unwrap();
    assert_eq!(
        status(connect(refuse("/deny")).await.unwrap_err()),
        (403, "not you\n".into())
    );
    // Not an error status: sent as 500, never as a success the client would misread.
    assert_eq!(
        status(connect(refuse("/weird-status")).await.unwrap_err()).0,
        500
    );
    // A subprotocol the client did not offer would break the client: refused instead.
    assert_eq!(
        status(connect(refuse("/bad-protocol")).await.unwrap_err()).0,
        500
    );
    // A panic in on_upgrade is a 500 for that request; the server goes on.
    assert_eq!(status(connect(refuse("/panic")).await.unwrap_err()).0, 500);
    assert_eq!(
        hub.metrics
            .rejected(embedded_server::metrics::Reject::Handler),
        4
    );
    ws.send(Ws::text("still served")).await.unwrap();
    assert_eq!(next(&mut ws).await, Ws::text("still served"));
}

#[tokio::test]
async fn a_conn_kept_past_its_connection_answers_closed_and_never_panics() {
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let (addr, hub) = start(seen.clone());
    let (mut ws, _) = connect(format!("ws://{addr}/").into_client_request().unwrap())
        .await
        .unwrap();
    next(&mut ws).await; // hello
    ws.send(Ws::text("keep")).await.unwrap();
    assert_eq!(next(&mut ws).await, Ws::text("kept"));
    let conn = seen.lock().unwrap().kept[0].clone();
    assert!(conn.is_open());
    assert!(conn.subscribe("news").is_ok());
    assert_eq!(hub.presence().subscriber_count("news"), 1);

    ws.close(Some(tungstenite::protocol::CloseFrame {
        code: 4100.into(),
        reason: "client leaves".into(),
    }))
    .await
    .unwrap();
    until(|| !seen.lock().unwrap().closes.is_empty()).await;
    assert_eq!(
        seen.lock().unwrap().closes[0],
        (4100, "client leaves".into())
    );
    // The connection is over: every method says so.
    assert!(!conn.is_open());
    assert_eq!(conn.send_text("x"), Err(Closed));
    assert_eq!(conn.send_binary(b"x"), Err(Closed));
    assert_eq!(
        conn.send_encoded(&embedded_server::Encoded::new(Message::Text("x"))),
        Err(Closed)
    );
    assert_eq!(conn.close(1000, ""), Err(Closed));
    assert_eq!(conn.subscribe("news"), Err(Closed));
    assert_eq!(conn.unsubscribe("news"), Err(Closed));
    assert_eq!(conn.offload(|| {}), Err(OffloadError::Closed));
    // Its channels were left when it ended; a publish reaches nobody and costs nothing.
    assert_eq!(hub.presence().subscriber_count("news"), 0);
    conn.publish("news", Message::Text("anyone?"));
    assert_eq!(
        conn.state(),
        "path=/ name= cookie=- peer-ip=127.0.0.1 protocols="
    );
    assert!(hub.registry().is_empty());
}

#[tokio::test]
async fn sends_and_closes_from_anywhere_keep_their_order_and_reason() {
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let (addr, _hub) = start(seen.clone());
    let url = format!("ws://{addr}/");

    // From another task: the message, then the close with the task's code and reason.
    let (mut ws, _) = connect(url.clone().into_client_request().unwrap())
        .await
        .unwrap();
    next(&mut ws).await;
    ws.send(Ws::text("later")).await.unwrap();
    assert_eq!(next(&mut ws).await, Ws::text("from a task"));
    assert_eq!(
        close_of(next(&mut ws).await),
        (4001, "done from a task".into())
    );

    // From the callback: the reply before it goes out first, nothing after it.
    let (mut ws, _) = connect(url.clone().into_client_request().unwrap())
        .await
        .unwrap();
    next(&mut ws).await;
    ws.send(Ws::text("bye")).await.unwrap();
    assert_eq!(next(&mut ws).await, Ws::text("last words"));
    assert_eq!(
        close_of(next(&mut ws).await),
        (4002, "bye from the handler".into())
    );
    assert_eq!(seen.lock().unwrap().after_close, Some(Err(Closed)));

    // A callback's send, then its publish to a room the sender is in: in that order.
    let (mut ws, _) = connect(url.clone().into_client_request().unwrap())
        .await
        .unwrap();
    next(&mut ws).await;
    ws.send(Ws::text("ack then publish")).await.unwrap();
    assert_eq!(next(&mut ws).await, Ws::text("ack"));
    assert_eq!(next(&mut ws).await, Ws::text("published"));

    // A panicking callback fails its own connection with 1011, nobody else's.
    let (mut ws, _) = connect(url.clone().into_client_request().unwrap())
        .await
        .unwrap();
    let (mut other, _) = connect(url.into_client_request().unwrap()).await.unwrap();
    next(&mut ws).await;
    next(&mut other).await;
    ws.send(Ws::text("boom")).await.unwrap();
    assert_eq!(
        close_of(next(&mut ws).await),
        (1011, "internal error".into())
    );
    other.send(Ws::binary(vec![9u8; 3])).await.unwrap();
    assert_eq!(next(&mut other).await, Ws::binary(vec![9u8; 3]));
    // on_close heard each: the task's close and the handler's (answered by the client with
    // the same code), and the failed one.
    until(|| seen.lock().unwrap().closes.len() >= 3).await;
    let codes: Vec<u16> = seen.lock().unwrap().closes.iter().map(|c| c.0).collect();
    assert!(codes.contains(&4001) && codes.contains(&4002), "{codes:?}");
    assert!(codes.contains(&1011), "{codes:?}");
}

/// Relays each message to the connection of another server kept in `to`.
struct Relay {
    to: Arc<Mutex<Option<Conn>>>,
    keep: bool,
}

impl Handler for Relay {
    type State = ();
    fn on_upgrade(&self, _req: &Request<'_>) -> Upgrade<()> {
        Upgrade::accept(())
    }
    fn on_open(&self, conn: &Conn) {
        if self.keep {
            *self.to.lock().unwrap() = Some(conn.clone());
        }
    }
    fn on_message(&self, _conn: &Conn, msg: Message<'_>) {
        if let Some(other) = self.to.lock().unwrap().as_ref() {
            other.send(msg).unwrap();
        }
    }
}

/// Two servers on one thread, each with its connection id 1: a send from A's callback to B's
/// connection must reach B's client, not join A's own corked replies.
#[tokio::test(flavor = "current_thread")]
async fn a_send_to_another_servers_connection_from_a_callback_goes_there() {
    let slot: Arc<Mutex<Option<Conn>>> = Arc::default();
    let serve = |h: Relay| {
        let server = Server::with_handler(ServerConfig::default(), h).unwrap();
        let listeners = embedded_server::bind("127.0.0.1:0".parse().unwrap(), false, 1).unwrap();
        let addr = listeners[0].local_addr().unwrap();
        tokio::spawn(async move { server.run(listeners, std::future::pending()).await });
        addr
    };
    let a = serve(Relay {
        to: slot.clone(),
        keep: false,
    });
    let b = serve(Relay {
        to: slot.clone(),
        keep: true,
    });
    let (mut on_b, _) = connect(format!("ws://{b}/").into_client_request().unwrap())
        .await
        .unwrap();
    until(|| slot.lock().unwrap().is_some()).await;
    let (mut on_a, _) = connect(format!("ws://{a}/").into_client_request().unwrap())
        .await
        .unwrap();
    assert_eq!(slot.lock().unwrap().as_ref().unwrap().id(), 1);
    on_a.send(Ws::text("to b")).await.unwrap();
    assert_eq!(next(&mut on_b).await, Ws::text("to b"));
    // And A's own client got nothing: its next message is the close we ask for.
    on_a.close(None).await.unwrap();
    assert!(matches!(next(&mut on_a).await, Ws::Close(_)));
}
