//! An open-loop echo generator that shares no code with wstune's self-test generator, as a
//! reference for what evenly spaced, independent clients cost a server.
//!
//! Every connection sends `--rate` messages per second on its own schedule, the N connections'
//! phases spread evenly over the period, so the server sees one message every
//! 1 / (N x rate) seconds. One sender thread sleeps until each message's own due time
//! (nanosleep with a 1 ns timer slack) and writes it; a separate tokio thread reads the echoes.
//! After `--warmup` seconds it measures `--secs` seconds: the server's CPU (utime + stime of
//! `--pid`, the same figure the self-test reads), its own, the echo latency from the actual
//! send, and the spacing of its sends (coefficient of variation of the gaps). One JSON line
//! on stdout.
//!
//!   wspaced --addr 127.0.0.1:PORT --conns 5000 --rate 5 --secs 20 --warmup 2 --pid PID

use clap::Parser;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wsbench::{connect, cpu_seconds, frame, read_frame};

#[derive(Parser)]
struct Args {
    #[arg(long)]
    addr: SocketAddr,
    #[arg(long, default_value_t = 5000)]
    conns: usize,
    /// Messages per second per connection.
    #[arg(long, default_value_t = 5.0)]
    rate: f64,
    #[arg(long, default_value_t = 20.0)]
    secs: f64,
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    #[arg(long, default_value_t = 100)]
    size: usize,
    /// The server's process, for its CPU.
    #[arg(long)]
    pid: u32,
    #[arg(long, default_value_t = 1)]
    sources: usize,
}

fn main() {
    let a = Args::parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Connect (256 handshakes at a time), then split each socket: the sender thread writes on
    // a std handle, the runtime reads on a tokio one (the same socket, dup'ed).
    let (writers, readers) = rt.block_on(async {
        let mut w = Vec::with_capacity(a.conns);
        let mut r = Vec::with_capacity(a.conns);
        let mut i = 0;
        while i < a.conns {
            let batch: Vec<_> = (i..(i + 256).min(a.conns))
                .map(|k| tokio::spawn(connect(a.addr, wsbench::source(k, a.sources))))
                .collect();
            for b in batch {
                let s = b.await.unwrap().expect("connect").into_std().unwrap();
                let reader = tokio::net::TcpStream::from_std(s.try_clone().unwrap()).unwrap();
                w.push(s);
                r.push(reader);
            }
            i += 256;
        }
        (w, r)
    });
    let base = Instant::now();
    let start = base + Duration::from_millis(200);
    let measure_from = start + Duration::from_secs_f64(a.warmup);
    let end = measure_from + Duration::from_secs_f64(a.secs);
    let received = Arc::new(AtomicU64::new(0));
    let lat_us = Arc::new(Mutex::new(Vec::<u32>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let n = a.conns;
    let gap = Duration::from_secs_f64(1.0 / (a.rate * n as f64));
    let size = a.size.max(16);
    let sender = std::thread::spawn(move || {
        // SAFETY: prctl(PR_SET_TIMERSLACK) takes a plain integer: the sleeps below wake
        // within microseconds instead of the default 50 us slack.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64) };
        let mut writers = writers;
        let (mut sent, mut blocked) = (0u64, 0u64);
        let (mut gaps, mut mean, mut m2, mut last) = (0u64, 0f64, 0f64, None::<Instant>);
        let mut payload = vec![b'x'; size];
        for k in 0u64.. {
            let due = start + gap.mul_f64(k as f64);
            if due >= end {
                break;
            }
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            let sent_at = Instant::now();
            let stamp = sent_at.duration_since(base).as_nanos() as u64;
            payload[..8].copy_from_slice(&stamp.to_le_bytes());
            let f = frame(2, &payload);
            let w = &mut writers[(k as usize) % n];
            let mut off = 0;
            while off < f.len() {
                match w.write(&f[off..]) {
                    Ok(m) => off += m,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        blocked += 1;
                        std::thread::yield_now();
                    }
                    Err(_) => return (sent, blocked, 0.0),
                }
            }
            if due >= measure_from {
                sent += 1;
                if let Some(l) = last {
                    let g = sent_at.duration_since(l).as_secs_f64() * 1e6;
                    gaps += 1;
                    let d = g - mean;
                    mean += d / gaps as f64;
                    m2 += d * (g - mean);
                }
                last = Some(sent_at);
            }
        }
        let cv = if gaps > 0 && mean > 0.0 {
            (m2 / gaps as f64).sqrt() / mean
        } else {
            0.0
        };
        (sent, blocked, cv)
    });
    let (srv0, gen0, t0) = rt.block_on(async {
        for mut r in readers {
            let (received, lat_us, stop) = (received.clone(), lat_us.clone(), stop.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while !stop.load(Relaxed) {
                    if read_frame(&mut r, &mut buf).await.is_err() || buf.len() < 8 {
                        break;
                    }
                    let stamp = u64::from_le_bytes(buf[..8].try_into().unwrap());
                    let sent = base + Duration::from_nanos(stamp);
                    let now = Instant::now();
                    if sent >= measure_from && now <= end {
                        received.fetch_add(1, Relaxed);
                        let us = now.duration_since(sent).as_micros().min(u32::MAX as u128);
                        lat_us.lock().unwrap().push(us as u32);
                    }
                }
            });
        }
        tokio::time::sleep_until(measure_from.into()).await;
        let edge = (
            cpu_seconds(a.pid),
            cpu_seconds(std::process::id()),
            Instant::now(),
        );
        tokio::time::sleep_until(end.into()).await;
        edge
    });
    let (srv1, gen1, t1) = (
        cpu_seconds(a.pid),
        cpu_seconds(std::process::id()),
        Instant::now(),
    );
    stop.store(true, Relaxed);
    let (sent, blocked, cv) = sender.join().unwrap();
    let wall = t1.duration_since(t0).as_secs_f64();
    let mut l = std::mem::take(&mut *lat_us.lock().unwrap());
    l.sort_unstable();
    let q = |p: f64| {
        l.get(((l.len() as f64 * p) as usize).min(l.len().saturating_sub(1)))
            .map_or(f64::NAN, |v| *v as f64 / 1000.0)
    };
    let out = serde_json::json!({
        "generator": "wspaced",
        "conns": n,
        "rate": a.rate,
        "secs": wall,
        "sent": sent,
        "received": received.load(Relaxed),
        "blocked_writes": blocked,
        "server_cpu_pct": (srv1 - srv0) / wall * 100.0,
        "generator_cpu_pct": (gen1 - gen0) / wall * 100.0,
        "service_p50_ms": q(0.5),
        "service_p99_ms": q(0.99),
        "gap_cv": cv,
    });
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{out}");
    let _ = o.flush();
    // The sockets close as the process exits.
    std::process::exit(0);
}
