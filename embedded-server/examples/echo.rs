//! The smallest application: every message back to its sender.
//!
//! ```text
//! cargo run -p embedded-server --example echo -- --port 9001    # or PORT=9001; 0 = any free port
//! ```
//!
//! Replies sent from `on_message` join the read's corked batch: 16 pipelined messages cost one
//! write, the path `wstune serve` (whose echo is this same handler) is benchmarked on.

use embedded_server::wstune::Launch;
use embedded_server::{Conn, Handler, Message, Request, Server, ServerConfig, Upgrade};

/// Echo on any path.
pub struct Echo;

impl Handler for Echo {
    type State = ();

    fn on_upgrade(&self, _req: &Request<'_>) -> Upgrade<()> {
        Upgrade::accept(())
    }

    fn on_message(&self, conn: &Conn, msg: Message<'_>) {
        // `Err(Closed)` only once the connection is closing: nothing to do then.
        let _ = conn.send(msg);
    }
}

/// The server as the example runs it (the test builds the same one).
pub fn server() -> Server<Echo> {
    Server::with_handler(ServerConfig::default(), Echo).expect("the default configuration is valid")
}

/// The port from `--port N` or `PORT`, default 9001.
pub fn port() -> Result<u16, String> {
    let mut args = std::env::args().skip(1);
    let flag = match (args.next().as_deref(), args.next()) {
        (Some("--port"), Some(p)) => Some(p),
        (None, _) => None,
        (Some(other), _) => return Err(format!("unknown argument '{other}': use --port N")),
    };
    match flag.or_else(|| std::env::var("PORT").ok()) {
        Some(p) => p
            .parse()
            .map_err(|_| format!("'{p}' is not a port number (0-65535)")),
        None => Ok(9001),
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port = port().unwrap_or_else(|e| {
        eprintln!("echo: {e}");
        std::process::exit(2)
    });
    // Under `wstune serve --self-test --command`, wstune's address and the profile's tuning
    // replace these defaults (see `embedded_server::wstune`).
    let launch = Launch::from_env(ServerConfig::default(), ([127, 0, 0, 1], port).into())
        .unwrap_or_else(|e| {
            eprintln!("echo: {e}");
            std::process::exit(2)
        });
    launch.run(Echo).await
}
