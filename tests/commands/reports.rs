//! What wstune writes and says: report file modes (a textfile collector must read them), fix
//! texts that never advise lowering a value, every profile/catalog error at once with its line,
//! error messages in wstune's words, and captured trees read with limits (the defects these
//! guard, by threat: RELIABILITY.md#wrong-answers).

use crate::common;
use common::Tree;

use common::{copy_dir, fixture, stderr};
use std::path::Path;

fn json_check(args: &[&str]) -> serde_json::Value {
    common::json_of(&common::run(&[&["check", "-f", "json"], args].concat()))
}

// ---- fix texts for multi-value sysctls keep the other fields ----

/// The default fixture has tcp_rmem `4096 131072 33554432`: the fix (advice) lowers the
/// default to the target and keeps min and max as they are (the old text cut max to 6291456).
#[test]
fn tcp_rmem_and_wmem_defaults_are_advice_not_to_apply_with_no_command() {
    let tree = Tree::from_fixture("default");
    // A host tuned above the old constants on both sides: min 8192, max 16 MiB for send.
    std::fs::write(
        tree.join("proc/sys/net/ipv4/tcp_wmem"),
        "8192\t65536\t16777216\n",
    )
    .unwrap();
    let report = json_check(&["--root", tree.root()]);
    for id in [
        "linux.net.ipv4.tcp_rmem.default",
        "linux.net.ipv4.tcp_wmem.default",
    ] {
        let f = common::element(&report["results"], "id", id);
        // Advice not to apply (the kernel docs keep the defaults; tcp_mem bounds the total):
        // shown with its target, marked advice, and no command to paste by mistake.
        assert_eq!(f["status"], "info", "{f}");
        assert_eq!(f["advice"], true, "{f}");
        assert!(f["target"].as_i64().is_some(), "{f}");
        let runtime = f["fix"]["runtime"].as_str().unwrap();
        assert!(runtime.starts_with("leave it as the kernel sets it"), "{f}");
        assert!(!runtime.contains("sysctl"), "{f}");
        assert!(f["fix"]["persistent"].is_null(), "{f}");
        let boot = common::element(&report["results"], "id", &format!("{id}.boot"));
        assert!(boot["fix"]["persistent"].is_null(), "{boot}");
    }
}

// ---- `-o FILE` modes; a real node_exporter reads the .prom file ----

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// `wstune ARGS` under umask 022, the usual root shell's.
fn run_umask_022(args: &[&str]) -> std::process::Output {
    std::process::Command::new("sh")
        .arg("-c")
        .arg("umask 022; exec \"$0\" \"$@\"")
        .arg(common::bin())
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

#[test]
fn output_file_is_0644_when_new_and_keeps_an_existing_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let root = fixture("default");
    let prom = dir.path().join("wstune.prom");
    let args = |out: &Path| {
        vec![
            "check".to_string(),
            "--root".into(),
            root.to_str().unwrap().into(),
            "-f".into(),
            "prometheus".into(),
            "-o".into(),
            out.to_str().unwrap().into(),
        ]
    };
    let run = |out: &Path| {
        let a = args(out);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let o = run_umask_022(&a);
        assert!(std::fs::read_to_string(out)
            .unwrap()
            .contains("wstune_check_result"));
        o
    };
    run(&prom);
    assert_eq!(
        format!("{:o}", mode(&prom)),
        "644",
        "a new report under umask 022"
    );
    run(&prom);
    assert_eq!(
        format!("{:o}", mode(&prom)),
        "644",
        "an existing 0644 report stays 0644"
    );
    std::fs::set_permissions(&prom, std::fs::Permissions::from_mode(0o640)).unwrap();
    run(&prom);
    assert_eq!(
        format!("{:o}", mode(&prom)),
        "640",
        "an operator's 0640 is kept"
    );
}

fn euid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// README's monitoring recipe, end to end: wstune runs as root and writes the textfile; the
/// Debian node_exporter, running as an unprivileged user, must read it and export it.
#[test]
fn node_exporter_running_unprivileged_exports_the_prom_file() {
    let exporter = "/usr/bin/prometheus-node-exporter";
    if !Path::new(exporter).exists() {
        common::skip(
            "node_exporter",
            &format!("{exporter} is not installed (apt-get install prometheus-node-exporter)"),
        );
        return;
    }
    if euid() != 0 {
        common::skip(
            "node_exporter",
            "needs root, to write as root and run node_exporter as nobody",
        );
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let textfiles = dir.path().join("textfile");
    std::fs::create_dir(&textfiles).unwrap();
    // The collector's user must be able to enter both directories.
    for d in [dir.path(), textfiles.as_path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let prom = textfiles.join("wstune.prom");
    let out = run_umask_022(&[
        "check",
        "--root",
        fixture("default").to_str().unwrap(),
        "-f",
        "prometheus",
        "-o",
        prom.to_str().unwrap(),
    ]);
    assert!(prom.exists(), "{}", stderr(&out));

    let port = common::free_port();
    let child = std::process::Command::new("setpriv")
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
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
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
        "node_exporter could not read {} (mode {:o}):\n{metrics}",
        prom.display(),
        mode(&prom)
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("wstune_check_result{")),
        "no wstune_check_result in /metrics:\n{metrics}"
    );
}

// ---- captured trees are read with limits ----

/// `wstune check -f json --root ROOT` with a deadline: a read that blocks or never ends must not
/// hang the test suite. Returns the report's finding for `id`.
fn check_tree_bounded(root: &Path, id: &str) -> serde_json::Value {
    let out = common::run_bounded(
        std::process::Command::new(common::bin())
            .args(["check", "-f", "json", "--root", root.to_str().unwrap()])
            .env("NO_COLOR", "1"),
        std::time::Duration::from_secs(30),
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}); stderr: {}", stderr(&out)));
    common::element(&report["results"], "id", id).clone()
}

fn tree_with_meminfo(make: impl FnOnce(&Path)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("host");
    copy_dir(&fixture("default"), &root);
    let meminfo = root.join("proc/meminfo");
    std::fs::remove_file(&meminfo).unwrap();
    make(&meminfo);
    dir
}

fn assert_refused(dir: &tempfile::TempDir, why: &str) {
    let root = dir.path().join("host");
    let started = std::time::Instant::now();
    let f = check_tree_bounded(&root, "linux.host.memory");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(f["status"], "skip", "{f}");
    let note = f["note"].as_str().unwrap_or_default();
    let file = root.join("proc/meminfo");
    assert!(
        note.starts_with(&format!("{}: {why}", file.display())),
        "the note must name the file and why: {note}"
    );
}

#[test]
fn root_tree_meminfo_linked_to_dev_zero_is_refused_quickly() {
    let dir = tree_with_meminfo(|p| std::os::unix::fs::symlink("/dev/zero", p).unwrap());
    assert_refused(&dir, "not a regular file");
}

#[test]
fn root_tree_meminfo_as_a_fifo_is_refused_without_blocking() {
    let dir = tree_with_meminfo(|p| {
        let ok = std::process::Command::new("mkfifo")
            .arg(p)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mkfifo");
    });
    assert_refused(&dir, "not a regular file");
}

#[test]
fn root_tree_file_over_the_size_cap_is_refused() {
    let dir = tree_with_meminfo(|p| {
        // MemTotal first, then 9 MiB of padding: a parser would accept it, the cap must not.
        let mut text = String::from("MemTotal:       16318424 kB\n");
        text.push_str(&"x".repeat(9 << 20));
        std::fs::write(p, text).unwrap();
    });
    assert_refused(&dir, "larger than 8 MiB");
}

#[test]
fn root_tree_link_out_of_the_tree_is_refused() {
    // The live host's own meminfo must not pass for the captured host's.
    let dir = tree_with_meminfo(|p| std::os::unix::fs::symlink("/proc/meminfo", p).unwrap());
    assert_refused(&dir, "is a link to /proc/meminfo, outside the tree");
}

#[test]
fn root_tree_link_inside_the_tree_is_followed() {
    let dir = tree_with_meminfo(|p| {
        let real = p.with_file_name("meminfo.real");
        std::fs::copy(fixture("default").join("proc/meminfo"), &real).unwrap();
        std::os::unix::fs::symlink("meminfo.real", p).unwrap();
    });
    let f = check_tree_bounded(&dir.path().join("host"), "linux.host.memory");
    assert!(f["current"].as_i64().is_some(), "{f}");
}

// ---- error texts name the file and the problem once, in wstune's words ----

#[test]
fn missing_profile_file_is_named_once_without_os_error_text() {
    let out = common::run(&["check", "-p", "/nope.yaml"]);
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert_eq!(err.matches("/nope.yaml").count(), 1, "{err}");
    assert!(err.contains("/nope.yaml: no such file"), "{err}");
    assert!(!err.contains("os error"), "{err}");
    assert!(err.contains("pass a built-in name"), "the fix: {err}");
    // A device is refused at once, not read without end.
    let out = common::run(&["check", "-p", "/dev/zero"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("/dev/zero: not a regular file"),
        "{}",
        stderr(&out)
    );
}

/// A profile path that leads to some other file (a link to /etc/shadow, say, which YAML reads
/// as a mapping whose keys are its lines) is refused as no profile, quoting none of it: its
/// keys and values may be secrets.
#[test]
fn a_profile_path_leading_to_another_file_quotes_none_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("shadow");
    std::fs::write(
        &secret,
        "root:$6$SaLt$HashOfRoot0123:19700:0:99999:7:::\ndaemon:*:19700:0:99999:7:::\nalice:$y$j9T$abc$HashOfAlice:19701:0:99999:7:::\n",
    )
    .unwrap();
    let link = dir.path().join("p.yaml");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    let out = common::run(&[
        "check",
        "-p",
        link.to_str().unwrap(),
        "--root",
        fixture("default").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{}: not a wstune profile", link.display())),
        "{err}"
    );
    assert!(err.contains("pass a profile file"), "the fix: {err}");
    for part in ["root", "daemon", "alice", "SaLt", "Hash", "19700", "99999"] {
        assert!(
            !err.contains(part),
            "{part} of the other file is quoted:\n{err}"
        );
    }
    assert_eq!(
        err.lines().count(),
        1,
        "one problem, not one per line:\n{err}"
    );
}

#[test]
fn empty_proc_self_limits_is_a_note_in_wstunes_words() {
    let tree = Tree::from_fixture("default");
    std::fs::write(tree.join("proc/self/limits"), "").unwrap();
    let report = json_check(&["--root", tree.root()]);
    let f = common::element(&report["results"], "id", "linux.process.nofile.hard");
    assert_eq!(f["status"], "skip", "{f}");
    let note = f["note"].as_str().unwrap();
    assert!(
        note.starts_with("/proc/self/limits: ") && note.contains("Max open files"),
        "{note}"
    );
    assert!(!note.to_lowercase().contains("procfs"), "{note}");
    assert!(!note.contains("Internal"), "{note}");
}

// ---- every profile and catalog error at once, each at its line ----

/// 1-based line of the first line of `text` that starts with `prefix`.
fn line_starting(text: &str, prefix: &str) -> usize {
    text.lines().position(|l| l.starts_with(prefix)).unwrap() + 1
}

#[test]
fn profile_with_three_errors_reports_all_three_with_lines() {
    let base =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/base.yaml"))
            .unwrap();
    let text = base
        .replace(
            "\nconnections: 100000\n",
            "\nconnections: 100000\nconections: 5\n",
        )
        .replace("  somaxconn: 65535\n", "  somaxcon: 65535\n")
        .replace("  nr_open: 1048576\n", "  nr_open: lots\n");
    assert_ne!(text, base);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.yaml");
    std::fs::write(&file, &text).unwrap();
    let out = common::run(&["check", "-p", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    let f = file.display();
    for (line, what) in [
        (
            line_starting(&text, "conections:"),
            "unknown field `conections`",
        ),
        (
            line_starting(&text, "  nr_open:"),
            "linux.nr_open: expected a whole number",
        ),
        (
            line_starting(&text, "  somaxcon:"),
            "linux: unknown field `somaxcon`",
        ),
    ] {
        assert!(
            err.contains(&format!("{f}:{line}: {what}")),
            "want {f}:{line}: {what} in:\n{err}"
        );
    }
    assert_eq!(err.lines().count(), 3, "exactly the three problems:\n{err}");
}

#[test]
fn catalog_errors_are_all_reported_and_a_duplicate_id_at_its_own_line() {
    let base =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("checks/linux.yaml"))
            .unwrap();
    let start = base.find("  - id: linux.net.core.somaxconn\n").unwrap();
    let end = start + 10 + base[start + 10..].find("  - id:").unwrap();
    // The somaxconn entry again at the end, an unknown key in one check, a bad variant in another.
    let mut text = format!("{base}{}", &base[start..end]);
    text = text.replacen("    severity: fail\n", "    sevrity: fail\n", 1);
    let fin = text
        .find("  - id: linux.net.ipv4.tcp_fin_timeout\n")
        .unwrap();
    text = format!(
        "{}{}",
        &text[..fin],
        text[fin..].replacen("    scope: netns\n", "    scope: nets\n", 1)
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.yaml");
    std::fs::write(&file, &text).unwrap();
    let out = common::run(&["check", "--catalog", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    let f = file.display();
    let dup_line = text
        .lines()
        .enumerate()
        .filter(|(_, l)| *l == "  - id: linux.net.core.somaxconn")
        .map(|(i, _)| i + 1)
        .last()
        .unwrap();
    assert!(dup_line > line_starting(&text, "  - id: linux.net.core.somaxconn"));
    for (line, what) in [
        (
            line_starting(&text, "    sevrity:"),
            "unknown field `sevrity`",
        ),
        (
            line_starting(&text, "    scope: nets"),
            "linux.net.ipv4.tcp_fin_timeout: unknown variant `nets`",
        ),
        (dup_line, "linux.net.core.somaxconn: duplicate id"),
    ] {
        assert!(
            err.contains(&format!("{f}:{line}: "))
                && err
                    .lines()
                    .any(|l| l.contains(&format!("{f}:{line}: ")) && l.contains(what)),
            "want {f}:{line}: ..{what} in:\n{err}"
        );
    }
    assert_eq!(err.lines().count(), 3, "exactly the three problems:\n{err}");
}

/// A control character in a sysctl.d file name, the osrelease or the profile name made the
/// JUnit report invalid XML (every CI's parser refused it). Python's expat, a strict XML 1.0
/// parser, reads it now.
#[test]
fn junit_with_control_characters_in_names_is_valid_xml() {
    let tree = Tree::from_fixture("default");
    std::fs::write(
        tree.join("etc/sysctl.d/10-a\x01b.conf"),
        "net.ipv4.tcp_fin_timeout = 61\n",
    )
    .unwrap();
    std::fs::write(tree.join("proc/sys/kernel/osrelease"), "6.1.0\x02-amd64\n").unwrap();
    let profile = tree.scratch().join("p.yaml");
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/base.yaml"))
            .unwrap()
            .replace("name: base", "name: \"100k\\x03\"");
    std::fs::write(&profile, text).unwrap();
    let o = common::run(&[
        "check",
        "--root",
        tree.root(),
        "--profile",
        profile.to_str().unwrap(),
        "-f",
        "junit",
    ]);
    let xml = o.stdout.clone();
    assert!(
        String::from_utf8_lossy(&xml).contains("10-a\\x01b.conf"),
        "the file name is in the report, its control character named: {}{}",
        common::stdout(&o),
        stderr(&o)
    );
    let mut py = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, xml.dom.minidom as m; d = m.parseString(sys.stdin.buffer.read()); print(d.getElementsByTagName('testsuite')[0].getAttribute('name'))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    py.stdin.take().unwrap().write_all(&xml).unwrap();
    let r = py.wait_with_output().unwrap();
    assert!(
        r.status.success(),
        "expat refused the report: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&r.stdout).trim(),
        "wstune check 100k\\x03"
    );
}

/// Profiles accepted somaxconn, nf_conntrack_max and tcp_max_tw_buckets up to 4294967295,
/// which the kernel (an int) refuses at apply: each is refused at load, with its line.
#[test]
fn sysctls_past_the_kernels_int_are_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("p.yaml");
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/base.yaml"))
            .unwrap()
            .replace("somaxconn: 65535", "somaxconn: 4294967295")
            .replace("nf_conntrack_max: 262144", "nf_conntrack_max: 4294967295")
            .replace(
                "tcp_max_tw_buckets: 262144",
                "tcp_max_tw_buckets: 2147483648",
            );
    std::fs::write(&profile, &text).unwrap();
    let o = common::run(&[
        "check",
        "--profile",
        profile.to_str().unwrap(),
        "--root",
        fixture("default").to_str().unwrap(),
    ]);
    assert_eq!(common::code(&o), 3, "{}", stderr(&o));
    let err = stderr(&o);
    for key in ["somaxconn", "nf_conntrack_max", "tcp_max_tw_buckets"] {
        let line = line_starting(&text, &format!("  {key}:"));
        assert!(
            err.contains(&format!("p.yaml:{line}: linux.{key}: "))
                && err.contains("(the kernel's maximum is 2147483647, an int)"),
            "{key}: {err}"
        );
    }
    assert_eq!(err.lines().count(), 3, "{err}");
}

/// A sysctl.d file that is not UTF-8 and one that is a link loop were skipped without a word in
/// the boot view: a key they set looked unset. Both are named now.
#[test]
fn unreadable_sysctl_d_files_are_named_in_the_boot_view() {
    let tree = Tree::from_fixture("default");
    let d = tree.join("etc/sysctl.d");
    std::fs::write(
        d.join("70-latin1.conf"),
        b"# caf\xe9\nnet.core.somaxconn = 8192\n",
    )
    .unwrap();
    std::os::unix::fs::symlink("80-loop.conf", d.join("80-loop.conf")).unwrap();
    let report = json_check(&["--root", tree.root()]);
    let f = common::finding(&report, "linux.net.core.somaxconn.boot");
    let note = f["note"].as_str().unwrap_or_default().to_string() + &f["current"].to_string();
    assert!(
        note.contains("/etc/sysctl.d/70-latin1.conf")
            && note.contains("/etc/sysctl.d/80-loop.conf"),
        "{f}"
    );
    let o = common::run(&["apply", "--root", tree.root(), "--dry-run"]);
    let out = common::stdout(&o);
    assert!(
        out.contains("note: the boot view could not read") && out.contains("70-latin1.conf"),
        "{out}"
    );
}

/// `serve --bind` with an address this host does not have said "in use? pick another --port";
/// EADDRNOTAVAIL means the address is not on this host.
#[test]
fn serve_on_an_address_not_on_this_host_says_so() {
    let mut cmd = std::process::Command::new(common::bin());
    cmd.args(["serve", "--bind", "192.0.2.77", "--port", "0"]);
    let o = common::run_bounded(&mut cmd, std::time::Duration::from_secs(20));
    assert_eq!(common::code(&o), 3, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("192.0.2.77 is not an address of this host")
            && !err.contains("pick another --port"),
        "{err}"
    );
}
