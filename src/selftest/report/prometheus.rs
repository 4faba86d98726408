//! The self-test's figures as Prometheus text exposition (`--out-prometheus FILE`), for
//! node_exporter's textfile collector: a scheduled self-test becomes a dashboard and an alert.
//!
//! Gauges only, in base units (seconds, messages per second, ratios), with bounded labels: the
//! profile, the scenario, a percentile, a check's name and status. Latency is labelled
//! `percentile` (`p50` .. `max`), not `quantile`: that label belongs to summaries, whose
//! `_sum` and `_count` a one-off run's figures are not (promtool refuses it on a gauge). The verdict carries its scope
//! (`scope`, `full_size`) so a small run is never read as a proof for the profile. A textfile
//! gauge goes stale silently: alert on `time() - wstune_selftest_last_run_timestamp_seconds`.

use super::scope::Scope;
use super::Report;
use crate::output::prometheus_label as esc;
use std::fmt::Write;

/// One metric family: its HELP and TYPE lines, then its samples.
struct Family<'a> {
    out: &'a mut String,
}

impl Family<'_> {
    fn start<'a>(out: &'a mut String, name: &str, help: &str) -> Family<'a> {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        Family { out }
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", esc(v)))
            .collect();
        let _ = writeln!(
            self.out,
            "{name}{{{}}} {}",
            labels.join(","),
            value_text(value)
        );
    }
}

/// The restart scenario's figures (only when it ran): its back times are the latency family's
/// `scenario="restart"` samples.
fn restart_families(o: &mut String, r: &Report, p: (&str, &str)) {
    let runs: Vec<_> = r
        .scenarios
        .iter()
        .filter_map(|s| Some((s.scenario.name(), s.own.restart()?)))
        .collect();
    if runs.is_empty() {
        return;
    }
    type Pick = fn(&crate::selftest::restart::RestartReport) -> Option<f64>;
    let each: [(&str, &str, Pick); 5] = [
        (
            "wstune_selftest_restart_closed_connections",
            "restart: connections the server ended (close frame, reset or end of stream).",
            |x| Some(x.closed as f64),
        ),
        (
            "wstune_selftest_restart_not_back_connections",
            "restart: connections still down when the window ended.",
            |x| Some(x.not_back as f64),
        ),
        (
            "wstune_selftest_restart_all_back_seconds",
            "restart: from the disruption until the last client was back (absent: one never was).",
            |x| x.all_back_secs,
        ),
        (
            "wstune_selftest_restart_peak_accepts_per_second",
            "restart: reconnect upgrades per second in the best one-second window.",
            |x| Some(x.peak_accept_rate),
        ),
        (
            "wstune_selftest_restart_listen_overflows",
            "restart: growth of TcpExt ListenOverflows over the window (a server on this host).",
            |x| x.kernel.as_ref().map(|k| k.listen_overflows as f64),
        ),
    ];
    for (n, help, pick) in each {
        let mut f = Family::start(o, n, help);
        for (name, x) in &runs {
            if let Some(v) = pick(x) {
                f.sample(n, &[p, ("scenario", name)], v);
            }
        }
    }
    let n = "wstune_selftest_restart_refused_attempts";
    let mut f = Family::start(
        o,
        n,
        "restart: reconnect attempts refused, by kind (rst, timeout, eof, http-503, ...).",
    );
    for (name, x) in &runs {
        for (kind, v) in &x.refused {
            f.sample(n, &[p, ("scenario", name), ("kind", kind)], *v as f64);
        }
    }
}

/// Prometheus's float syntax: integers without a fraction, and never a bare `inf`.
fn value_text(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        // Twelve significant digits: the float noise of a unit conversion (0.004187000000000001)
        // is no part of a measurement.
        let scale = 10f64.powi(11 - v.abs().log10().floor() as i32);
        format!("{}", (v * scale).round() / scale)
    }
}

/// The run's standing: its verdict and scope, the connections it covers against the
/// profile's, and (serve --self-test) whether the host check passed.
fn verdict_families(o: &mut String, r: &Report, scope: &Scope, p: (&str, &str)) {
    let n = "wstune_selftest_verdict";
    Family::start(
        o,
        n,
        "The self-test's verdict (1 for the one it reached). scope: load, or load_and_host \
         (serve --self-test); full_size: whether it ran at the profile's connection count \
         (false: not a proof for the profile).",
    )
    .sample(
        n,
        &[
            p,
            ("verdict", scope.verdict_label()),
            ("scope", scope.scope_label()),
            ("full_size", if scope.full_size { "true" } else { "false" }),
        ],
        1.0,
    );
    let n = "wstune_selftest_connections";
    Family::start(
        o,
        n,
        "Connections the verdict covers (the smallest count any scenario ran with).",
    )
    .sample(n, &[p], scope.conns as f64);
    let n = "wstune_selftest_profile_connections";
    Family::start(
        o,
        n,
        "The profile's connection count: a proof needs this many.",
    )
    .sample(n, &[p], scope.profile_conns as f64);
    if let Some(host_ok) = r.verdict.host_pass {
        let n = "wstune_selftest_host_ready";
        Family::start(
            o,
            n,
            "1 when the host check before the load found no failure (serve --self-test).",
        )
        .sample(n, &[p], if host_ok { 1.0 } else { 0.0 });
    }
}

/// The report as a textfile-collector file; `stopped`: the error that ended the run early
/// (its verdict is then a miss, as its exit code); `unix_time`: when the run ended.
pub fn prometheus(r: &Report, stopped: Option<&str>, unix_time: u64) -> String {
    let scope = Scope::of(r, stopped);
    let profile = r.targets.profile.as_str();
    let p = ("profile", profile);
    let mut o = String::new();
    verdict_families(&mut o, r, &scope, p);

    let n = "wstune_selftest_latency_seconds";
    let mut f = Family::start(
        &mut o,
        n,
        "Message latency by percentile, p50 to max (echo: from when each message was due; storm: connect \
         and first echo; broadcast: to each subscriber).",
    );
    for s in r.scenarios.iter().filter(|s| s.latency_ms.count > 0) {
        let l = &s.latency_ms;
        for (q, ms) in [
            ("p50", l.p50),
            ("p90", l.p90),
            ("p99", l.p99),
            ("p99.9", l.p999),
            ("max", l.max),
        ] {
            f.sample(
                n,
                &[p, ("scenario", s.scenario.name()), ("percentile", q)],
                ms / 1000.0,
            );
        }
    }
    type Pick = fn(&crate::selftest::ScenarioReport, usize) -> Option<f64>;
    let per_scenario: [(&str, &str, Pick); 7] = [
        (
            "wstune_selftest_offered_messages_per_second",
            "Messages per second the open-loop scenarios offered, in total.",
            |s, _| s.offered_rate,
        ),
        (
            "wstune_selftest_achieved_messages_per_second",
            "Echoes (or deliveries) per second over the measured window.",
            |s, _| Some(s.achieved_rate),
        ),
        (
            "wstune_selftest_errors",
            "Errors the generator met (failed connects, protocol errors).",
            |s, _| Some(s.errors as f64),
        ),
        (
            "wstune_selftest_server_closes",
            "Connections the server closed during the scenario.",
            |s, _| Some(s.disconnects as f64),
        ),
        (
            "wstune_selftest_lost_messages",
            "Messages never answered by the end of the scenario.",
            |s, _| Some(s.lost as f64),
        ),
        (
            "wstune_selftest_server_cpu_ratio",
            "The server's CPU over the scenario as a share of the host's cores (1: every core busy).",
            |s, cores| s.server.as_ref().map(|x| x.cpu_pct / 100.0 / cores as f64),
        ),
        (
            "wstune_selftest_generator_cpu_ratio",
            "The load generator's CPU over the scenario as a share of the host's cores.",
            |s, cores| Some(s.generator.cpu_pct / 100.0 / cores as f64),
        ),
    ];
    let cores = r.cores.max(1);
    for (n, help, pick) in per_scenario {
        let mut f = Family::start(&mut o, n, help);
        for s in &r.scenarios {
            if let Some(v) = pick(s, cores).filter(|v| v.is_finite()) {
                f.sample(n, &[p, ("scenario", s.scenario.name())], v);
            }
        }
    }

    restart_families(&mut o, r, p);

    let n = "wstune_selftest_check";
    let mut f = Family::start(
        &mut o,
        n,
        "One load check (1 for the status it has): ok, fail, or not_judged (its window was too \
         noisy, or a threshold's figure was not measured).",
    );
    for c in &r.verdict.checks {
        let status = match (c.judged, c.ok) {
            (false, _) => "not_judged",
            (true, true) => "ok",
            (true, false) => "fail",
        };
        f.sample(
            n,
            &[
                p,
                ("scenario", c.scenario.name()),
                ("check", &c.what),
                ("status", status),
            ],
            1.0,
        );
    }
    let n = "wstune_selftest_last_run_timestamp_seconds";
    Family::start(
        &mut o,
        n,
        "When the self-test ended (Unix time). Alert when it grows stale: the file stays \
         behind when the scheduled run stops.",
    )
    .sample(n, &[p], unix_time as f64);
    o
}

#[cfg(test)]
mod tests {
    use super::super::tests::{echo, report};
    use super::prometheus;
    use crate::selftest::report::combine;
    use crate::selftest::Scenario;

    fn samples(text: &str) -> Vec<&str> {
        text.lines().filter(|l| !l.starts_with('#')).collect()
    }

    #[test]
    fn the_verdict_carries_its_scope_and_every_check_its_status() {
        let mut slow = echo(Scenario::EchoRate, 9.0, 0.0);
        slow.latency_ms.p50 = 2.0;
        let noisy = echo(Scenario::Deflate, 1.0, 100.0);
        let r = report(vec![slow, noisy], false, true);
        let text = prometheus(&r, None, 1_700_000_000);
        let s = samples(&text);
        assert!(s.contains(
            &"wstune_selftest_verdict{profile=\"10k\",verdict=\"miss\",scope=\"load_and_host\",full_size=\"true\"} 1"
        ), "{text}");
        assert!(s.contains(&"wstune_selftest_latency_seconds{profile=\"10k\",scenario=\"echo-rate\",percentile=\"p99\"} 0.009"), "{text}");
        assert!(s.contains(&"wstune_selftest_latency_seconds{profile=\"10k\",scenario=\"echo-rate\",percentile=\"p50\"} 0.002"), "{text}");
        assert!(s.contains(&"wstune_selftest_check{profile=\"10k\",scenario=\"echo-rate\",check=\"p99 latency\",status=\"fail\"} 1"), "{text}");
        assert!(s.contains(&"wstune_selftest_check{profile=\"10k\",scenario=\"deflate\",check=\"p99 latency\",status=\"not_judged\"} 1"), "{text}");
        assert!(s.contains(&"wstune_selftest_check{profile=\"10k\",scenario=\"echo-rate\",check=\"no errors\",status=\"ok\"} 1"), "{text}");
        assert!(s.contains(&"wstune_selftest_offered_messages_per_second{profile=\"10k\",scenario=\"echo-rate\"} 2000"), "{text}");
        assert!(
            s.contains(&"wstune_selftest_last_run_timestamp_seconds{profile=\"10k\"} 1700000000"),
            "{text}"
        );
        assert!(
            s.contains(&"wstune_selftest_host_ready{profile=\"10k\"} 1"),
            "{text}"
        );
        assert_eq!(
            s.iter()
                .filter(|l| l.starts_with("wstune_selftest_check{"))
                .count(),
            r.verdict.checks.len()
        );
        // Every family is declared once, as a gauge.
        for l in text.lines().filter(|l| l.starts_with("# TYPE")) {
            assert!(l.ends_with(" gauge"), "{l}");
            assert_eq!(text.matches(&format!("{l}\n")).count(), 1, "{l}");
        }
    }

    #[test]
    fn a_small_run_is_a_pass_that_says_it_is_not_full_size_and_labels_are_escaped() {
        let mut r = report(vec![echo(Scenario::EchoRate, 1.0, 0.0)], false, false);
        r.conns = 100;
        r.scenarios[0].conns_requested = 100;
        r.targets.profile = "my \"big\" profile\\1\n".into();
        combine(&mut r, false);
        let text = prometheus(&r, None, 1);
        assert!(text.contains(
            "wstune_selftest_verdict{profile=\"my \\\"big\\\" profile\\\\1\\n\",verdict=\"pass\",scope=\"load\",full_size=\"false\"} 1"
        ), "{text}");
        assert!(
            text.contains(
                "wstune_selftest_connections{profile=\"my \\\"big\\\" profile\\\\1\\n\"} 100\n"
            ),
            "{text}"
        );
        assert!(
            !text.contains("wstune_selftest_host_ready"),
            "no host in a selftest verdict"
        );
    }
}
