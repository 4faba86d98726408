//! A look at the server before the load: one message on one connection while a second one
//! listens, to learn what kind of server it is. A scenario that cannot work against it (a
//! broadcast against an echo server, echoes against a channels server) is then refused with
//! what to run instead, not measured as "0 of 5000 deliveries" after a whole run.
//!
//! The message is a channels subscribe, which each kind answers its own way: an echo server
//! sends it back to the sender alone, a broadcast server to every client (the listener too),
//! wstune's channels server answers `{"op":"subscribed",...}`. Anything else (no answer, a
//! user's server with its own protocol, a server that wants a token) is no evidence, and
//! nothing is refused.

use super::client::{self, Incoming, Target};
use super::scenario::NeedsServer;
use super::{Refusal, Scenario};
use std::time::Duration;

/// What the probe learned of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The message came back to its sender, and no other client got it.
    Echo,
    /// Another client got the message.
    Broadcast,
    /// The server answered the subscribe in wstune's channels protocol.
    Channels,
}

impl Kind {
    fn described(self, url: &str) -> String {
        match self {
            Kind::Echo => format!(
                "{url} sent the probe's message back to its sender only: it is an echo server \
                 (what `wstune serve` runs by default)"
            ),
            Kind::Broadcast => format!(
                "{url} sent the probe's message to another client too: it is a broadcast \
                 server (`wstune serve --app broadcast`)"
            ),
            Kind::Channels => format!(
                "{url} answered the probe's subscribe in wstune's channels protocol: it is a \
                 channels server (`wstune serve --app channels`)"
            ),
        }
    }
}

/// The message the probe sends, on a channel no application uses.
pub const PROBE_CHANNEL: &str = "wstune-probe";

fn probe_message() -> String {
    serde_json::json!({"op": "subscribe", "channel": PROBE_CHANNEL}).to_string()
}

/// How long the probe waits for each of its two connections, for an answer, and for
/// the listener after the sender's echo (a broadcast server's relay to its other processes or
/// nodes takes a moment). A server that does not answer in time is no evidence: the run goes
/// on, and says what it meets.
pub const CONNECT_WITHIN: Duration = Duration::from_secs(2);
const ANSWER_WITHIN: Duration = Duration::from_secs(2);
const LISTENER_GRACE: Duration = Duration::from_millis(500);

/// What kind of server `target` is; None when the probe learned nothing (it could not
/// connect, nothing answered, or the answer fits no known kind).
pub async fn kind(target: &Target, tls: Option<&super::tls::TlsClient>) -> Option<Kind> {
    let session = match tls.filter(|_| target.tls) {
        Some(t) => Some(super::tls::Client::new(t).ok()?.session()),
        None => None,
    };
    let open = || async {
        tokio::time::timeout(
            CONNECT_WITHIN,
            client::connect(target, None, false, session.as_ref()),
        )
        .await
        .ok()?
        .ok()
    };
    // One after the other: a server that does not answer the first upgrade gets no second
    // connection waiting in its accept queue.
    let mut listener = open().await?;
    let mut sender = open().await?;
    let sent = probe_message();
    sender
        .writer
        .send(embedded_server::frame::OpCode::Text, sent.as_bytes())
        .await
        .ok()?;
    let start = tokio::time::Instant::now();
    let mut until = start + ANSWER_WITHIN;
    let mut answer: Option<Vec<u8>> = None;
    let mut sender_open = true;
    let mut listener_open = true;
    let found = loop {
        tokio::select! {
            m = sender.reader.next(), if sender_open && answer.is_none() => match m {
                Ok(Incoming::Message(m)) => {
                    answer = Some(m);
                    until = until.min(tokio::time::Instant::now() + LISTENER_GRACE);
                }
                Ok(Incoming::Ping(p)) => { let _ = sender.writer.pong(&p).await; }
                Ok(Incoming::Closed(_)) | Err(_) => sender_open = false,
            },
            m = listener.reader.next(), if listener_open => match m {
                Ok(Incoming::Message(m)) if m == sent.as_bytes() => break Some(Kind::Broadcast),
                Ok(Incoming::Message(_)) => {}
                Ok(Incoming::Ping(p)) => { let _ = listener.writer.pong(&p).await; }
                Ok(Incoming::Closed(_)) | Err(_) => listener_open = false,
            },
            _ = tokio::time::sleep_until(until) => break None,
        }
        if !sender_open && !listener_open {
            break None;
        }
    };
    let _ = sender.writer.close().await;
    let _ = listener.writer.close().await;
    found.or_else(|| answer.and_then(|a| of_answer(&a, sent.as_bytes())))
}

/// The kind an answer to the sender shows, when no other client got the message.
fn of_answer(answer: &[u8], sent: &[u8]) -> Option<Kind> {
    if answer == sent {
        return Some(Kind::Echo);
    }
    let v: serde_json::Value = serde_json::from_slice(answer).ok()?;
    match v.get("op").and_then(|o| o.as_str()) {
        Some("subscribed" | "error") => Some(Kind::Channels),
        _ => None,
    }
}

/// What the run needs of a server, to hold against what the probe found.
#[derive(Debug, Clone, Default)]
pub struct Needs {
    /// `--message`: a user's server that answers requests, not an echo.
    pub request: bool,
    /// The script's steps speak the channels protocol (subscribe, publish).
    pub script_channels: bool,
}

/// What to run instead when a broadcast needs a server that fans out.
const BROADCAST_SERVER: &str =
    "a broadcast server: `wstune serve --app broadcast` (give its URL as --broadcast-url)";

/// Why `scenario` cannot work against a server of `kind` at `url`, and what to run instead;
/// None when it can (or the probe says too little to refuse).
pub fn refusal(scenario: Scenario, kind: Kind, url: &str, needs: &Needs) -> Option<Refusal> {
    let found = kind.described(url);
    let needs_server = scenario.workload().needs_server();
    let (reason, instead) = match (needs_server, kind) {
        (NeedsServer::FanOut, Kind::Echo) => (
            format!(
                "broadcast needs a server that sends each message to every client, and {found}"
            ),
            vec![
                BROADCAST_SERVER.to_string(),
                "measure this echo server with --scenario echo-rate (or echo-sat, idle, storm, \
                 deflate)"
                    .to_string(),
            ],
        ),
        (NeedsServer::FanOut, Kind::Channels) => (
            format!(
                "broadcast needs a server that sends each message to every client, and {found}"
            ),
            vec![
                BROADCAST_SERVER.to_string(),
                "measure this channels server with --script FILE.yaml and subscribe and publish \
                 steps (docs/selftest.md)"
                    .to_string(),
            ],
        ),
        (NeedsServer::Echo, Kind::Broadcast) if !needs.request => (
            format!(
                "{} expects each message back at its sender alone, and {found}",
                scenario.name()
            ),
            vec![
                "an echo server: `wstune serve` (the echo app)".to_string(),
                "measure this broadcast server with --scenario broadcast".to_string(),
            ],
        ),
        (NeedsServer::Echo, Kind::Channels) if !needs.request => (
            format!(
                "{} expects each message back as it was sent, and {found}",
                scenario.name()
            ),
            vec![
                "an echo server: `wstune serve` (the echo app)".to_string(),
                "measure this channels server with --script FILE.yaml and subscribe and publish \
                 steps (docs/selftest.md)"
                    .to_string(),
            ],
        ),
        (NeedsServer::Scripted, Kind::Echo | Kind::Broadcast) if needs.script_channels => (
            format!(
                "the script's subscribe and publish steps speak wstune's channels protocol, and \
                 {found}"
            ),
            vec!["a channels server: `wstune serve --app channels`".to_string()],
        ),
        _ => return None,
    };
    Some(Refusal {
        scenario,
        url: url.to_string(),
        reason,
        instead,
    })
}

/// Whether a scenario's success depends on what kind of server it meets (idle holds and
/// handshakes work against any WebSocket server).
pub fn depends_on_kind(scenario: Scenario) -> bool {
    scenario.workload().needs_server() != NeedsServer::Any
}

/// Whether a script's sent text is a channels request (subscribe, unsubscribe, publish).
pub fn is_channels_request(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| {
        matches!(
            v.get("op").and_then(|o| o.as_str()),
            Some("subscribe" | "unsubscribe" | "publish")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_show_the_kind_of_server() {
        let sent = probe_message();
        assert_eq!(
            of_answer(sent.as_bytes(), sent.as_bytes()),
            Some(Kind::Echo)
        );
        assert_eq!(
            of_answer(
                br#"{"op":"subscribed","channel":"wstune-probe","offset":0}"#,
                sent.as_bytes()
            ),
            Some(Kind::Channels)
        );
        assert_eq!(of_answer(b"pong", sent.as_bytes()), None);
        assert_eq!(of_answer(br#"{"type":"hello"}"#, sent.as_bytes()), None);
    }

    #[test]
    fn only_pairs_that_cannot_work_are_refused() {
        let none = Needs::default();
        let url = "ws://127.0.0.1:1/";
        let r = refusal(Scenario::Broadcast, Kind::Echo, url, &none).unwrap();
        assert!(
            r.line().contains("wstune serve --app broadcast"),
            "{}",
            r.line()
        );
        assert!(r.line().contains("echo server"), "{}", r.line());
        assert!(refusal(Scenario::Broadcast, Kind::Broadcast, url, &none).is_none());
        assert!(refusal(Scenario::EchoRate, Kind::Echo, url, &none).is_none());
        assert!(refusal(Scenario::EchoRate, Kind::Broadcast, url, &none).is_some());
        assert!(refusal(Scenario::Storm, Kind::Channels, url, &none).is_some());
        assert!(refusal(Scenario::Idle, Kind::Channels, url, &none).is_none());
        // A user's server answering --message: its replies are not echoes anyway.
        let request = Needs {
            request: true,
            ..Needs::default()
        };
        assert!(refusal(Scenario::EchoRate, Kind::Channels, url, &request).is_none());
        let channels = Needs {
            script_channels: true,
            ..Needs::default()
        };
        let r = refusal(Scenario::Script, Kind::Echo, url, &channels).unwrap();
        assert!(r.line().contains("--app channels"), "{}", r.line());
        assert!(refusal(Scenario::Script, Kind::Channels, url, &channels).is_none());
        assert!(refusal(Scenario::Script, Kind::Echo, url, &none).is_none());
        assert!(is_channels_request(
            r#"{"op":"publish","channel":"a","data":1}"#
        ));
        assert!(!is_channels_request("hello"));
    }
}
