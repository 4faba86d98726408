use super::*;
use crate::selftest::noise::Disturbance;
use crate::selftest::Scenario;
use crate::selftest::{Latency, OwnFigures, ScenarioReport};

/// The table at a width where nothing wraps.
const WIDE: Layout = Layout {
    width: 1000,
    blocks: false,
    wrap: true,
};

pub(super) fn targets() -> Targets {
    Targets {
        profile: "10k".into(),
        connections: 200,
        p99_ms: 5.0,
        rate_per_client: 10.0,
        payload_bytes: 100,
        estimate: MemoryEstimate {
            server_bytes_per_conn: 0,
            kernel_bytes_per_socket: 0,
            bytes_per_conn: 0,
        },
        cpu: CpuTarget {
            messages_per_sec: 2000,
            ns_per_message: 14_000,
            cores: 1,
        },
        restart: Default::default(),
    }
}

fn disturbance(other_pct: f64) -> Disturbance {
    let (too_noisy, why) = crate::selftest::noise::judge(Some(0.0), Some(other_pct), 2);
    Disturbance {
        secs: 5.0,
        host_cores: 2,
        steal_pct: Some(0.0),
        other_cpu_pct: Some(other_pct),
        kernel_threads_cpu_pct: None,
        other_not_measured: None,
        too_noisy,
        why,
    }
}

/// An echo-rate at 200 x 10 msgs/s with this p99, on a window with this much other CPU.
#[test]
fn capacity_comes_from_echo_rate_and_says_when_the_rate_was_low() {
    let t = CpuTarget::of(&crate::profile::load("100k").unwrap().profile);
    assert_eq!((t.messages_per_sec, t.cores), (1_000_000, 20));
    let mut e = echo(Scenario::EchoRate, 1.0, 0.0);
    e.server_cpu_us_per_msg = Some(28.0);
    let mut d = echo(Scenario::Deflate, 1.0, 0.0);
    d.server_cpu_us_per_msg = Some(50.0);
    // echo-rate wins over deflate; 28 us is twice the profile's 14: twice the cores.
    let c = CapacityReport::of(&[d.clone(), e], &t, 2).unwrap();
    assert_eq!(c.scenario, "echo-rate");
    assert_eq!((c.cores_at_measured, c.cores_at_profile), (40, 20));
    let line = c.line();
    assert!(
        line.contains("28.0 us of CPU per message in echo-rate at 2000 msgs/s"),
        "{line}"
    );
    assert!(
        line.contains("need 40 core(s)") && line.contains("(20 at the profile's)"),
        "{line}"
    );
    assert!(
        line.contains("Measured at 0.2% of the profile's rate"),
        "{line}"
    );
    // Deflate alone serves; no server CPU read, no line.
    assert_eq!(CapacityReport::of(&[d], &t, 2).unwrap().scenario, "deflate");
    assert_eq!(
        CapacityReport::of(&[echo(Scenario::EchoRate, 1.0, 0.0)], &t, 2),
        None
    );
    // At the profile's own rate there is nothing to caveat.
    let full = CpuTarget {
        messages_per_sec: 2000,
        ..t
    };
    let mut e = echo(Scenario::EchoRate, 1.0, 0.0);
    e.server_cpu_us_per_msg = Some(14.0);
    assert!(!CapacityReport::of(&[e], &full, 2)
        .unwrap()
        .line()
        .contains("upper bound"));
}

pub(super) fn echo(scenario: Scenario, p99: f64, other_pct: f64) -> ScenarioReport {
    ScenarioReport {
        host_timeline: None,
        scenario,
        conns_requested: 200,
        conns_connected: 200,
        workers: 1,
        sources: 1,
        secs: 5.0,
        warmup_secs: 1.0,
        payload_bytes: 100,
        offered_rate: Some(2000.0),
        inflight: None,
        sent: 10_000,
        received: 10_000,
        achieved_rate: 2000.0,
        errors: 0,
        disconnects: 0,
        lost: 0,
        close_codes: Default::default(),
        latency_ms: Latency {
            count: 10_000,
            p99,
            ..Latency::default()
        },
        service_latency_ms: None,
        arrivals: None,
        server: None,
        generator: Default::default(),
        kernel: None,
        kernel_drops: None,
        echoes_per_server_cpu_sec: None,
        server_cpu_us_per_msg: None,
        storm_secs: None,
        connects_per_sec: None,
        broadcast_last_ms: None,
        broadcast_rounds: None,
        timeline: Vec::new(),
        disturbance: Some(disturbance(other_pct)),
        attempts: Vec::new(),
        incomplete: None,
        first_error: None,
        connect_ms: None,
        tls: None,
        handshakes_per_sec: None,
        handshakes_per_server_core_sec: None,
        steps: Vec::new(),
        started_unix_ms: None,
        own: OwnFigures::Common,
        histograms: None,
    }
}

pub(super) fn report(scenarios: Vec<ScenarioReport>, accept_noise: bool, host: bool) -> Report {
    let j = Judging {
        accept_noise,
        ..Judging::default()
    };
    judged(scenarios, &j, host)
}

pub(super) fn judged(scenarios: Vec<ScenarioReport>, j: &Judging, host: bool) -> Report {
    let t = targets();
    let verdict = verdict(&scenarios, &t, j);
    let mut r = Report {
        schema_version: SCHEMA_VERSION,
        url: "ws://127.0.0.1:1/".into(),
        program: None,
        skipped: Vec::new(),
        refused: Vec::new(),
        cores: 2,
        targets: t,
        conns: 200,
        scaled_down: Vec::new(),
        rate_note: None,
        server_processes: None,
        memory: None,
        capacity: None,
        memory_budget: None,
        host_check: Some(HostCheck {
            profile: "10k".into(),
            failed: Vec::new(),
            warnings: 0,
        }),
        shard: None,
        merged_from: None,
        baseline: None,
        scenarios,
        verdict,
    };
    combine(&mut r, host);
    r
}

#[test]
fn a_quiet_pass_is_a_pass_and_a_quiet_miss_a_miss() {
    let r = report(vec![echo(Scenario::EchoRate, 1.2, 3.0)], false, true);
    assert!(r.verdict.pass && !r.verdict.too_noisy && !r.verdict.inconclusive);
    assert!(r
        .verdict
        .summary
        .starts_with("PASS against profile 10k: load: PASS"));
    let r = report(vec![echo(Scenario::EchoRate, 9.0, 3.0)], false, true);
    assert!(!r.verdict.pass && !r.verdict.too_noisy && !r.verdict.inconclusive);
    assert!(r
        .verdict
        .summary
        .starts_with("MISS against profile 10k: load: MISS"));
}

#[test]
fn a_noisy_window_is_neither_pass_nor_miss() {
    // A pass under a CPU hog (other processes a whole core) is not a PASS...
    let r = report(vec![echo(Scenario::EchoRate, 1.2, 100.0)], false, true);
    assert!(
        !r.verdict.pass && r.verdict.too_noisy && r.verdict.inconclusive,
        "{:?}",
        r.verdict
    );
    assert!(
        r.verdict
            .summary
            .starts_with("NOT PROVEN against profile 10k: load: NOT PROVEN"),
        "{}",
        r.verdict.summary
    );
    assert!(r
        .verdict
        .summary
        .contains("host too noisy to judge it (other processes 100 % of a core in echo-rate)"));
    // ... and a miss under it is not a MISS, but it is shown, marked as not judged.
    let r = report(vec![echo(Scenario::EchoRate, 40.0, 100.0)], false, false);
    assert!(r.verdict.too_noisy && r.verdict.inconclusive);
    assert!(r
        .verdict
        .summary
        .starts_with("NOT PROVEN: load: NOT PROVEN at 200"));
    let t = table(&r, &WIDE);
    assert!(
        t.contains("MISS echo-rate p99 latency: 40.00 ms (target 5 ms) (not judged: the host was too noisy)"),
        "{t}"
    );
    assert!(
        t.contains("TOO NOISY to judge (other processes 100 % of a core)"),
        "{t}"
    );
}

#[test]
fn a_miss_on_a_quiet_window_is_not_hidden_by_noise_elsewhere() {
    // echo-rate missed on a quiet window (its re-measure, say); storm was too noisy: the
    // judged miss decides.
    let mut quiet_miss = echo(Scenario::EchoRate, 9.0, 3.0);
    quiet_miss.attempts.push(crate::selftest::Attempt {
        p99_ms: 30.0,
        service_p99_ms: None,
        achieved_rate: 2000.0,
        server_cpu_pct: Some(40.0),
        disturbance: Some(disturbance(100.0)),
        missed: vec!["p99 latency".into()],
    });
    let r = report(
        vec![quiet_miss, echo(Scenario::Storm, 1.0, 100.0)],
        false,
        false,
    );
    assert!(!r.verdict.pass && !r.verdict.too_noisy && !r.verdict.inconclusive);
    assert!(
        r.verdict.summary.starts_with("MISS: load: MISS"),
        "{}",
        r.verdict.summary
    );
    assert_eq!(
        r.verdict.noise.as_deref(),
        Some("other processes 100 % of a core in storm")
    );
    let t = table(&r, &WIDE);
    assert!(
        t.contains("measured 1 time before: p99 30.0 ms, server CPU 40%"),
        "{t}"
    );
    assert!(t.contains("missed p99 latency"), "{t}");
}

#[test]
fn server_closes_are_judged_on_any_window() {
    let mut closed = echo(Scenario::EchoRate, 1.0, 100.0);
    closed.disconnects = 3;
    let r = report(vec![closed], false, false);
    assert!(!r.verdict.too_noisy && !r.verdict.pass, "{:?}", r.verdict);
    assert!(r.verdict.summary.starts_with("MISS"));
}

#[test]
fn untimed_scenarios_and_accept_noise_are_judged_as_measured() {
    // idle holds connections: a busy host does not make it pass or fail.
    let r = report(vec![echo(Scenario::Idle, 0.0, 100.0)], false, false);
    assert!(r.verdict.pass, "{:?}", r.verdict);
    assert!(
        table(&r, &WIDE).contains("noisy (other processes 100 % of a core; not a timing verdict")
    );
    let r = report(vec![echo(Scenario::EchoRate, 1.0, 100.0)], true, false);
    assert!(r.verdict.pass && !r.verdict.too_noisy);
    let r = report(vec![echo(Scenario::EchoRate, 9.0, 100.0)], true, false);
    assert!(!r.verdict.pass && !r.verdict.inconclusive);
}

#[test]
fn a_noisy_run_with_a_failed_host_check_is_a_miss_not_exit_4() {
    let mut r = report(vec![echo(Scenario::EchoRate, 1.0, 100.0)], false, true);
    r.host_check
        .as_mut()
        .unwrap()
        .failed
        .push("fs.nr_open".into());
    combine(&mut r, true);
    assert!(r.verdict.too_noisy && !r.verdict.inconclusive);
    assert!(
        r.verdict
            .summary
            .starts_with("MISS against profile 10k: load: NOT PROVEN"),
        "{}",
        r.verdict.summary
    );
    assert!(r
        .verdict
        .summary
        .ends_with("host: NOT READY for 10k, 1 failed check"));
}

#[test]
fn the_budget_row_sums_servers_and_stores_and_needs_the_series() {
    let text = "# HELP ws_memory_budget_bytes x\nws_memory_budget_bytes 1000\n\
                ws_memory_budget_peak_bytes 250\n\
                ws_memory_budget_closes_total{store=\"queue\"} 2\n\
                ws_memory_budget_closes_total{store=\"input\"} 1\n\
                ws_memory_share_closes_total 4\nws_connections 7\n";
    let one = BudgetReport::from_metrics(text).unwrap();
    assert_eq!(
        one,
        BudgetReport {
            limit_bytes: 1000,
            peak_bytes: 250,
            budget_closes: 3,
            share_closes: 4
        }
    );
    assert_eq!((one + one).limit_bytes, 2000);
    assert!(
        one.line()
            .contains("at most 250 B of 1000 B (25.0%); 3 closed"),
        "{}",
        one.line()
    );
    assert_eq!(BudgetReport::from_metrics("ws_connections 7\n"), None);
}

fn with(thresholds: &[&str]) -> Judging {
    Judging {
        thresholds: thresholds.iter().map(|t| t.parse().unwrap()).collect(),
        ..Judging::default()
    }
}

#[test]
fn thresholds_that_hold_pass_and_a_miss_fails_naming_the_check() {
    let run = || vec![echo(Scenario::EchoRate, 1.2, 3.0)];
    let r = judged(
        run(),
        &with(&["echo-rate.p99 < 2ms", "*.error_rate <= 0.1%"]),
        false,
    );
    assert!(r.verdict.pass, "{}", r.verdict.summary);
    let user: Vec<_> = r.verdict.checks.iter().filter(|c| c.threshold).collect();
    assert_eq!(user.len(), 2);
    assert!(user.iter().all(|c| c.ok && c.judged));
    assert!(r.verdict.summary.contains("2 of 2 threshold checks held"));

    let r = judged(run(), &with(&["echo-rate.p99 < 1ms"]), false);
    assert!(!r.verdict.pass && !r.verdict.inconclusive);
    let miss = r.verdict.checks.iter().find(|c| c.threshold).unwrap();
    assert!(!miss.ok && miss.judged);
    assert_eq!(miss.detail, "1.20 ms (misses < 1.00 ms)");
    assert!(
        r.verdict.summary.starts_with("MISS")
            && r.verdict
                .summary
                .contains("missed: echo-rate.p99 < 1ms on echo-rate"),
        "{}",
        r.verdict.summary
    );
}

#[test]
fn a_threshold_without_its_figure_is_not_judged_and_the_run_is_not_proven() {
    // 10,000 latencies are too few for a p99.9 only below 1,000; make it 500.
    let mut e = echo(Scenario::EchoRate, 1.2, 3.0);
    e.latency_ms.count = 500;
    let r = judged(vec![e.clone()], &with(&["echo-rate.p999 < 50ms"]), false);
    assert!(!r.verdict.pass && r.verdict.inconclusive, "{:?}", r.verdict);
    assert_eq!(r.verdict.unmeasured.len(), 1);
    assert!(r.verdict.unmeasured[0].contains("500 samples, too few"));
    assert!(r.verdict.summary.starts_with("NOT PROVEN"));
    // The server's CPU was not sampled: not judged either.
    let r = judged(vec![e.clone()], &with(&["echo-rate.server_cpu < 1"]), false);
    assert!(r.verdict.inconclusive);
    assert!(r.verdict.unmeasured[0].contains("give --pid"));
    // A judged miss decides, whatever else could not be judged.
    let r = judged(
        vec![e],
        &with(&["echo-rate.server_cpu < 1", "echo-rate.p99 < 1ms"]),
        false,
    );
    assert!(!r.verdict.pass && !r.verdict.inconclusive);
    assert!(r.verdict.summary.starts_with("MISS"));
}

#[test]
fn a_threshold_on_a_noisy_window_is_shown_and_not_judged() {
    let r = judged(
        vec![echo(Scenario::EchoRate, 9.0, 95.0)],
        &with(&["echo-rate.p99 < 1ms"]),
        false,
    );
    let c = r.verdict.checks.iter().find(|c| c.threshold).unwrap();
    assert!(!c.ok && !c.judged);
    assert!(r.verdict.inconclusive && r.verdict.too_noisy);
}

#[test]
fn no_default_checks_leaves_the_profile_targets_to_the_thresholds() {
    // p99 9 ms misses the profile's 5 ms; the user's 10 ms holds.
    let j = Judging {
        no_default_checks: true,
        ..with(&["echo-rate.p99 < 10ms"])
    };
    let r = judged(vec![echo(Scenario::EchoRate, 9.0, 3.0)], &j, false);
    assert!(r.verdict.pass, "{}", r.verdict.summary);
    assert!(!r.verdict.checks.iter().any(|c| c.what == "p99 latency"));
    assert!(r.verdict.checks.iter().any(|c| c.what == "no errors"));
    let r = report(vec![echo(Scenario::EchoRate, 9.0, 3.0)], false, false);
    assert!(!r.verdict.pass);
}

/// A shard's echo-rate report whose histograms hold exactly `samples` (us).
fn shard(index: usize, count: usize, samples: &[u64]) -> Report {
    let mut h = crate::selftest::histo::histogram();
    for &v in samples {
        h.record(v).unwrap();
    }
    let mut s = echo(Scenario::EchoRate, 0.0, 0.0);
    s.latency_ms = crate::selftest::histo::latency(&h);
    s.sent = samples.len() as u64;
    s.received = samples.len() as u64;
    s.conns_requested = 100;
    s.conns_connected = 100;
    s.achieved_rate = 1000.0;
    s.started_unix_ms = Some(1_000_000 + index as u64 * 3);
    s.histograms = Some(crate::selftest::Histograms {
        latency: crate::selftest::histo::encode_packed(&h),
        service: None,
        connect: None,
        tls_handshake: None,
        rounds: Vec::new(),
    });
    let mut r = report(vec![s], false, false);
    r.conns = 100;
    r.shard = Some(crate::selftest::shard::Shard {
        index,
        count,
        start_at_unix_ms: 1_000_000,
        slot_secs: 60.0,
    });
    r
}

fn inputs(reports: Vec<Report>) -> Vec<ShardReport> {
    reports
        .into_iter()
        .enumerate()
        .map(|(i, report)| ShardReport {
            name: format!("s{i}.json"),
            report,
        })
        .collect()
}

#[test]
fn merged_shards_have_the_percentiles_of_every_sample_together() {
    // Three shards, each with its own distribution (one host slower than the others).
    let spread = |base: u64, n: u64| {
        (0..n)
            .map(|i| base + (i * 7919) % (base * 4))
            .collect::<Vec<_>>()
    };
    let samples = [spread(300, 5000), spread(800, 3000), spread(5000, 2000)];
    let mut all = crate::selftest::histo::histogram();
    for v in samples.iter().flatten() {
        all.record(*v).unwrap();
    }
    let shards = (0..3).map(|i| shard(i, 3, &samples[i])).collect();
    let m = merge_shards(inputs(shards), false).unwrap();
    let s = &m.scenarios[0];
    let want = crate::selftest::histo::latency(&all);
    assert_eq!(s.latency_ms.count, 10_000);
    assert_eq!(
        (
            s.latency_ms.p50,
            s.latency_ms.p99,
            s.latency_ms.p999,
            s.latency_ms.max
        ),
        (want.p50, want.p99, want.p999, want.max)
    );
    assert_eq!((s.sent, s.conns_connected, m.conns), (10_000, 300, 300));
    assert_eq!(s.achieved_rate, 3000.0);
    let from = m.merged_from.as_ref().unwrap();
    assert_eq!((from.count, from.start_skew_ms), (3, 6));
    assert_eq!(from.shards, vec![0, 1, 2]);
    // The merged report keeps its histograms, so merged reports read back and merge again.
    let back: Report = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
    assert_eq!(back.scenarios[0].histograms, s.histograms);
}

#[test]
fn reports_of_different_runs_or_missing_shards_are_refused_by_name() {
    let two = || vec![shard(0, 2, &[100]), shard(1, 2, &[200])];
    let err = |r: Vec<Report>, partial| merge_shards(inputs(r), partial).unwrap_err();
    let mut r = two();
    r[1].url = "ws://elsewhere:1/".into();
    assert!(err(r, false).contains("their URLs differ"));
    let mut r = two();
    r[1].shard.as_mut().unwrap().start_at_unix_ms += 1;
    assert!(err(r, false).contains("--start-at"));
    let mut r = two();
    r[1].shard.as_mut().unwrap().index = 0;
    assert!(err(r, false).contains("are both shard 0/2"));
    let mut r = two();
    r[1].scenarios[0].histograms = None;
    assert!(err(r, false).contains("carries no histograms"));
    let mut r = two();
    r[0].shard = None;
    assert!(err(r, false).contains("is not a shard's report"));
    let one = vec![shard(0, 3, &[100])];
    assert!(err(one, false).contains("shards 1, 2 of 3 missing"));
    let m = merge_shards(inputs(vec![shard(0, 3, &[100])]), true).unwrap();
    assert_eq!(m.merged_from.unwrap().shards, vec![0]);
}

#[test]
fn a_baseline_shows_each_figure_old_to_new_in_the_table_and_the_page() {
    let old = report(vec![echo(Scenario::EchoRate, 1.0, 0.0)], false, false);
    let mut new = report(vec![echo(Scenario::EchoRate, 1.5, 0.0)], false, false);
    new.baseline = Some(Baseline::of(&old, "old.json").unwrap());
    let t = table(&new, &WIDE);
    assert!(
        t.contains("vs baseline old.json (ws://127.0.0.1:1/):"),
        "{t}"
    );
    assert!(
        t.contains("echo-rate: p50 0.00 -> 0.00 ms, p99 1.00 -> 1.50 ms (+50 %)"),
        "{t}"
    );
    let page = html(&new, None);
    assert!(page.contains("Against the baseline"));
    assert!(
        page.contains("<td class=\"bad\">1.00 -&gt; 1.50 ms (+50 %)</td>"),
        "a rise marked"
    );
    // Another schema cannot be compared; a report without scenarios has nothing to compare.
    let mut other = old.clone();
    other.schema_version = 99;
    assert!(Baseline::of(&other, "x.json")
        .unwrap_err()
        .contains("schema 99"));
    other.schema_version = SCHEMA_VERSION;
    other.scenarios.clear();
    assert!(Baseline::of(&other, "x.json")
        .unwrap_err()
        .contains("no scenario"));
    // A report that carries log lines around it (a pod's log) still reads.
    let json = serde_json::to_string_pretty(&old).unwrap();
    let log = format!("wstune: warning: something\n{json}\nwstune: error: after\n");
    assert_eq!(parse(&log).unwrap().url, old.url);
}

#[test]
fn the_summary_fits_its_width_with_scenario_names_whole() {
    let mut miss = echo(Scenario::EchoRate, 40.0, 0.0);
    miss.incomplete = Some(
        "a very long reason why the scenario stopped before its end, \
        which must wrap at the width like every other line of the summary"
            .into(),
    );
    let r = report(
        vec![miss, echo(Scenario::TlsHandshake, 1.0, 0.0)],
        false,
        false,
    );
    for width in [80, 100, 200] {
        let wanted = width >= TABLE_MIN_WIDTH;
        let t = table(&r, &Layout::for_width(width, true));
        for line in t.lines() {
            assert!(line.chars().count() <= width, "{width}: {line:?}\n{t}");
        }
        assert!(t.contains("tls-handshake"), "{t}");
        if wanted {
            assert!(t.contains("│ echo-rate     ┆ MISS "), "{width}: {t}");
        } else {
            assert!(t.contains("\necho-rate: MISS\n"), "{width}: {t}");
        }
        assert_eq!(t.contains("┌"), wanted, "{width}: {t}");
    }
    // Human units in the summary; the JSON keeps the raw figures.
    let t = table(&r, &Layout::for_width(80, false));
    assert!(t.contains("p99 40.0 ms"), "{t}");
    assert_eq!(ms_words(1520.0), "1.52 s");
    assert_eq!(rate_words(25_276_510.0), "25,276,510");
    assert_eq!(bytes(3.0 * 1024.0 * 1024.0 * 1024.0), "3.0 GiB");
    assert_eq!(
        wrap("  key         alpha beta gamma", 20, 4),
        "  key         alpha\n    beta gamma\n",
        "continuations indented"
    );
    assert_eq!(wrap("abcdefghij", 20, 2), "abcdefghij\n");
}
