//! clap's side of the value enums a flag parses into. The enums live beside their meaning
//! (`selftest::Scenario`, `lb::Kind`, `lb::Sticky`) and know nothing of clap; here each is given
//! its command-line names and the help line `--help` lists for it.

use crate::lb::{Kind, Sticky};
use crate::selftest::Scenario;
use clap::builder::PossibleValue;
use clap::ValueEnum;

impl ValueEnum for Scenario {
    fn value_variants<'a>() -> &'a [Self] {
        &[
            Scenario::Idle,
            Scenario::EchoRate,
            Scenario::Deflate,
            Scenario::EchoSat,
            Scenario::Storm,
            Scenario::TlsHandshake,
            Scenario::Broadcast,
            Scenario::Restart,
        ]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        let (name, help) = match self {
            Scenario::Idle => (
                "idle",
                "N connections held open: server memory per connection and idle CPU",
            ),
            Scenario::EchoRate => (
                "echo-rate",
                "Open loop: N clients x R msgs/s, latency from each message's scheduled time",
            ),
            Scenario::Deflate => (
                "deflate",
                "echo-rate with permessage-deflate negotiated and JSON payloads",
            ),
            Scenario::EchoSat => (
                "echo-sat",
                "Closed loop: a fixed number of messages in flight per connection; maximum throughput",
            ),
            Scenario::Storm => (
                "storm",
                "N clients connect at once, send one message, wait for the echo",
            ),
            Scenario::TlsHandshake => (
                "tls-handshake",
                "wss:// only: clients connect, handshake, upgrade and close in a loop; TLS handshakes per server core",
            ),
            Scenario::Broadcast => (
                "broadcast",
                "N subscribers; a publisher's timestamped message, time until the last one has it",
            ),
            Scenario::Restart => (
                "restart",
                "N connections held, the server restarted or drained; reconnects with backoff, refusals, time until every client is back (not in the default list)",
            ),
            // Run by --script FILE, not chosen by name: not among the values.
            Scenario::Script => return None,
        };
        Some(PossibleValue::new(name).help(help))
    }
}

impl ValueEnum for Kind {
    fn value_variants<'a>() -> &'a [Self] {
        &[Kind::Haproxy, Kind::Nginx]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(match self {
            Kind::Haproxy => "haproxy",
            Kind::Nginx => "nginx",
        }))
    }
}

impl ValueEnum for Sticky {
    fn value_variants<'a>() -> &'a [Self] {
        &[Sticky::Cookie, Sticky::Source]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Sticky::Cookie => {
                PossibleValue::new("cookie").help("HAProxy inserts a cookie naming the backend")
            }
            Sticky::Source => {
                PossibleValue::new("source").help("The client's address picks the backend")
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names are also the JSON report's (serde) for scenarios: one spelling each.
    #[test]
    fn every_scenario_parses_from_its_own_name_and_matches_its_json_name() {
        for s in Scenario::value_variants() {
            let name = s.to_possible_value().unwrap().get_name().to_string();
            assert_eq!(Scenario::from_str(&name, false), Ok(*s));
            assert_eq!(serde_json::to_string(s).unwrap(), format!("\"{name}\""));
        }
    }
}
