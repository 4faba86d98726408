//! Every bound a profile value must respect, collected so one edit can fix them all.

use super::model::{self, Profile};

/// Every bound a profile value must respect, as (key path, what is allowed). All problems are
/// collected so one edit can fix them all.
pub fn validate(p: &Profile) -> Vec<(&'static str, String)> {
    let mut b = Bounds(Vec::new());
    b.range("connections", p.connections, 1, 100_000_000, "");
    validate_linux(&mut b, &p.linux);
    validate_nic(&mut b, &p.nic);
    validate_windows(&mut b, &p.windows);
    validate_server(&mut b, &p.server);
    validate_selftest(&mut b, &p.selftest);
    b.0
}

/// `linux`: what the kernel accepts for each sysctl and rlimit, and nofile under nr_open.
fn validate_linux(b: &mut Bounds, l: &model::LinuxTargets) {
    b.range(
        "linux.nofile",
        l.nofile,
        1024,
        1 << 30,
        "the kernel's nr_open ceiling is at most 2^30",
    );
    b.range("linux.nr_open", l.nr_open, 1024, 1 << 30, "");
    b.range("linux.file_max", l.file_max, 1024, i64::MAX as u64, "");
    // The kernel keeps these in an int (proc_dointvec): a larger value is refused with EINVAL
    // when apply writes it, after the plan promised it.
    const INT: &str = "the kernel's maximum is 2147483647, an int";
    b.range("linux.somaxconn", l.somaxconn, 128, i32::MAX as u64, INT);
    b.range(
        "linux.tcp_max_syn_backlog",
        l.tcp_max_syn_backlog,
        128,
        i32::MAX as u64,
        INT,
    );
    b.range(
        "linux.netdev_max_backlog",
        l.netdev_max_backlog,
        1,
        i32::MAX as u64,
        INT,
    );
    b.range(
        "linux.tcp_tw_reuse",
        l.tcp_tw_reuse,
        0,
        2,
        "0 off, 1 on, 2 loopback only",
    );
    b.range(
        "linux.tcp_fin_timeout",
        l.tcp_fin_timeout,
        1,
        600,
        "seconds",
    );
    b.range(
        "linux.nf_conntrack_max",
        l.nf_conntrack_max,
        1,
        i32::MAX as u64,
        INT,
    );
    b.range(
        "linux.tcp_max_tw_buckets",
        l.tcp_max_tw_buckets,
        1,
        i32::MAX as u64,
        INT,
    );
    b.range(
        "linux.epoll_max_user_watches",
        l.epoll_max_user_watches,
        1,
        i64::MAX as u64,
        "",
    );
    let [lo, hi] = l.ip_local_port_range;
    if !(1024..=65535).contains(&lo) || !(1024..=65535).contains(&hi) || lo >= hi {
        b.problem("linux.ip_local_port_range", format!("[{lo}, {hi}] is not a port range; write [low, high] with 1024 <= low < high <= 65535"));
    }
    if l.nofile > l.nr_open {
        b.problem("linux.nofile", format!("{} is above linux.nr_open {}: the kernel refuses a nofile limit above nr_open; raise nr_open too", l.nofile, l.nr_open));
    }
}

/// `nic`: what the kernel accepts.
fn validate_nic(b: &mut Bounds, n: &model::NicProfile) {
    b.range(
        "nic.rps_flow_entries",
        n.rps_flow_entries,
        1,
        1 << 29,
        "the kernel refuses a flow table above 2^29 entries",
    );
}

/// `windows`: what the registry and netsh accept, and a port range that ends by 65535.
fn validate_windows(b: &mut Bounds, w: &model::WindowsTargets) {
    b.range(
        "windows.max_user_port",
        w.max_user_port,
        5000,
        65534,
        "REG_DWORD 5000..65534",
    );
    b.range(
        "windows.dynamic_port_start",
        w.dynamic_port_start,
        1025,
        65535,
        "netsh accepts start 1025..65535",
    );
    b.range(
        "windows.dynamic_port_count",
        w.dynamic_port_count,
        255,
        64511,
        "netsh needs at least 255 ports",
    );
    b.range(
        "windows.tcp_timed_wait_delay",
        w.tcp_timed_wait_delay,
        0,
        300,
        "seconds, REG_DWORD 0x0-0x12C as Microsoft's Windows Server 2003 TCP/IP reference gives it; 120 when absent",
    );
    b.range(
        "windows.tcp_max_connect_response_retransmissions",
        w.tcp_max_connect_response_retransmissions,
        0,
        255,
        "REG_DWORD 0..255",
    );
    if w.dynamic_port_start + w.dynamic_port_count > 65536 {
        b.problem(
            "windows.dynamic_port_count",
            format!(
                "start {} + count {} runs past port 65535",
                w.dynamic_port_start, w.dynamic_port_count
            ),
        );
    }
}

/// `server`: each knob within what the embedded server can honour, and the sizes that must
/// nest (fragment <= frame <= message, heartbeat timeout > interval).
fn validate_server(b: &mut Bounds, s: &model::ServerSettings) {
    b.range(
        "server.io_workers",
        s.io_workers,
        0,
        1024,
        "0 = one per core",
    );
    b.range(
        "server.offload_pool_size",
        s.offload_pool_size,
        0,
        4096,
        "0 = one per core",
    );
    b.range(
        "server.offload_queue_size",
        s.offload_queue_size,
        1,
        1 << 24,
        "",
    );
    b.range(
        "server.max_connections",
        s.max_connections,
        1,
        100_000_000,
        "",
    );
    b.range(
        "server.read_buffer_bytes",
        s.read_buffer_bytes,
        256,
        16 << 20,
        "",
    );
    b.range(
        "server.write_buffer_bytes",
        s.write_buffer_bytes,
        256,
        16 << 20,
        "",
    );
    validate_deflate(b, &s.deflate);
    b.range(
        "server.max_frame_bytes",
        s.max_frame_bytes,
        125,
        1 << 31,
        "",
    );
    b.range(
        "server.max_message_bytes",
        s.max_message_bytes,
        125,
        1 << 32,
        "",
    );
    b.range("server.fragment_bytes", s.fragment_bytes, 125, 1 << 31, "");
    b.range(
        "server.heartbeat.interval_secs",
        s.heartbeat.interval_secs,
        1,
        3600,
        "",
    );
    b.range(
        "server.heartbeat.timeout_secs",
        s.heartbeat.timeout_secs,
        1,
        4 * 3600,
        "",
    );
    b.range(
        "server.send_queue_bytes",
        s.send_queue_bytes,
        1024,
        1 << 32,
        "",
    );
    if s.notsent_lowat_bytes != 0 {
        let r = embedded_server::config::NOTSENT_LOWAT_BOUNDS;
        b.range(
            "server.notsent_lowat_bytes",
            s.notsent_lowat_bytes,
            *r.start() as u64,
            *r.end() as u64,
            "or 0: the system's tcp_notsent_lowat",
        );
    }
    b.range(
        "server.cpu_ns_per_message",
        s.cpu_ns_per_message,
        100,
        100_000_000,
        "nanoseconds of server CPU per message",
    );
    b.range(
        "server.coalesce_us",
        s.coalesce_us,
        0,
        embedded_server::coalesce::MAX_WINDOW.as_micros() as u64,
        "0 serves every message at once",
    );
    if let model::Processes::Count(n) = s.processes {
        b.range(
            "server.processes",
            n,
            1,
            super::MAX_PROCESSES,
            "or auto / cores",
        );
    }
    if s.max_frame_bytes > s.max_message_bytes {
        b.problem(
            "server.max_frame_bytes",
            format!(
                "{} is above server.max_message_bytes {}: a frame is part of a message",
                s.max_frame_bytes, s.max_message_bytes
            ),
        );
    }
    if s.fragment_bytes > s.max_frame_bytes {
        b.problem("server.fragment_bytes", format!("{} is above server.max_frame_bytes {}: peers with the same cap would reject our fragments", s.fragment_bytes, s.max_frame_bytes));
    }
    validate_limits(b, &s.limits);
    validate_budget(b, &s.budget);
    validate_drain(b, &s.drain);
    if s.heartbeat.timeout_secs <= s.heartbeat.interval_secs {
        b.problem("server.heartbeat.timeout_secs", format!("{} must be longer than interval_secs {}, or every connection times out before its pong", s.heartbeat.timeout_secs, s.heartbeat.interval_secs));
    }
}

/// `server.deflate`: what zlib accepts.
fn validate_deflate(b: &mut Bounds, d: &model::DeflateProfile) {
    b.range(
        "server.deflate.window_bits",
        d.window_bits as u64,
        9,
        15,
        "zlib turns 8 into 9 for raw deflate, so 8 cannot be honoured",
    );
    b.range("server.deflate.mem_level", d.mem_level as u64, 1, 9, "");
    b.range("server.deflate.level", d.level as u64, 0, 9, "");
    b.range(
        "server.deflate.threshold_bytes",
        d.threshold_bytes,
        0,
        1 << 30,
        "",
    );
}

/// `selftest`: targets a run can measure.
fn validate_selftest(b: &mut Bounds, t: &model::SelfTestTargets) {
    b.range("selftest.payload_bytes", t.payload_bytes, 1, 16 << 20, "");
    b.range(
        "selftest.rate_per_client",
        t.rate_per_client,
        1,
        100_000,
        "",
    );
    b.range("selftest.p99_ms", t.p99_ms, 1, 600_000, "");
    b.range(
        "selftest.restart.back_p99_ms",
        t.restart.back_p99_ms,
        1,
        600_000,
        "",
    );
}

/// `server.drain`: a window a stop timeout can still hold, a delay longer than any health
/// check needs.
fn validate_drain(b: &mut Bounds, v: &model::DrainProfile) {
    b.range(
        "server.drain.reconnect_rate",
        v.reconnect_rate,
        0,
        10_000_000,
        "reconnects a second; 0 closes every connection at once",
    );
    b.range(
        "server.drain.max_over_secs",
        v.max_over_secs,
        0,
        3600,
        "seconds",
    );
    b.range("server.drain.delay_secs", v.delay_secs, 0, 600, "seconds");
}

/// `server.budget`: sizes a server can hold and bounds it can keep.
fn validate_budget(b: &mut Bounds, v: &model::BudgetProfile) {
    let tib = 1u64 << 40;
    b.range(
        "server.budget.memory_bytes",
        v.memory_bytes,
        0,
        tib,
        "bytes; 0 derives it from the host's memory",
    );
    b.range(
        "server.budget.conn_share_bytes",
        v.conn_share_bytes,
        0,
        tib,
        "bytes; 0 derives it from the message and queue caps",
    );
    for (key, value) in [
        ("server.budget.message_timeout_secs", v.message_timeout_secs),
        ("server.budget.drain_timeout_secs", v.drain_timeout_secs),
    ] {
        b.range(key, value, 0, 86_400, "seconds; 0 turns it off");
    }
    b.range(
        "server.budget.inflate_ratio_limit",
        v.inflate_ratio_limit,
        0,
        u32::MAX as u64,
        "0 turns it off",
    );
    b.range(
        "server.budget.inflate_rate_bytes",
        v.inflate_rate_bytes,
        0,
        tib,
        "bytes per second; 0 turns it off",
    );
}

/// `server.limits`: rates and bursts a u32 holds, a close code that says what happened, and
/// addresses the server can parse.
fn validate_limits(b: &mut Bounds, l: &model::LimitsProfile) {
    let per_sec = "per second; 0 turns it off";
    b.range(
        "server.limits.max_connections_per_ip",
        l.max_connections_per_ip,
        0,
        u32::MAX as u64,
        "0 turns it off",
    );
    b.range(
        "server.limits.connection_rate_per_ip",
        l.connection_rate_per_ip,
        0,
        1_000_000_000,
        per_sec,
    );
    b.range(
        "server.limits.connection_burst_per_ip",
        l.connection_burst_per_ip,
        0,
        u32::MAX as u64,
        "",
    );
    b.range(
        "server.limits.connection_rate",
        l.connection_rate,
        0,
        1_000_000_000,
        per_sec,
    );
    b.range(
        "server.limits.connection_burst",
        l.connection_burst,
        0,
        u32::MAX as u64,
        "",
    );
    b.range(
        "server.limits.message_rate",
        l.message_rate,
        0,
        1_000_000_000,
        per_sec,
    );
    b.range(
        "server.limits.message_burst",
        l.message_burst,
        0,
        u32::MAX as u64,
        "",
    );
    if !matches!(l.message_rate_close, 1008 | 1013) {
        b.problem(
            "server.limits.message_rate_close",
            format!(
                "{} is not allowed; use 1008 (policy violation) or 1013 (try again later)",
                l.message_rate_close
            ),
        );
    }
    for (path, list) in [
        ("server.limits.exempt", &l.exempt),
        ("server.limits.trusted_proxies", &l.trusted_proxies),
    ] {
        for entry in list {
            if let Err(e) = embedded_server::abuse::Cidr::parse(entry) {
                b.problem(path, e);
            }
        }
    }
}

/// Collects (key path, problem) pairs.
struct Bounds(Vec<(&'static str, String)>);

impl Bounds {
    fn problem(&mut self, path: &'static str, message: String) {
        self.0.push((path, message));
    }

    /// `v` must lie in `lo..=hi`; `why` (may be empty) explains the bound.
    fn range(&mut self, path: &'static str, v: u64, lo: u64, hi: u64, why: &str) {
        if v < lo || v > hi {
            let why = if why.is_empty() {
                String::new()
            } else {
                format!(" ({why})")
            };
            self.problem(
                path,
                format!("{v} is out of range; allowed {lo}..={hi}{why}"),
            );
        }
    }
}
