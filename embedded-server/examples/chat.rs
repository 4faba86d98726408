//! A chat room per path, with a token check on upgrade.
//!
//! ```text
//! cargo run -p embedded-server --example chat -- --port 9002    # or PORT=9002
//! # then, e.g. with websocat:
//! websocat 'ws://127.0.0.1:9002/chat/lobby?token=alice-token'
//! ```
//!
//! - `on_upgrade` authenticates: the token comes from the `token` query parameter or an
//!   `Authorization: Bearer` header and must be one of `CHAT_TOKENS` (`user:token,...`;
//!   default `alice:alice-token,bob:bob-token`). No token or a wrong one: 401, before any
//!   WebSocket exists. The room is the path (`/chat/ROOM`); anything else is 404. The user
//!   and room become the connection's typed state.
//! - Each text message goes to everyone in the room as
//!   `{"room":..,"from":..,"text":..}`, encoded once (the hub's channels); joins and leaves
//!   are announced as `{"room":..,"event":"joined"|"left","user":..}`.

use embedded_server::wstune::Launch;
use embedded_server::{Conn, Handler, Message, Request, Server, ServerConfig, Upgrade};
use std::collections::HashMap;

/// Who a connection is and where it talks (set once, on upgrade).
pub struct Member {
    /// The user the token belongs to.
    pub user: String,
    /// The room (a channel on the hub).
    pub room: String,
}

/// The chat application: the tokens it accepts.
pub struct Chat {
    tokens: HashMap<String, String>,
}

impl Chat {
    /// Tokens from `user:token,user:token`.
    pub fn new(spec: &str) -> Result<Chat, String> {
        let mut tokens = HashMap::new();
        for pair in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (user, token) = pair
                .split_once(':')
                .ok_or_else(|| format!("'{pair}' is not user:token"))?;
            tokens.insert(token.to_string(), user.to_string());
        }
        if tokens.is_empty() {
            return Err("no tokens: set CHAT_TOKENS to user:token,...".into());
        }
        Ok(Chat { tokens })
    }

    /// The user whose token this is. Compared in constant time per candidate, so the
    /// response time does not tell an attacker how much of a guess was right.
    fn user(&self, token: &str) -> Option<&str> {
        let mut found = None;
        for (t, user) in &self.tokens {
            if t.len() == token.len()
                && t.bytes()
                    .zip(token.bytes())
                    .fold(0u8, |d, (a, b)| d | (a ^ b))
                    == 0
            {
                found = Some(user.as_str());
            }
        }
        found
    }
}

impl Handler for Chat {
    type State = Member;

    fn on_upgrade(&self, req: &Request<'_>) -> Upgrade<Member> {
        let room = match req.path().strip_prefix("/chat/") {
            Some(r) if !r.is_empty() && r.len() <= 64 && !r.contains('/') => r,
            _ => return Upgrade::reject_with(404, "rooms are at /chat/ROOM"),
        };
        let token = req
            .query_param("token")
            .map(|t| t.into_owned())
            .or_else(|| {
                req.header("authorization")
                    .and_then(|h| h.strip_prefix("Bearer "))
                    .map(str::to_string)
            });
        let Some(user) = token.as_deref().and_then(|t| self.user(t)) else {
            return Upgrade::reject_with(401, "a valid token is required (?token=...)");
        };
        let member = Member {
            user: user.to_string(),
            room: room.to_string(),
        };
        // Speak the versioned subprotocol to a client that asks for it.
        if req.protocols().any(|p| p == "chat.v1") {
            Upgrade::accept(member).with_protocol("chat.v1")
        } else {
            Upgrade::accept(member)
        }
    }

    fn on_open(&self, conn: &Conn<Member>) {
        let m = conn.state();
        if conn.subscribe(&m.room).is_ok() {
            let event = serde_json::json!({"room": m.room, "event": "joined", "user": m.user});
            conn.publish(&m.room, Message::Text(&event.to_string()));
        }
    }

    fn on_message(&self, conn: &Conn<Member>, msg: Message<'_>) {
        let m = conn.state();
        match msg {
            Message::Text(text) => {
                let out = serde_json::json!({"room": m.room, "from": m.user, "text": text});
                conn.publish(&m.room, Message::Text(&out.to_string()));
            }
            Message::Binary(_) => {
                let _ = conn.close(1003, "this chat speaks text");
            }
        }
    }

    fn on_close(&self, conn: &Conn<Member>, _code: u16, _reason: &str) {
        // The hub already took the connection out of its room; the others hear it left.
        let m = conn.state();
        let event = serde_json::json!({"room": m.room, "event": "left", "user": m.user});
        conn.publish(&m.room, Message::Text(&event.to_string()));
    }
}

/// The server as the example runs it, with tokens from `spec` (`user:token,...`) (the test
/// builds it; `main` runs the same handler through `Launch`).
#[allow(dead_code)]
pub fn server(spec: &str) -> Result<Server<Chat>, String> {
    Server::with_handler(ServerConfig::default(), Chat::new(spec)?).map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let fail = |e: String| -> ! {
        eprintln!("chat: {e}");
        std::process::exit(2)
    };
    let mut args = std::env::args().skip(1);
    let port = match (args.next().as_deref(), args.next()) {
        (Some("--port"), Some(p)) => Some(p),
        (None, _) => None,
        (Some(other), _) => fail(format!("unknown argument '{other}': use --port N")),
    }
    .or_else(|| std::env::var("PORT").ok())
    .map_or(Ok(9002), |p| p.parse::<u16>())
    .unwrap_or_else(|_| fail("the port must be a number (0-65535)".into()));
    let spec =
        std::env::var("CHAT_TOKENS").unwrap_or_else(|_| "alice:alice-token,bob:bob-token".into());
    let chat = Chat::new(&spec).unwrap_or_else(|e| fail(e));
    // Under `wstune serve --self-test --command`, wstune's address and the profile's tuning
    // replace these defaults (see `embedded_server::wstune`). Its clients connect to `/` with
    // no token, which this server refuses; measure it with `wstune selftest --url
    // 'ws://127.0.0.1:9002/chat/lobby?token=alice-token' --pid PID` instead.
    let launch = Launch::from_env(ServerConfig::default(), ([127, 0, 0, 1], port).into())
        .unwrap_or_else(|e| fail(e.to_string()));
    println!(
        "chat: clients connect to ws://{}/chat/ROOM?token=TOKEN",
        launch.listen
    );
    launch.run(chat).await
}
