//! How many server processes a profile's connections need, and the open files each needs: the
//! supervisor's sharing rule (`serve --processes`), used by the nofile target and its note.

use super::model::Processes;
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

/// [`MAX_PROCESSES`] as a count of processes.
const MAX_PROCESSES_USIZE: usize = MAX_PROCESSES as usize;

/// How many processes and how many connections each may hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessSizing {
    pub processes: usize,
    /// Each process's max connections: its share plus 10% (the kernel's hash spreads
    /// connections evenly on average, not exactly), never above the total.
    pub per_process: usize,
}

/// One process's connection cap when `total` is shared by `n` (the rule `check` sizes each
/// process's fd limit by: [`connections_per_process`]).
pub fn per_process(total: usize, n: usize) -> usize {
    connections_per_process(total as u64, n as u64) as usize
}

/// Resolve `want` (from `from`: "--processes" or "server.processes") for `max_connections`,
/// given this process's fd hard limit and core count. Errors name the problem and the fix.
pub fn size_processes(
    want: Processes,
    from: &str,
    max_connections: usize,
    hard_nofile: u64,
    cores: usize,
) -> Result<ProcessSizing, String> {
    let fits = |n: usize| per_process(max_connections, n) as u64 + RESERVE_FDS <= hard_nofile;
    let needed = (1..=MAX_PROCESSES_USIZE).find(|&n| fits(n));
    let n = match want {
        Processes::Count(0) => {
            return Err(format!(
            "{from} 0: a server needs at least one process; use 1 (one process, no supervisor), \
                 a number up to {MAX_PROCESSES_USIZE}, auto or cores"
        ))
        }
        Processes::Count(n) if n as usize > MAX_PROCESSES_USIZE => {
            return Err(format!(
                "{from} {n}: more than {MAX_PROCESSES_USIZE} processes is not a useful layout (one per \
                 core is the usual most); use auto or cores"
            ))
        }
        Processes::Count(n) => n as usize,
        Processes::Auto | Processes::Cores => {
            let Some(needed) = needed else {
                return Err(format!(
                    "{from} {want}: even {MAX_PROCESSES_USIZE} processes cannot hold max connections \
                     {max_connections} under the fd hard limit {hard_nofile}; raise the hard \
                     limit (LimitNOFILE; `wstune check` says how) or lower --max-connections"
                ));
            };
            if want == Processes::Cores {
                needed.max(cores)
            } else {
                needed
            }
        }
    };
    if n > 1 && n > max_connections {
        return Err(format!(
            "{from} {n}: more processes than max connections {max_connections}; some would hold \
             no connection: use at most {max_connections}, or auto"
        ));
    }
    // One process keeps today's behaviour (a warning at start); several are the operator's
    // way around the fd limit, so a layout that cannot hold the count is refused.
    if n > 1 && !fits(n) {
        let pp = per_process(max_connections, n);
        let fix = match needed {
            Some(k) => format!("use --processes {k} (or auto)"),
            None => "lower --max-connections".to_string(),
        };
        return Err(format!(
            "{from} {n}: each process may hold {pp} of max connections {max_connections} and \
             needs {} file descriptors, above the fd hard limit {hard_nofile}; {fix}, or raise \
             the hard limit (LimitNOFILE; `wstune check` says how)",
            pp as u64 + RESERVE_FDS
        ));
    }
    Ok(ProcessSizing {
        processes: n,
        per_process: per_process(max_connections, n),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizing() {
        let s = |w, m, hard| size_processes(w, "--processes", m, hard, 2);
        // 100k under a 20,000 hard limit: 6 processes of 18,334.
        assert_eq!(
            s(Processes::Auto, 100_000, 20_000),
            Ok(ProcessSizing {
                processes: 6,
                per_process: 18_334
            })
        );
        assert_eq!(s(Processes::Auto, 10_000, 20_000).unwrap().processes, 1);
        assert_eq!(s(Processes::Cores, 10_000, 20_000).unwrap().processes, 2);
        assert!(s(Processes::Count(0), 10, 100)
            .unwrap_err()
            .contains("--processes 0: a server needs at least one process"));
        assert!(s(Processes::Count(5000), 100_000, 1 << 20)
            .unwrap_err()
            .contains("more than 1024"));
        let e = s(Processes::Count(2), 100_000, 20_000).unwrap_err();
        assert!(
            e.contains("needs 55064 file descriptors") && e.contains("--processes 6"),
            "{e}"
        );
        assert!(s(Processes::Count(8), 4, 1000)
            .unwrap_err()
            .contains("more processes than"));
        // One process is today's server: a low limit only warns.
        assert_eq!(
            s(Processes::Count(1), 100_000, 20_000).unwrap().processes,
            1
        );
        assert_eq!(per_process(10, 3), 5);
        assert_eq!(per_process(1000, 1), 1000);
    }

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
