//! What wstune writes and says: report file modes (a textfile collector must read them), fix
//! texts that never advise lowering a value, every profile/catalog error at once with its line,
//! error messages in wstune's words, and captured trees read with limits.

mod common;

use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Copy a fixture tree (files and directories; no links in fixtures) to `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

fn json_check(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["check", "-f", "json"];
    all.extend_from_slice(args);
    let out = common::run(&all);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

// ---- item 5: fix texts for multi-value sysctls keep the other fields ----

/// The default fixture has tcp_rmem `4096 131072 33554432`: the fix lowers the default to the
/// target and keeps min and max as they are (the old text cut max to 6291456).
#[test]
fn tcp_rmem_and_wmem_fixes_keep_min_and_max() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("host");
    copy_dir(&fixture("default"), &root);
    // A host tuned above the old constants on both sides: min 8192, max 16 MiB for send.
    std::fs::write(
        root.join("proc/sys/net/ipv4/tcp_wmem"),
        "8192\t65536\t16777216\n",
    )
    .unwrap();
    let report = json_check(&["--root", root.to_str().unwrap()]);
    for (id, min, max) in [
        ("linux.net.ipv4.tcp_rmem.default", 4096, 33554432),
        ("linux.net.ipv4.tcp_wmem.default", 8192, 16777216),
    ] {
        let f = common::element(&report["results"], "id", id);
        assert_eq!(f["status"], "warn", "{f}");
        let target = f["target"].as_i64().unwrap();
        let key = id.trim_end_matches(".default");
        let key = key.trim_start_matches("linux.");
        let whole = format!("{min} {target} {max}");
        assert_eq!(
            f["fix"]["runtime"],
            format!("sysctl -w {key}=\"{whole}\""),
            "{f}"
        );
        assert_eq!(
            f["fix"]["persistent"],
            format!("echo '{key} = {whole}' >> /etc/sysctl.d/60-wstune.conf"),
            "{f}"
        );
        // The boot view's persistent line says the same.
        let boot = common::element(&report["results"], "id", &format!("{id}.boot"));
        assert!(
            boot["fix"]["persistent"].as_str().unwrap().contains(&whole),
            "{boot}"
        );
    }
}
