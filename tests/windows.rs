//! Windows hosts as `registry.yaml` trees: the TCP dynamic port range check (what replaced
//! MaxUserPort), its netsh fix text, and the report header.

mod common;

use common::{element, fixture, wstune};
use std::path::Path;
use std::process::Command;

fn check_json(root: &Path, extra: &[&str]) -> (i32, serde_json::Value) {
    let mut args = vec!["check", "--root", root.to_str().unwrap(), "-f", "json"];
    args.extend_from_slice(extra);
    let o = wstune(&args);
    let report = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o.status.code().unwrap(), report)
}

fn finding<'a>(report: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    element(&report["results"], "id", id)
}

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
    assert_eq!(code, 1, "{}", r["summary"]);
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
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/100k.yaml"))
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
        let header = out.lines().next().unwrap_or_default();
        assert!(
            header.contains(&format!(" on {host} [snapshot:")),
            "{name}: {header}"
        );
    }
}
