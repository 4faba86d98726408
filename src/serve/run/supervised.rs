//! Serve's side of its `--processes` supervisor, which runs on Linux only (its processes share
//! one port through inherited sockets and SO_REUSEPORT): the sockets a process inherits (from
//! the supervisor or systemd), the relay socket between processes, the counts a process
//! leaves at its exit, and starting the supervisor. The system is chosen here, once, so
//! `run` reads the same everywhere: elsewhere nothing is inherited, there is no relay, and
//! `--processes` above one says why it cannot be.

use crate::outcome::Outcome;
use crate::serve::config::ServeConfig;
use anyhow::Result;
use embedded_server::admin::Gate;
use embedded_server::Hub;
use std::sync::Arc;

pub use imp::*;

#[cfg(target_os = "linux")]
mod imp {
    use super::*;
    use crate::serve::supervisor::{self, listen};
    use anyhow::Context;
    use std::net::SocketAddr;

    /// Listening sockets this process inherited: from its supervisor or from systemd.
    pub type Inherited = Option<(listen::Origin, Vec<std::os::fd::OwnedFd>)>;

    /// The inherited sockets. First, before any thread: it unsets LISTEN_FDS/LISTEN_PID.
    pub fn take_inherited() -> Result<Inherited> {
        listen::take_inherited()
    }

    /// The inherited sockets as the server's listeners; None when nothing was inherited.
    pub fn listeners(inherited: Inherited) -> Result<Option<Vec<tokio::net::TcpListener>>> {
        match inherited {
            Some((_, fds)) => Ok(Some(listen::into_tokio(fds)?)),
            None => Ok(None),
        }
    }

    /// A supervised process joins its siblings' relay through the socket the supervisor
    /// passed, with its pid as node id: during a rolling restart a process and its
    /// replacement share the index, and each must deliver what the other relays.
    pub async fn join_relay(supervised: Option<u64>, hub: Arc<Hub>) -> Result<()> {
        let fd = std::env::var(supervisor::ENV_RELAY_FD)
            .ok()
            .and_then(|v| v.parse().ok());
        if let (Some(_), Some(fd)) = (supervised, fd) {
            supervisor::relay::start_child(hub, std::process::id().into(), fd)
                .await
                .context("cannot use the relay socket the supervisor passed")?;
        }
        Ok(())
    }

    /// What a supervised process counted up to its exit, drain included, for the
    /// supervisor's sums.
    pub fn leave_final_counts(supervised: Option<u64>, hub: &Hub, gate: &Gate) {
        if supervised.is_some() {
            let mut m = embedded_server::admin::render(hub);
            gate.render_counts(&mut m, "ws_api_requests_total");
            supervisor::tally::write_final(&m);
        }
    }

    /// Run the supervisor over `sizing.processes` server processes, and return its outcome.
    pub fn supervise(
        r: &ServeConfig,
        sizing: crate::profile::ProcessSizing,
        cores: usize,
        tls: bool,
        inherited: &mut Inherited,
    ) -> Result<Outcome> {
        // One process per core by default, each with its share of the cores (nginx's layout);
        // an explicit --workers or profile io_workers is each process's own.
        let workers = if r.workers_follow_cores {
            (cores / sizing.processes).max(1)
        } else {
            r.workers
        };
        let supervision = supervisor::Supervision {
            sizing,
            addr: SocketAddr::new(r.bind, r.port),
            admin: r.admin,
            config: r.clone(),
            workers,
            relay: r.cluster.is_none(),
            // A process drains (delay, then its closes' window) before the grace begins.
            grace: r.server.shutdown_grace + r.server.drain_delay + r.server.drain_most(),
            scheme: if tls { "wss" } else { "ws" },
            acceptors: r.acceptors,
            // A replaced process drains (delay, window, grace); the margin is its exit.
            old_exit_wait: r.server.shutdown_grace
                + r.server.drain_delay
                + r.server.drain_most()
                + std::time::Duration::from_secs(10),
            inherited: inherited.take().map(|(_, fds)| fds),
        };
        supervisor::supervise(supervision)
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::*;

    /// Nothing is inherited here: no supervisor, no systemd socket activation.
    pub type Inherited = Option<std::convert::Infallible>;

    pub fn take_inherited() -> Result<Inherited> {
        Ok(None)
    }

    pub fn listeners(_inherited: Inherited) -> Result<Option<Vec<tokio::net::TcpListener>>> {
        Ok(None)
    }

    pub async fn join_relay(_supervised: Option<u64>, _hub: Arc<Hub>) -> Result<()> {
        Ok(())
    }

    pub fn leave_final_counts(_supervised: Option<u64>, _hub: &Hub, _gate: &Gate) {}

    pub fn supervise(
        r: &ServeConfig,
        sizing: crate::profile::ProcessSizing,
        _cores: usize,
        _tls: bool,
        _inherited: &mut Inherited,
    ) -> Result<Outcome> {
        let _ = sizing;
        let (want, from) = (r.processes, r.processes_from.as_str());
        anyhow::bail!("{from} {want}: several processes on one port need Linux (SO_REUSEPORT spreads the connections); run one `wstune serve` per port behind a load balancer");
    }
}
