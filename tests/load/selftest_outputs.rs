//! Where a self-test's results go besides the terminal, read by the programs that consume
//! them: the `--out-prometheus` textfile by promtool, prometheus_client's parser and a real
//! node_exporter; the `--report` page by headless Chromium at a 1280-pixel width.

use crate::common;

use common::{run, serve};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A short real self-test of `wstune serve` on 127.0.0.1 (broadcast against a second one
/// with the broadcast app), writing both files into `dir`.
fn selftest_into(dir: &Path, scenarios: &[&str]) -> (Output, PathBuf, PathBuf) {
    let srv = serve(&["--profile", "10k"]);
    let fan = serve(&["--profile", "10k", "--app", "broadcast"]);
    let url = format!("ws://127.0.0.1:{}/", srv.port);
    let broadcast_url = format!("ws://127.0.0.1:{}/", fan.port);
    let (html, prom) = (dir.join("report.html"), dir.join("selftest.prom"));
    let mut args = vec![
        "selftest",
        "--url",
        &url,
        "--profile",
        "10k",
        "--conns",
        "50",
        "--secs",
        "1",
        "--rounds",
        "3",
        "--report",
        html.to_str().unwrap(),
        "--out-prometheus",
        prom.to_str().unwrap(),
        "--broadcast-url",
        &broadcast_url,
    ];
    for s in scenarios {
        args.extend(["--scenario", s]);
    }
    let o = run(&args);
    drop((srv, fan));
    let err = String::from_utf8_lossy(&o.stderr);
    // Pass, miss or too noisy to judge on a busy box: the files are written in every case.
    assert!(matches!(o.status.code(), Some(0 | 2 | 4)), "{err}");
    assert!(html.exists() && prom.exists(), "{err}");
    (o, html, prom)
}

#[test]
fn out_prometheus_is_valid_exposition_for_promtool_prometheus_client_and_node_exporter() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _, prom) = selftest_into(dir.path(), &["echo-rate"]);
    let text = std::fs::read_to_string(&prom).unwrap();
    assert!(
        text.lines().any(
            |l| l.starts_with("wstune_selftest_verdict{profile=\"10k\",")
                && l.contains("scope=\"load\"")
                && l.contains("full_size=\"false\"")
                && l.ends_with("} 1")
        ),
        "50 connections are no proof for 10k, and the verdict says so:\n{text}"
    );
    for want in [
        "wstune_selftest_latency_seconds{profile=\"10k\",scenario=\"echo-rate\",percentile=\"p99\"} ",
        "wstune_selftest_achieved_messages_per_second{profile=\"10k\",scenario=\"echo-rate\"} ",
        "wstune_selftest_check{profile=\"10k\",scenario=\"echo-rate\",check=\"no errors\",status=\"",
        "wstune_selftest_last_run_timestamp_seconds{profile=\"10k\"} ",
    ] {
        assert!(text.contains(want), "no {want}:\n{text}");
    }
    let samples = text.lines().filter(|l| !l.starts_with('#')).count();

    // promtool: the format and the naming conventions.
    if common::have("promtool") {
        let mut child = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let o = child.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "promtool check metrics: {}{}\n{text}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    } else {
        common::skip(
            "promtool",
            "promtool is not installed (apt-get install prometheus)",
        );
    }

    // A parser we did not write counts the same samples.
    let py = Command::new("python3")
        .args(["-c", "import sys\nfrom prometheus_client.parser import text_string_to_metric_families as p\nprint(sum(len(f.samples) for f in p(open(sys.argv[1]).read())))"])
        .arg(&prom)
        .output();
    match py {
        Err(_) => common::skip("prometheus_client", "no python3 to run prometheus_client"),
        Ok(o) if String::from_utf8_lossy(&o.stderr).contains("No module named") => common::skip(
            "prometheus_client",
            "pip install -r tests/requirements.txt for the exposition-format parser",
        ),
        Ok(o) => {
            assert!(
                o.status.success(),
                "prometheus_client: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            assert_eq!(
                String::from_utf8_lossy(&o.stdout).trim(),
                samples.to_string()
            );
        }
    }

    node_exporter_exports(&prom, "wstune_selftest_verdict{");
}

/// node_exporter, running as nobody, reads the file from its textfile directory and exports
/// `want` (the file written as root with the default umask, as a cron job would).
fn node_exporter_exports(prom: &Path, want: &str) {
    let exporter = "/usr/bin/prometheus-node-exporter";
    if !Path::new(exporter).exists() {
        return common::skip(
            "node_exporter",
            &format!("{exporter} is not installed (apt-get install prometheus-node-exporter)"),
        );
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2));
    if euid != Some("0") {
        return common::skip(
            "node_exporter",
            "needs root, to run node_exporter as nobody",
        );
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let textfiles = dir.path().join("textfile");
    std::fs::create_dir(&textfiles).unwrap();
    for d in [dir.path(), textfiles.as_path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let copy = textfiles.join("wstune-selftest.prom");
    std::fs::copy(prom, &copy).unwrap();
    let port = common::free_port();
    let child = Command::new("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            exporter,
            "--collector.disable-defaults",
            "--collector.textfile",
        ])
        .arg(format!(
            "--collector.textfile.directory={}",
            textfiles.display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _guard = common::Kill(child);
    let metrics = common::wait_for(
        &format!("node_exporter to answer on 127.0.0.1:{port}"),
        std::time::Duration::from_secs(20),
        || common::try_get_ok(port, "/metrics"),
    );
    assert!(
        !metrics
            .lines()
            .any(|l| l.trim() == "node_textfile_scrape_error 1"),
        "node_exporter could not read the file:\n{metrics}"
    );
    assert!(
        metrics.lines().any(|l| l.starts_with(want)),
        "no {want} in /metrics:\n{metrics}"
    );
}

#[test]
fn the_html_report_fits_1280_pixels_and_says_its_scope_on_the_first_screen() {
    let Some(browser) = common::chromium() else {
        return common::skip("chromium", "no chromium here (apt-get install chromium)");
    };
    let dir = tempfile::tempdir().unwrap();
    let (_, html, _) = selftest_into(
        dir.path(),
        &["idle", "echo-rate", "echo-sat", "storm", "broadcast"],
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(!page.contains("<script"), "the page needs no script");
    assert_eq!(page.matches("<svg").count(), 5, "a chart per scenario");
    // The measuring script goes into a copy, never into the product's file: the page's full
    // width and where the scope line sits, in the title, which --dump-dom prints.
    let probe = dir.path().join("probe.html");
    std::fs::write(
        &probe,
        format!(
            "{page}<script>const s = document.getElementById('scope').getBoundingClientRect();\
             document.title = 'W=' + document.documentElement.scrollWidth + ' S=' + Math.round(s.bottom);</script>"
        ),
    )
    .unwrap();
    let (title, field) = common::chromium_title(browser, &probe, "1280,900");
    assert!(
        field("W=") <= 1280,
        "the page scrolls sideways at 1280 px: {title}"
    );
    assert!(
        field("S=") <= 900,
        "the verdict's scope is not on the first screen: {title}"
    );
    assert!(page.contains("not a proof for profile 10k"), "{page}");
    // A screenshot beside the report, for a person to look at.
    let shot = dir.path().join("report.png");
    let o = common::chromium_on(
        browser,
        &html,
        "1280,900",
        &format!("--screenshot={}", shot.display()),
    );
    assert!(
        shot.metadata().is_ok_and(|m| m.len() > 10_000),
        "no screenshot: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}
