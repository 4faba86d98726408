//! What a container, a Kubernetes node or a deploy adds to a host's limits, as text formats:
//! the server's cgroup (its task and memory limits, the socket memory charged to it) and the
//! listening sockets that share an address and port (an SO_REUSEPORT group). Pure parsing;
//! `gather` decides what to read through the backend, so `--root` trees answer the same.

use std::collections::BTreeMap;

/// Where cgroups are mounted; a cgroup's path in /proc/PID/cgroup is relative to it (v1:
/// under the controller's own directory).
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The directories that hold a `controller` file (`pids.max`, `memory.max`) for the cgroup
/// /proc/PID/cgroup names, the process's own first and then each parent up to the root:
/// these limits are hierarchical, the most stringent of them applies. cgroup v2 (`0::PATH`)
/// wins; v1 (`N:pids:PATH`, a controller list naming `v1_controller`) is the fallback. Empty
/// when the file names neither.
pub fn cgroup_dirs(proc_pid_cgroup: &str, v1_controller: &str) -> (Vec<String>, CgroupVersion) {
    let mut v1 = None;
    for line in proc_pid_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            return (ancestors(CGROUP_ROOT, path), CgroupVersion::V2);
        }
        if controllers.split(',').any(|c| c == v1_controller) {
            v1 = Some(ancestors(&format!("{CGROUP_ROOT}/{v1_controller}"), path));
        }
    }
    match v1 {
        Some(dirs) => (dirs, CgroupVersion::V1),
        None => (Vec::new(), CgroupVersion::None),
    }
}

/// Which hierarchy a process's cgroup was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    V2,
    V1,
    /// /proc/PID/cgroup names no hierarchy with the controller.
    None,
}

/// `root/a/b`, `root/a`, `root` for the cgroup path `/a/b`.
fn ancestors(root: &str, path: &str) -> Vec<String> {
    let parts: Vec<&str> = path
        .trim()
        .split('/')
        .filter(|p| !p.is_empty() && *p != "." && *p != "..")
        .collect();
    (0..=parts.len())
        .rev()
        .map(|n| {
            let mut dir = root.to_string();
            for p in &parts[..n] {
                dir.push('/');
                dir.push_str(p);
            }
            dir
        })
        .collect()
}

/// A cgroup limit file (`pids.max`, `memory.max`): a number, or `max` for no limit
/// (`i64::MAX`, how wstune stores "unlimited"). None when it is neither.
pub fn limit(text: &str) -> Option<i64> {
    match text.trim() {
        "max" => Some(i64::MAX),
        t => t.parse::<u64>().ok().map(|n| n.min(i64::MAX as u64) as i64),
    }
}

/// One key of a flat-keyed cgroup file (`memory.stat`'s `sock`).
pub fn flat_key(text: &str, key: &str) -> Option<i64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// How many local address-and-port pairs have two listening sockets or more in a
/// /proc/net/tcp or /proc/net/tcp6 text (state `0A`): the kernel lets sockets share a
/// listening address only with SO_REUSEPORT. `counts` gathers them over both files.
pub fn count_listeners(proc_net_tcp: &str, counts: &mut BTreeMap<String, u32>) {
    for line in proc_net_tcp.lines().skip(1) {
        let mut cols = line.split_whitespace();
        let (Some(_sl), Some(local), Some(_remote), Some(state)) =
            (cols.next(), cols.next(), cols.next(), cols.next())
        else {
            continue;
        };
        if state == "0A" {
            *counts.entry(local.to_string()).or_default() += 1;
        }
    }
}

/// The groups of `counts` with more than one listener.
pub fn shared(counts: &BTreeMap<String, u32>) -> usize {
    counts.values().filter(|n| **n > 1).count()
}

/// Listening sockets written as /proc/net/tcp and /proc/net/tcp6 rows, as the kernel prints
/// them (an address as its bytes in memory, a port in hex): how `wstune snapshot` keeps the
/// listeners a live host's sock_diag answered, which [`count_listeners`] reads back.
#[derive(Debug, Default)]
pub struct ListenerRows {
    v4: Vec<String>,
    v6: Vec<String>,
}

const TCP_HEADER: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";

impl ListenerRows {
    pub fn push(&mut self, s: &super::sockets::Sock) {
        use std::net::SocketAddr;
        let word = |b: [u8; 4]| format!("{:08X}", u32::from_ne_bytes(b));
        let (list, addr, zero) = match s.local {
            SocketAddr::V4(a) => (
                &mut self.v4,
                word(a.ip().octets()),
                "00000000:0000".to_string(),
            ),
            SocketAddr::V6(a) => {
                let o = a.ip().octets();
                let addr: String = o
                    .chunks(4)
                    .map(|c| word([c[0], c[1], c[2], c[3]]))
                    .collect();
                (&mut self.v6, addr, format!("{}:0000", "0".repeat(32)))
            }
        };
        list.push(format!(
            "{:4}: {addr}:{:04X} {zero} 0A {:08X}:{:08X} 00:00000000 00000000 {:5} 0 {}\n",
            list.len(),
            s.local.port(),
            s.send_queue,
            s.recv_queue,
            s.uid,
            s.inode
        ));
    }

    /// (path, text) of each file with at least one row.
    pub fn files(&self) -> Vec<(&'static str, String)> {
        [("/proc/net/tcp", &self.v4), ("/proc/net/tcp6", &self.v6)]
            .into_iter()
            .filter(|(_, rows)| !rows.is_empty())
            .map(|(p, rows)| (p, format!("{TCP_HEADER}{}", rows.concat())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroup_and_its_parents_v2_first() {
        let (dirs, v) = cgroup_dirs(
            "12:pids:/system.slice/ws.service\n0::/system.slice/ws.service\n",
            "pids",
        );
        assert_eq!(v, CgroupVersion::V2);
        assert_eq!(
            dirs,
            [
                "/sys/fs/cgroup/system.slice/ws.service",
                "/sys/fs/cgroup/system.slice",
                "/sys/fs/cgroup"
            ]
        );
        let (dirs, v) = cgroup_dirs("5:cpu,pids:/docker/abc\n", "pids");
        assert_eq!(v, CgroupVersion::V1);
        assert_eq!(dirs[0], "/sys/fs/cgroup/pids/docker/abc");
        assert_eq!(cgroup_dirs("0::/\n", "pids").0, ["/sys/fs/cgroup"]);
        assert_eq!(cgroup_dirs("3:memory:/x\n", "pids").1, CgroupVersion::None);
        // A path cannot climb out of the cgroup mount.
        assert_eq!(
            cgroup_dirs("0::/../../etc\n", "pids").0[0],
            "/sys/fs/cgroup/etc"
        );
    }

    #[test]
    fn limits_and_stat_keys() {
        assert_eq!(limit("max\n"), Some(i64::MAX));
        assert_eq!(limit("4096\n"), Some(4096));
        assert_eq!(limit("lots"), None);
        let stat = "anon 1000\nfile 20\nsock 123456\nshmem 0\n";
        assert_eq!(flat_key(stat, "sock"), Some(123456));
        assert_eq!(flat_key(stat, "socks"), None);
    }

    #[test]
    fn recorded_listeners_read_back_as_the_kernel_prints_them() {
        use crate::host::sockets::{Sock, TcpState};
        let sock = |local: &str, inode| Sock {
            state: TcpState::Listen,
            local: local.parse().unwrap(),
            remote: "0.0.0.0:0".parse().unwrap(),
            recv_queue: 0,
            send_queue: 4096,
            inode,
            uid: 0,
            pid: None,
            detailed: true,
        };
        let mut rows = ListenerRows::default();
        rows.push(&sock("127.0.0.1:8080", 1));
        rows.push(&sock("127.0.0.1:8080", 2));
        rows.push(&sock("[::]:8080", 3));
        let files = rows.files();
        assert_eq!(files.len(), 2);
        let (path, v4) = &files[0];
        assert_eq!(*path, "/proc/net/tcp");
        if cfg!(target_endian = "little") {
            assert!(v4.contains(" 0100007F:1F90 "), "{v4}");
        }
        let mut counts = BTreeMap::new();
        count_listeners(v4, &mut counts);
        count_listeners(&files[1].1, &mut counts);
        assert_eq!((counts.len(), shared(&counts)), (2, 1));
    }

    #[test]
    fn listeners_sharing_an_address_are_counted() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 101 1\n\
   1: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 102 1\n\
   2: 0100007F:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 103 1\n\
   3: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 104 1\n";
        let mut counts = BTreeMap::new();
        count_listeners(tcp, &mut counts);
        assert_eq!(counts["00000000:1F90"], 2);
        assert_eq!(shared(&counts), 1);
        count_listeners("header only\n", &mut counts);
        assert_eq!(shared(&counts), 1);
    }
}
