use super::read::secs;
use super::*;

fn profile() -> Profile {
    crate::profile::load("10k").unwrap().profile
}

fn opts() -> ProxySpec {
    ProxySpec {
        backends: vec!["10.0.0.1:9001".into(), "10.0.0.2:9001".into()],
        bind: "0.0.0.0:8080".into(),
        tls_cert: None,
        tls_key: None,
        sticky: None,
        check_port: None,
    }
}

#[test]
fn absurd_nginx_numbers_do_not_overflow() {
    let f = read(
        "worker_processes 2;\nevents {\n    worker_connections 18446744073709551615;\n}\nhttp { server { listen 80; location / { proxy_pass http://b; } } }\n",
    );
    assert_eq!(f.max_connections, Some(u64::MAX / 2));
}

#[test]
fn generated_configs_read_back_to_the_profile() {
    let p = profile();
    for kind in [Kind::Haproxy, Kind::Nginx] {
        let text = generate(kind, &p, &opts()).unwrap();
        let f = read(&text);
        assert_eq!(f.kind, Some(kind), "{text}");
        assert_eq!(f.idle_timeout_secs, Some(30 + 90), "{text}");
        assert!(
            f.max_connections.unwrap() >= p.connections,
            "{kind:?}: {f:?}"
        );
    }
    let h = generate(Kind::Haproxy, &p, &opts()).unwrap();
    assert!(h.contains("balance leastconn") && h.contains("option httpchk GET /readyz"));
    assert!(
        h.contains("server s1 10.0.0.1:9001 check inter 1s fall 2 rise 2"),
        "{h}"
    );
    let admin = ProxySpec {
        check_port: Some(9002),
        ..opts()
    };
    let h = generate(Kind::Haproxy, &p, &admin).unwrap();
    assert!(
        h.contains("server s2 10.0.0.2:9001 check port 9002 inter 1s"),
        "{h}"
    );
    let n = generate(Kind::Nginx, &p, &opts()).unwrap();
    assert!(n.contains("least_conn;") && n.contains("proxy_set_header Upgrade $http_upgrade;"));
}

#[test]
fn sticky_and_tls_options() {
    let p = profile();
    let mut o = opts();
    o.sticky = Some(Sticky::Cookie);
    let h = generate(Kind::Haproxy, &p, &o).unwrap();
    assert!(h.contains("cookie WSTUNE_BACKEND insert") && h.contains(" cookie s2"));
    assert!(generate(Kind::Nginx, &p, &o)
        .unwrap_err()
        .contains("NGINX Plus"));
    o.sticky = Some(Sticky::Source);
    assert!(generate(Kind::Nginx, &p, &o).unwrap().contains("ip_hash;"));
    assert!(generate(Kind::Haproxy, &p, &o)
        .unwrap()
        .contains("stick on src"));
    o.tls_cert = Some("/etc/ssl/ws.pem".into());
    assert!(generate(Kind::Haproxy, &p, &o)
        .unwrap()
        .contains("ssl crt /etc/ssl/ws.pem"));
    assert!(generate(Kind::Nginx, &p, &o)
        .unwrap_err()
        .contains("--tls-key"));
}

#[test]
fn reading_hand_written_configs() {
    let f = read("defaults\n  timeout client 50000\nfrontend f\n  maxconn 2000\nbackend b\n");
    assert_eq!(f.idle_timeout_secs, Some(50));
    assert_eq!(f.max_connections, Some(2000));
    let f = read("events { worker_connections 1024; }\nhttp { upstream u { server a:1; } server { location / { proxy_pass http://u; } } }\nworker_processes 2;");
    assert_eq!(f.idle_timeout_secs, Some(60), "nginx's default");
    assert_eq!(
        f.max_connections,
        Some(1024),
        "2 workers x 1024 / 2 sockets each"
    );
    assert_eq!(read("nothing here").kind, None);
    assert_eq!(secs("2m", true), Some(120));
    assert_eq!(secs("1h", false), Some(3600));
}

#[test]
fn headroom_backlog_and_fd_limits_in_what_is_generated() {
    let p = profile();
    let h = generate(Kind::Haproxy, &p, &opts()).unwrap();
    // 10,000 + 10 %: global and frontend; the fd limit it needs is said.
    assert_eq!(h.matches("\n    maxconn 11000\n").count(), 2, "{h}");
    assert!(h.contains("fd limit of at least 22256"), "{h}");
    let f = read(&h);
    assert_eq!((f.global_maxconn, f.nofile), (Some(11000), None));
    let n = generate(Kind::Nginx, &p, &opts()).unwrap();
    assert!(n.contains("listen 0.0.0.0:8080 backlog=4096;"), "{n}");
    assert!(n.contains("worker_connections 23024;") && n.contains("worker_rlimit_nofile 24048;"));
    let f = read(&n);
    assert_eq!(f.listens, vec![("0.0.0.0:8080".to_string(), Some(4096))]);
    let mut o = opts();
    o.tls_cert = Some("c.pem".into());
    o.tls_key = Some("k.pem".into());
    let n = generate(Kind::Nginx, &p, &o).unwrap();
    assert!(n.contains("listen 0.0.0.0:8080 ssl backlog=4096;"), "{n}");
    // Both pass their own checks (the fd limit given, so this host's does not matter).
    let big = || {
        Ok(ProcLimits {
            soft: 1 << 20,
            hard: 1 << 20,
            raise_to: None,
            source: "t".into(),
        })
    };
    for text in [h, n] {
        for r in findings_with(std::path::Path::new("x"), &text, &p, big()) {
            assert_eq!(r.status, crate::catalog::eval::Status::Pass, "{r:?}");
        }
    }
}

#[test]
fn nginx_cap_counts_the_workers_fd_limit_and_its_backlog() {
    use crate::catalog::eval::Status;
    let p = profile();
    let text = "worker_processes 1;\nworker_rlimit_nofile 1024;\nevents { worker_connections 30000; }\nhttp { upstream u { server a:1; } server { listen 80; listen [::]:80 backlog=8192; location / { proxy_pass http://u; proxy_read_timeout 120s; } } }";
    let f = read(text);
    assert_eq!(f.max_connections, Some(512), "1024 fds / 2 per connection");
    let lim = Ok(ProcLimits {
        soft: 1 << 20,
        hard: 1 << 20,
        raise_to: None,
        source: "t".into(),
    });
    let r = findings_with(std::path::Path::new("n.conf"), text, &p, lim);
    let by = |id: &str| r.iter().find(|f| f.id == id).unwrap();
    assert_eq!(by("lb.max_connections").status, Status::Fail);
    assert_eq!(by("lb.fd_limit").status, Status::Fail);
    let b = by("lb.backlog");
    assert_eq!(b.status, Status::Fail);
    assert!(b.why.contains("80 (no backlog=, so 511)"), "{}", b.why);
    assert!(!b.why.contains("[::]:80 ("), "8192 >= 4096: {}", b.why);
    // A cap at the connections but without headroom is a warning.
    let t = "global\n maxconn 10000\ndefaults\n timeout tunnel 120s\nfrontend f\n bind :80\nbackend b\n";
    let r = findings_with(std::path::Path::new("h"), t, &p, Err("x".into()));
    assert_eq!(r[1].id, "lb.max_connections");
    assert_eq!(r[1].status, Status::Warn);
    assert!(r[1].fix.runtime.as_ref().unwrap().contains("maxconn 11000"));
}

#[test]
fn bind_addresses() {
    for (given, written) in [
        ("0.0.0.0:80", "0.0.0.0:80"),
        ("*:443", "*:443"),
        (":8080", "*:8080"),
        ("[::]:80", "[::]:80"),
        ("[::1]:9000", "[::1]:9000"),
        ("lb.example.com:80", "lb.example.com:80"),
    ] {
        assert_eq!(parse_bind(given).unwrap(), written);
    }
    for (bad, why) in [
        ("nonsense", "no port"),
        ("1.2.3:80", "not an IPv4"),
        ("0.0.0.0:0", "not a port"),
        ("0.0.0.0:65536", "not a port"),
        ("::1:80", "in brackets"),
        ("[::g]:80", "not an IPv6"),
        ("[::1]80", "after the bracket"),
        ("a b:80", "neither an address"),
        ("-x:80", "neither an address"),
        ("0.0.0.0:", "not a port"),
    ] {
        let e = parse_bind(bad).unwrap_err();
        assert!(e.contains(why) && e.contains("--bind"), "{bad}: {e}");
    }
}

#[test]
fn backend_lists() {
    assert_eq!(parse_backends("a:1, b:2").unwrap().len(), 2);
    assert!(parse_backends("").is_err());
    assert!(parse_backends("a")
        .unwrap_err()
        .contains("'a' is not HOST:PORT"));
    assert!(parse_backends("a:0").is_err());
}
