//! A connection whose offloaded job waits for room in a full queue ("parked") stops reading,
//! but the rest of its life goes on: a close asked for from elsewhere goes out, and the job it
//! was promised is still queued and run.

use embedded_server::{Conn, Handler, Message, Request, Server, ServerConfig, Upgrade};
use futures_util::{SinkExt, StreamExt};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message as Ws;

#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.cv.wait(open).unwrap();
        }
    }
    fn release(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

#[derive(Default)]
struct Blocked {
    gate: Arc<Gate>,
    conn: Mutex<Option<Conn>>,
    messages: AtomicUsize,
    jobs_run: Arc<AtomicUsize>,
}

struct App(Arc<Blocked>);

impl Handler for App {
    type State = ();
    fn on_upgrade(&self, _req: &Request<'_>) -> Upgrade<()> {
        Upgrade::accept(())
    }
    fn on_open(&self, conn: &Conn) {
        *self.0.conn.lock().unwrap() = Some(conn.clone());
    }
    fn on_message(&self, conn: &Conn, _msg: Message<'_>) {
        let (gate, run) = (self.0.gate.clone(), self.0.jobs_run.clone());
        // The first job holds the only pool thread, the second fills the one-slot queue, the
        // third parks this connection.
        conn.offload(move || {
            gate.wait();
            run.fetch_add(1, SeqCst);
        })
        .unwrap();
        self.0.messages.fetch_add(1, SeqCst);
    }
}

fn wait_until(what: &str, ok: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_connection_still_closes_and_its_job_still_runs() {
    let state = Arc::new(Blocked::default());
    let config = ServerConfig {
        offload_pool_size: 1,
        offload_queue_size: 1,
        ..ServerConfig::default()
    };
    let server = Server::with_handler(config, App(state.clone())).unwrap();
    let listeners = embedded_server::bind("127.0.0.1:0".parse().unwrap(), false, 1).unwrap();
    let addr = listeners[0].local_addr().unwrap();
    tokio::spawn(async move { server.run(listeners, std::future::pending()).await });

    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/"))
        .await
        .unwrap();
    for _ in 0..3 {
        ws.send(Ws::Binary(vec![1u8].into())).await.unwrap();
    }
    let s = state.clone();
    tokio::task::spawn_blocking(move || {
        wait_until("the third message (parked)", || {
            s.messages.load(SeqCst) == 3
        })
    })
    .await
    .unwrap();

    // The application closes the connection from another thread while its job is parked.
    let conn = state.conn.lock().unwrap().clone().unwrap();
    conn.close(4000, "bye").unwrap();
    let close = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match ws.next().await {
                Some(Ok(Ws::Close(f))) => return f.map(|f| u16::from(f.code)),
                Some(Ok(_)) => continue,
                other => panic!("expected a close frame, got {other:?}"),
            }
        }
    })
    .await
    .expect("the close goes out while the job is parked, not once the pool has room");
    assert_eq!(close, Some(4000));
    assert_eq!(state.jobs_run.load(SeqCst), 0, "the pool is still blocked");

    // Every job `offload` accepted runs, the parked one too, though its connection is gone.
    state.gate.release();
    let s = state.clone();
    tokio::task::spawn_blocking(move || {
        wait_until("the three jobs", || s.jobs_run.load(SeqCst) == 3)
    })
    .await
    .unwrap();
}

struct Lazy;

impl Handler for Lazy {
    type State = ();
    fn on_upgrade(&self, _req: &Request<'_>) -> Upgrade<()> {
        Upgrade::accept(())
    }
    fn on_message(&self, conn: &Conn, msg: Message<'_>) {
        if msg.as_bytes() == b"offload" {
            let reply = conn.clone();
            conn.offload(move || {
                let _ = reply.send_text("done");
            })
            .unwrap();
        } else {
            let _ = conn.send(msg);
        }
    }
}

type Client =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn next_text(ws: &mut Client) -> String {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
            Ok(Some(Ok(Ws::Text(t)))) => return t.to_string(),
            Ok(Some(Ok(_))) => continue,
            other => panic!("expected a reply, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn the_offload_pool_starts_on_first_use_not_with_the_server() {
    let config = ServerConfig {
        offload_pool_size: 3,
        ..ServerConfig::default()
    };
    let server = Server::with_handler(config, Lazy).unwrap();
    let hub = server.hub();
    let listeners = embedded_server::bind("127.0.0.1:0".parse().unwrap(), false, 1).unwrap();
    let addr = listeners[0].local_addr().unwrap();
    tokio::spawn(async move { server.run(listeners, std::future::pending()).await });
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/"))
        .await
        .unwrap();
    // An echo needs no pool: none is started (a handler that never offloads has no threads).
    ws.send(Ws::Text("hi".into())).await.unwrap();
    assert_eq!(next_text(&mut ws).await, "hi");
    assert_eq!(hub.metrics.offload_threads.load(SeqCst), 0);
    // The first offload starts the configured pool, once.
    for _ in 0..2 {
        ws.send(Ws::Text("offload".into())).await.unwrap();
        assert_eq!(next_text(&mut ws).await, "done");
    }
    assert_eq!(hub.metrics.offload_threads.load(SeqCst), 3);
}

/// Records the order its jobs run in; the first job waits at the gate.
struct Ordered {
    gate: Arc<Gate>,
    ran: Arc<Mutex<Vec<u8>>>,
}

impl Handler for Ordered {
    type State = ();
    fn on_upgrade(&self, _req: &Request<'_>) -> Upgrade<()> {
        Upgrade::accept(())
    }
    fn on_message(&self, conn: &Conn, msg: Message<'_>) {
        let (gate, ran) = (self.gate.clone(), self.ran.clone());
        let n = msg.as_bytes()[0];
        conn.offload(move || {
            gate.wait();
            ran.lock().unwrap().push(n);
        })
        .unwrap();
    }
}

/// Parked for longer than the heartbeat timeout, a live client is not closed as dead (it
/// reads nothing then, so the client's frames wait in the socket), and its messages' jobs run
/// in the order it sent them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_connection_outlives_the_heartbeat_and_keeps_its_order() {
    let gate = Arc::new(Gate::default());
    let ran = Arc::new(Mutex::new(Vec::new()));
    let config = ServerConfig {
        offload_pool_size: 1,
        offload_queue_size: 1,
        heartbeat_interval: Duration::from_secs(1),
        heartbeat_timeout: Duration::from_secs(2),
        ..ServerConfig::default()
    };
    let server = Server::with_handler(
        config,
        Ordered {
            gate: gate.clone(),
            ran: ran.clone(),
        },
    )
    .unwrap();
    let hub = server.hub();
    let listeners = embedded_server::bind("127.0.0.1:0".parse().unwrap(), false, 1).unwrap();
    let addr = listeners[0].local_addr().unwrap();
    tokio::spawn(async move { server.run(listeners, std::future::pending()).await });
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/"))
        .await
        .unwrap();
    // 1 holds the pool thread, 2 fills the queue, 3 parks the connection, 4-6 wait behind it.
    for n in 1..=6u8 {
        ws.send(Ws::Binary(vec![n].into())).await.unwrap();
    }
    // Three heartbeat timeouts' worth parked; the client answers what it is sent meanwhile.
    let _ = tokio::time::timeout(Duration::from_secs(6), async {
        while let Some(Ok(m)) = ws.next().await {
            assert!(!matches!(m, Ws::Close(_)), "closed while parked: {m:?}");
        }
        panic!("the connection ended while parked");
    })
    .await;
    assert_eq!(hub.metrics.heartbeat_timeouts.load(SeqCst), 0);
    gate.release();
    let r = ran.clone();
    tokio::task::spawn_blocking(move || wait_until("six jobs", || r.lock().unwrap().len() == 6))
        .await
        .unwrap();
    assert_eq!(
        *ran.lock().unwrap(),
        [1, 2, 3, 4, 5, 6],
        "run in the order sent"
    );
}
