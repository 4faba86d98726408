//! The backplane's other engines against the real servers: a 3-master Redis Cluster
//! (sharded pub/sub), a Redis master with a replica and a Sentinel (the master killed), and a
//! nats-server (killed and restarted). Each starts its servers on free loopback ports in a
//! temporary directory and two `wstune serve` nodes on them.

use crate::common;

use super::wait_backplane;
use common::tungstenite::{clients, next_text, Ws};
use common::{free_port, Kill, Served};
use futures_util::{SinkExt, StreamExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

/// A free port whose cluster-bus port (+10000) is free too.
fn cluster_port() -> u16 {
    loop {
        let p = free_port();
        if p < 55_000 && std::net::TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok() {
            return p;
        }
    }
}

fn have_redis() -> bool {
    if common::have("redis-server") && common::have("redis-cli") {
        return true;
    }
    common::skip("redis", "redis-server or redis-cli is not installed");
    false
}

/// `redis-server ARGS` in `dir`, once its port accepts connections.
fn redis_server(dir: &Path, port: u16, args: &[&str]) -> Kill {
    let child = Command::new("redis-server")
        .args(args)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server");
    let k = Kill(child);
    common::wait_port(port, Duration::from_secs(10), "redis-server");
    k
}

fn redis_cli(port: u16, args: &[&str]) -> String {
    let o = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn node(app: &str, url: &str) -> Served {
    common::serve(&["--profile", "10k", "--app", app, "--cluster", url])
}

async fn subscribe(ws: &mut Ws, channel: &str) {
    ws.send(Message::text(format!(
        r#"{{"op":"subscribe","channel":"{channel}"}}"#
    )))
    .await
    .unwrap();
    let r = next_text(ws).await.unwrap();
    assert!(r.contains("subscribed"), "{r}");
}

/// Nothing more arrives on `ws` within a short while (the absence is what is tested).
async fn nothing_more(ws: &mut Ws) {
    if let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_millis(500), ws.next()).await {
        panic!("a duplicate or stray message: {m:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_sharded_pubsub_delivers_every_channel_once_on_both_nodes() {
    if !have_redis() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<u16> = (0..3).map(|_| cluster_port()).collect();
    let _servers: Vec<Kill> = ports
        .iter()
        .map(|p| {
            let d = dir.path().join(p.to_string());
            std::fs::create_dir(&d).unwrap();
            redis_server(
                &d,
                *p,
                &["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"],
            )
        })
        .collect();
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let o = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addrs)
        .arg("--cluster-yes")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    for p in &ports {
        common::poll(Duration::from_secs(20), || {
            redis_cli(*p, &["CLUSTER", "INFO"])
                .contains("cluster_state:ok")
                .then_some(())
        })
        .unwrap_or_else(|| panic!("the cluster never came up on {p}"));
    }
    let url = format!("redis+cluster://{}", addrs.join(","));
    let a = node("channels", &url);
    let b = node("channels", &url);
    wait_backplane(a.admin, "up");
    wait_backplane(b.admin, "up");
    // The 16 shard channels are spread over the masters: more than one holds subscribers.
    let holding = ports
        .iter()
        .filter(|p| redis_cli(**p, &["PUBSUB", "SHARDCHANNELS"]).contains("wstune:relay:{"))
        .count();
    assert!(holding >= 2, "shard channels on {holding} of 3 masters");
    let mut sub_a = clients(a.port, 1).await.pop().unwrap();
    let mut sub_b = clients(b.port, 1).await.pop().unwrap();
    let names: Vec<String> = (0..40).map(|i| format!("room-{i}")).collect();
    for n in &names {
        subscribe(&mut sub_a, n).await;
        subscribe(&mut sub_b, n).await;
    }
    let mut publisher = clients(a.port, 1).await.pop().unwrap();
    for n in &names {
        publisher
            .send(Message::text(format!(
                r#"{{"op":"publish","channel":"{n}","data":"m-{n}"}}"#
            )))
            .await
            .unwrap();
    }
    let mut want: Vec<String> = names
        .iter()
        .map(|n| format!(r#"{{"channel":"{n}","data":"m-{n}"}}"#))
        .collect();
    want.sort();
    for ws in [&mut sub_a, &mut sub_b] {
        let mut got = Vec::new();
        for _ in 0..names.len() {
            got.push(next_text(ws).await.unwrap());
        }
        got.sort();
        assert_eq!(got, want, "every channel's message once");
        nothing_more(ws).await;
    }
    // One subscription held throughout: no rebuild loop on a healthy cluster.
    for n in [&a, &b] {
        assert!(!n.log_text().contains("resubscribing"), "{}", n.log_text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_nodes_follow_a_failover_after_the_master_is_killed() {
    if !have_redis() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mp, rp, sp) = (free_port(), free_port(), free_port());
    let master = redis_server(dir.path(), mp, &[]);
    let _replica = redis_server(
        dir.path(),
        rp,
        &["--replicaof", "127.0.0.1", &mp.to_string()],
    );
    let conf = dir.path().join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port {sp}\nbind 127.0.0.1\ndir {}\n\
             sentinel monitor mymaster 127.0.0.1 {mp} 1\n\
             sentinel down-after-milliseconds mymaster 1000\n\
             sentinel failover-timeout mymaster 3000\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let _sentinel = Kill(
        Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    common::wait_port(sp, Duration::from_secs(10), "redis sentinel");
    // The Sentinel knows the replica (else it has nothing to promote).
    common::poll(Duration::from_secs(20), || {
        let r = redis_cli(sp, &["SENTINEL", "replicas", "mymaster"]);
        (r.contains(&rp.to_string())
            && redis_cli(rp, &["INFO", "replication"]).contains("master_link_status:up"))
        .then_some(())
    })
    .expect("the Sentinel never saw the replica in sync");
    let url = format!("redis+sentinel://127.0.0.1:{sp}/mymaster");
    let a = node("broadcast", &url);
    let b = node("broadcast", &url);
    wait_backplane(a.admin, "up");
    wait_backplane(b.admin, "up");
    let mut on_a = clients(a.port, 1).await.pop().unwrap();
    let mut on_b = clients(b.port, 1).await.pop().unwrap();
    on_a.send(Message::text("before")).await.unwrap();
    assert_eq!(next_text(&mut on_a).await.unwrap(), "before");
    assert_eq!(next_text(&mut on_b).await.unwrap(), "before");
    // SIGKILL: no goodbye to anyone.
    drop(master);
    wait_backplane(a.admin, "down");
    // The Sentinel promotes the replica; both nodes find it (asked again, or told by
    // +switch-master) and relay again, within a bounded wait.
    let t0 = std::time::Instant::now();
    common::poll(Duration::from_secs(30), || {
        redis_cli(sp, &["SENTINEL", "get-master-addr-by-name", "mymaster"])
            .contains(&rp.to_string())
            .then_some(())
    })
    .expect("the Sentinel never failed over to the replica");
    wait_backplane(a.admin, "up");
    wait_backplane(b.admin, "up");
    on_a.send(Message::text("after")).await.unwrap();
    assert_eq!(next_text(&mut on_a).await.unwrap(), "after");
    assert_eq!(next_text(&mut on_b).await.unwrap(), "after");
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "relaying again {:?} after the kill",
        t0.elapsed()
    );
    nothing_more(&mut on_b).await;
}

fn nats_server(port: u16) -> Option<Kill> {
    if !common::have("nats-server") {
        common::skip("nats", "nats-server is not installed");
        return None;
    }
    let child = Command::new("nats-server")
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let k = Kill(child);
    common::wait_port(port, Duration::from_secs(10), "nats-server");
    Some(k)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_relays_exactly_once_and_resumes_after_a_restart() {
    let np = free_port();
    let Some(nats) = nats_server(np) else { return };
    let url = format!("nats://127.0.0.1:{np}");
    let a = node("broadcast", &url);
    let b = node("broadcast", &url);
    wait_backplane(a.admin, "up");
    wait_backplane(b.admin, "up");
    let mut on_a = clients(a.port, 2).await;
    let mut on_b = clients(b.port, 2).await;
    on_a[0].send(Message::text("n1")).await.unwrap();
    on_a[0].send(Message::text("n2")).await.unwrap();
    for ws in on_a.iter_mut().chain(on_b.iter_mut()) {
        assert_eq!(next_text(ws).await.unwrap(), "n1");
        assert_eq!(next_text(ws).await.unwrap(), "n2");
    }
    nothing_more(&mut on_b[0]).await;
    drop(nats);
    wait_backplane(a.admin, "down");
    wait_backplane(b.admin, "down");
    let _nats = nats_server(np).unwrap();
    wait_backplane(a.admin, "up");
    wait_backplane(b.admin, "up");
    on_b[1].send(Message::text("n3")).await.unwrap();
    for ws in on_a.iter_mut().chain(on_b.iter_mut()) {
        assert_eq!(next_text(ws).await.unwrap(), "n3");
    }
    nothing_more(&mut on_a[1]).await;
}
