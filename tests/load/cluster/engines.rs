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

/// A Redis Cluster of `masters` masters with `replicas` replicas each, on loopback, once every
/// node says `cluster_state:ok`: the servers and their ports (the masters first).
fn redis_cluster(dir: &Path, masters: usize, replicas: usize) -> (Vec<Kill>, Vec<u16>) {
    let ports: Vec<u16> = (0..masters * (1 + replicas))
        .map(|_| cluster_port())
        .collect();
    let servers: Vec<Kill> = ports
        .iter()
        .map(|p| {
            let d = dir.join(p.to_string());
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
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    for p in &ports {
        cluster_ok(*p);
        // A replica that never finished its first sync is too stale to be promoted.
        if redis_cli(*p, &["ROLE"]).starts_with("slave") {
            common::poll(Duration::from_secs(30), || {
                redis_cli(*p, &["INFO", "replication"])
                    .contains("master_link_status:up")
                    .then_some(())
            })
            .unwrap_or_else(|| panic!("the replica on {p} never synced"));
        }
    }
    (servers, ports)
}

fn cluster_ok(port: u16) {
    common::poll(Duration::from_secs(30), || {
        redis_cli(port, &["CLUSTER", "INFO"])
            .contains("cluster_state:ok")
            .then_some(())
    })
    .unwrap_or_else(|| panic!("the cluster never came up (ok) on {port}"));
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
    let (_servers, ports) = redis_cluster(dir.path(), 3, 0);
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
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
    every_channel_once(&a, &b, "m").await;
    // One subscription held throughout: no rebuild loop on a healthy cluster.
    for n in [&a, &b] {
        assert!(!n.log_text().contains("resubscribing"), "{}", n.log_text());
    }
}

/// Fresh subscribers on `a` and `b` to 40 channels (spread over the shards), a publish of
/// each on `a`: each subscriber gets each channel's message exactly once.
async fn every_channel_once(a: &Served, b: &Served, tag: &str) {
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
                r#"{{"op":"publish","channel":"{n}","data":"{tag}-{n}"}}"#
            )))
            .await
            .unwrap();
    }
    let mut want: Vec<String> = names
        .iter()
        .map(|n| format!(r#"{{"channel":"{n}","data":"{tag}-{n}"}}"#))
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_nodes_resubscribe_after_a_master_is_killed_and_its_replica_takes_over() {
    if !have_redis() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut servers, ports) = redis_cluster(dir.path(), 3, 1);
    // Every node a seed, the one to be killed too: a dead seed is skipped.
    let seeds: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let url = format!("redis+cluster://{}", seeds.join(","));
    let a = node("channels", &url);
    let b = node("channels", &url);
    wait_backplane(a.admin, "up");
    wait_backplane(b.admin, "up");
    every_channel_once(&a, &b, "before").await;
    // SIGKILL the master that holds shard 0 (broadcasts and heartbeats): its replica is
    // promoted after the node timeout (2 s), and the nodes subscribe again.
    let slot_of_0 = redis_cli(ports[0], &["CLUSTER", "KEYSLOT", "wstune:relay:{0}"]);
    let slot: u16 = slot_of_0.trim().parse().unwrap();
    let victim = ports
        .iter()
        .position(|p| owns(*p, slot))
        .expect("a master owns shard 0's slot");
    let t0 = std::time::Instant::now();
    drop(servers.remove(victim));
    // The cluster sees the master fail and promotes its replica (node timeout 2 s).
    let survivor = ports[(victim + 1) % ports.len()];
    common::poll(Duration::from_secs(30), || {
        ports
            .iter()
            .any(|p| *p != ports[victim] && owns(*p, slot))
            .then_some(())
    })
    .expect("the killed master's replica was never promoted");
    cluster_ok(survivor);
    for n in [&a, &b] {
        common::poll(Duration::from_secs(20), || {
            common::get(n.admin, "/healthz")
                .contains("\"backplane\":\"up\"")
                .then_some(())
        })
        .unwrap_or_else(|| {
            let views: Vec<String> = ports
                .iter()
                .map(|p| redis_cli(*p, &["CLUSTER", "NODES"]))
                .collect();
            panic!(
                "never up again after the failover (victim {victim}):\n{}\n{}",
                n.log_text(),
                views.join("\n--\n")
            )
        });
    }
    every_channel_once(&a, &b, "after").await;
    assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", t0.elapsed());
}

/// Whether the node on `port` is the master serving `slot` (its own `CLUSTER SLOTS` view).
fn owns(port: u16, slot: u16) -> bool {
    let slots = redis_cli(port, &["CLUSTER", "SLOTS"]);
    let l: Vec<&str> = slots.lines().collect();
    // Each range: start, end, then the master's ip, port, id, then replicas.
    l.windows(4).any(|w| {
        let (Ok(lo), Ok(hi)) = (w[0].trim().parse::<u16>(), w[1].trim().parse::<u16>()) else {
            return false;
        };
        lo <= slot && slot <= hi && w[2].trim() == "127.0.0.1" && w[3].trim() == port.to_string()
    })
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
    let t0 = std::time::Instant::now();
    drop(master);
    wait_backplane(a.admin, "down");
    // The Sentinel promotes the replica; both nodes find it (asked again, or told by
    // +switch-master) and relay again, within a bounded wait.
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
        t0.elapsed() < Duration::from_secs(15),
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
