//! The restart scenario in the report: its checks against the profile's `selftest.restart`,
//! and its lines in the table.

use crate::profile::RestartTargets;
use crate::selftest::ScenarioReport;

/// The restart scenario's checks: the server was disrupted, every client came back, and
/// (the profile's, unless `--no-default-checks`) the back p99, the refused attempts and the
/// accept queue's overflows within `selftest.restart`.
pub(crate) fn restart_checks(
    s: &ScenarioReport,
    t: &RestartTargets,
    defaults: bool,
) -> Vec<(&'static str, bool, String)> {
    let Some(r) = s.own.restart() else {
        return vec![(
            "server restarted",
            false,
            "no restart figures were reported".into(),
        )];
    };
    let mut out = vec![
        (
            "server restarted",
            r.closed > 0,
            format!(
                "{} of {} connections closed by the restart ({})",
                r.closed, s.conns_connected, r.restart_by
            ),
        ),
        (
            "every client back",
            r.closed > 0 && r.not_back == 0,
            format!(
                "{} reconnected, {} still down at the end{}",
                r.back,
                r.not_back,
                r.all_back_secs
                    .map(|t| format!("; all back {t:.2} s after the restart"))
                    .unwrap_or_default()
            ),
        ),
    ];
    if defaults {
        out.push((
            "back p99",
            r.back_ms.count > 0 && r.back_ms.p99 <= t.back_p99_ms as f64,
            format!(
                "{:.0} ms from close to new upgrade (selftest.restart.back_p99_ms {})",
                r.back_ms.p99, t.back_p99_ms
            ),
        ));
        out.push((
            "refused reconnects",
            r.refused_total <= t.max_refused,
            format!(
                "{} refused (selftest.restart.max_refused {})",
                r.refused_total, t.max_refused
            ),
        ));
        if let Some(k) = &r.kernel {
            out.push((
                "accept queue held",
                k.listen_overflows <= t.max_listen_overflows,
                format!(
                    "TcpExt ListenOverflows +{} (selftest.restart.max_listen_overflows {})",
                    k.listen_overflows, t.max_listen_overflows
                ),
            ));
        }
    }
    out
}

/// The restart figures, one line each, for the table.
pub(crate) fn restart_lines(s: &ScenarioReport) -> Vec<String> {
    let Some(r) = s.own.restart() else {
        return Vec::new();
    };
    let mut out = vec![
        format!(
            "restart by {}{}",
            r.restart_by,
            r.disruption
                .as_ref()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        ),
        format!(
            "closed {} ({} without a close frame; codes {}), reconnect attempts {}, back {}, \
             still down {}",
            r.closed,
            r.without_close_frame,
            if s.close_codes.is_empty() {
                "none".to_string()
            } else {
                s.close_codes
                    .iter()
                    .map(|(c, n)| format!("{c} x{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            r.attempts,
            r.back,
            r.not_back
        ),
        format!(
            "refused {}{}",
            r.refused_total,
            if r.refused.is_empty() {
                String::new()
            } else {
                format!(
                    " ({})",
                    r.refused
                        .iter()
                        .map(|(k, n)| format!("{k} {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ),
        format!(
            "back: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; all back {}; peak accept rate \
             {:.0} upgrades/s",
            r.back_ms.p50,
            r.back_ms.p99,
            r.back_ms.max,
            r.all_back_secs
                .map(|t| format!("after {t:.2} s"))
                .unwrap_or_else(|| "never".into()),
            r.peak_accept_rate
        ),
    ];
    if let Some(k) = &r.kernel {
        out.push(format!(
            "kernel: ListenOverflows +{}, ListenDrops +{}, TCPReqQFullDrop +{}, \
             TCPReqQFullDoCookies +{}, SyncookiesSent +{}, AttemptFails +{}, EstabResets +{}",
            k.listen_overflows,
            k.listen_drops,
            k.req_q_full_drop,
            k.req_q_full_do_cookies,
            k.syncookies_sent,
            k.attempt_fails,
            k.estab_resets
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::tests::{echo, report};
    use crate::selftest::restart::{from_counts, RestartCounts};
    use crate::selftest::{Latency, OwnFigures, Scenario, ScenarioReport};

    fn restart_run(not_back: u64, p99_ms: f64) -> ScenarioReport {
        let mut s = echo(Scenario::Restart, p99_ms, 0.0);
        s.disconnects = 200;
        s.close_codes = [(1001, 200)].into();
        let c = RestartCounts {
            closed: 200,
            attempts: 200 + 7,
            back: 200 - not_back,
            not_back,
            refused: [("rst".to_string(), 7)].into(),
            last_back_unix_ms: Some(4_000),
            upgrades: vec![(30, 150), (31, 200 - not_back - 150)],
            ..Default::default()
        };
        let back = Latency {
            count: 200 - not_back,
            p50: p99_ms / 2.0,
            p99: p99_ms,
            max: p99_ms,
            ..Default::default()
        };
        s.own = OwnFigures::of_restart(Some(from_counts(
            c,
            back,
            "sigterm".into(),
            2_000,
            None,
            None,
        )));
        s
    }

    /// Closes are a restart's measure, not a fault; a client still down, or a back p99 past
    /// the profile's `selftest.restart.back_p99_ms`, is a miss named by its check.
    #[test]
    fn a_restart_is_judged_by_the_clients_coming_back() {
        let r = report(vec![restart_run(0, 800.0)], true, false);
        let what: Vec<(&str, bool)> = r
            .verdict
            .checks
            .iter()
            .map(|c| (c.what.as_str(), c.ok))
            .collect();
        assert!(
            !what.iter().any(|(w, _)| *w == "no server closes"),
            "{what:?}"
        );
        for w in [
            "server restarted",
            "every client back",
            "back p99",
            "refused reconnects",
        ] {
            assert!(what.contains(&(w, true)), "{w}: {what:?}");
        }
        assert!(r.verdict.load_pass, "{what:?}");
        let r = report(vec![restart_run(3, 800.0)], true, false);
        assert!(!r.verdict.load_pass);
        let miss = r.verdict.checks.iter().find(|c| !c.ok).unwrap();
        assert_eq!(miss.what, "every client back");
        let r = report(vec![restart_run(0, 60_000.0)], true, false);
        let miss = r.verdict.checks.iter().find(|c| !c.ok).unwrap();
        assert_eq!(miss.what, "back p99");
    }

    #[test]
    fn the_restart_figures_reach_the_table_and_prometheus() {
        let r = report(vec![restart_run(0, 800.0)], true, false);
        let lines = super::restart_lines(&r.scenarios[0]).join("\n");
        for words in [
            "restart by sigterm",
            "codes 1001 x200",
            "refused 7 (rst 7)",
            "after 2.00 s",
        ] {
            assert!(lines.contains(words), "'{words}': {lines}");
        }
        let text = super::super::prometheus(&r, None, 0);
        assert!(
            text.contains("wstune_selftest_restart_refused_attempts{profile=\"10k\",scenario=\"restart\",kind=\"rst\"} 7"),
            "{text}"
        );
        assert!(
            text.contains("wstune_selftest_restart_all_back_seconds{"),
            "{text}"
        );
        assert!(text.contains("wstune_selftest_restart_peak_accepts_per_second{profile=\"10k\",scenario=\"restart\"} 200"), "{text}");
    }
}
