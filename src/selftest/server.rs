//! The self-test's servers as it measures them: a process tree's CPU and memory, the
//! embedded server started in this process, and a server's memory budget and metrics read
//! from its admin listener. (A child `wstune serve --processes N` is started by
//! `serve::child`, which owns the serve configuration it hands over.)

use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::time::Duration;

/// `pid` and every process below it (the supervisor and its server processes), Linux.
pub fn tree(pid: u32) -> Vec<u32> {
    crate::host::process::tree(pid)
}

/// CPU seconds and RSS summed over `pid`'s process tree. The CPU includes what the tree's
/// exited (and reaped) processes used: the kernel adds a reaped child's time to its parent's
/// cutime/cstime, and a process's children's, so the top process's account them all (a
/// short-lived helper, a worker restarted mid-run). One that exited but is not yet reaped is
/// missed until it is; callers clamp a negative delta (a process gone from the tree with its
/// time not yet in an ancestor's).
pub fn sample_tree(pid: u32) -> Option<(f64, u64)> {
    let mut total: Option<(f64, u64)> = None;
    if let Some(reaped) = crate::host::process::reaped_children_cpu(pid) {
        total = Some((reaped, 0));
    }
    for p in tree(pid) {
        if let Some((c, r)) = super::sample(p) {
            let t = total.get_or_insert((0.0, 0));
            t.0 += c;
            t.1 += r;
        }
    }
    total
}

/// The embedded server with `config`, running the built-in `app`, on a free loopback port, in
/// this process (on the current Tokio runtime), until the sender is used or dropped: its
/// address and hub.
pub fn start_in_process(
    config: embedded_server::ServerConfig,
    app: &embedded_server::BuiltinConfig,
) -> InProcess {
    start_in_process_with(config, app, |s| s)
}

/// A server started in this process: its address, hub, and the sender that stops it.
pub type InProcess = Result<(
    SocketAddr,
    std::sync::Arc<embedded_server::Hub>,
    tokio::sync::oneshot::Sender<()>,
)>;

/// [`start_in_process`], the server first passed through `wrap` (to serve TLS).
pub fn start_in_process_with(
    config: embedded_server::ServerConfig,
    app: &embedded_server::BuiltinConfig,
    wrap: impl FnOnce(embedded_server::Server) -> embedded_server::Server,
) -> InProcess {
    start_in_process_on("127.0.0.1:0".parse()?, config, app, wrap)
}

/// [`start_in_process_with`] on `addr` (the restart scenario's new server takes the port of
/// the one it replaces).
pub fn start_in_process_on(
    addr: SocketAddr,
    config: embedded_server::ServerConfig,
    app: &embedded_server::BuiltinConfig,
    wrap: impl FnOnce(embedded_server::Server) -> embedded_server::Server,
) -> InProcess {
    let listeners = embedded_server::bind(addr, false, 1)
        .with_context(|| format!("cannot listen on {addr}"))?;
    let addr = listeners[0].local_addr()?;
    let server = wrap(embedded_server::Server::builtin(config, app));
    let hub = server.hub();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = server
            .run(listeners, async move {
                let _ = rx.await;
            })
            .await;
    });
    Ok((addr, hub, tx))
}

/// The memory budget a server's admin listener reports; None when it does not answer or has
/// no budget series.
pub async fn budget_at(admin: SocketAddr) -> Option<crate::selftest::budget::BudgetReport> {
    let text = fetch_metrics(admin).await.ok()?;
    crate::selftest::budget::BudgetReport::from_metrics(&text)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    /// A child that burned CPU and exited (reaped) still counts in its parent's tree.
    #[test]
    fn a_reaped_childs_cpu_counts_in_the_tree() {
        let busy = std::process::Command::new("timeout")
            .args(["0.5", "sh", "-c", "while :; do :; done"])
            .status()
            .unwrap();
        assert!(!busy.success(), "stopped by timeout");
        let me = std::process::id();
        let own = super::super::sample(me).unwrap().0;
        let tree = super::sample_tree(me).unwrap().0;
        assert!(tree >= own + 0.05, "tree {tree} s, own {own} s");
    }
}

/// A server's `/metrics` text (plain HTTP GET on its admin address), bounded.
pub async fn fetch_metrics(admin: SocketAddr) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let what = || format!("the admin endpoint http://{admin}/metrics");
    let mut s = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect(admin),
    )
    .await
    .map_err(|_| anyhow::anyhow!("{} did not answer in 5 s", what()))?
    .with_context(|| {
        format!(
            "cannot reach {}: is --admin the server's admin address?",
            what()
        )
    })?;
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {admin}\r\n\r\n").as_bytes())
        .await?;
    let mut body = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut body))
        .await
        .map_err(|_| anyhow::anyhow!("{} did not finish its answer in 5 s", what()))??;
    Ok(body)
}
