//! `wstune selftest` against wss:// servers and `serve --self-test --tls`: the real binary, a
//! real TLS listener on 127.0.0.1, a CA and a server certificate it signed.

use crate::common;

use common::{json_of, run, serve, Served};
use serde_json::Value;
use std::path::PathBuf;

/// A CA and a server certificate for localhost and 127.0.0.1 it signed, under a new directory:
/// (dir, CA, certificate, key).
fn certificates() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let g = wstune::selftest::tls::generate(&["localhost", "127.0.0.1"]).unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let ca = write("ca.pem", &g.ca_pem);
    let cert = write("cert.pem", &g.cert_pem);
    let key = write("key.pem", &g.key_pem);
    (dir, ca, cert, key)
}

/// `wstune serve` on TLS with that certificate, and `extra` flags.
fn serve_tls(cert: &std::path::Path, key: &std::path::Path, extra: &[&str]) -> Served {
    let mut args = vec![
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    serve(&args)
}

fn wss(srv: &Served) -> String {
    format!("wss://localhost:{}/", srv.port)
}

fn scenario<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["scenario"] == name)
        .unwrap_or_else(|| panic!("no {name} in {r:#}"))
}

#[test]
fn selftest_measures_a_wss_server_whose_ca_it_is_given() {
    let (_dir, ca, cert, key) = certificates();
    let srv = serve_tls(&cert, &key, &[]);
    let o = run(&[
        "selftest",
        "--url",
        &wss(&srv),
        "--ca",
        ca.to_str().unwrap(),
        "--scenario",
        "echo-rate",
        "--conns",
        "50",
        "--secs",
        "1",
        "--format",
        "json",
    ]);
    let r = json_of(&o);
    assert_ne!(o.status.code(), Some(3), "{r:#}");
    assert_eq!(r["url"], wss(&srv));
    let s = scenario(&r, "echo-rate");
    assert_eq!(s["errors"], 0, "{s:#}");
    assert_eq!(s["conns_connected"], 50, "{s:#}");
    assert!(s["received"].as_u64().unwrap() > 0, "{s:#}");
    // Every connection made a full handshake (resumption is off by default), signed with the
    // certificate's P-256 key.
    assert_eq!(s["tls"]["full"], 50, "{s:#}");
    assert_eq!(s["tls"]["resumed"], 0, "{s:#}");
    assert_eq!(s["tls"]["version"], "TLSv1_3", "{s:#}");
    assert_eq!(
        s["tls"]["signature_scheme"], "ECDSA_NISTP256_SHA256",
        "{s:#}"
    );
    assert_eq!(s["tls"]["handshake_ms"]["count"], 50, "{s:#}");
    // Opening (TCP + TLS + upgrade) takes at least the handshake.
    assert_eq!(s["connect_ms"]["count"], 50, "{s:#}");
    assert!(
        s["connect_ms"]["p50"].as_f64().unwrap()
            >= s["tls"]["handshake_ms"]["p50"].as_f64().unwrap(),
        "{s:#}"
    );
}

#[test]
fn a_wss_url_without_a_trust_decision_is_refused_naming_both_fixes() {
    let (_dir, _ca, cert, key) = certificates();
    let srv = serve_tls(&cert, &key, &[]);
    let o = run(&[
        "selftest",
        "--url",
        &wss(&srv),
        "--conns",
        "5",
        "--secs",
        "1",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("--ca FILE") && err.contains("--insecure"),
        "{err}"
    );
    // --insecure accepts the chain it cannot verify, and measures.
    let o = run(&[
        "selftest",
        "--url",
        &wss(&srv),
        "--insecure",
        "--conns",
        "5",
        "--secs",
        "1",
        "--format",
        "json",
    ]);
    let r = json_of(&o);
    assert_eq!(scenario(&r, "echo-rate")["tls"]["full"], 5, "{r:#}");
}

#[test]
fn tls_handshake_is_refused_against_plain_ws() {
    let srv = serve(&[]);
    let o = run(&[
        "selftest",
        "--url",
        &srv.url(),
        "--scenario",
        "tls-handshake",
        "--secs",
        "1",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("tls-handshake") && err.contains("wss://"),
        "{err}"
    );
}

/// tls-handshake with `--tls-resume` against a server at `resumption`: the report.
fn handshakes(resumption: &str) -> (Value, Option<i32>) {
    let (_dir, ca, cert, key) = certificates();
    let srv = serve_tls(&cert, &key, &["--tls-resumption", resumption]);
    let pid = srv.pid().to_string();
    let o = run(&[
        "selftest",
        "--url",
        &wss(&srv),
        "--ca",
        ca.to_str().unwrap(),
        "--scenario",
        "tls-handshake",
        "--tls-resume",
        "--storm-concurrency",
        "8",
        "--secs",
        "1",
        "--pid",
        &pid,
        // The resumed share is what is judged here, on any window.
        "--accept-noise",
        "--format",
        "json",
    ]);
    (json_of(&o), o.status.code())
}

#[test]
fn tls_handshake_with_resumption_resumes_and_counts_per_server_core() {
    let (r, code) = handshakes("tickets");
    let s = scenario(&r, "tls-handshake");
    let (full, resumed) = (
        s["tls"]["full"].as_f64().unwrap(),
        s["tls"]["resumed"].as_f64().unwrap(),
    );
    assert!(resumed / (full + resumed) >= 0.9, "{s:#}");
    assert_eq!(s["errors"], 0, "{s:#}");
    assert!(s["handshakes_per_sec"].as_f64().unwrap() > 0.0, "{s:#}");
    assert!(
        s["handshakes_per_server_core_sec"].as_f64().unwrap() > 0.0,
        "{s:#}"
    );
    assert_eq!(code, Some(0), "{r:#}");
}

#[test]
fn a_server_without_resumption_fails_the_resumed_check() {
    let (r, code) = handshakes("off");
    let s = scenario(&r, "tls-handshake");
    assert_eq!(s["tls"]["resumed"], 0, "{s:#}");
    assert!(s["tls"]["full"].as_u64().unwrap() > 0, "{s:#}");
    let check = r["verdict"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["what"] == "sessions resumed")
        .unwrap_or_else(|| panic!("no resumed check: {r:#}"));
    assert_eq!(check["ok"], false, "{check:#}");
    assert_eq!(code, Some(2), "{r:#}");
}

#[test]
fn serve_self_test_tls_runs_every_scenario_over_tls() {
    let o = run(&[
        "serve",
        "--self-test",
        "--tls",
        "--profile",
        "10k",
        "--conns",
        "100",
        "--secs",
        "1",
        "--rounds",
        "2",
        "--format",
        "json",
    ]);
    let r = json_of(&o);
    assert!(
        r["url"].as_str().unwrap().starts_with("wss://localhost:"),
        "{r:#}"
    );
    let scenarios = r["scenarios"].as_array().unwrap();
    let names: Vec<&str> = scenarios
        .iter()
        .map(|s| s["scenario"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"tls-handshake"), "{names:?}");
    assert!(names.contains(&"echo-rate"), "{names:?}");
    for s in scenarios {
        assert!(s["tls"]["full"].as_u64().unwrap() > 0, "{s:#}");
        assert_eq!(s["errors"], 0, "{s:#}");
    }
}

#[test]
fn serve_self_test_with_a_given_certificate_needs_a_trust_decision() {
    let (_dir, _ca, cert, key) = certificates();
    let o = run(&[
        "serve",
        "--self-test",
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
        "--conns",
        "5",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("--ca") && err.contains("--insecure"), "{err}");
}

#[test]
fn tls_settings_without_a_tls_listener_are_refused() {
    for (args, want) in [
        (
            &["serve", "--tls-resumption", "off"][..],
            "--tls-resumption applies to a TLS listener",
        ),
        (&["serve", "--insecure"][..], "only apply to a load test"),
        (&["serve", "--self-test", "--ca", "x.pem"][..], "add --tls"),
    ] {
        let o = run(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// Over several server processes (the supervisor's children read the run's certificate from
/// its private directory, and announce a wss:// listener): tls-handshake's clients are
/// `--conns` at most, the count the processes were sized for, so none is refused with 503.
#[test]
fn serve_self_test_tls_over_several_processes() {
    let o = run(&[
        "serve",
        "--self-test",
        "--tls",
        "--processes",
        "2",
        "--profile",
        "10k",
        "--conns",
        "50",
        "--secs",
        "1",
        "--scenario",
        "echo-rate",
        "--scenario",
        "tls-handshake",
        "--format",
        "json",
    ]);
    let r = json_of(&o);
    assert_eq!(r["server_processes"], 2, "{r:#}");
    let echo = scenario(&r, "echo-rate");
    assert_eq!(echo["errors"], 0, "{echo:#}");
    assert_eq!(echo["tls"]["full"], 50, "{echo:#}");
    let hs = scenario(&r, "tls-handshake");
    assert_eq!(hs["errors"], 0, "{hs:#}");
    assert_eq!(hs["conns_connected"], 50, "{hs:#}");
    assert!(hs["tls"]["full"].as_u64().unwrap() > 0, "{hs:#}");
}

/// One TLS connection to `port` with `client` (its session cache kept between calls): it asks
/// the WebSocket port's /healthz and reads the answer, so the server's tickets arrive. Whether
/// the handshake resumed an earlier session.
fn resumed(client: &std::sync::Arc<embedded_server::tls::rustls::ClientConfig>, port: u16) -> bool {
    use embedded_server::tls::rustls;
    use std::io::{Read, Write};
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(client.clone(), name).unwrap();
    let tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut s = rustls::StreamOwned::new(conn, tcp);
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    s.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
}

/// `serve --processes 2` over TLS: every process opens every other's tickets (the
/// supervisor's shared keys), so a client resumes wherever the kernel sends its reconnect, and
/// still does after a rolling restart replaced every process. With a key per process, about
/// half the reconnects resumed, and none after a roll.
#[test]
fn tickets_resume_on_every_process_and_across_a_roll() {
    use embedded_server::tls::rustls;
    let (_dir, ca, cert, key) = certificates();
    let srv = serve_tls(
        &cert,
        &key,
        &["--profile", "10k", "--app", "echo", "--processes", "2"],
    );
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for c in rustls::pki_types::CertificateDer::pem_file_iter(&ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let client = std::sync::Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    assert!(
        !resumed(&client, srv.port),
        "the first handshake is a full one"
    );
    let n = 40;
    let before = (0..n).filter(|_| resumed(&client, srv.port)).count();
    assert_eq!(before, n, "every reconnect resumed, on either process");
    let pids = |admin: u16| -> Vec<u64> {
        let h: Value = serde_json::from_str(common::body(&common::get(admin, "/healthz"))).unwrap();
        h["process"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["pid"].as_u64())
            .collect()
    };
    let old = pids(srv.admin);
    common::signal(srv.pid(), "-HUP");
    common::poll(std::time::Duration::from_secs(60), || {
        let h: Value =
            serde_json::from_str(common::body(&common::get(srv.admin, "/healthz"))).ok()?;
        let procs = h["process"].as_array()?;
        (h["rolling_restart"] == false
            && procs.iter().all(|p| {
                p["state"] == "up" && p["pid"].as_u64().is_some_and(|pid| !old.contains(&pid))
            }))
        .then_some(())
    })
    .unwrap_or_else(|| panic!("the processes {old:?} were never all replaced"));
    let after = (0..n).filter(|_| resumed(&client, srv.port)).count();
    assert_eq!(
        after,
        n,
        "every reconnect after the roll resumed: {:?}",
        pids(srv.admin)
    );
}
