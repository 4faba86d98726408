//! wsload: the client side of the benchmarks.
//!   wsload idle ADDR --conns N --hold SECS            open N connections and hold them
//!   wsload echo ADDR --conns N --secs S [--size B]    closed-loop echo, 1 message in flight each
//!   wsload sub  ADDR --conns N --rounds R             subscribers: per round, time until the last one has it
//!   wsload pub  ADDR --rounds R [--gap-ms G]          publish R timestamped messages (broadcast app)
//! Prints "ready" on stdout when its connections are open, results as key=value lines.

use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use wsbench::*;

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    Idle {
        addr: SocketAddr,
        #[arg(long)]
        conns: usize,
        #[arg(long, default_value_t = 30)]
        hold: u64,
        #[arg(long, default_value_t = 1)]
        sources: usize,
    },
    Echo {
        addr: SocketAddr,
        #[arg(long)]
        conns: usize,
        #[arg(long)]
        secs: u64,
        #[arg(long, default_value_t = 100)]
        size: usize,
    },
    Sub {
        addr: SocketAddr,
        #[arg(long)]
        conns: usize,
        #[arg(long)]
        rounds: usize,
        #[arg(long, default_value_t = 1)]
        sources: usize,
        #[arg(long, default_value_t = 120)]
        timeout: u64,
    },
    Pub {
        addr: SocketAddr,
        #[arg(long)]
        rounds: usize,
        #[arg(long, default_value_t = 500)]
        gap_ms: u64,
        #[arg(long, default_value_t = 100)]
        size: usize,
    },
}

async fn open(addr: SocketAddr, n: usize, sources: usize) -> Vec<tokio::net::TcpStream> {
    let mut out = Vec::with_capacity(n);
    let mut i = 0;
    while i < n {
        let batch: Vec<_> = (i..(i + 256).min(n))
            .map(|k| tokio::spawn(connect(addr, source(k, sources))))
            .collect();
        for b in batch {
            out.push(b.await.unwrap().expect("connect"));
        }
        i += 256;
    }
    out
}

#[tokio::main]
async fn main() {
    match Args::parse().cmd {
        Cmd::Idle {
            addr,
            conns,
            hold,
            sources,
        } => {
            let socks = open(addr, conns, sources).await;
            println!("ready {}", socks.len());
            tokio::time::sleep(Duration::from_secs(hold)).await;
        }
        Cmd::Echo {
            addr,
            conns,
            secs,
            size,
        } => {
            let socks = open(addr, conns, 1).await;
            println!("ready {}", socks.len());
            let done = Arc::new(AtomicU64::new(0));
            let until = Instant::now() + Duration::from_secs(secs);
            let start = Instant::now();
            let mut tasks = Vec::new();
            for mut s in socks {
                let done = done.clone();
                tasks.push(tokio::spawn(async move {
                    let f = frame(2, &vec![b'e'; size]);
                    let mut buf = Vec::new();
                    while Instant::now() < until {
                        if s.write_all(&f).await.is_err()
                            || read_frame(&mut s, &mut buf).await.is_err()
                        {
                            break;
                        }
                        done.fetch_add(1, Relaxed);
                    }
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
            let n = done.load(Relaxed);
            println!(
                "messages={n} secs={:.3} rate={:.0}",
                start.elapsed().as_secs_f64(),
                n as f64 / start.elapsed().as_secs_f64()
            );
        }
        Cmd::Sub {
            addr,
            conns,
            rounds,
            sources,
            timeout,
        } => {
            let socks = open(addr, conns, sources).await;
            println!("ready {}", socks.len());
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, f64)>();
            for mut s in socks {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut round = 0;
                    while round < rounds {
                        match read_frame(&mut s, &mut buf).await {
                            Ok(1) | Ok(2) => {
                                if let Some(t) = stamp_of(&buf) {
                                    let _ = tx.send((
                                        round,
                                        (now_nanos().saturating_sub(t)) as f64 / 1e6,
                                    ));
                                    round += 1;
                                }
                            }
                            Ok(9) => {}
                            _ => return,
                        }
                    }
                });
            }
            drop(tx);
            let mut per_round: Vec<Vec<f64>> = vec![Vec::new(); rounds];
            let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
            while let Ok(Some((r, ms))) = tokio::time::timeout_at(deadline, rx.recv()).await {
                per_round[r].push(ms);
            }
            for (r, v) in per_round.iter_mut().enumerate() {
                let got = v.len();
                let last = v.iter().cloned().fold(0.0, f64::max);
                let p50 = median(v);
                println!("round={r} received={got} last_ms={last:.2} p50_ms={p50:.2}");
            }
        }
        Cmd::Pub {
            addr,
            rounds,
            gap_ms,
            size,
        } => {
            let mut s = connect(addr, None).await.expect("connect");
            for _ in 0..rounds {
                tokio::time::sleep(Duration::from_millis(gap_ms)).await;
                s.write_all(&frame(2, &stamped(size)))
                    .await
                    .expect("publish");
            }
            tokio::time::sleep(Duration::from_millis(gap_ms)).await;
        }
    }
}
