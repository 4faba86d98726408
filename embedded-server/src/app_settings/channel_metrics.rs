//! The channels app's counters of its access control and protocol errors, shared by the
//! configuration that builds the app and the hub that serves its connections.

use crate::jwt::AuthError;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Why a WebSocket channels message was answered with an error op (the label of
/// `ws_channels_protocol_errors_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolError {
    /// Not JSON, or not an object with a string `op`.
    BadJson,
    /// No channel, or a name that is empty or over 256 bytes.
    BadName,
    /// An op other than subscribe, unsubscribe, publish.
    UnknownOp,
    /// A binary frame (the connection is closed with 1003).
    Binary,
}

impl ProtocolError {
    const ALL: [ProtocolError; 4] = [
        ProtocolError::BadJson,
        ProtocolError::BadName,
        ProtocolError::UnknownOp,
        ProtocolError::Binary,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            ProtocolError::BadJson => "bad_json",
            ProtocolError::BadName => "bad_name",
            ProtocolError::UnknownOp => "unknown_op",
            ProtocolError::Binary => "binary",
        }
    }
}

/// Counters of the channels app's access control (rendered after the server's own metrics).
#[derive(Debug, Default)]
pub struct ChannelMetrics {
    auth_failures: [AtomicU64; AuthError::COUNT],
    /// Subscribes the connection's token did not allow.
    pub subscribe_denied: AtomicU64,
    /// Publishes the connection's token did not allow.
    pub publish_denied: AtomicU64,
    /// Subscribes refused because the connection held the most subscriptions allowed.
    pub subscription_cap: AtomicU64,
    /// Connections closed (1008) because their token expired.
    pub token_expired_closes: AtomicU64,
    protocol_errors: [AtomicU64; 4],
    /// Subscribes that asked to recover, by result ([`RECOVERY_RESULTS`]'s order).
    recoveries: [AtomicU64; 6],
    /// Publications sent by recoveries.
    pub recovered_publications: AtomicU64,
}

/// The results of a recovery (the `result` label of `ws_channels_recoveries_total`): recovered,
/// or why not (`hub::history::Unrecoverable::reason`, and `off` without history).
pub const RECOVERY_RESULTS: [&str; 6] = [
    "recovered",
    "epoch",
    "too_old",
    "too_many",
    "too_large",
    "off",
];

impl ChannelMetrics {
    /// Count an upgrade refused for `e`.
    pub fn auth_failed(&self, e: AuthError) {
        self.auth_failures[e as usize].fetch_add(1, Relaxed);
    }

    /// Count a WebSocket message refused for `e`.
    pub fn protocol_error(&self, e: ProtocolError) {
        self.protocol_errors[e as usize].fetch_add(1, Relaxed);
    }

    /// Count a subscribe that asked to recover, by its result (`recovered`, `epoch`, `too_old`, `too_many`, `too_large` or `off`).
    pub fn recovery(&self, result: &str) {
        if let Some(i) = RECOVERY_RESULTS.iter().position(|r| *r == result) {
            self.recoveries[i].fetch_add(1, Relaxed);
        }
    }

    /// Recoveries with `result` so far.
    pub fn recoveries(&self, result: &str) -> u64 {
        RECOVERY_RESULTS
            .iter()
            .position(|r| *r == result)
            .map_or(0, |i| self.recoveries[i].load(Relaxed))
    }

    /// Upgrades refused for `e` so far.
    pub fn auth_failures(&self, e: AuthError) -> u64 {
        self.auth_failures[e as usize].load(Relaxed)
    }

    /// Append the Prometheus text of these counters to `o`.
    pub fn render(&self, o: &mut String) {
        let _ = writeln!(
            o,
            "# HELP ws_channels_auth_failures_total Upgrades refused (401) by the channels app's \
             token check, by reason.\n# TYPE ws_channels_auth_failures_total counter"
        );
        for e in AuthError::ALL {
            let _ = writeln!(
                o,
                "ws_channels_auth_failures_total{{reason=\"{}\"}} {}",
                e.label(),
                self.auth_failures(e)
            );
        }
        let _ = writeln!(
            o,
            "# HELP ws_channels_protocol_errors_total WebSocket channels messages refused \
             (answered with an error op, or a 1003 close for binary), by reason.\n# TYPE \
             ws_channels_protocol_errors_total counter"
        );
        for e in ProtocolError::ALL {
            let _ = writeln!(
                o,
                "ws_channels_protocol_errors_total{{reason=\"{}\"}} {}",
                e.label(),
                self.protocol_errors[e as usize].load(Relaxed)
            );
        }
        let _ = writeln!(
            o,
            "# HELP ws_channels_denied_total Channel operations the connection's token did not \
             allow (answered with an error op), by op.\n# TYPE ws_channels_denied_total counter"
        );
        for (op, v) in [
            ("subscribe", &self.subscribe_denied),
            ("publish", &self.publish_denied),
        ] {
            let _ = writeln!(
                o,
                "ws_channels_denied_total{{op=\"{op}\"}} {}",
                v.load(Relaxed)
            );
        }
        let _ = writeln!(
            o,
            "# HELP ws_channels_recoveries_total Subscribes that asked to recover from a stream \
             position, by result (recovered, or why not).\n# TYPE ws_channels_recoveries_total \
             counter"
        );
        for (i, r) in RECOVERY_RESULTS.iter().enumerate() {
            let _ = writeln!(
                o,
                "ws_channels_recoveries_total{{result=\"{r}\"}} {}",
                self.recoveries[i].load(Relaxed)
            );
        }
        for (name, help, v) in [
            (
                "ws_channels_recovered_publications_total",
                "Publications sent by recoveries (what resubscribing clients had missed).",
                &self.recovered_publications,
            ),
            (
                "ws_channels_subscription_cap_total",
                "Subscribes refused because the connection held the most subscriptions allowed.",
                &self.subscription_cap,
            ),
            (
                "ws_channels_token_expired_closes_total",
                "Connections closed with 1008 because their token expired.",
                &self.token_expired_closes,
            ),
        ] {
            let _ = writeln!(
                o,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                v.load(Relaxed)
            );
        }
    }
}
