//! The restart scenario's pure parts: the backoff, the refusal kinds, the figures added up
//! and merged, the trigger names and the drain request.

use super::*;

#[test]
fn full_jitter_stays_under_an_exponential_ceiling_capped_at_a_few_seconds() {
    assert_eq!(full_jitter(0, 0.0), Duration::ZERO);
    assert_eq!(full_jitter(0, 0.5), Duration::from_millis(50));
    assert_eq!(full_jitter(3, 0.5), Duration::from_millis(400));
    // 100 ms * 2^10 is far past the cap: the cap holds, and a huge attempt cannot overflow.
    assert_eq!(full_jitter(10, 1.0), BACKOFF_CAP);
    assert_eq!(full_jitter(u32::MAX, 1.0), BACKOFF_CAP);
}

#[test]
fn refusals_are_named_by_what_the_client_saw() {
    use super::super::client::ConnectError;
    let io = |k| ConnectError::Io(std::io::Error::from(k));
    assert_eq!(
        refusal_kind(&io(std::io::ErrorKind::ConnectionRefused)),
        "rst"
    );
    assert_eq!(refusal_kind(&io(std::io::ErrorKind::UnexpectedEof)), "eof");
    assert_eq!(
        refusal_kind(&ConnectError::NotWebSocket(
            "HTTP/1.1 503 Service Unavailable".into()
        )),
        "http-503"
    );
    assert_eq!(
        refusal_kind(&ConnectError::NotWebSocket("garbage".into())),
        "other"
    );
}

#[test]
fn the_peak_accept_rate_is_the_best_second_of_any_ten_buckets() {
    // 300 in buckets 10..=14, 900 in 15..=24 spread, 5 in 40.
    let mut u: Vec<(u64, u64)> = (10..15).map(|b| (b, 60)).collect();
    u.extend((15..25).map(|b| (b, 90)));
    u.push((40, 5));
    assert_eq!(peak_per_sec(&u), 900.0);
    // Shards' buckets at the same instant add.
    assert_eq!(peak_per_sec(&[(7, 3), (7, 4)]), 7.0);
    assert_eq!(peak_per_sec(&[]), 0.0);
}

#[test]
fn every_client_back_gives_the_time_from_the_disruption_to_the_last() {
    let c = RestartCounts {
        closed: 10,
        back: 10,
        last_back_unix_ms: Some(5_500),
        ..Default::default()
    };
    let r = from_counts(c.clone(), Latency::default(), "x".into(), 2_000, None, None);
    assert_eq!(r.all_back_secs, Some(3.5));
    let r = from_counts(
        RestartCounts { not_back: 1, ..c },
        Latency::default(),
        "x".into(),
        2_000,
        None,
        None,
    );
    assert_eq!(r.all_back_secs, None);
}

/// A drain endpoint's 202 is a success carrying its status line; a 404 is an error that
/// says what to check; the key goes as a bearer token.
#[tokio::test]
async fn the_drain_post_wants_a_2xx_and_sends_the_key() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for (answer, ok) in [
        ("HTTP/1.1 202 Accepted", true),
        ("HTTP/1.1 404 Not Found", false),
    ] {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/api/drain", l.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut req = vec![0u8; 1024];
            let n = s.read(&mut req).await.unwrap();
            s.write_all(format!("{answer}\r\nContent-Length: 0\r\n\r\n").as_bytes())
                .await
                .unwrap();
            String::from_utf8_lossy(&req[..n]).into_owned()
        });
        let d = Disrupt::drain_url(&url, Some("k3y".into())).unwrap();
        let r = (d.run)().await;
        let req = server.await.unwrap();
        assert!(req.starts_with("POST /api/drain HTTP/1.0\r\n"), "{req}");
        assert!(req.contains("Authorization: Bearer k3y\r\n"), "{req}");
        match r {
            Ok(said) => assert!(ok && said.contains("202 Accepted"), "{said}"),
            Err(e) => assert!(!ok && e.contains("not 2xx"), "{e}"),
        }
    }
    assert!(Disrupt::drain_url("https://x/api/drain", None).is_err());
}

#[test]
fn restart_by_reads_its_names_and_a_command() {
    assert_eq!("sigterm-child".parse(), Ok(RestartBy::SigtermChild));
    assert_eq!(
        "command:systemctl restart ws".parse(),
        Ok(RestartBy::Command("systemctl restart ws".into()))
    );
    assert!("command: ".parse::<RestartBy>().is_err());
    assert!("reboot"
        .parse::<RestartBy>()
        .unwrap_err()
        .contains("sigterm-child"));
}

/// `report merge`: two shards' clients added up, the disruption's time and trigger from
/// the shard that ran it, the accept buckets of the same instant summed before the peak.
#[test]
fn shards_restart_figures_merge_into_one() {
    let shard = |at, by: &str, last, refused: u64| {
        from_counts(
            RestartCounts {
                closed: 100,
                back: 100,
                attempts: 100 + refused,
                refused: [("rst".to_string(), refused)].into(),
                last_back_unix_ms: Some(last),
                upgrades: vec![(20, 60), (21, 40)],
                ..Default::default()
            },
            Latency::default(),
            by.into(),
            at,
            None,
            Some(ListenCounters {
                listen_overflows: 1,
                ..Default::default()
            }),
        )
    };
    let a = shard(0, "shard 0", 3_000, 2);
    let b = shard(1_000, "sigterm", 2_500, 3);
    let m = merge_reports(&[&a, &b], Latency::default()).unwrap();
    assert_eq!((m.closed, m.back, m.refused_total), (200, 200, 5));
    assert_eq!(m.restart_by, "sigterm");
    assert_eq!(m.all_back_secs, Some(2.0));
    assert_eq!(m.peak_accept_rate, 200.0);
    assert_eq!(m.kernel.unwrap().listen_overflows, 2);
    assert!(merge_reports(&[], Latency::default()).is_none());
}
