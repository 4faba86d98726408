use super::*;
use crate::selftest::noise::Disturbance;
use crate::selftest::Scenario;
use crate::selftest::{Latency, ScenarioReport};

fn targets() -> Targets {
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

fn echo(scenario: Scenario, p99: f64, other_pct: f64) -> ScenarioReport {
    ScenarioReport {
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
    }
}

fn report(scenarios: Vec<ScenarioReport>, accept_noise: bool, host: bool) -> Report {
    let t = targets();
    let verdict = verdict(&scenarios, &t, accept_noise);
    let mut r = Report {
        schema_version: SCHEMA_VERSION,
        url: "ws://127.0.0.1:1/".into(),
        program: None,
        skipped: Vec::new(),
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
    let t = table(&r);
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
    let t = table(&r);
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
    assert!(table(&r).contains("noisy (other processes 100 % of a core; not a timing verdict"));
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
