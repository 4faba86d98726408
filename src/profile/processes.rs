//! How many server processes a profile's connections need, and the open files each needs: the
//! supervisor's sharing rule (`serve --processes`), used by the nofile target and its note.

use crate::value::Value;

/// Processes `auto` may start at most (more is a typo, not a plan: nginx and Envoy run one per
/// core); the nofile target of an `auto` layout is what one of that many processes needs.
pub const MAX_PROCESSES: u64 = 1024;

/// File descriptors a server process keeps besides its connections (listeners, admin, relay,
/// epoll, runtime, logs), in one process or under the supervisor.
pub const RESERVE_FDS: u64 = 64;

/// One process's connections when `connections` are shared by `n` (the supervisor's rule: the
/// kernel spreads connections over SO_REUSEPORT sockets evenly on average, not exactly, so each
/// gets its share plus 10%).
pub fn connections_per_process(connections: u64, n: u64) -> u64 {
    if n <= 1 {
        return connections;
    }
    let share = connections.div_ceil(n);
    (share + share.div_ceil(10)).min(connections)
}

/// `server.processes` (a number, `auto` or `cores`; absent: 1) and the open files each process
/// needs: the profile's `linux.nofile` for one process (the guide's 2 x connections), and
/// connections / processes + 10% + the reserve for several. `auto` and `cores` pick as many
/// processes as the host's limit needs, so their floor is one of `MAX_PROCESSES` processes;
/// they report 0 processes (decided at start).
pub fn nofile_per_process(processes: Option<&Value>, connections: u64, nofile: u64) -> (u64, u64) {
    match processes {
        Some(Value::Num(n)) if *n > 1 => {
            let n = *n as u64;
            (n, connections_per_process(connections, n) + RESERVE_FDS)
        }
        Some(Value::Text(_)) => (
            0,
            connections_per_process(connections, MAX_PROCESSES) + RESERVE_FDS,
        ),
        _ => (1, nofile),
    }
}

/// The fewest processes whose share of `connections` fits under `limit` open files each.
pub fn processes_needed(connections: u64, limit: u64) -> Option<u64> {
    (1..=MAX_PROCESSES).find(|&n| connections_per_process(connections, n) + RESERVE_FDS <= limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nofile_per_process_shares_the_connections() {
        // One process (absent or 1): the profile's nofile, the guide's 2 x connections.
        assert_eq!(nofile_per_process(None, 100_000, 200_000), (1, 200_000));
        assert_eq!(
            nofile_per_process(Some(&Value::Num(1)), 100_000, 200_000),
            (1, 200_000)
        );
        // Six: 16,667 each plus 10% plus the reserve, under this VM's 20,000.
        assert_eq!(
            nofile_per_process(Some(&Value::Num(6)), 100_000, 200_000),
            (6, 16_667 + 1_667 + 64)
        );
        let (n, per) = nofile_per_process(Some(&Value::Text("auto".into())), 100_000, 200_000);
        assert_eq!(n, 0);
        assert!(per < 1000, "{per}");
        assert_eq!(processes_needed(100_000, 20_000), Some(6));
        assert_eq!(processes_needed(100_000, 200_000), Some(1));
        assert_eq!(processes_needed(100_000, 64), None);
    }
}
