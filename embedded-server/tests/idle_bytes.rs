//! Every byte an idle connection costs, by allocation. Run by
//! bench/idle-bytes.sh (release, `--ignored`); not part of the ordinary test run (10,000
//! connections need a client process and ~20,000 file descriptors).
//!
//! The server runs in this process with the `wstune` binary's allocator (jemalloc) under a
//! counting wrapper that keeps, per requested size, how many allocations are live and the
//! bytes jemalloc really handed out (`usable_size`: size classes, alignment). The clients are
//! another process (bench/idle_clients.py: raw sockets, an upgrade each, then silence), so
//! nothing they hold is counted. The table is the difference between two snapshots: after a
//! warm-up set of connections (per-thread buffers, first-use tables) and after N more.

use std::alloc::{GlobalAlloc, Layout};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Requested sizes up to this are counted one by one; larger ones in one bucket.
const EXACT: usize = 16 << 10;

struct Counting;

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicI64 = AtomicI64::new(0);
/// Live allocations by requested size (index EXACT: everything larger).
static LIVE: [AtomicI64; EXACT + 1] = [ZERO; EXACT + 1];
/// Live bytes as requested, and as jemalloc rounded them.
static REQUESTED: AtomicI64 = AtomicI64::new(0);
static USABLE: AtomicI64 = AtomicI64::new(0);
/// Usable bytes by requested size (the rounding of each row), and requested bytes (for the
/// large bucket, whose sizes differ).
static USABLE_BY_SIZE: [AtomicI64; EXACT + 1] = [ZERO; EXACT + 1];
static REQUESTED_BY_SIZE: [AtomicI64; EXACT + 1] = [ZERO; EXACT + 1];

/// The sizes of the last large allocations (> EXACT), to name the tables behind that row.
static LARGE: [AtomicI64; 16] = [ZERO; 16];
static LARGE_NEXT: AtomicI64 = AtomicI64::new(0);

fn count(size: usize, usable: usize, sign: i64) {
    let i = size.min(EXACT);
    if size > EXACT {
        let k = LARGE_NEXT.fetch_add(1, Relaxed) as usize % LARGE.len();
        LARGE[k].store(sign * size as i64, Relaxed);
    }
    LIVE[i].fetch_add(sign, Relaxed);
    USABLE_BY_SIZE[i].fetch_add(sign * usable as i64, Relaxed);
    REQUESTED_BY_SIZE[i].fetch_add(sign * size as i64, Relaxed);
    REQUESTED.fetch_add(sign * size as i64, Relaxed);
    USABLE.fetch_add(sign * usable as i64, Relaxed);
}

// SAFETY: forwards to jemalloc unchanged; the counting touches only atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = tikv_jemallocator::Jemalloc.alloc(l);
        if !p.is_null() {
            count(l.size(), tikv_jemallocator::usable_size(p), 1);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = tikv_jemallocator::Jemalloc.alloc_zeroed(l);
        if !p.is_null() {
            count(l.size(), tikv_jemallocator::usable_size(p), 1);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        count(l.size(), tikv_jemallocator::usable_size(p), -1);
        tikv_jemallocator::Jemalloc.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let old_usable = tikv_jemallocator::usable_size(p);
        let q = tikv_jemallocator::Jemalloc.realloc(p, l, new);
        if !q.is_null() {
            count(l.size(), old_usable, -1);
            count(new, tikv_jemallocator::usable_size(q), 1);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The binary's jemalloc options (src/main.rs): freed pages go back at once.
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8; 34] = b"dirty_decay_ms:0,muzzy_decay_ms:0\0";

struct Snapshot {
    live: Vec<i64>,
    usable_by_size: Vec<i64>,
    requested_by_size: Vec<i64>,
    requested: i64,
    usable: i64,
    rss: i64,
    slab: Vec<(String, i64)>,
}

fn rss_bytes() -> i64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: i64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Kernel slab caches an idle TCP connection lives in (system-wide: both ends of each
/// loopback connection, and whatever else the machine does meanwhile). Bytes = objects x size.
fn slab() -> Vec<(String, i64)> {
    let Ok(s) = std::fs::read_to_string("/proc/slabinfo") else {
        return Vec::new();
    };
    let want = [
        "TCP",
        "request_sock_TCP",
        "sock_inode_cache",
        "dentry",
        "filp",
        "eventpoll_epi",
        "eventpoll_pwq",
        "skbuff_head_cache",
        "selinux_file_security",
        "lsm_file_cache",
    ];
    s.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() > 3 && want.contains(&f[0]) {
                let objs: i64 = f[1].parse().ok()?;
                let size: i64 = f[3].parse().ok()?;
                Some((f[0].to_string(), objs * size))
            } else {
                None
            }
        })
        .collect()
}

/// Fills `s` in place: both snapshots' buffers exist before the first one is taken, so the
/// harness's own tables are in neither difference.
fn snapshot(s: &mut Snapshot) {
    for (i, a) in LIVE.iter().enumerate() {
        s.live[i] = a.load(Relaxed);
        s.usable_by_size[i] = USABLE_BY_SIZE[i].load(Relaxed);
        s.requested_by_size[i] = REQUESTED_BY_SIZE[i].load(Relaxed);
    }
    s.requested = REQUESTED.load(Relaxed);
    s.usable = USABLE.load(Relaxed);
    s.rss = rss_bytes();
    s.slab = slab();
}

fn empty() -> Snapshot {
    Snapshot {
        live: vec![0; EXACT + 1],
        usable_by_size: vec![0; EXACT + 1],
        requested_by_size: vec![0; EXACT + 1],
        requested: 0,
        usable: 0,
        rss: 0,
        slab: Vec::with_capacity(16),
    }
}

/// Opens `n` connections from the client process and waits until the server holds `total`.
fn open(
    clients: &mut Vec<std::process::Child>,
    port: u16,
    n: usize,
    held: &dyn Fn() -> usize,
    total: usize,
) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../bench/idle_clients.py");
    let mut child = Command::new("python3")
        .args([script, &port.to_string(), &n.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 for bench/idle_clients.py");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(
        line.trim(),
        format!("open {n}"),
        "the client process failed"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while held() < total {
        assert!(
            Instant::now() < deadline,
            "{} of {total} registered",
            held()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    clients.push(child);
}

#[test]
#[ignore = "run by bench/idle-bytes.sh: 10,000 connections and a client process"]
fn idle_connection_bytes() {
    let n: usize = std::env::var("IDLE_CONNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let warm = 200;
    let workers: usize = std::env::var("IDLE_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    let server = std::sync::Arc::new(embedded_server::Server::builtin(
        embedded_server::ServerConfig::default(),
        &embedded_server::BuiltinConfig::default(),
    ));
    let _in_rt = rt.enter();
    let listeners = embedded_server::bind("127.0.0.1:0".parse().unwrap(), false, 1).expect("bind");
    let port = listeners[0].local_addr().unwrap().port();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let s2 = server.clone();
    let handle = rt.spawn(async move {
        let _ = s2
            .run(listeners, async {
                let _ = stop_rx.await;
            })
            .await;
    });
    let hub = server.hub();
    let mut clients = Vec::new();
    let held = || hub.registry().len();
    open(&mut clients, port, warm, &held, warm);
    // Let the upgrades' transient state go (boxed handshake, request buffers).
    std::thread::sleep(Duration::from_secs(2));
    let (mut before, mut after) = (empty(), empty());
    snapshot(&mut before);
    open(&mut clients, port, n, &held, warm + n);
    std::thread::sleep(Duration::from_secs(3));
    snapshot(&mut after);
    let per = |a: i64, b: i64| (b - a) as f64 / n as f64;
    println!("idle connections: {n} (after {warm} warm-up), {workers} worker threads");
    println!(
        "task future: {} B (embedded_server::memory::task_future_bytes)",
        embedded_server::memory::task_future_bytes()
    );
    for (name, size) in embedded_server::idle_layout() {
        println!("type {name}: {size} B");
    }
    println!("| requested size (B) | live allocations per connection | requested B/conn | usable B/conn |");
    println!("|---|---|---|---|");
    let mut rows = Vec::new();
    for i in 0..=EXACT {
        let d = after.live[i] - before.live[i];
        let u = after.usable_by_size[i] - before.usable_by_size[i];
        let r = after.requested_by_size[i] - before.requested_by_size[i];
        if u.abs() as f64 / n as f64 >= 0.5 || d.abs() as f64 / n as f64 >= 0.05 {
            rows.push((i, d, u, r));
        }
    }
    rows.sort_by_key(|r| -r.2);
    for (i, d, u, r) in rows {
        let label = if i == EXACT {
            format!(">{EXACT}")
        } else {
            i.to_string()
        };
        println!(
            "| {label} | {:.3} | {:.1} | {:.1} |",
            d as f64 / n as f64,
            r as f64 / n as f64,
            u as f64 / n as f64
        );
    }
    let large: Vec<i64> = LARGE
        .iter()
        .map(|a| a.load(Relaxed))
        .filter(|&x| x != 0)
        .collect();
    println!("last large allocations (+) and frees (-), bytes: {large:?}");
    println!(
        "heap per connection: requested {:.1} B, usable (jemalloc) {:.1} B",
        per(before.requested, after.requested),
        per(before.usable, after.usable)
    );
    println!("RSS per connection: {:.1} B", per(before.rss, after.rss));
    for ((name, b), (_, a)) in before.slab.iter().zip(&after.slab) {
        println!(
            "kernel slab {name}: {:.1} B per connection (both ends, system-wide)",
            per(*b, *a)
        );
    }
    // The budget this measurement guards (bench/results/2026-12-01-idle-bytes.md,
    // "Idle bytes per connection"): 2,044 B before the rare select! branches were boxed, 1,804 B after;
    // 2,073 B before "The cheap bytes taken" (task cell 1,536 -> 768, Shared 160 -> 128, registry
    // slots 17 -> 9 B), 1,260 B after. Over 1,400, a size class was lost somewhere.
    let heap = per(before.usable, after.usable);
    let ok = heap < 1_400.0;
    for mut c in clients {
        let _ = c.stdin.take().unwrap().write_all(b"\n");
        let _ = c.wait();
    }
    let _ = stop_tx.send(());
    let _ = rt.block_on(handle);
    assert!(
        ok,
        "{heap:.0} B of heap per idle connection (budget 1,400 B)"
    );
}
