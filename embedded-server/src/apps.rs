//! The built-in applications of `wstune serve --app`/`--handler`, written on the public
//! [`Handler`] API like any user's application, so the benchmarked and tested paths are the
//! API's own: echo (corked replies from `on_message`), the simulated handlers (work on the
//! offload pool, reply from there), broadcast (encode once for everybody) and channels (the
//! JSON pub/sub protocol of [`crate::hub`]).

use crate::config::{App, ServerConfig, SimulatedWork};
use crate::handler::{Conn, Handler, Message, Request, Upgrade};

/// One of the built-in applications, chosen by [`ServerConfig::app`] and
/// [`ServerConfig::handler`] (what [`Server::new`](crate::Server::new) serves).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// Every message back to its sender, from the I/O thread.
    Echo,
    /// Simulated work on the offload pool, then the echo from there.
    Simulated(SimulatedWork),
    /// Every message to every connection.
    Broadcast,
    /// The channels protocol (subscribe, unsubscribe, publish in JSON).
    Channels,
}

impl Builtin {
    /// The application `config` asks for.
    pub fn from_config(config: &ServerConfig) -> Builtin {
        match config.app {
            App::Echo if config.handler.offloaded() => Builtin::Simulated(config.handler),
            App::Echo => Builtin::Echo,
            App::Broadcast => Builtin::Broadcast,
            App::Channels => Builtin::Channels,
        }
    }
}

impl Handler for Builtin {
    type State = ();

    fn on_upgrade(&self, _req: &Request<'_>) -> Upgrade<()> {
        Upgrade::accept(())
    }

    fn on_message(&self, conn: &Conn, msg: Message<'_>) {
        match *self {
            Builtin::Echo => {
                let _ = conn.send(msg);
            }
            Builtin::Simulated(work) => {
                let reply_to = conn.clone();
                let msg = msg.to_owned();
                // The reply goes out once the job is counted: what /metrics says is never
                // behind what a client has seen.
                let _ = conn.offload_then(
                    move || crate::offload::simulate(work),
                    move |()| {
                        let _ = reply_to.send(msg.as_message());
                    },
                );
            }
            Builtin::Broadcast => conn.broadcast(msg),
            Builtin::Channels => match msg {
                Message::Text(t) => {
                    if let Some(reply) = conn.hub().channel_message(conn.shared(), t.as_bytes()) {
                        let _ = conn.send_text(&reply);
                    }
                }
                Message::Binary(_) => {
                    let _ = conn.close(1003, "the channels protocol is JSON text");
                }
            },
        }
    }

    fn uses_offload(&self) -> bool {
        matches!(self, Builtin::Simulated(_))
    }
}
