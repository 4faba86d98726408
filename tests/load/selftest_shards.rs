//! `selftest --shard` and `wstune report merge`: shards started together on loopback merge into
//! one run's counts and exact percentiles; the exported Ansible play runs them for real.

use crate::common;

use common::{bin, json_of, run, serve};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Four shards started together against one server and merged: the same connections and
/// messages as one generator's run of the same load, and latencies merged exactly (the merged
/// percentiles are those of the four shards' histograms added, read back here with the
/// hdrhistogram crate). Each shard binds its own loopback addresses with --src-ips.
#[test]
fn four_shards_merged_equal_one_run() {
    let srv = serve(&["--profile", "10k"]);
    let url = format!("ws://127.0.0.1:{}/", srv.port);
    let dir = tempfile::tempdir().unwrap();
    let load = [
        "--conns",
        "80",
        "--rate",
        "10",
        "--secs",
        "3",
        "--warmup",
        "1",
        "--accept-noise",
        "--format",
        "json",
    ];
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 6;
    let shards: Vec<_> = (0..4)
        .map(|i| {
            let out = std::fs::File::create(dir.path().join(format!("s{i}.json"))).unwrap();
            let src = format!("127.0.0.{},127.0.0.{}", 10 + 2 * i, 11 + 2 * i);
            let mut c = Command::new(bin());
            c.args(["selftest", "--url", &url, "--shard", &format!("{i}/4")])
                .args(["--start-at", &start.to_string(), "--src-ips", &src])
                .args(load)
                .stdout(out)
                .stderr(Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    // Connected and waiting for the start: every client socket comes from the shards' --src-ips.
    std::thread::sleep(Duration::from_secs(4));
    let ss = Command::new("ss")
        .args([
            "-Htn",
            "state",
            "established",
            &format!("( dport = :{} )", srv.port),
        ])
        .output()
        .unwrap();
    let mut local: Vec<String> = String::from_utf8_lossy(&ss.stdout)
        .lines()
        .filter_map(|l| {
            l.split_whitespace()
                .nth(2)?
                .rsplit_once(':')
                .map(|(a, _)| a.to_string())
        })
        .collect();
    let conns = local.len();
    local.sort();
    local.dedup();
    let want: Vec<String> = (10..18).map(|i| format!("127.0.0.{i}")).collect();
    assert_eq!(
        (conns, local),
        (80, want),
        "{}",
        String::from_utf8_lossy(&ss.stdout)
    );
    for (i, s) in shards.into_iter().enumerate() {
        let o = s.wait_with_output().unwrap();
        // A shard exits 0 whenever it wrote its report: the merge judges.
        assert_eq!(
            o.status.code(),
            Some(0),
            "shard {i}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let files: Vec<String> = (0..4)
        .map(|i| dir.path().join(format!("s{i}.json")).display().to_string())
        .collect();
    // The first shard's report as the baseline: the merged run beside it, scenario by scenario.
    let mut args = vec![
        "report",
        "merge",
        "--format",
        "json",
        "--accept-noise",
        "--baseline",
    ];
    args.push(&files[0]);
    args.extend(files.iter().map(String::as_str));
    let o = run(&args);
    let merged = json_of(&o);
    assert!(matches!(o.status.code(), Some(0 | 2)), "{merged:#}");
    let m = &merged["scenarios"][0];

    let mut one = vec!["selftest", "--url", &url];
    one.extend(load);
    let single = json_of(&run(&one));
    let s = &single["scenarios"][0];
    assert_eq!(
        (m["conns_connected"].as_u64(), s["conns_connected"].as_u64()),
        (Some(80), Some(80))
    );
    assert_eq!(merged["conns"], 80);
    // The open-loop schedule is the same whichever host sends: 80 x 10 msgs/s x 3 s.
    let (ms, ss) = (m["sent"].as_u64().unwrap(), s["sent"].as_u64().unwrap());
    assert!(
        ms.abs_diff(ss) <= 8 && ms.abs_diff(2400) <= 8,
        "merged {ms}, one run {ss}"
    );
    assert_eq!(m["errors"], 0, "{m:#}");
    assert_eq!(
        m["latency_ms"]["count"],
        m["received"].as_u64().unwrap() + m["lost"].as_u64().unwrap()
    );

    // The merged percentiles from the shards' own histograms, added here independently.
    use base64::Engine;
    let mut all = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).unwrap();
    let mut skews = Vec::new();
    for f in &files {
        let r: Value = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        let sc = &r["scenarios"][0];
        skews.push(sc["started_unix_ms"].as_u64().unwrap());
        let b = base64::engine::general_purpose::STANDARD
            .decode(sc["histograms"]["latency"].as_str().unwrap())
            .unwrap();
        let h: hdrhistogram::Histogram<u64> = hdrhistogram::serialization::Deserializer::new()
            .deserialize(&mut &b[..])
            .unwrap();
        all.add(h).unwrap();
    }
    let ms_at = |q: f64| all.value_at_quantile(q) as f64 / 1000.0;
    assert_eq!(m["latency_ms"]["p99"].as_f64().unwrap(), ms_at(0.99));
    assert_eq!(m["latency_ms"]["p50"].as_f64().unwrap(), ms_at(0.5));
    assert_eq!(m["latency_ms"]["count"].as_u64().unwrap(), all.len());
    let skew = skews.iter().max().unwrap() - skews.iter().min().unwrap();
    assert_eq!(merged["merged_from"]["start_skew_ms"].as_u64(), Some(skew));
    assert!(skew < 1000, "the shards started within a second: {skew} ms");
    assert!(merged["verdict"]["summary"]
        .as_str()
        .unwrap()
        .contains("merged from 4 of 4 shards"));
    let b = &merged["baseline"]["scenarios"][0];
    assert_eq!(
        (b["scenario"].as_str(), b["conns"].as_u64()),
        (Some("echo-rate"), Some(20))
    );

    // --partial: what there is, merged, and never judged a proof: NOT PROVEN (exit 4) when
    // nothing failed, and the Prometheus file says the same as the exit code.
    let prom = dir.path().join("partial.prom");
    let o = run(&[
        "report",
        "merge",
        "--partial",
        "--accept-noise",
        "--format",
        "json",
        "--out-prometheus",
        prom.to_str().unwrap(),
        &files[0],
        &files[1],
    ]);
    let v = json_of(&o);
    if v["verdict"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["ok"] == true)
    {
        assert_eq!(o.status.code(), Some(4), "{v:#}");
        let text = std::fs::read_to_string(&prom).unwrap();
        assert!(text.contains("verdict=\"not_proven\""), "{text}");
        assert!(v["verdict"]["unmeasured"][0]
            .as_str()
            .unwrap()
            .contains("2 of 4 shards"));
    }
    // A report missing, and an address that is not this host's, are refused by name.
    let o = run(&["report", "merge", &files[0], &files[1]]);
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains("shards 2, 3 of 4 missing"));
    let o = run(&["selftest", "--url", &url, "--src-ips", "192.0.2.1"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr)
        .contains("--src-ips 192.0.2.1: not an address of this host"));
    let o = run(&["selftest", "--url", &url, "--shard", "0/2"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--shard needs --start-at"));
}

/// The exported Ansible play, run for real: two inventory hosts (both this machine) run one
/// shard each against a local server, the controller fetches both reports and merges them.
#[test]
fn the_exported_play_runs_the_shards_and_merges_their_reports() {
    if !common::have("ansible-playbook") {
        return common::skip(
            "ansible-playbook",
            "ansible is not installed (pip install ansible)",
        );
    }
    let srv = serve(&["--profile", "10k"]);
    let url = format!("ws://127.0.0.1:{}/", srv.port);
    let dir = tempfile::tempdir().unwrap();
    let play = dir.path().join("play.yml");
    let root = common::fixture("default");
    let o = run(&[
        "export",
        "--to",
        "selftest-ansible",
        "--root",
        root.to_str().unwrap(),
        "--shards",
        "2",
        "--start-in",
        "10",
        "-o",
        play.to_str().unwrap(),
        "--",
        "--url",
        &url,
        "--conns",
        "40",
        "--rate",
        "5",
        "--secs",
        "2",
        "--scenario",
        "echo-rate",
        "--accept-noise",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let python = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v python3"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let inventory = dir.path().join("inventory");
    std::fs::write(
        &inventory,
        format!(
            "[wstune_generators]\ngen0\ngen1\n[wstune_generators:vars]\nansible_connection=local\n\
             ansible_python_interpreter={}\n",
            python.trim()
        ),
    )
    .unwrap();
    let o = Command::new("ansible-playbook")
        .args(["-i", inventory.to_str().unwrap(), "-f", "4", "-e"])
        .arg(format!("wstune_bin={}", bin()))
        .arg(&play)
        .env("ANSIBLE_NOCOLOR", "1")
        .env("ANSIBLE_LOCALHOST_WARNING", "false")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{log}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let reports = dir.path().join("wstune-reports");
    let merged: Value =
        serde_json::from_str(&std::fs::read_to_string(reports.join("merged.json")).unwrap())
            .unwrap();
    assert_eq!(merged["conns"], 40, "{merged:#}");
    assert_eq!(merged["merged_from"]["shards"], serde_json::json!([0, 1]));
    assert_eq!(merged["scenarios"][0]["conns_connected"], 40);
    assert!(reports.join("merged.html").exists());
    assert!(log.contains("merged from 2 of 2 shards"), "{log}");
}
