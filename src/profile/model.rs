//! The tuning profile as data: what a host and a server should look like for N connections.
//!
//! Every struct rejects unknown keys, so a typo in a profile is an error with a line number
//! instead of a silently ignored setting. Field comments give the unit; `validate` gives the bounds.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Short name, e.g. `100k`; what `--profile` and reports call it.
    pub name: String,
    /// One line for `wstune profiles list`.
    pub description: String,
    /// Concurrent WebSocket connections the host must hold.
    pub connections: u64,
    /// What else the host does, where the right value of a setting depends on it (a port
    /// range, TIME_WAIT reuse, reserved ports). Absent: `--role`, else detected, else `server`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    pub linux: LinuxTargets,
    pub windows: WindowsTargets,
    pub server: ServerSettings,
    pub selftest: SelfTestTargets,
    /// How `apply` tunes each NIC's queues (RSS, RPS/RFS, XPS, interrupts). Absent: the
    /// defaults of [`NicProfile`].
    #[serde(default, skip_serializing_if = "NicProfile::is_default")]
    pub nic: NicProfile,
}

impl Profile {
    /// The profile as JSON with every block written out: serde leaves out a block that holds
    /// only its defaults (`nic`, `server.limits`, `server.channels`, `server.budget`,
    /// `server.drain`), and the loader's shape check and the reference page need each key.
    /// An unset `Option` stays out (it has no value to show).
    pub fn written_out(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).expect("a profile serializes");
        let blocks = [
            ("", "nic", serde_json::to_value(&self.nic)),
            (
                "server",
                "limits",
                serde_json::to_value(&self.server.limits),
            ),
            (
                "server",
                "channels",
                serde_json::to_value(&self.server.channels),
            ),
            (
                "server",
                "budget",
                serde_json::to_value(&self.server.budget),
            ),
            ("server", "drain", serde_json::to_value(&self.server.drain)),
        ];
        for (parent, leaf, block) in blocks {
            let map = if parent.is_empty() {
                Some(&mut v)
            } else {
                v.get_mut(parent)
            };
            if let (Some(serde_json::Value::Object(map)), Ok(block)) = (map, block) {
                map.insert(leaf.to_string(), block);
            }
        }
        v
    }
}

/// Which CPUs serve a NIC's queues: one word for both systems. On Windows it is the adapter's
/// standardized `*RSSProfile` keyword (Microsoft's "Standardized INF keywords for RSS": 1
/// ClosestProcessor, 2 ClosestProcessorStatic, 3 NUMAScaling, 4 NUMAScalingStatic, 5
/// ConservativeScaling); on Linux the CPU set [`crate::apply::nic::cpus_for`] gives the queues,
/// interrupts, RPS and XPS (the kernel's scaling.rst).
///
/// A `_static` word is its dynamic twin's CPU set on Linux: the driver there never moves a
/// queue between CPUs on its own (Windows' dynamic profiles let NDIS do that at run time), and
/// the run-time moving is irqbalance's, which `nic.irq` chooses (`irqbalance` moves interrupts
/// as load shifts, `pinned` keeps them where they are put).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum RssProfile {
    /// The CPUs of the NIC's own NUMA node (ClosestProcessor): no cross-node traffic.
    #[default]
    Closest,
    /// Closest, without Windows' run-time rebalancing (ClosestProcessorStatic).
    ClosestStatic,
    /// Every CPU, the NIC's node first (NUMAScaling): more CPUs than one node has.
    NumaScaling,
    /// NUMAScaling without Windows' run-time rebalancing (NUMAScalingStatic, the drivers'
    /// default on Windows).
    NumaScalingStatic,
    /// Half the node's CPUs (ConservativeScaling): the rest stay for the application.
    Conservative,
}

impl RssProfile {
    pub const ALL: [RssProfile; 5] = [
        RssProfile::Closest,
        RssProfile::ClosestStatic,
        RssProfile::NumaScaling,
        RssProfile::NumaScalingStatic,
        RssProfile::Conservative,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RssProfile::Closest => "closest",
            RssProfile::ClosestStatic => "closest_static",
            RssProfile::NumaScaling => "numa_scaling",
            RssProfile::NumaScalingStatic => "numa_scaling_static",
            RssProfile::Conservative => "conservative",
        }
    }

    /// The `*RSSProfile` name Windows gives the word (its number is the catalog's `names`).
    pub fn windows_name(self) -> &'static str {
        match self {
            RssProfile::Closest => "ClosestProcessor",
            RssProfile::ClosestStatic => "ClosestProcessorStatic",
            RssProfile::NumaScaling => "NUMAScaling",
            RssProfile::NumaScalingStatic => "NUMAScalingStatic",
            RssProfile::Conservative => "ConservativeScaling",
        }
    }

    /// The word for a Windows name (the older `windows.rss_profile` key's values).
    pub fn from_windows_name(name: &str) -> Option<RssProfile> {
        RssProfile::ALL
            .into_iter()
            .find(|r| r.windows_name() == name)
    }

    /// The CPUs the word gives a NIC on Linux, in words (a static word gives its dynamic
    /// twin's: see the type's comment).
    pub fn linux_cpus(self) -> &'static str {
        match self {
            RssProfile::Closest | RssProfile::ClosestStatic => {
                "the CPUs of each NIC's own NUMA node"
            }
            RssProfile::NumaScaling | RssProfile::NumaScalingStatic => {
                "every CPU, each NIC's own node first"
            }
            RssProfile::Conservative => "half the CPUs of each NIC's node",
        }
    }
}

/// Who places a NIC's interrupts.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum IrqPolicy {
    /// irqbalance does (it must run); apply pins nothing.
    #[default]
    Irqbalance,
    /// apply pins each queue's interrupt to one CPU of the profile's set (what the vendors'
    /// set_irq_affinity.sh does) and keeps irqbalance off those interrupts.
    Pinned,
}

/// When `apply` changes a NIC.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum NicWhen {
    /// Only when `--watch` measured the kernel spending real time receiving (softnet drops or
    /// squeezes grew, or one CPU's softirq share stood out), or `--nic NAME` names the NIC.
    #[default]
    Evidence,
    /// Whenever the queues differ from the profile.
    Always,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct NicProfile {
    /// The RSS profile of both systems (see [`RssProfile`]); `windows.rss_profile`, its older
    /// Windows-only spelling, is still read into it.
    pub rss: RssProfile,
    pub irq: IrqPolicy,
    /// RPS and RFS on each receive queue when the NIC has fewer receive queues than the
    /// profile's CPUs (redundant otherwise: scaling.rst).
    pub rps: bool,
    /// XPS: each transmit queue sent on by its own CPUs (a NIC with more than one).
    pub xps: bool,
    /// net.core.rps_sock_flow_entries, RFS's global flow table (scaling.rst suggests 32768);
    /// each queue's rps_flow_cnt is this over the queue count.
    pub rps_flow_entries: u64,
    pub when: NicWhen,
}

impl Default for NicProfile {
    fn default() -> Self {
        NicProfile {
            rss: RssProfile::Closest,
            irq: IrqPolicy::Irqbalance,
            rps: true,
            xps: true,
            rps_flow_entries: 32768,
            when: NicWhen::Evidence,
        }
    }
}

impl NicProfile {
    fn is_default(&self) -> bool {
        *self == NicProfile::default()
    }
}

/// What the host does besides holding WebSocket connections. The sources disagree only where
/// the roles do: a server that only accepts opens no outbound connections, a proxy opens one per
/// client, a Kubernetes node must keep its NodePorts out of the ephemeral range.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Accepts WebSocket clients; its outbound connections are few (a database, a backplane).
    Server,
    /// Opens a connection to a backend for every client: HAProxy, nginx, Envoy, a gateway.
    Proxy,
    /// A Kubernetes node: kube-proxy and NodePorts (30000-32767) and the kubelet (10250) on it.
    KubernetesNode,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Server, Role::Proxy, Role::KubernetesNode];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Proxy => "proxy",
            Role::KubernetesNode => "kubernetes-node",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Linux kernel and process targets; each one is read by a check in checks/linux.yaml.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LinuxTargets {
    /// RLIMIT_NOFILE, soft and hard, for the server process.
    pub nofile: u64,
    /// fs.file-max: system-wide file handles.
    pub file_max: u64,
    /// fs.nr_open: the ceiling any RLIMIT_NOFILE can be raised to.
    pub nr_open: u64,
    /// net.core.somaxconn: accept-queue cap.
    pub somaxconn: u64,
    /// net.ipv4.tcp_max_syn_backlog.
    pub tcp_max_syn_backlog: u64,
    /// net.core.netdev_max_backlog (packets per CPU).
    pub netdev_max_backlog: u64,
    /// net.ipv4.tcp_tw_reuse: 0 off, 1 on, 2 loopback only.
    pub tcp_tw_reuse: u64,
    /// net.ipv4.ip_local_port_range as [low, high].
    pub ip_local_port_range: [u64; 2],
    /// net.ipv4.tcp_fin_timeout in seconds (an upper bound).
    pub tcp_fin_timeout: u64,
    /// net.netfilter.nf_conntrack_max (when the module is loaded).
    pub nf_conntrack_max: u64,
    /// net.ipv4.tcp_max_tw_buckets.
    pub tcp_max_tw_buckets: u64,
    /// fs.epoll.max_user_watches.
    pub epoll_max_user_watches: u64,
}

/// Windows targets; each one is read by a check in checks/windows.yaml.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WindowsTargets {
    /// Tcpip\Parameters\MaxUserPort (honoured only up to Windows Server 2003).
    pub max_user_port: u64,
    /// First dynamic port (`netsh int ipv4 set dynamicport tcp start=`).
    pub dynamic_port_start: u64,
    /// Number of dynamic ports (`num=`).
    pub dynamic_port_count: u64,
    /// Tcpip\Parameters\TcpTimedWaitDelay in seconds.
    pub tcp_timed_wait_delay: u64,
    /// Tcpip\Parameters\TcpMaxConnectResponseRetransmissions.
    pub tcp_max_connect_response_retransmissions: u64,
    // The adapters' *RSSProfile is `nic.rss`: an older profile's `windows.rss_profile` is read
    // into it when the profile is loaded (see `fold_rss` in profile/mod.rs).
}

/// Settings of the embedded server (`wstune serve`), also used to size memory estimates.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    /// I/O worker threads; 0 = one per core.
    pub io_workers: u64,
    /// Offload pool threads for blocking handler work; 0 = one per core.
    pub offload_pool_size: u64,
    /// Bounded offload queue length.
    pub offload_queue_size: u64,
    /// Upgrades beyond this many connections get HTTP 503.
    pub max_connections: u64,
    /// Initial per-connection read buffer.
    pub read_buffer_bytes: u64,
    /// Initial per-connection write buffer.
    pub write_buffer_bytes: u64,
    pub deflate: DeflateProfile,
    /// Largest frame accepted.
    pub max_frame_bytes: u64,
    /// Largest reassembled message accepted.
    pub max_message_bytes: u64,
    /// Outgoing messages above this size are fragmented.
    pub fragment_bytes: u64,
    pub heartbeat: HeartbeatSettings,
    /// Queued outgoing bytes per connection before a slow consumer is closed.
    pub send_queue_bytes: u64,
    /// TCP_NOTSENT_LOWAT on each connection's socket: unsent bytes the kernel takes before the
    /// server queues them itself (where send_queue_bytes sees them); 0 leaves the system's
    /// net.ipv4.tcp_notsent_lowat. Optional; 131072 when absent.
    #[serde(default = "default_notsent_lowat")]
    pub notsent_lowat_bytes: u64,
    /// How long an I/O thread with dense traffic waits before it sleeps, so the messages that
    /// arrive meanwhile are served on one wake-up (`embedded_server::coalesce`): microseconds,
    /// 0 to 2000; 0 serves every message the moment it arrives (latency-critical hosts).
    /// Optional; 500 when absent.
    #[serde(default = "default_coalesce_us")]
    pub coalesce_us: u64,
    /// Server CPU per echoed message, in nanoseconds, that the capacity estimate
    /// (`estimate.cores_for_rate`, the CPU check) budgets: by default what the embedded server
    /// measured under independent arrivals (BENCHMARKS.md#echo-cpu); put your own server's figure here,
    /// as `wstune serve --self-test` (or `selftest --pid`) reports it. Optional.
    #[serde(default = "default_cpu_ns_per_message")]
    pub cpu_ns_per_message: u64,
    /// Server processes sharing the port (SO_REUSEPORT, `serve --processes`): a number,
    /// `auto` (enough that each stays under its fd limit) or `cores` (auto, and at least one
    /// per core). Optional; 1 when absent.
    #[serde(default)]
    pub processes: Processes,
    /// Abuse limits (`server.limits`, see `LimitsProfile`). Optional; all off when absent.
    #[serde(default, skip_serializing_if = "LimitsProfile::is_default")]
    pub limits: LimitsProfile,
    /// The channels app (`server.channels`, see `ChannelsProfile`). Optional.
    #[serde(default, skip_serializing_if = "ChannelsProfile::is_default")]
    pub channels: ChannelsProfile,
    /// What clients can make the server hold and spend (`server.budget`, see
    /// `BudgetProfile`). Optional; the server's defaults when absent.
    #[serde(default, skip_serializing_if = "BudgetProfile::is_default")]
    pub budget: BudgetProfile,
    /// How a drain (SIGTERM, `POST /api/drain`) spreads its closes (`server.drain`, see
    /// `DrainProfile`). Optional; the defaults below when absent.
    #[serde(default, skip_serializing_if = "DrainProfile::is_default")]
    pub drain: DrainProfile,
}

/// `server.drain`: a drain turns `/readyz` to 503, waits `delay_secs`, then closes every
/// connection with 1012 at `reconnect_rate` a second, evenly and in a random order: over
/// `ceil(connections / reconnect_rate)` seconds, at most `max_over_secs` (`serve
/// --drain-over` sets the window itself). Every key is optional.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct DrainProfile {
    /// Reconnects a second the rest of the fleet can take from one draining server (its TLS
    /// handshakes, upgrades and resubscribes on top of its own load); 0: close every
    /// connection at once.
    pub reconnect_rate: u64,
    /// The longest a drain's closes are spread over, seconds (also what a stop timeout, such
    /// as Kubernetes' terminationGracePeriodSeconds, must leave room for).
    pub max_over_secs: u64,
    /// Seconds `/readyz` answers 503 before the first close, so load balancers' health checks
    /// stop sending clients here first.
    pub delay_secs: u64,
}

impl Default for DrainProfile {
    fn default() -> Self {
        DrainProfile {
            reconnect_rate: 2000,
            max_over_secs: 300,
            delay_secs: 5,
        }
    }
}

impl DrainProfile {
    pub fn is_default(&self) -> bool {
        *self == DrainProfile::default()
    }

    /// Seconds a stop of a server of `max_connections` may take: the delay, the window its
    /// connections take at the rate, serve's default shutdown grace (5 s), and 15 s for the
    /// process to exit; at least 45 s.
    pub fn stop_secs(&self, max_connections: u64) -> u64 {
        let window = match self.reconnect_rate {
            0 => 0,
            r => max_connections.div_ceil(r).min(self.max_over_secs),
        };
        (self.delay_secs + window + 5 + 15).max(45)
    }
}

/// `server.budget`: the server-wide memory budget and the bounds that keep one client from
/// piling bytes or CPU up (see `embedded_server::budget` and `ServerConfig`). Every key is
/// optional; the defaults are the server's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetProfile {
    /// Bytes clients may make the server hold at once, server-wide (partial frames,
    /// reassembly, inflate output, queued output, offloaded payloads); 0: an eighth of the
    /// host's memory beyond what the profile's connections need, at least 64 MiB.
    pub memory_bytes: u64,
    /// What one connection may hold of it; 0: three messages at the cap, a frame and the send
    /// queue.
    pub conn_share_bytes: u64,
    /// Seconds a message (or frame) has to arrive whole once it has started; 0: no bound.
    pub message_timeout_secs: u64,
    /// Seconds a queue above its cap has to drain below it; 0: no bound.
    pub drain_timeout_secs: u64,
    /// Largest inflated / compressed size of a message past 1 MiB of output; 0: no bound.
    pub inflate_ratio_limit: u64,
    /// Inflate output per connection per second, bytes; 0: no bound.
    pub inflate_rate_bytes: u64,
}

impl Default for BudgetProfile {
    fn default() -> Self {
        let s = embedded_server::ServerConfig::default();
        BudgetProfile {
            memory_bytes: 0,
            conn_share_bytes: 0,
            message_timeout_secs: s.message_timeout.as_secs(),
            drain_timeout_secs: s.send_drain_timeout.as_secs(),
            inflate_ratio_limit: s.inflate_ratio_limit as u64,
            inflate_rate_bytes: s.inflate_rate,
        }
    }
}

impl BudgetProfile {
    pub fn is_default(&self) -> bool {
        *self == BudgetProfile::default()
    }
}

/// `server.channels`: the channels app's HTTP API key, its upgrade tokens and its
/// per-connection subscription cap. Secrets are named by file (relative paths are from the
/// working directory), never written in the profile. Every key is optional.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ChannelsProfile {
    /// File holding the admin listener's HTTP API key; empty: none (the API is off unless
    /// --api-key-file or WSTUNE_API_KEY gives one).
    pub api_key_file: String,
    pub auth: ChannelsAuthProfile,
    /// Subscriptions one connection may hold; 0: the default (256).
    pub max_subscriptions: u64,
    pub history: ChannelsHistoryProfile,
}

/// `server.channels.history`: per-channel history for recovery on resubscribe (docs/serve.md,
/// "History and recovery"). Every key is optional; 0 means the default.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ChannelsHistoryProfile {
    /// Publications each channel keeps; 0: history off.
    pub size: u64,
    /// Seconds a publication is kept; 0: the default (300).
    pub ttl_secs: u64,
    /// Bytes all channels' history may hold; 0: the default (64 MiB).
    pub max_bytes: u64,
    /// Publications one recovery may send; 0: the default (300).
    pub recover_max: u64,
}

/// `server.channels.auth`: JWT (HS256) on upgrade.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ChannelsAuthProfile {
    /// File holding the HMAC secret (32+ bytes); empty: no token auth.
    pub secret_file: String,
    /// Refuse tokens valid for longer (seconds); 0: no cap.
    pub max_lifetime_secs: u64,
    /// The `aud` tokens must carry; empty: not checked.
    pub audience: String,
}

impl ChannelsProfile {
    pub fn is_default(&self) -> bool {
        *self == ChannelsProfile::default()
    }
}

/// Abuse limits as the profile file writes them (`server.limits`); `serve`'s flags override
/// each key. Every key is optional and 0 (or an empty list) means off / none, which is also
/// what the built-in profiles ship: a per-address cap or rate that fits one deployment
/// refuses real users in another (a carrier NAT puts thousands of clients behind one
/// address; a balancer that sends no PROXY header or X-Forwarded-For makes every client the
/// balancer), so the operator who knows the topology turns them on. See
/// `embedded_server::abuse` for how each is answered.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsProfile {
    /// Concurrent connections per client address (IPv6: per /64); 0: no cap.
    pub max_connections_per_ip: u64,
    /// New connections per second per client address; 0: off.
    pub connection_rate_per_ip: u64,
    /// How many may come at once after a quiet spell; 0: one second's worth.
    pub connection_burst_per_ip: u64,
    /// New connections per second, server-wide; 0: off.
    pub connection_rate: u64,
    /// How many may come at once after a quiet spell; 0: one second's worth.
    pub connection_burst: u64,
    /// Messages per second per connection; 0: off.
    pub message_rate: u64,
    /// How many may come at once after a quiet spell; 0: one second's worth.
    pub message_burst: u64,
    /// Close code for a connection over its message rate: 1008 or 1013.
    pub message_rate_close: u64,
    /// Addresses or networks no limit applies to (the load balancer, a backend publisher).
    pub exempt: Vec<String>,
    /// Peers whose PROXY protocol header or X-Forwarded-For names the client; none by default.
    pub trusted_proxies: Vec<String>,
}

impl Default for LimitsProfile {
    fn default() -> Self {
        LimitsProfile {
            max_connections_per_ip: 0,
            connection_rate_per_ip: 0,
            connection_burst_per_ip: 0,
            connection_rate: 0,
            connection_burst: 0,
            message_rate: 0,
            message_burst: 0,
            message_rate_close: 1008,
            exempt: Vec::new(),
            trusted_proxies: Vec::new(),
        }
    }
}

impl LimitsProfile {
    pub fn is_default(&self) -> bool {
        *self == LimitsProfile::default()
    }
}

/// How many server processes `serve` starts (see `src/supervisor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Processes {
    /// Exactly this many (1: no supervisor, the single process).
    Count(u64),
    /// As many as the per-process fd hard limit needs for the connection count, at least 1.
    Auto,
    /// `auto`, and at least one per core (nginx's `worker_processes auto`).
    Cores,
}

impl Default for Processes {
    fn default() -> Processes {
        Processes::Count(1)
    }
}

impl Processes {
    /// `auto`, `cores` or a whole number; the error names the accepted forms.
    pub fn parse(s: &str) -> Result<Processes, String> {
        match s.trim() {
            "auto" => Ok(Processes::Auto),
            "cores" => Ok(Processes::Cores),
            n => n.parse().map(Processes::Count).map_err(|_| {
                format!("'{s}' is not a process count: use a whole number, auto or cores")
            }),
        }
    }
}

impl std::fmt::Display for Processes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Processes::Count(n) => write!(f, "{n}"),
            Processes::Auto => f.write_str("auto"),
            Processes::Cores => f.write_str("cores"),
        }
    }
}

/// A number or `auto`/`cores` in YAML.
impl Serialize for Processes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Processes::Count(n) => s.serialize_u64(*n),
            other => s.serialize_str(&other.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for Processes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Processes, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(Processes::Count(n)),
            Raw::S(s) => Processes::parse(&s).map_err(serde::de::Error::custom),
        }
    }
}

/// permessage-deflate (RFC 7692) as the profile file writes it (`server.deflate`): the file's
/// names and whole numbers, like every other profile field. The server runs on one type,
/// `embedded_server::DeflateSettings`; this converts into it with `From` (and `serve`'s flags
/// override that type's fields, which have the same names and widths). The inflate budget is
/// the server config's own (`ServerConfig::inflate_budget`), not a deflate setting.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeflateProfile {
    /// Negotiate permessage-deflate with clients that offer it (`serve --deflate` /
    /// `--no-deflate` override).
    pub enabled: bool,
    /// LZ77 window, 9..=15 (zlib turns 8 into 9 for raw deflate, so 8 is refused).
    pub window_bits: u8,
    /// zlib memLevel, 1..=9.
    pub mem_level: u8,
    /// zlib compression level, 0..=9.
    pub level: u8,
    /// Messages below this many bytes are sent uncompressed.
    pub threshold_bytes: u64,
    /// Keep one compressor/decompressor per connection alive between messages.
    pub context_takeover: bool,
    /// Server-wide cap on inflated-message memory held at once (1013 past it); absent: the
    /// server's default, max(64 MiB, 4 x max_message_bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inflate_budget_bytes: Option<u64>,
}

impl From<&DeflateProfile> for embedded_server::DeflateSettings {
    fn from(p: &DeflateProfile) -> Self {
        embedded_server::DeflateSettings {
            enabled: p.enabled,
            window_bits: p.window_bits,
            mem_level: p.mem_level,
            level: p.level,
            // Validated at load to at most 1 GiB, so it fits any usize wstune builds for.
            threshold: usize::try_from(p.threshold_bytes).unwrap_or(usize::MAX),
            context_takeover: p.context_takeover,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatSettings {
    /// Seconds between server pings.
    pub interval_secs: u64,
    /// Seconds of silence (no pong, no frame) before the connection is closed.
    pub timeout_secs: u64,
}

/// What `wstune selftest` loads the server with and the p99 it must meet.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SelfTestTargets {
    /// Bytes in each message the generator sends.
    pub payload_bytes: u64,
    /// Messages per second each client sends in the rate scenarios (echo-rate, deflate),
    /// where the host's cores allow it (the report says the rate it used).
    pub rate_per_client: u64,
    /// The p99 round trip (ms) the rate scenarios must meet to pass.
    pub p99_ms: u64,
    /// What the `restart` scenario (the server restarted or drained under its connections)
    /// must meet. Optional: left out, the defaults below.
    #[serde(default)]
    pub restart: RestartTargets,
}

/// `selftest.restart`: how a fleet of clients reconnecting with full-jitter backoff (base
/// 100 ms, cap 3 s) must come back after the server restarts. A restart makes every client
/// reconnect at once: a reconnect storm the size of the profile.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RestartTargets {
    /// The p99 (ms) of each client's time from its close to its new upgrade. The profiles
    /// allow a storm's handshakes at ~5,000/s on 2 cores (the storm budget) plus the backoff's
    /// 3 s cap; default 10000.
    #[serde(default = "default_back_p99_ms")]
    pub back_p99_ms: u64,
    /// Reconnect attempts refused (reset, timed out, answered 503 or closed in the upgrade)
    /// the run tolerates: while no listener is up a client's attempt is reset and it backs
    /// off. The profiles allow a tenth of their connections; default 10000.
    #[serde(default = "default_max_refused")]
    pub max_refused: u64,
    /// Growth of TcpExt ListenOverflows (a full accept queue) over the restart, on a server on
    /// this host. A tuned host's accept queue (net.core.somaxconn, the listen backlog) holds a
    /// reconnect storm: default 0.
    #[serde(default)]
    pub max_listen_overflows: u64,
}

impl Default for RestartTargets {
    fn default() -> Self {
        RestartTargets {
            back_p99_ms: default_back_p99_ms(),
            max_refused: default_max_refused(),
            max_listen_overflows: 0,
        }
    }
}

fn default_back_p99_ms() -> u64 {
    10_000
}

fn default_max_refused() -> u64 {
    10_000
}

/// `server.notsent_lowat_bytes` when a profile leaves it out: the server's own default.
fn default_notsent_lowat() -> u64 {
    embedded_server::config::DEFAULT_NOTSENT_LOWAT as u64
}

/// `server.cpu_ns_per_message` when a profile leaves it out: the embedded server's CPU per
/// echo under independent arrivals at 25,000 msgs/s on one core of the development VM, with
/// its default coalescing window (BENCHMARKS.md#echo-cpu; the runs:
/// bench/results/2026-12-04-echo-cpu-arrivals.md), rounded up.
pub const DEFAULT_CPU_NS_PER_MESSAGE: u64 = 14_000;

fn default_cpu_ns_per_message() -> u64 {
    DEFAULT_CPU_NS_PER_MESSAGE
}

/// `server.coalesce_us` when a profile leaves it out: the server's own default.
fn default_coalesce_us() -> u64 {
    embedded_server::coalesce::DEFAULT_WINDOW.as_micros() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profiles_deflate_block_converts_into_the_servers_settings() {
        let p = DeflateProfile {
            enabled: true,
            window_bits: 11,
            mem_level: 4,
            level: 3,
            threshold_bytes: 512,
            context_takeover: false,
            inflate_budget_bytes: Some(1 << 27),
        };
        assert_eq!(
            embedded_server::DeflateSettings::from(&p),
            embedded_server::DeflateSettings {
                enabled: true,
                window_bits: 11,
                mem_level: 4,
                level: 3,
                threshold: 512,
                context_takeover: false,
            }
        );
    }
}
