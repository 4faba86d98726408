//! `serve --self-test --scenario restart`: how the self-test disrupts the server it started
//! (`--restart-by`). One process: stopped as on SIGTERM (its listener closes, its connections
//! get 1012, spread over its drain window) and a new one started on the same port. `--processes N`: SIGTERM to one server
//! process (the supervisor starts another), SIGHUP to the supervisor (a rolling restart, where
//! the supervisor does one), or `POST /api/drain` on its admin listener.

use crate::host::signals::{send as kill, SIGHUP, SIGTERM};
use crate::selftest::restart::{Disrupt, RestartBy};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The stop handle of an in-process server, replaced when the restart starts a new one.
pub(super) type StopSlot = Arc<Mutex<Option<tokio::sync::oneshot::Sender<()>>>>;

/// How long the new in-process server may wait for the old one's port.
const REBIND_BUDGET: Duration = Duration::from_secs(10);

/// The server the restart acts on.
pub(super) enum Restartable {
    /// In this process: its address, its stop handle, and how to start another.
    InProcess {
        addr: SocketAddr,
        stop: StopSlot,
        start: Arc<dyn Fn(SocketAddr) -> crate::selftest::server::InProcess + Send + Sync>,
    },
    /// A child `serve --processes N`: the supervisor's pid and admin listener.
    Supervisor {
        pid: u32,
        admin: Option<SocketAddr>,
        api_key: Option<String>,
        /// Seconds one process's SIGTERM drain lasts (its delay and window), and a rolling
        /// restart of all of them (each replaced process drains alone at the node's rate).
        drain_secs: f64,
        roll_secs: f64,
    },
    /// The user's `--command` program.
    User,
}

/// The disruption `by` asks for (its default: sigterm for one process, a rolling restart,
/// sighup, for several), or why it cannot act on this server.
pub(super) fn disrupt(by: Option<&RestartBy>, server: Restartable) -> anyhow::Result<Disrupt> {
    use anyhow::bail;
    match (by, server) {
        (Some(RestartBy::Command(c)), _) => Ok(Disrupt::command(c)),
        (_, Restartable::User) => bail!(
            "--scenario restart with --command: say how your server restarts with \
             --restart-by 'command:CMD' (or --restart-cmd 'CMD')"
        ),
        (None | Some(RestartBy::Sigterm), Restartable::InProcess { addr, stop, start }) => {
            Ok(in_process(addr, stop, start))
        }
        (Some(by), Restartable::InProcess { .. }) => bail!(
            "--restart-by {}: the self-test's server is one process here (no supervisor); give \
             --processes 2 or more, or --restart-by sigterm",
            by.name()
        ),
        // The default is the rolling restart a deploy does; a supervisor that cannot roll
        // (an older binary) has one process stopped instead.
        (
            None,
            Restartable::Supervisor {
                pid, drain_secs, ..
            },
        ) if !catches_sighup(pid) => Ok(Disrupt {
            lasts_secs: drain_secs,
            ..sigterm_child(pid)
        }),
        (
            Some(RestartBy::SigtermChild),
            Restartable::Supervisor {
                pid, drain_secs, ..
            },
        ) => Ok(Disrupt {
            lasts_secs: drain_secs,
            ..sigterm_child(pid)
        }),
        (None | Some(RestartBy::Sighup), Restartable::Supervisor { pid, roll_secs, .. }) => {
            if !catches_sighup(pid) {
                bail!(
                    "--restart-by sighup: this supervisor (pid {pid}) does not handle SIGHUP, \
                     which would end it and its processes; use --restart-by sigterm-child"
                );
            }
            Ok(Disrupt {
                lasts_secs: roll_secs,
                ..signal(pid, SIGHUP, "sighup", move |_| {
                    format!("SIGHUP to the supervisor (pid {pid}): a rolling restart")
                })
            })
        }
        (Some(RestartBy::DrainApi), Restartable::Supervisor { admin, api_key, .. }) => {
            let Some(admin) = admin else {
                bail!("--restart-by drain-api: the server has no admin listener")
            };
            // /api/* on the admin listener answers only with the key.
            if api_key.is_none() {
                bail!(
                    "--restart-by drain-api: POST /api/drain needs the admin API key; give \
                     --api-key-file FILE (or $WSTUNE_API_KEY)"
                );
            }
            Disrupt::drain_url(&format!("http://{admin}/api/drain"), api_key)
                .map_err(anyhow::Error::msg)
        }
        (Some(RestartBy::Sigterm), Restartable::Supervisor { .. }) => bail!(
            "--restart-by sigterm restarts a server of one process; with --processes N give \
             sigterm-child, sighup or drain-api"
        ),
    }
}

/// Whether `pid` catches SIGHUP (Linux).
fn catches_sighup(pid: u32) -> bool {
    crate::host::process::catches(pid, SIGHUP)
}

/// A signal to the process `target(pid)` picks, described by `say`.
fn signal(
    pid: u32,
    sig: i32,
    by: &str,
    say: impl Fn(u32) -> String + Send + Sync + 'static,
) -> Disrupt {
    let say = Arc::new(say);
    Disrupt {
        lasts_secs: 0.0,
        by: by.into(),
        run: Arc::new(move || {
            let say = say.clone();
            Box::pin(async move {
                if let Err(e) = kill(pid, sig) {
                    return Err(format!("cannot signal pid {pid}: {e}"));
                }
                Ok(say(pid))
            })
        }),
    }
}

/// SIGTERM to the supervisor's first server process; the supervisor starts another.
fn sigterm_child(supervisor: u32) -> Disrupt {
    Disrupt {
        lasts_secs: 0.0,
        by: "sigterm-child".into(),
        run: Arc::new(move || {
            Box::pin(async move {
                // Breadth first: the supervisor, then its server processes.
                let Some(&child) = crate::host::process::tree(supervisor).get(1) else {
                    return Err(format!(
                        "the supervisor (pid {supervisor}) has no server process"
                    ));
                };
                if let Err(e) = kill(child, SIGTERM) {
                    return Err(format!("cannot signal server process {child}: {e}"));
                }
                Ok(format!(
                    "SIGTERM to server process {child} of supervisor {supervisor}; the \
                     supervisor starts another"
                ))
            })
        }),
    }
}

/// Stop the in-process server as SIGTERM does (it drains: 1012 closes spread over its drain
/// window) and start a new one on its port as soon as the port is free.
fn in_process(
    addr: SocketAddr,
    stop: StopSlot,
    start: Arc<dyn Fn(SocketAddr) -> crate::selftest::server::InProcess + Send + Sync>,
) -> Disrupt {
    Disrupt {
        lasts_secs: 0.0,
        by: "sigterm".into(),
        run: Arc::new(move || {
            let (stop, start) = (stop.clone(), start.clone());
            Box::pin(async move {
                let old = stop.lock().unwrap_or_else(|e| e.into_inner()).take();
                if let Some(tx) = old {
                    let _ = tx.send(());
                }
                let deadline = tokio::time::Instant::now() + REBIND_BUDGET;
                loop {
                    match start(addr) {
                        Ok((_, _, tx)) => {
                            *stop.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
                            return Ok(format!(
                                "the server on {addr} stopped as on SIGTERM and a new one \
                                 started on the same port"
                            ));
                        }
                        Err(e) if tokio::time::Instant::now() >= deadline => {
                            return Err(format!(
                                "the new server could not listen on {addr} within {} s: {e:#}",
                                REBIND_BUDGET.as_secs()
                            ))
                        }
                        // The old listener closes once its accept loops have stopped.
                        Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                    }
                }
            })
        }),
    }
}
