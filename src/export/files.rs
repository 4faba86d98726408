//! Plain configuration files: sysctl.d, limits.d, a systemd drop-in, and the systemd units
//! that run the server and the periodic check (deploy/systemd/ holds them for the 100k
//! profile and /usr/bin/wstune, as the Debian package installs them).

use super::Export;
use crate::apply::plan::{dropin_body, limits_lines, sysctl_lines, LIMITS_FILE, SYSCTL_FILE};

pub fn sysctl(e: &Export) -> String {
    let mut s = e.header("sysctl", "#");
    s.push_str(&format!(
        "# Install as {SYSCTL_FILE}, then `sysctl --system` (or reboot).\n"
    ));
    let groups = [
        (
            "# Per network namespace (a container has its own; `docker run --sysctl`):",
            e.netns(),
        ),
        ("# Kernel-wide (set on the host or node itself):", e.node()),
    ];
    for (title, list) in groups {
        if list.is_empty() {
            continue;
        }
        s.push_str(title);
        s.push('\n');
        let lines: Vec<(&str, &str)> = list
            .iter()
            .map(|x| (x.key.as_str(), x.value.as_str()))
            .collect();
        s.push_str(&sysctl_lines(&lines));
    }
    s
}

pub fn limits(e: &Export) -> String {
    let mut s = e.header("limits", "#");
    s.push_str(&format!(
        "# Install as {LIMITS_FILE}. pam_limits applies it to new logins (ssh, su), not to\n\
         # systemd services: for a service use `--to systemd` (LimitNOFILE).\n"
    ));
    match e.nofile("limits").0 {
        Some(n) => s.push_str(&limits_lines(n)),
        None => s.push_str("# (the profile sets no open-file limit for this host)\n"),
    }
    s
}

pub fn dropin(e: &Export, unit: &str) -> String {
    let mut s = e.header("systemd", "#");
    s.push_str(&format!(
        "# Install as /etc/systemd/system/{unit}.d/60-wstune.conf, then\n\
         # `systemctl daemon-reload && systemctl restart {unit}` (a unit reads its limits at start).\n"
    ));
    s.push_str(&dropin_body(e.nofile("systemd").0));
    s
}

/// `wstune serve` as a hardened service: what a WebSocket server needs (sockets, its own
/// threads, the profile's fd limit), nothing more.
pub fn serve_service(e: &Export) -> String {
    serve_unit(e, &wstune_path())
}

pub(crate) fn serve_unit(e: &Export, bin: &str) -> String {
    let mut s = e.header("systemd-unit", "#");
    let nofile = e
        .nofile("systemd-unit")
        .0
        .map(|n| format!("LimitNOFILE={n}\n"))
        .unwrap_or_default();
    s.push_str(&format!(
        "# Install as /etc/systemd/system/wstune-serve.service, then\n\
         # `systemctl daemon-reload && systemctl enable --now wstune-serve.service`.\n\
         [Unit]\n\
         Description=wstune WebSocket server (profile {profile})\n\
         After=network-online.target\n\
         Wants=network-online.target\n\
         # The listening socket is wstune-serve.socket's: systemd holds it while the service\n\
         # restarts, so connections wait in its queue instead of being refused.\n\
         Requires=wstune-serve.socket\n\
         After=wstune-serve.socket\n\
         \n\
         [Service]\n\
         Type=exec\n\
         # --bind/--port name the socket's address; the inherited socket (LISTEN_FDS) wins.\n\
         ExecStart={bin} serve --profile {profile} --bind 0.0.0.0 --port 9001 --admin 127.0.0.1:9002\n\
         # `systemctl reload`: with --processes N, replace the processes one at a time.\n\
         ExecReload=/bin/kill -HUP $MAINPID\n\
         Restart=on-failure\n\
         RestartSec=2s\n\
         # SIGTERM drains: /readyz answers 503, clients closed with 1012 spread over the\n\
         # profile's server.drain window, then --shutdown-grace; the stop timeout holds all three.\n\
         KillSignal=SIGTERM\n\
         TimeoutStopSec={stop}s\n\
         # The profile's open-file limit: one descriptor per connection, plus headroom.\n\
         {nofile}\
         # Sandboxing a WebSocket server tolerates: it needs TCP and Unix sockets (the\n\
         # --processes relay), its threads and memory, and no file outside its own.\n\
         DynamicUser=yes\n\
         NoNewPrivileges=yes\n\
         CapabilityBoundingSet=\n\
         {sandbox}\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n",
        profile = e.profile,
        stop = e.stop_secs,
        sandbox = SANDBOX,
    ));
    s
}

/// The sandbox every unit wstune exports runs in: no file outside its own, no new
/// privileges, TCP, Unix and netlink sockets only, the system-service calls. Each unit adds
/// what its own job allows on top (the watch also hides other processes).
pub(super) const SANDBOX: &str = "ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
";

/// The listening socket of `wstune-serve.service` (systemd socket activation): systemd creates
/// and holds it, so neither `systemctl restart` nor a crash closes its accept queue. One socket,
/// shared by the processes of `--processes N` (they accept from one queue); its backlog is the
/// profile's net.core.somaxconn (the kernel caps a listen backlog there).
pub fn serve_socket(e: &Export) -> String {
    let backlog = e
        .settings
        .sysctls
        .iter()
        .find(|s| s.1 == "net.core.somaxconn")
        .and_then(|s| s.2.trim().parse::<u64>().ok())
        .unwrap_or(4096);
    let mut s = e.header("systemd-unit", "#");
    s.push_str(&format!(
        "# Install as /etc/systemd/system/wstune-serve.socket with wstune-serve.service, then\n\
         # `systemctl daemon-reload && systemctl enable --now wstune-serve.socket`.\n\
         [Unit]\n\
         Description=wstune WebSocket server's listening socket (profile {profile})\n\
         \n\
         [Socket]\n\
         ListenStream=0.0.0.0:9001\n\
         # The accept queue: the profile's net.core.somaxconn (the kernel caps it there).\n\
         Backlog={backlog}\n\
         # One socket that outlives every server process; nothing else binds the port.\n\
         ReusePort=no\n\
         FileDescriptorName=wstune\n\
         Service=wstune-serve.service\n\
         \n\
         [Install]\n\
         WantedBy=sockets.target\n",
        profile = e.profile,
    ));
    s
}

/// Where node_exporter's textfile collector reads on Debian (prometheus-node-exporter).
pub const TEXTFILE_DIR: &str = "/var/lib/prometheus/node-exporter";

/// One `wstune check` run writing the Prometheus textfile; started by [`check_timer`].
pub fn check_service(e: &Export) -> String {
    check_unit(e, &wstune_path())
}

pub(crate) fn check_unit(e: &Export, bin: &str) -> String {
    let mut s = e.header("systemd-unit", "#");
    s.push_str(&format!(
        "# Install as /etc/systemd/system/wstune-check.service with wstune-check.timer.\n\
         [Unit]\n\
         Description=wstune check (profile {profile}) for node_exporter's textfile collector\n\
         \n\
         [Service]\n\
         Type=oneshot\n\
         # -o writes atomically with mode 0644, so the unprivileged collector can read it.\n\
         ExecStart={bin} check --profile {profile} --format prometheus -o {TEXTFILE_DIR}/wstune.prom\n\
         # A failed check (2) or warning (1) is a result in the file, not a failed run.\n\
         SuccessExitStatus=1 2\n\
         NoNewPrivileges=yes\n\
         ProtectSystem=strict\n\
         ReadWritePaths={TEXTFILE_DIR}\n\
         ProtectHome=yes\n\
         PrivateTmp=yes\n\
         PrivateDevices=yes\n\
         ProtectKernelModules=yes\n\
         ProtectControlGroups=yes\n\
         RestrictRealtime=yes\n\
         LockPersonality=yes\n\
         MemoryDenyWriteExecute=yes\n\
         SystemCallArchitectures=native\n",
        profile = e.profile,
    ));
    s
}

pub fn check_timer(e: &Export) -> String {
    let mut s = e.header("systemd-unit", "#");
    s.push_str(
        "# Install as /etc/systemd/system/wstune-check.timer, then\n\
         # `systemctl enable --now wstune-check.timer`.\n\
         [Unit]\n\
         Description=Run wstune check every 5 minutes\n\
         \n\
         [Timer]\n\
         OnBootSec=1min\n\
         OnUnitActiveSec=5min\n\
         RandomizedDelaySec=30s\n\
         \n\
         [Install]\n\
         WantedBy=timers.target\n",
    );
    s
}

/// This binary's path, for ExecStart (systemd needs an absolute one).
pub(super) fn wstune_path() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.to_str().map(str::to_string))
        .unwrap_or_else(|| "/usr/bin/wstune".into())
}
