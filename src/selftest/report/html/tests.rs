use super::super::tests::{echo, report};
use super::html;
use crate::selftest::report::{combine, Report};
use crate::selftest::{Latency, Scenario, TimelinePoint};
use base64::Engine as _;

fn curve(p99: f64) -> Latency {
    Latency {
        count: 10_000,
        p50: p99 / 4.0,
        p90: p99 / 2.0,
        p99,
        p999: p99 * 1.5,
        max: p99 * 2.0,
        mean: p99 / 3.0,
        curve: [50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.99, 100.0]
            .iter()
            .map(|p| (*p, p99 * p / 99.0))
            .collect(),
    }
}

fn timeline(per_sec: &[u64]) -> Vec<TimelinePoint> {
    per_sec
        .iter()
        .enumerate()
        .map(|(i, n)| TimelinePoint {
            t: i as u32 + 1,
            sent_per_sec: *n,
            received_per_sec: *n,
        })
        .collect()
}

/// Every scenario with data: the echo ones with latency curves, storm and broadcast with
/// their timelines, idle with its connections.
fn full_run(host: bool) -> Report {
    let mut idle = echo(Scenario::Idle, 0.0, 0.0);
    idle.latency_ms = Latency::default();
    let mut rate = echo(Scenario::EchoRate, 1.2, 0.0);
    rate.latency_ms = curve(1.2);
    rate.service_latency_ms = Some(curve(0.8));
    let mut sat = echo(Scenario::EchoSat, 3.0, 0.0);
    sat.latency_ms = curve(3.0);
    sat.offered_rate = None;
    let mut storm = echo(Scenario::Storm, 40.0, 0.0);
    storm.timeline = timeline(&[120, 80]);
    let mut bcast = echo(Scenario::Broadcast, 2.0, 0.0);
    bcast.timeline = timeline(&[600, 800, 600]);
    bcast.broadcast_rounds = Some(10);
    bcast.received = 2000;
    report(vec![idle, rate, sat, storm, bcast], false, host)
}

#[test]
fn every_scenario_with_data_gets_its_own_section_and_one_chart() {
    let r = full_run(true);
    let page = html(&r, None);
    assert_eq!(page.matches("<svg").count(), r.scenarios.len(), "{page}");
    for s in &r.scenarios {
        let id = format!(
            "<section class=\"scenario\" id=\"scenario-{}\">",
            s.scenario.name()
        );
        let start = page.find(&id).unwrap_or_else(|| panic!("no section {id}"));
        let section = &page[start..start + page[start..].find("</section>").unwrap()];
        assert_eq!(section.matches("<svg").count(), 1, "{section}");
        // A chart with a line, not an empty frame.
        assert!(
            section.contains("<polyline") || section.contains("<rect"),
            "{section}"
        );
    }
    // Storm's chart counts connections up to what it asked for.
    assert!(page.contains("Connections open during the storm"));
    assert!(
        page.contains("p99 target 5.00 ms"),
        "the echo chart shows the target"
    );
}

#[test]
fn every_check_is_listed_with_its_mark_and_detail() {
    let mut slow = echo(Scenario::EchoRate, 9.0, 0.0);
    slow.latency_ms = curve(9.0);
    let noisy = echo(Scenario::Deflate, 1.0, 100.0);
    let r = report(vec![slow, noisy], false, true);
    let page = html(&r, None);
    let list = &page[page.find("<ul class=\"checks\">").unwrap()..];
    let list = &list[..list.find("</ul>").unwrap()];
    // Every load check and the host's.
    assert_eq!(
        list.matches("<li").count(),
        r.verdict.checks.len() + 1,
        "{list}"
    );
    for c in &r.verdict.checks {
        assert!(
            list.contains(&super::esc(&c.detail)),
            "{} missing: {list}",
            c.what
        );
    }
    assert!(list.contains("✗") && list.contains("✓"), "{list}");
    assert!(
        list.contains("not judged: the window was too noisy"),
        "{list}"
    );
    // The failure comes before the passes.
    assert!(list.find("✗").unwrap() < list.find("✓").unwrap(), "{list}");
    assert!(page.contains("9.00 ms (target 5 ms)"), "{page}");
}

#[test]
fn the_json_is_a_download_that_decodes_to_the_report_and_never_inline() {
    let r = full_run(true);
    let page = html(&r, None);
    let prefix = "href=\"data:application/json;base64,";
    let start = page.find(prefix).expect("a data: link") + prefix.len();
    let b64 = &page[start..start + page[start..].find('"').unwrap()];
    let json = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("valid base64");
    let back: serde_json::Value = serde_json::from_slice(&json).expect("JSON");
    assert_eq!(back, serde_json::to_value(&r).unwrap());
    assert!(!page.contains("<pre"), "no preformatted dump");
    assert!(
        !page.contains("schema_version"),
        "no JSON text in the page, only in the link"
    );
}

#[test]
fn a_run_below_the_profile_never_reads_as_a_plain_pass() {
    // `selftest --conns 100` against a 200-connection profile: the load passed.
    let mut r = report(vec![echo(Scenario::EchoRate, 1.0, 0.0)], false, false);
    r.conns = 100;
    r.scenarios[0].conns_requested = 100;
    combine(&mut r, false);
    assert!(r.verdict.pass && !r.verdict.full_size);
    let page = html(&r, None);
    assert!(
        page.contains("<p class=\"word\">PASS at 100 connections</p>"),
        "{page}"
    );
    assert!(!page.contains(">PASS<"), "never a bare PASS: {page}");
    assert!(
        !page.contains("class=\"verdict v-pass\""),
        "not the green box: {page}"
    );
    assert!(page.contains("Covers the load only"), "{page}");
    assert!(
        page.contains("at 100 of profile 10k's 200 connections: not a proof for profile 10k"),
        "{page}"
    );
    // The same under `serve --self-test`: the host is in the verdict, and it is NOT PROVEN.
    combine(&mut r, true);
    let page = html(&r, None);
    assert!(page.contains("<p class=\"word\">NOT PROVEN</p>"), "{page}");
    assert!(page.contains("Covers the load and this host"), "{page}");
    // At full size, with the host: the green PASS, its scope said.
    let page = html(&full_run(true), None);
    assert!(
        page.contains("<p class=\"word\">PASS</p>") && page.contains("class=\"verdict v-pass\""),
        "{page}"
    );
    assert!(
        page.contains("at 200 connections, profile 10k's full count"),
        "{page}"
    );
    // The scope comes before the checks: the first thing read.
    assert!(page.find("id=\"scope\"").unwrap() < page.find("id=\"checks\"").unwrap());
}

#[test]
fn the_figures_are_a_fixed_layout_table() {
    let page = html(&full_run(true), None);
    assert!(
        page.contains("table{table-layout:fixed;width:100%"),
        "{page}"
    );
    let table = &page[page.find("<table>").unwrap()..page.find("</table>").unwrap()];
    assert_eq!(
        table.matches("<tr>").count(),
        1 + 5,
        "header and a row per scenario"
    );
}

#[test]
fn a_run_that_stopped_early_is_a_miss_that_says_why() {
    let page = html(
        &full_run(true),
        Some("scenario deflate: the server went away"),
    );
    assert!(
        page.contains("<p class=\"word\">MISS: the run stopped early</p>"),
        "{page}"
    );
    assert!(page.contains("class=\"verdict v-miss\""), "{page}");
    assert!(
        page.contains("scenario deflate: the server went away"),
        "{page}"
    );
}
