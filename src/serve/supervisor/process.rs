//! One server process: start it (`spawn`: its sockets, relay and configuration inherited) and
//! follow its log until it is up (`watch_stderr`). Keeping it running is `keep.rs`'s; replacing
//! it, `roll.rs`'s.

use super::listen::{self, ENV_LISTEN_FDS};
use super::state::{say, Binary, State};
use super::{ENV_PROCESS, ENV_RELAY_FD};
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncBufReadExt, BufReader};

/// One server process: its handle, its log reader, when it started.
pub(super) struct Running {
    pub(super) child: tokio::process::Child,
    pub(super) pid: u32,
    /// Its log reader; it returns what the process printed before it was up.
    pub(super) lines: Option<tokio::task::JoinHandle<Vec<String>>>,
    pub(super) born: Instant,
    /// Where it writes its final metrics as it exits (`tally.rs`).
    pub(super) final_metrics: std::path::PathBuf,
}

/// Start server process `i`: `binary serve` with the supervisor's flags, its slot's listening
/// sockets and its relay socket inherited, and a parent-death signal so that no process
/// outlives the supervisor. `up`: a replacement (a rolling restart's), which takes the slot only
/// once it is up, and says so there; meanwhile it is one of the `others`.
pub(super) fn spawn(
    st: &Arc<State>,
    i: usize,
    binary: &Binary,
    up: Option<tokio::sync::oneshot::Sender<Option<SocketAddr>>>,
    first: bool,
) -> Result<Running> {
    let p = &st.plan;
    // For `ps`: the path, not /proc/self/exe.
    let name = std::env::current_exe().unwrap_or_else(|_| "wstune".into());
    let exe = match binary {
        Binary::Own => std::path::PathBuf::from("/proc/self/exe"),
        Binary::At(path) => path.clone(),
    };
    let fds = st.slots.lock().unwrap()[i].fds.clone();
    // The memory budget is the server's: each process gets its share.
    let budget = p.config.server.memory_budget() / p.sizing.processes.max(1);
    let config = p
        .config
        .for_supervised_process(st.port, p.sizing.per_process, p.workers, budget);
    let final_metrics = st
        .final_dir
        .path()
        .join(format!("{i}-{}.prom", st.spawned.fetch_add(1, Relaxed)));
    let mut cmd = tokio::process::Command::new(&exe);
    if *binary == Binary::Own {
        cmd.arg0(&name);
    }
    cmd.arg("serve")
        .envs(config.child_env())
        .env(ENV_PROCESS, i.to_string())
        .env(super::tally::ENV_FINAL_METRICS, &final_metrics)
        .env_remove(super::ENV_TICKET_KEYS)
        .env(ENV_LISTEN_FDS, listen::env_value(&fds))
        .env_remove(ENV_RELAY_FD)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let pair = if p.relay {
        Some(super::relay::pair().context("cannot create the relay socket")?)
    } else {
        None
    };
    let child_fd = pair.as_ref().map(|(_, c)| c.as_raw_fd());
    if let Some(fd) = child_fd {
        cmd.env(ENV_RELAY_FD, fd.to_string());
    }
    if let Some(keys) = &st.ticket_keys {
        cmd.env(super::ENV_TICKET_KEYS, keys);
    }
    let parent = std::process::id() as i32;
    // SAFETY: only async-signal-safe calls (prctl, getppid, fcntl) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // A supervisor killed with -9 still leaves its processes to drain (1001) and exit.
            crate::host::process::term_with_parent(parent)?;
            listen::inherit(&fds)?;
            if let Some(fd) = child_fd {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = crate::host::process::spawn_lasting(cmd)
        .with_context(|| format!("cannot start {} serve", exe.display()))?;
    let pid = child.id().unwrap_or(0);
    if let Some((mine, theirs)) = pair {
        drop(theirs);
        st.hubs.attach(pid, mine)?;
    }
    let replacing = up.is_some();
    let lines = child
        .stderr
        .take()
        .map(|e| tokio::spawn(watch_stderr(st.clone(), i, pid, e, first, up)));
    if replacing {
        st.others.lock().unwrap().push(pid);
    } else {
        st.slots.lock().unwrap()[i].pid = Some(pid);
    }
    st.bump();
    Ok(Running {
        child,
        pid,
        lines,
        born: Instant::now(),
        final_metrics,
    })
}

/// A child's log line as the supervisor forwards it: text lines prefixed `[process i]`; a JSON
/// line (`--log-format json`) stays one JSON object, with `"process":i` added as its first
/// field, so a log shipper still parses every line.
fn tag_line(i: usize, l: &str) -> String {
    match l.strip_prefix('{') {
        Some(rest) if l.ends_with('}') => {
            let sep = if rest.trim_start().starts_with('}') {
                ""
            } else {
                ","
            };
            format!("{{\"process\":{i}{sep}{rest}")
        }
        _ => format!("[process {i}] {l}"),
    }
}

/// Follow process `i`'s log: it is up once it prints its admin address (after "listening");
/// what it printed before is kept (returned) and shown only for process 0's first start (its
/// settings table) or when it dies before listening. Later lines are forwarded, prefixed.
async fn watch_stderr(
    st: Arc<State>,
    i: usize,
    pid: u32,
    stderr: tokio::process::ChildStderr,
    first: bool,
    mut replacement: Option<tokio::sync::oneshot::Sender<Option<SocketAddr>>>,
) -> Vec<String> {
    let mut lines = BufReader::new(stderr).lines();
    let mut head = Vec::new();
    let mut up = false;
    while let Ok(Some(l)) = lines.next_line().await {
        if up {
            say!("{}", tag_line(i, &l));
            continue;
        }
        if let Some(rest) = l.split("admin on http://").nth(1) {
            let addr = rest.split('/').next().and_then(|a| a.parse().ok());
            up = true;
            if let Some(tx) = replacement.take() {
                // The rolling restart checks its /healthz and then gives it the slot.
                let _ = tx.send(addr);
                continue;
            }
            {
                let mut slots = st.slots.lock().unwrap();
                // Not if it was reaped meanwhile (the line was still in the pipe).
                if slots[i].pid == Some(pid) {
                    slots[i].admin = addr;
                    slots[i].up = true;
                }
            }
            st.bump();
            if st.started.load(Relaxed) {
                say!("wstune serve: process {i} is up again (pid {pid})");
            }
            continue;
        }
        if l.contains("listening on ") {
            continue;
        }
        if i == 0 && first {
            say!("{l}");
        }
        head.push(l);
    }
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_log_lines_stay_json_with_the_process_added() {
        assert_eq!(
            tag_line(3, r#"{"level":"INFO","msg":"x"}"#),
            r#"{"process":3,"level":"INFO","msg":"x"}"#
        );
        assert_eq!(tag_line(0, "{}"), r#"{"process":0}"#);
        assert_eq!(tag_line(2, "plain text"), "[process 2] plain text");
        let v: serde_json::Value = serde_json::from_str(&tag_line(5, r#"{"a":1}"#)).unwrap();
        assert_eq!(v["process"], 5);
    }
}
