//! The self-test's server when one process cannot hold the count: a child
//! `wstune serve --processes N` (a supervisor and its server processes, one port with
//! SO_REUSEPORT), started on a free loopback port with this run's serve configuration and
//! measured as the whole process tree.

use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

/// How long a child server may take to print its "listening" line: the supervisor starts its
/// processes one by one, on the sockets it listens on.
const START_BUDGET: Duration = Duration::from_secs(60);

/// A running child server; dropping it kills the supervisor (which takes its processes along).
pub struct ChildServer {
    child: tokio::process::Child,
    pub addr: SocketAddr,
    pub pid: u32,
    /// The supervisor's admin listener (/metrics summed over its processes), when the child
    /// was started with one.
    pub admin: Option<SocketAddr>,
}

impl ChildServer {
    /// Start `wstune serve` with `config` (handed over in its environment, as the supervisor
    /// hands its own to its processes) and wait (bounded) for its "listening on ws://ADDR/"
    /// line. The rest of its stderr goes on to ours, so its warnings stay visible.
    pub async fn start(config: &super::config::ServeConfig) -> Result<ChildServer> {
        let what = format!(
            "`wstune serve`: {} on {} processes",
            format!("{:?}", config.builtin.app).to_lowercase(),
            config.processes
        );
        let exe = std::env::current_exe()
            .context("cannot find this program to start the self-test's server")?;
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.arg("serve")
            .envs(config.child_env())
            // Its per-process start and drain lines would bury the report; warnings stay.
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = crate::host::process::spawn_dying_with_this_process(cmd)
            .with_context(|| format!("cannot start `{} serve`", exe.display()))?;
        let pid = child.id().unwrap_or(0);
        let mut lines =
            tokio::io::BufReader::new(child.stderr.take().expect("piped stderr")).lines();
        let mut seen = Vec::new();
        let found = tokio::time::timeout(START_BUDGET, async {
            while let Ok(Some(l)) = lines.next_line().await {
                // wss:// for `serve --self-test --tls`.
                let rest = l
                    .split("listening on ")
                    .nth(1)
                    .and_then(|r| r.strip_prefix("ws://").or_else(|| r.strip_prefix("wss://")));
                if let Some(rest) = rest {
                    if let Ok(a) = rest.trim_end_matches('/').parse::<SocketAddr>() {
                        return Some(a);
                    }
                }
                seen.push(l);
            }
            None
        })
        .await;
        let addr = match found {
            Ok(Some(a)) => a,
            Ok(None) => {
                let _ = child.kill().await;
                bail!(
                    "the self-test's server ({what}) exited before listening:\n{}",
                    seen.join("\n")
                )
            }
            Err(_) => {
                let _ = child.kill().await;
                bail!(
                    "the self-test's server ({what}) did not listen within {} s",
                    START_BUDGET.as_secs()
                )
            }
        };
        // The supervisor names its admin listener right after the port (when it has one).
        let admin = tokio::time::timeout(Duration::from_secs(5), async {
            while let Ok(Some(l)) = lines.next_line().await {
                if let Some(rest) = l.split("admin on http://").nth(1) {
                    return rest.split('/').next().and_then(|a| a.parse().ok());
                }
                eprintln!("{l}");
            }
            None
        })
        .await
        .ok()
        .flatten();
        tokio::spawn(async move {
            while let Ok(Some(l)) = lines.next_line().await {
                eprintln!("{l}");
            }
        });
        Ok(ChildServer {
            child,
            addr,
            pid,
            admin,
        })
    }

    /// SIGTERM (every process drains), bounded; then SIGKILL.
    pub async fn stop(mut self) {
        crate::host::signals::terminate(self.pid);
        if tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}
