//! Running your server under `wstune`: the tuned configuration handed over in the environment.
//!
//! `wstune serve --self-test --command "PROGRAM ARGS"` and `wstune pool --measure/--sweep
//! --command "PROGRAM ARGS"` start your program with three variables set:
//!
//! | variable | what |
//! |---|---|
//! | `WSTUNE_LISTEN` | the address to serve WebSocket on (`127.0.0.1:PORT`) |
//! | `WSTUNE_ADMIN` | the address to serve `/metrics` on (`127.0.0.1:PORT`); set by `pool`, which reads the offload pool's timings there |
//! | `WSTUNE_SERVER_CONFIG` | a JSON file with the profile's [`ServerConfig`] (pool sizes, caps, deflate, heartbeats, abuse limits, the memory budget and message deadlines) |
//!
//! [`Launch::from_env`] reads them, falling back to your program's own address and
//! configuration when they are not set, so one `main` serves both ways. The file is merged
//! into your configuration: the profile's tuning (sizes, caps, timeouts, offload pool,
//! deflate, abuse limits, memory budget) replaces yours; what it does not tune stays yours (the app, the
//! channels settings with their JWT verifier); `allowed_origins` and `subprotocols` stay yours
//! unless the profile lists some:
//!
//! ```no_run
//! use embedded_server::{wstune::Launch, Conn, Handler, Message, Request, ServerConfig, Upgrade};
//!
//! struct Echo;
//! impl Handler for Echo {
//!     type State = ();
//!     fn on_upgrade(&self, _req: &Request<'_>) -> Upgrade<()> {
//!         Upgrade::accept(())
//!     }
//!     fn on_message(&self, conn: &Conn, msg: Message<'_>) {
//!         let _ = conn.send(msg);
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // Your defaults; under wstune, its address and the profile's configuration win.
//!     let launch = Launch::from_env(ServerConfig::default(), "127.0.0.1:9001".parse()?)?;
//!     launch.run(Echo).await?;
//!     Ok(())
//! }
//! ```
//!
//! The file's format is private to this module and versioned: a `wstune` newer than this crate
//! that writes a format it does not know gets [`EnvError::Version`], never a silently partial
//! configuration.

use crate::abuse::{Cidr, LimitSettings, Rate};
use crate::deflate::DeflateSettings;
use crate::{BackpressureClose, ConfigError, Handler, Server, ServerConfig};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;

/// The WebSocket address variable.
pub const LISTEN_VAR: &str = "WSTUNE_LISTEN";
/// The admin (`/metrics`) address variable.
pub const ADMIN_VAR: &str = "WSTUNE_ADMIN";
/// The configuration file variable.
pub const CONFIG_VAR: &str = "WSTUNE_SERVER_CONFIG";

/// The configuration file's format version.
const VERSION: u32 = 1;

/// Why the environment `wstune` set could not be used. Each names the variable.
#[derive(Debug)]
pub enum EnvError {
    /// A variable that is not an address.
    Address {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// The configuration file could not be read.
    Read {
        /// The file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// The configuration file is not the JSON this crate writes.
    Format {
        /// The file.
        path: String,
        /// What is wrong.
        error: String,
    },
    /// The file was written in a newer format than this crate reads.
    Version {
        /// The file's version.
        found: u32,
    },
    /// The configuration breaks a bound (see [`ServerConfig::validate`]).
    Config(ConfigError),
}

impl std::fmt::Display for EnvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EnvError::Address { var, value } => {
                write!(f, "{var}={value:?} is not an address like 127.0.0.1:9001")
            }
            EnvError::Read { path, error } => {
                write!(f, "{CONFIG_VAR}: cannot read {path}: {error}")
            }
            EnvError::Format { path, error } => write!(
                f,
                "{CONFIG_VAR}: {path} is not a server configuration written by wstune: {error}"
            ),
            EnvError::Version { found } => write!(
                f,
                "{CONFIG_VAR}: the configuration is format {found}, this embedded-server reads \
                 {VERSION}: build your server with the embedded-server of the wstune that runs it"
            ),
            EnvError::Config(e) => write!(f, "{CONFIG_VAR}: {e}"),
        }
    }
}

impl std::error::Error for EnvError {}

/// Where and how to serve: the program's own defaults, or what `wstune` handed over.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The WebSocket address.
    pub listen: SocketAddr,
    /// Where to serve `/metrics` and `/healthz` (None: not served).
    pub admin: Option<SocketAddr>,
    /// The server's configuration.
    pub config: ServerConfig,
    /// Whether `wstune` set any of it.
    pub by_wstune: bool,
}

impl Launch {
    /// The program's defaults, with whatever `WSTUNE_LISTEN`, `WSTUNE_ADMIN` and
    /// `WSTUNE_SERVER_CONFIG` set in their place. A variable that is set but unusable is an
    /// error (never ignored: a self-test of the defaults would prove the wrong server).
    pub fn from_env(config: ServerConfig, listen: SocketAddr) -> Result<Launch, EnvError> {
        Launch::from_vars(config, listen, |k| std::env::var(k).ok())
    }

    /// `from_env` with the variables from `get` (tests).
    pub fn from_vars(
        config: ServerConfig,
        listen: SocketAddr,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Launch, EnvError> {
        let addr = |var: &'static str| -> Result<Option<SocketAddr>, EnvError> {
            match get(var).filter(|v| !v.is_empty()) {
                None => Ok(None),
                Some(v) => v
                    .parse()
                    .map(Some)
                    .map_err(|_| EnvError::Address { var, value: v }),
            }
        };
        let mut launch = Launch {
            listen,
            admin: None,
            config,
            by_wstune: false,
        };
        if let Some(a) = addr(LISTEN_VAR)? {
            launch.listen = a;
            launch.by_wstune = true;
        }
        if let Some(a) = addr(ADMIN_VAR)? {
            launch.admin = Some(a);
            launch.by_wstune = true;
        }
        if let Some(path) = get(CONFIG_VAR).filter(|v| !v.is_empty()) {
            let text = std::fs::read_to_string(&path).map_err(|error| EnvError::Read {
                path: path.clone(),
                error,
            })?;
            launch.config =
                from_json(&text, std::mem::take(&mut launch.config)).map_err(|e| match e {
                    FromJson::Version(found) => EnvError::Version { found },
                    FromJson::Format(error) => EnvError::Format { path, error },
                })?;
            launch.by_wstune = true;
        }
        launch.config.validate().map_err(EnvError::Config)?;
        Ok(launch)
    }

    /// Serve `handler` until SIGINT/SIGTERM: bind the address, serve the admin endpoints when
    /// asked, print `listening on ws://ADDR/` on stderr, and shut down gracefully.
    pub async fn run<H: Handler>(self, handler: H) -> std::io::Result<()> {
        let invalid = |e: ConfigError| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
        let server = Server::with_handler(self.config, handler).map_err(invalid)?;
        let listeners = crate::bind(self.listen, false, 1)?;
        let shutdown = crate::shutdown_signal()?;
        let (stop_admin, admin_stopped) = tokio::sync::oneshot::channel::<()>();
        if let Some(a) = self.admin {
            let l = tokio::net::TcpListener::bind(a).await?;
            tokio::spawn(server.serve_admin(l, async move {
                let _ = admin_stopped.await;
            }));
        }
        eprintln!("listening on ws://{}/", listeners[0].local_addr()?);
        let r = server.run(listeners, shutdown).await;
        let _ = stop_admin.send(());
        r
    }
}

#[derive(Serialize, Deserialize)]
struct Wire {
    version: u32,
    max_connections: usize,
    max_frame_bytes: usize,
    max_message_bytes: usize,
    fragment_bytes: usize,
    send_queue_bytes: usize,
    backpressure_close: u16,
    // Absent in files written before it existed: the library's default.
    #[serde(default = "default_notsent_lowat")]
    notsent_lowat_bytes: usize,
    heartbeat_interval_ms: u64,
    heartbeat_timeout_ms: u64,
    handshake_timeout_ms: u64,
    max_header_bytes: usize,
    allowed_origins: Vec<String>,
    subprotocols: Vec<String>,
    offload_pool_size: usize,
    offload_queue_size: usize,
    shutdown_grace_ms: u64,
    deflate: WireDeflate,
    inflate_budget: Option<usize>,
    limits: WireLimits,
    #[serde(flatten)]
    budget: WireBudget,
}

/// The memory budget and the deadlines that bound what a client can make the server hold.
/// Absent in files written before they crossed: the program's own values stand then.
#[derive(Serialize, Deserialize, Default)]
struct WireBudget {
    #[serde(default)]
    memory_budget: Option<usize>,
    #[serde(default)]
    conn_memory_share: Option<usize>,
    #[serde(default)]
    message_timeout_ms: Option<u64>,
    #[serde(default)]
    send_drain_timeout_ms: Option<u64>,
    #[serde(default)]
    inflate_ratio_limit: Option<u32>,
    #[serde(default)]
    inflate_rate: Option<u64>,
}

#[derive(Serialize, Deserialize)]
struct WireDeflate {
    enabled: bool,
    window_bits: u8,
    mem_level: u8,
    level: u8,
    threshold: usize,
    context_takeover: bool,
}

#[derive(Serialize, Deserialize)]
struct WireLimits {
    max_connections_per_ip: usize,
    /// (per second, burst)
    connection_rate_per_ip: Option<(u32, u32)>,
    connection_rate: Option<(u32, u32)>,
    message_rate: Option<(u32, u32)>,
    message_rate_close: u16,
    exempt: Vec<String>,
    trusted_proxies: Vec<String>,
    // The accept gate's guards; absent in files written before they existed (the defaults).
    #[serde(default)]
    max_pending_handshakes: usize,
    #[serde(default)]
    fd_reserve: Option<usize>,
}

fn default_notsent_lowat() -> usize {
    crate::config::DEFAULT_NOTSENT_LOWAT
}

fn ms(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

/// The configuration as `wstune` writes it into `WSTUNE_SERVER_CONFIG`'s file. The built-in
/// apps' settings (`app`, `handler`) are not part of it: the program runs its own handler.
pub fn to_json(c: &ServerConfig) -> String {
    let rate = |r: Option<Rate>| r.map(|r| (r.per_sec, r.burst));
    let l = &c.limits;
    let d = &c.deflate;
    let wire = Wire {
        version: VERSION,
        max_connections: c.max_connections,
        max_frame_bytes: c.max_frame_bytes,
        max_message_bytes: c.max_message_bytes,
        fragment_bytes: c.fragment_bytes,
        send_queue_bytes: c.send_queue_bytes,
        backpressure_close: c.backpressure_close.code(),
        notsent_lowat_bytes: c.notsent_lowat_bytes,
        heartbeat_interval_ms: ms(c.heartbeat_interval),
        heartbeat_timeout_ms: ms(c.heartbeat_timeout),
        handshake_timeout_ms: ms(c.handshake_timeout),
        max_header_bytes: c.max_header_bytes,
        allowed_origins: c.allowed_origins.clone(),
        subprotocols: c.subprotocols.clone(),
        offload_pool_size: c.offload_pool_size,
        offload_queue_size: c.offload_queue_size,
        shutdown_grace_ms: ms(c.shutdown_grace),
        deflate: WireDeflate {
            enabled: d.enabled,
            window_bits: d.window_bits,
            mem_level: d.mem_level,
            level: d.level,
            threshold: d.threshold,
            context_takeover: d.context_takeover,
        },
        inflate_budget: c.inflate_budget,
        limits: WireLimits {
            max_connections_per_ip: l.max_connections_per_ip,
            connection_rate_per_ip: rate(l.connection_rate_per_ip),
            connection_rate: rate(l.connection_rate),
            message_rate: rate(l.message_rate),
            message_rate_close: l.message_rate_close,
            exempt: l.exempt.iter().map(|c| c.to_string()).collect(),
            trusted_proxies: l.trusted_proxies.iter().map(|c| c.to_string()).collect(),
            max_pending_handshakes: l.max_pending_handshakes,
            fd_reserve: l.fd_reserve,
        },
        budget: WireBudget {
            memory_budget: c.memory_budget,
            conn_memory_share: c.conn_memory_share,
            message_timeout_ms: Some(ms(c.message_timeout)),
            send_drain_timeout_ms: Some(ms(c.send_drain_timeout)),
            inflate_ratio_limit: Some(c.inflate_ratio_limit),
            inflate_rate: Some(c.inflate_rate),
        },
    };
    serde_json::to_string_pretty(&wire).expect("plain data serializes")
}

enum FromJson {
    Version(u32),
    Format(String),
}

/// Read what [`to_json`] wrote over the program's own `base`: the tuned fields (sizes, caps,
/// timeouts, pool, deflate, abuse limits) are wstune's; what the file does not carry (the
/// app, the channels settings: JWT verifier, caps) stays the program's; `allowed_origins` and
/// `subprotocols` are the program's unless the profile names some (its list replaces the
/// program's then).
fn from_json(text: &str, base: ServerConfig) -> Result<ServerConfig, FromJson> {
    // The version first, so a newer format is named as such rather than as a parse error.
    #[derive(Deserialize)]
    struct Versioned {
        version: u32,
    }
    let v: Versioned = serde_json::from_str(text).map_err(|e| FromJson::Format(e.to_string()))?;
    if v.version != VERSION {
        return Err(FromJson::Version(v.version));
    }
    let w: Wire = serde_json::from_str(text).map_err(|e| FromJson::Format(e.to_string()))?;
    let rate = |r: Option<(u32, u32)>| r.and_then(|(p, b)| Rate::new(p, b));
    let cidrs = |v: &[String]| -> Result<Vec<Cidr>, FromJson> {
        v.iter()
            .map(|s| Cidr::parse(s).map_err(FromJson::Format))
            .collect()
    };
    Ok(ServerConfig {
        max_connections: w.max_connections,
        max_frame_bytes: w.max_frame_bytes,
        max_message_bytes: w.max_message_bytes,
        fragment_bytes: w.fragment_bytes,
        send_queue_bytes: w.send_queue_bytes,
        backpressure_close: match w.backpressure_close {
            1013 => BackpressureClose::TryAgain,
            _ => BackpressureClose::Policy,
        },
        notsent_lowat_bytes: w.notsent_lowat_bytes,
        heartbeat_interval: Duration::from_millis(w.heartbeat_interval_ms),
        heartbeat_timeout: Duration::from_millis(w.heartbeat_timeout_ms),
        handshake_timeout: Duration::from_millis(w.handshake_timeout_ms),
        max_header_bytes: w.max_header_bytes,
        allowed_origins: if w.allowed_origins.is_empty() {
            base.allowed_origins.clone()
        } else {
            w.allowed_origins
        },
        subprotocols: if w.subprotocols.is_empty() {
            base.subprotocols.clone()
        } else {
            w.subprotocols
        },
        offload_pool_size: w.offload_pool_size,
        offload_queue_size: w.offload_queue_size,
        shutdown_grace: Duration::from_millis(w.shutdown_grace_ms),
        deflate: DeflateSettings {
            enabled: w.deflate.enabled,
            window_bits: w.deflate.window_bits,
            mem_level: w.deflate.mem_level,
            level: w.deflate.level,
            threshold: w.deflate.threshold,
            context_takeover: w.deflate.context_takeover,
        },
        inflate_budget: w.inflate_budget,
        limits: LimitSettings {
            max_connections_per_ip: w.limits.max_connections_per_ip,
            connection_rate_per_ip: rate(w.limits.connection_rate_per_ip),
            connection_rate: rate(w.limits.connection_rate),
            message_rate: rate(w.limits.message_rate),
            message_rate_close: w.limits.message_rate_close,
            exempt: cidrs(&w.limits.exempt)?,
            trusted_proxies: cidrs(&w.limits.trusted_proxies)?,
            max_pending_handshakes: w.limits.max_pending_handshakes,
            fd_reserve: w.limits.fd_reserve,
        },
        memory_budget: w.budget.memory_budget.or(base.memory_budget),
        conn_memory_share: w.budget.conn_memory_share.or(base.conn_memory_share),
        message_timeout: w
            .budget
            .message_timeout_ms
            .map_or(base.message_timeout, Duration::from_millis),
        send_drain_timeout: w
            .budget
            .send_drain_timeout_ms
            .map_or(base.send_drain_timeout, Duration::from_millis),
        inflate_ratio_limit: w
            .budget
            .inflate_ratio_limit
            .unwrap_or(base.inflate_ratio_limit),
        inflate_rate: w.budget.inflate_rate.unwrap_or(base.inflate_rate),
        ..base
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, String)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn without_wstune_the_programs_defaults_stand() {
        let own = ServerConfig {
            offload_pool_size: 3,
            ..ServerConfig::default()
        };
        let l = Launch::from_vars(own, "127.0.0.1:9001".parse().unwrap(), vars(&[])).unwrap();
        assert!(!l.by_wstune);
        assert_eq!(l.listen.port(), 9001);
        assert_eq!(l.config.offload_pool_size, 3);
        assert_eq!(l.admin, None);
    }

    #[test]
    fn the_handed_over_configuration_round_trips() {
        let mut c = ServerConfig {
            offload_pool_size: 7,
            offload_queue_size: 99,
            max_connections: 1234,
            heartbeat_interval: Duration::from_secs(4),
            heartbeat_timeout: Duration::from_secs(9),
            backpressure_close: BackpressureClose::TryAgain,
            inflate_budget: Some(80 << 20),
            memory_budget: Some(300 << 20),
            conn_memory_share: Some(1 << 20),
            message_timeout: Duration::from_secs(7),
            send_drain_timeout: Duration::from_secs(11),
            inflate_ratio_limit: 40,
            inflate_rate: 5 << 20,
            ..ServerConfig::default()
        };
        c.deflate.enabled = true;
        c.deflate.window_bits = 10;
        c.limits.message_rate = Rate::new(50, 100);
        c.limits.exempt = vec![Cidr::parse("127.0.0.0/8").unwrap()];
        let dir = std::env::temp_dir().join(format!("wstune-env-test-{}", std::process::id()));
        std::fs::write(&dir, to_json(&c)).unwrap();
        let l = Launch::from_vars(
            ServerConfig::default(),
            "127.0.0.1:1".parse().unwrap(),
            vars(&[
                (LISTEN_VAR, "127.0.0.1:4567".into()),
                (ADMIN_VAR, "127.0.0.1:4568".into()),
                (CONFIG_VAR, dir.display().to_string()),
            ]),
        )
        .unwrap();
        let _ = std::fs::remove_file(&dir);
        assert!(l.by_wstune);
        assert_eq!(l.listen.port(), 4567);
        assert_eq!(l.admin.unwrap().port(), 4568);
        // Every field that crosses (Debug prints them all; app/handler are not handed over).
        assert_eq!(format!("{:?}", l.config), format!("{c:?}"));
    }

    /// A file from a wstune that did not yet hand the budget over leaves the program's own.
    #[test]
    fn a_file_without_the_budget_keeps_the_programs_budget() {
        let mut v: serde_json::Value =
            serde_json::from_str(&to_json(&ServerConfig::default())).unwrap();
        for k in [
            "memory_budget",
            "conn_memory_share",
            "message_timeout_ms",
            "send_drain_timeout_ms",
            "inflate_ratio_limit",
            "inflate_rate",
        ] {
            assert!(
                v.as_object_mut().unwrap().remove(k).is_some(),
                "{k} is written"
            );
        }
        let own = ServerConfig {
            memory_budget: Some(123 << 20),
            message_timeout: Duration::from_secs(42),
            inflate_ratio_limit: 17,
            ..ServerConfig::default()
        };
        let Ok(got) = from_json(&v.to_string(), own.clone()) else {
            panic!("an older file is read")
        };
        assert_eq!(got.memory_budget, own.memory_budget);
        assert_eq!(got.message_timeout, own.message_timeout);
        assert_eq!(got.inflate_ratio_limit, 17);
    }

    #[test]
    fn the_programs_own_settings_outside_the_tuning_are_kept() {
        let mut own = ServerConfig {
            subprotocols: vec!["chat.v1".into()],
            allowed_origins: vec!["https://app.example".into()],
            offload_pool_size: 2,
            ..ServerConfig::default()
        };
        own.channels.max_subscriptions = 7;
        let tuned = ServerConfig {
            offload_pool_size: 9,
            ..ServerConfig::default()
        };
        let file = std::env::temp_dir().join(format!("wstune-env-merge-{}", std::process::id()));
        std::fs::write(&file, to_json(&tuned)).unwrap();
        let l = Launch::from_vars(
            own.clone(),
            "127.0.0.1:1".parse().unwrap(),
            vars(&[(CONFIG_VAR, file.display().to_string())]),
        )
        .unwrap();
        let _ = std::fs::remove_file(&file);
        assert_eq!(l.config.offload_pool_size, 9, "the tuning is wstune's");
        assert_eq!(l.config.subprotocols, own.subprotocols);
        assert_eq!(l.config.allowed_origins, own.allowed_origins);
        assert_eq!(
            format!("{:?}", l.config.channels),
            format!("{:?}", own.channels)
        );
    }

    #[test]
    fn bad_variables_are_errors_naming_them() {
        let e = Launch::from_vars(
            ServerConfig::default(),
            "127.0.0.1:1".parse().unwrap(),
            vars(&[(LISTEN_VAR, "nine".into())]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("WSTUNE_LISTEN=\"nine\""), "{e}");
        let e = Launch::from_vars(
            ServerConfig::default(),
            "127.0.0.1:1".parse().unwrap(),
            vars(&[(CONFIG_VAR, "/nonexistent/wstune.json".into())]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("cannot read /nonexistent/wstune.json"), "{e}");
        let newer = r#"{"version": 99}"#;
        assert!(matches!(
            from_json(newer, ServerConfig::default()),
            Err(FromJson::Version(99))
        ));
    }
}
