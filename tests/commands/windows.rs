//! Windows hosts as `registry.yaml` trees: every check of checks/windows.yaml on the fixtures,
//! the TCP dynamic port range check (what replaced MaxUserPort), its netsh fix text, and the
//! report header. wstune.exe itself, under Wine, is tests/heavy/windows_wine.rs.

use crate::common;

use common::{check_json, finding, fixture, wstune};
use std::path::Path;
use std::process::Command;

const RANGES: [&str; 2] = [
    "windows.tcpip.dynamic_port_range",
    "windows.tcpip6.dynamic_port_range",
];

/// Every `netsh ... set dynamicport tcp start=S num=N` in `text`, as (S, N).
fn netsh_sets(text: &str) -> Vec<(u32, u32)> {
    let num = |rest: &str, key: &str| -> Option<u32> {
        let at = rest.find(key)? + key.len();
        let digits: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        digits.parse().ok()
    };
    text.match_indices("set dynamicport tcp")
        .map(|(i, _)| {
            let rest = &text[i..];
            let start = num(rest, "start=").unwrap_or_else(|| panic!("no start= in {text}"));
            let count = num(rest, "num=").unwrap_or_else(|| panic!("no num= in {text}"));
            (start, count)
        })
        .collect()
}

#[test]
fn default_windows_host_warns_that_its_16384_dynamic_ports_miss_the_profile() {
    let (code, r) = check_json(&fixture("windows-default"), &["--strict"]);
    assert_eq!(code, 2, "{}", r["summary"]);
    for (id, ip) in RANGES.iter().zip(["ipv4", "ipv6"]) {
        let f = finding(&r, id);
        assert_eq!(f["status"], "warn", "{f:#}");
        assert_eq!(f["compare"], "covers");
        // Windows' default since Vista, and the 100k profile's start=10000 num=55535.
        assert_eq!(f["current"], serde_json::json!([49152, 65535]), "{f:#}");
        assert_eq!(f["target"], serde_json::json!([10000, 65534]), "{f:#}");
        assert_eq!(
            f["note"],
            "16384 ports; the profile wants 10000-65534 (55535 ports)"
        );
        let fix = f["fix"]["runtime"].as_str().unwrap();
        assert!(
            fix.starts_with(&format!(
                "netsh int {ip} set dynamicport tcp start=10000 num=55535"
            )),
            "{fix}"
        );
    }
}

#[test]
fn tuned_windows_host_passes_the_dynamic_port_range() {
    let (code, r) = check_json(&fixture("windows-tuned"), &["--strict"]);
    assert_eq!(code, 0, "{}", r["summary"]);
    for id in RANGES {
        let f = finding(&r, id);
        assert_eq!(f["status"], "pass", "{f:#}");
        assert_eq!(f["current"], serde_json::json!([10000, 65534]));
        assert_eq!(f["note"], "55535 ports");
    }
}

/// netsh refuses start + num > 65536; the old MaxUserPort fix said start=65534 num=55535.
#[test]
fn every_netsh_fix_keeps_start_plus_num_within_65536() {
    let dir = tempfile::tempdir().unwrap();
    // A host where MaxUserPort is set low, so its fix is the one a reader acts on.
    let text = std::fs::read_to_string(fixture("windows-default").join("registry.yaml"))
        .unwrap()
        .replace(
            "Hostname: {type: REG_SZ, data: \"WIN-EDGE-01\"}",
            "Hostname: {type: REG_SZ, data: \"WIN-EDGE-01\"}\n    MaxUserPort: {type: REG_DWORD, data: 5000}",
        );
    std::fs::write(dir.path().join("registry.yaml"), text).unwrap();
    let (_, r) = check_json(dir.path(), &[]);
    assert_eq!(
        finding(&r, "windows.tcpip.max_user_port")["status"],
        "info",
        "MaxUserPort 5000 misses the target"
    );
    let mut seen = 0;
    for profile in ["10k", "50k", "100k", "250k", "1m"] {
        for root in [dir.path().to_path_buf(), fixture("windows-tuned")] {
            let (_, r) = check_json(&root, &["--profile", profile]);
            for f in r["results"].as_array().unwrap() {
                for text in [&f["fix"]["runtime"], &f["fix"]["persistent"]] {
                    let Some(text) = text.as_str() else { continue };
                    for (start, num) in netsh_sets(text) {
                        seen += 1;
                        assert!(
                            start + num <= 65536 && (1025..=65535).contains(&start),
                            "{profile} {}: start={start} num={num} is refused by netsh: {text}",
                            f["id"]
                        );
                    }
                }
            }
        }
    }
    assert!(seen >= 20, "only {seen} netsh commands checked");

    // The numbers come from the profile, not from the catalog.
    let profile = dir.path().join("p.yaml");
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/base.yaml"))
            .unwrap()
            .replace("dynamic_port_start: 10000", "dynamic_port_start: 20000")
            .replace("dynamic_port_count: 55535", "dynamic_port_count: 45536");
    std::fs::write(&profile, text).unwrap();
    let (_, r) = check_json(
        &fixture("windows-default"),
        &["--profile", profile.to_str().unwrap()],
    );
    let f = finding(&r, "windows.tcpip.dynamic_port_range");
    assert_eq!(f["target"], serde_json::json!([20000, 65535]));
    assert_eq!(
        netsh_sets(f["fix"]["runtime"].as_str().unwrap()),
        vec![(20000, 45536)]
    );
}

#[test]
fn a_captured_range_netsh_would_refuse_is_an_input_error() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(fixture("windows-default").join("registry.yaml"))
        .unwrap()
        .replace(
            "ipv4: {start: 49152, count: 16384}",
            "ipv4: {start: 65534, count: 55535}",
        );
    std::fs::write(dir.path().join("registry.yaml"), text).unwrap();
    let o = wstune(&["check", "--root", dir.path().to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("dynamic_ports.ipv4: start 65534 + 55535 ports runs past port 65535"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
}

/// A captured registry.yaml is not trusted: an overflowing count, a FIFO, a link out of the tree
/// are each refused with the reason (exit 3), never a panic, a hang or a read of the live host.
#[test]
fn hostile_registry_files_are_refused_with_the_reason() {
    let default =
        std::fs::read_to_string(fixture("windows-default").join("registry.yaml")).unwrap();
    let refused = |dir: &Path, why: &str| {
        let start = std::time::Instant::now();
        let o = wstune(&["check", "--root", dir.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{why}: {err}");
        assert!(err.contains(why), "{why}: {err}");
        assert!(start.elapsed() < std::time::Duration::from_secs(20));
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("registry.yaml"),
        default.replace(
            "ipv4: {start: 49152, count: 16384}",
            "ipv4: {start: 49152, count: 4294967295}",
        ),
    )
    .unwrap();
    refused(dir.path(), "runs past port 65535");

    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("registry.yaml");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    refused(dir.path(), "not a regular file");

    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("registry.yaml"), &default).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("registry.yaml"),
        dir.path().join("registry.yaml"),
    )
    .unwrap();
    refused(dir.path(), "outside the tree");
}

#[test]
fn a_tree_without_the_range_skips_the_check_and_says_how_to_capture_it() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(fixture("windows-default").join("registry.yaml")).unwrap();
    let cut = text
        .find("dynamic_ports:")
        .expect("the fixture records the range");
    std::fs::write(dir.path().join("registry.yaml"), &text[..cut]).unwrap();
    let (_, r) = check_json(dir.path(), &[]);
    let f = finding(&r, "windows.tcpip.dynamic_port_range");
    assert_eq!(f["status"], "skip", "never a pass on a value nobody read");
    let note = f["note"].as_str().unwrap();
    assert!(
        note.contains("dynamic_ports.ipv4") && note.contains("netsh int ipv4 show dynamicport tcp"),
        "{note}"
    );
}

#[test]
fn the_table_header_names_each_windows_host() {
    for (name, host) in [
        ("windows-default", "WIN-EDGE-01"),
        ("windows-tuned", "WIN-EDGE-02"),
    ] {
        let root = fixture(name);
        let o = wstune(&["check", "--root", root.to_str().unwrap()]);
        let out = String::from_utf8_lossy(&o.stdout);
        // The header may wrap at the width (the snapshot's path is long): read it whole.
        let header = out.split("\n\n").next().unwrap_or_default();
        let header = header.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            header.contains(&format!(" on {host} [snapshot:")),
            "{name}: {header}"
        );
    }
}

/// The case the check exists for: 100k connections through one proxy address do not fit in
/// Windows' default 16,384 dynamic ports, and the check says how many addresses they need.
#[test]
fn default_windows_host_fails_the_dynamic_port_count_for_100k_through_one_proxy_address() {
    let (code, r) = check_json(&fixture("windows-default"), &["--profile", "100k"]);
    assert_eq!(code, 2, "{}", r["summary"]);
    let f = finding(&r, "windows.tcpip.dynamic_port_count");
    assert_eq!(f["status"], "fail", "{f:#}");
    assert_eq!(f["current"], 16384);
    assert_eq!(f["target"], 55535, "min(connections, the profile's range)");
    assert_eq!(
        f["note"],
        "16384 ports: one proxy address reaches 16384 of the profile's 100000 connections to one backend address and port; 100000 need 7 source addresses (2 with the profile's 55535 ports)"
    );
    let fix = f["fix"]["runtime"].as_str().unwrap();
    assert!(
        fix.starts_with("netsh int ipv4 set dynamicport tcp start=10000 num=55535;"),
        "{fix}"
    );
    // The failures of this host are exactly that one.
    let failed: Vec<&str> = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] == "fail")
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert_eq!(failed, ["windows.tcpip.dynamic_port_count"]);
    // 10k connections fit in the default range.
    let (_, r) = check_json(&fixture("windows-default"), &["--profile", "10k"]);
    let f = finding(&r, "windows.tcpip.dynamic_port_count");
    assert_eq!(f["status"], "pass", "{f:#}");
}

/// Every check in checks/windows.yaml on the three Windows fixtures: one that passes, and the
/// state that makes it warn, fail or inform, with the value read. A check added to the catalog
/// without a row here fails the test.
#[test]
fn every_windows_check_is_judged_on_the_fixtures() {
    use serde_json::json;
    const NIC_D: &str = "[Intel(R) Ethernet Controller X710]";
    const NIC_L: &str = "[Broadcom NetXtreme Gigabit Ethernet]";
    const NIC_T: &str = "[Ethernet]";
    #[rustfmt::skip]
    let rows: &[(&str, &str, &str, serde_json::Value)] = &[
        // (fixture, check id, status, current)
        ("default", "windows.tcpip.max_user_port", "pass", json!(null)),
        ("legacy", "windows.tcpip.max_user_port", "info", json!(5000)),
        ("default", "windows.tcpip.dynamic_port_range", "warn", json!([49152, 65535])),
        ("tuned", "windows.tcpip.dynamic_port_range", "pass", json!([10000, 65534])),
        ("legacy", "windows.tcpip6.dynamic_port_range", "warn", json!([60000, 65535])),
        ("tuned", "windows.tcpip6.dynamic_port_range", "pass", json!([10000, 65534])),
        ("default", "windows.tcpip.dynamic_port_count", "fail", json!(16384)),
        ("tuned", "windows.tcpip.dynamic_port_count", "pass", json!(55535)),
        ("default", "windows.tcpip.tcp_timed_wait_delay", "warn", json!(120)),
        ("legacy", "windows.tcpip.tcp_timed_wait_delay", "warn", json!(240)),
        ("tuned", "windows.tcpip.tcp_timed_wait_delay", "pass", json!(30)),
        ("legacy", "windows.tcpip.tcp_max_connect_response_retransmissions", "warn", json!(5)),
        ("tuned", "windows.tcpip.tcp_max_connect_response_retransmissions", "pass", json!(2)),
        ("default", "windows.tcpip.tcp_num_connections", "pass", json!(16777214)),
        ("legacy", "windows.tcpip.tcp_num_connections", "fail", json!(5000)),
        ("default", "windows.tcpip.max_free_tcbs", "pass", json!(null)),
        ("legacy", "windows.tcpip.max_free_tcbs", "info", json!(2000)),
        ("tuned", "windows.ndis.rss_global", "pass", json!(1)),
        ("legacy", "windows.ndis.rss_global", "warn", json!(0)),
        ("default", &format!("windows.nic.rss_enabled{NIC_D}"), "pass", json!(1)),
        ("legacy", &format!("windows.nic.rss_enabled{NIC_L}"), "info", json!(0)),
        ("tuned", &format!("windows.nic.rss_profile{NIC_T}"), "pass", json!("NUMAScalingStatic")),
        ("default", &format!("windows.nic.rss_profile{NIC_D}"), "pass", json!("NUMAScalingStatic")),
        ("legacy", &format!("windows.nic.rss_profile{NIC_L}"), "info", json!("ClosestProcessor")),
        ("default", &format!("windows.nic.rss_queues{NIC_D}"), "pass", json!(8)),
        ("legacy", &format!("windows.nic.rss_queues{NIC_L}"), "info", json!(1)),
        ("tuned", "windows.host.cpus", "pass", json!(32)),
        ("default", "windows.host.cpus", "warn", json!(16)),
        ("default", "windows.host.memory", "pass", json!(68719476736_u64)),
        ("legacy", "windows.host.memory", "fail", json!(4294967296_u64)),
        ("default", "windows.process.handles", "pass", json!(100612)),
        ("legacy", "windows.process.handles", "warn", json!(16700000)),
    ];
    let mut reports = std::collections::BTreeMap::new();
    for name in ["default", "tuned", "legacy"] {
        let root = fixture(&format!("windows-{name}"));
        let (_, r) = check_json(&root, &["--profile", "100k", "--pid", "4242"]);
        reports.insert(name, r);
    }
    let mut covered = std::collections::BTreeSet::new();
    for (name, id, status, current) in rows {
        let f = finding(&reports[name], id);
        assert_eq!(f["status"], *status, "{name} {id}: {f:#}");
        assert_eq!(f["current"], *current, "{name} {id}: {f:#}");
        covered.insert(id.split('[').next().unwrap().to_string());
    }
    // At least 15 checks, each with a row that is not a pass.
    let ids: std::collections::BTreeSet<String> = reports["default"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            f["id"]
                .as_str()
                .unwrap()
                .split('[')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(ids.len() >= 15, "{} Windows checks", ids.len());
    assert_eq!(ids, covered, "checks without a fixture row");
    for id in &ids {
        assert!(
            rows.iter()
                .any(|(_, i, s, _)| i.starts_with(id.as_str()) && *s != "pass"),
            "{id} is never seen failing"
        );
    }
    // The tuned host passes everything, --strict included.
    let (code, r) = check_json(&fixture("windows-tuned"), &["--strict", "--pid", "4242"]);
    assert_eq!(code, 0, "{}", r["summary"]);
    // Without --pid the handle check says what it needs instead of guessing.
    let (_, r) = check_json(&fixture("windows-default"), &[]);
    assert_eq!(finding(&r, "windows.process.handles")["status"], "skip");
}

/// --pid on a captured Windows host names a process the capture recorded, or is refused.
#[test]
fn a_pid_the_capture_does_not_know_is_refused() {
    let root = fixture("windows-default");
    let o = wstune(&["check", "--root", root.to_str().unwrap(), "--pid", "999"]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("--pid 999: no such process"));
}

/// An adapter's *RSSProfile check targets the profile's `nic.rss` in Windows' name: the
/// built-in word, numa_scaling_static, is NUMAScalingStatic (4), the drivers' default that every
/// source cited prefers, so the default and tuned hosts pass with it; a profile saying
/// numa_scaling wants NUMAScaling (3) instead, with its number in the fix; an older profile's
/// `windows.rss_profile` is still followed.
#[test]
fn the_rss_profile_check_follows_nic_rss() {
    const NIC_T: &str = "windows.nic.rss_profile[Ethernet]";
    const NIC_D: &str = "windows.nic.rss_profile[Intel(R) Ethernet Controller X710]";
    let dir = tempfile::tempdir().unwrap();
    let profile = |name: &str, body: &str| {
        let p = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&p, format!("extends: 100k\nname: {name}\n{body}")).unwrap();
        p.to_str().unwrap().to_string()
    };
    for (tree, nic) in [("windows-tuned", NIC_T), ("windows-default", NIC_D)] {
        let (_, r) = check_json(&fixture(tree), &["--profile", "100k"]);
        let f = finding(&r, nic);
        assert_eq!(
            (f["status"].as_str(), f["target"].as_str()),
            (Some("pass"), Some("NUMAScalingStatic")),
            "{tree}: {f:#}"
        );
    }

    let dynamic = profile("dynamic", "nic:\n  rss: numa_scaling\n");
    let (_, r) = check_json(&fixture("windows-default"), &["--profile", &dynamic]);
    let f = finding(&r, NIC_D);
    assert_eq!(
        (f["status"].as_str(), f["target"].as_str()),
        (Some("info"), Some("NUMAScaling")),
        "{f:#}"
    );
    assert!(
        f["fix"]["runtime"]
            .as_str()
            .unwrap()
            .contains("3 NUMAScaling, 4 NUMAScalingStatic"),
        "{f:#}"
    );

    let old = profile("old", "windows:\n  rss_profile: ConservativeScaling\n");
    let (_, r) = check_json(&fixture("windows-tuned"), &["--profile", &old]);
    let f = finding(&r, NIC_T);
    assert_eq!(
        (f["status"].as_str(), f["target"].as_str()),
        (Some("info"), Some("ConservativeScaling")),
        "{f:#}"
    );
    // Both keys, disagreeing: refused with the line and the fix.
    let both = profile(
        "both",
        "windows:\n  rss_profile: ClosestProcessor\nnic:\n  rss: numa_scaling\n",
    );
    let o = wstune(&[
        "check",
        "--root",
        fixture("windows-tuned").to_str().unwrap(),
        "--profile",
        &both,
    ]);
    assert_eq!(o.status.code(), Some(3));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("{both}:4: windows.rss_profile: ClosestProcessor disagrees with nic.rss: numa_scaling (line 6"))
            && err.contains("remove windows.rss_profile"),
        "{err}"
    );
}
