//! A handler whose work blocks (a database call), done on the offload pool so that the I/O
//! threads never wait for it.
//!
//! ```text
//! cargo run -p embedded-server --example offload_db -- --port 9003    # or PORT=9003
//! # send "get user:1" -> {"key":"user:1","value":"Ada"} about 20 ms later
//! ```
//!
//! `on_message` runs on an I/O thread, so it only parses the request and hands the lookup to
//! [`Conn::offload`]; the job blocks on the pool (bounded: when its queue is full this
//! connection stops being read, so TCP slows the client instead of memory growing) and
//! replies through its own clone of the `Conn`. Each job's wall, CPU and run-queue time is in
//! /metrics (`ws_handler_wall_seconds` and friends), so `wstune pool --measure` can size the
//! pool for it: here about 20 ms of blocking per request.

use embedded_server::wstune::Launch;
use embedded_server::{Conn, Handler, Message, Request, Server, ServerConfig, Upgrade};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// A blocking database stand-in: every query takes `latency` of the calling thread.
pub struct Db {
    rows: HashMap<String, String>,
    latency: Duration,
}

impl Db {
    /// A few rows, `latency` per query.
    pub fn demo(latency: Duration) -> Db {
        let rows = [("user:1", "Ada"), ("user:2", "Grace"), ("user:3", "Edsger")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Db { rows, latency }
    }

    /// Look a key up (blocks the calling thread, like a driver's synchronous call).
    pub fn get(&self, key: &str) -> Option<String> {
        std::thread::sleep(self.latency);
        self.rows.get(key).cloned()
    }
}

/// The application: `get KEY` in, `{"key":..,"value":..}` (or an error) out.
pub struct Lookup {
    db: Arc<Db>,
}

impl Handler for Lookup {
    type State = ();

    fn on_upgrade(&self, _req: &Request<'_>) -> Upgrade<()> {
        Upgrade::accept(())
    }

    fn on_message(&self, conn: &Conn, msg: Message<'_>) {
        let Message::Text(text) = msg else {
            let _ = conn.close(1003, "send text: get KEY");
            return;
        };
        let Some(key) = text.strip_prefix("get ").map(str::trim) else {
            let _ = conn.send_text(r#"{"error":"unknown request: send get KEY"}"#);
            return;
        };
        // Only owned data crosses to the pool: the key, the database, a clone of the Conn.
        let key = key.to_string();
        let db = self.db.clone();
        let reply_to = conn.clone();
        let queued = conn.offload(move || {
            let value = db.get(&key);
            let out = serde_json::json!({"key": key, "value": value});
            // `Err(Closed)` if the client left meanwhile: the answer has nobody to go to.
            let _ = reply_to.send_text(&out.to_string());
        });
        if let Err(e) = queued {
            let _ = conn.send_text(&serde_json::json!({ "error": e.to_string() }).to_string());
        }
    }
}

/// The example's own configuration: `pool` offload threads.
pub fn config(pool: usize) -> ServerConfig {
    ServerConfig {
        offload_pool_size: pool,
        offload_queue_size: 1024,
        ..ServerConfig::default()
    }
}

/// The application, `latency` per query.
pub fn app(latency: Duration) -> Lookup {
    Lookup {
        db: Arc::new(Db::demo(latency)),
    }
}

/// The server as the example runs it: `pool` offload threads, `latency` per query.
pub fn server(pool: usize, latency: Duration) -> Server<Lookup> {
    Server::with_handler(config(pool), app(latency)).expect("the example's configuration is valid")
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let port = match (args.next().as_deref(), args.next()) {
        (Some("--port"), Some(p)) => Some(p),
        (None, _) => None,
        (Some(other), _) => {
            eprintln!("offload_db: unknown argument '{other}': use --port N");
            std::process::exit(2)
        }
    }
    .or_else(|| std::env::var("PORT").ok())
    .map_or(Ok(9003), |p| p.parse::<u16>())
    .unwrap_or_else(|_| {
        eprintln!("offload_db: the port must be a number (0-65535)");
        std::process::exit(2)
    });
    // 16 threads: at 20 ms a query that is up to 800 queries a second. Under `wstune serve
    // --self-test --command` or `wstune pool --measure --command`, wstune's address, admin
    // listener and the profile's configuration (its pool size) replace these defaults.
    let launch = Launch::from_env(config(16), ([127, 0, 0, 1], port).into()).unwrap_or_else(|e| {
        eprintln!("offload_db: {e}");
        std::process::exit(2)
    });
    eprintln!("offload_db: send `get user:1`");
    launch.run(app(Duration::from_millis(20))).await
}
