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
//! configuration when they are not set, so one `main` serves both ways. The file is
//! [`ServerConfig`]'s serde form with a version, merged into your configuration: every field it
//! carries (the profile's tuning: sizes, caps, timeouts, offload pool, deflate, abuse limits,
//! memory budget) replaces yours; a field it does not carry (a file from an older `wstune`)
//! stays yours; `allowed_origins` and `subprotocols` stay yours unless the profile lists some.
//! Your handler, and whatever it was built with, is yours alone:
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

use crate::{ConfigError, Handler, Server, ServerConfig};
use serde::Serialize;
use std::net::SocketAddr;

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

/// The file: the format's version beside the configuration's own fields (see
/// [`ServerConfig`]'s serde form).
#[derive(Serialize)]
struct Wire<'a> {
    version: u32,
    #[serde(flatten)]
    config: &'a ServerConfig,
}

/// The configuration as `wstune` writes it into `WSTUNE_SERVER_CONFIG`'s file.
pub fn to_json(c: &ServerConfig) -> String {
    let wire = Wire {
        version: VERSION,
        config: c,
    };
    serde_json::to_string_pretty(&wire).expect("plain data serializes")
}

enum FromJson {
    Version(u32),
    Format(String),
}

/// Read what [`to_json`] wrote over the program's own `base`: every field the file carries is
/// wstune's (the profile's tuning); a field it does not carry (a file from an older wstune)
/// stays the program's; `allowed_origins` and `subprotocols` stay the program's unless the
/// profile names some (its list replaces the program's then).
fn from_json(text: &str, base: ServerConfig) -> Result<ServerConfig, FromJson> {
    let format = |e: serde_json::Error| FromJson::Format(e.to_string());
    let mut file: serde_json::Value = serde_json::from_str(text).map_err(format)?;
    // The version first, so a newer format is named as such rather than as a parse error.
    let version = file
        .as_object_mut()
        .and_then(|o| o.remove("version"))
        .ok_or_else(|| FromJson::Format("no \"version\" field".into()))?;
    match version.as_u64() {
        Some(v) if v == u64::from(VERSION) => {}
        Some(v) => return Err(FromJson::Version(u32::try_from(v).unwrap_or(u32::MAX))),
        None => {
            return Err(FromJson::Format(format!(
                "version {version} is not a number"
            )))
        }
    }
    let mut merged = serde_json::to_value(&base).expect("plain data serializes");
    overlay(&mut merged, file);
    // The path of a bad value (`limits.exempt[0]: ...`): the merged document has no lines that
    // would point into the file.
    let mut c: ServerConfig = serde_path_to_error::deserialize(merged)
        .map_err(|e| FromJson::Format(format!("{}: {}", e.path(), e.inner())))?;
    if c.allowed_origins.is_empty() {
        c.allowed_origins = base.allowed_origins;
    }
    if c.subprotocols.is_empty() {
        c.subprotocols = base.subprotocols;
    }
    Ok(c)
}

/// `top`'s fields over `base`'s, object by object (so a file may carry part of `limits`).
fn overlay(base: &mut serde_json::Value, top: serde_json::Value) {
    match (base, top) {
        (serde_json::Value::Object(b), serde_json::Value::Object(t)) => {
            for (k, v) in t {
                match b.get_mut(&k) {
                    Some(slot) => overlay(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, top) => *slot = top,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BackpressureClose, Cidr, Rate};
    use std::time::Duration;

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
        let own = ServerConfig {
            subprotocols: vec!["chat.v1".into()],
            allowed_origins: vec!["https://app.example".into()],
            offload_pool_size: 2,
            ..ServerConfig::default()
        };
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
    }

    /// The file as the first `wstune` to write it did (every field then, in its own layout):
    /// still read, each value where it was.
    #[test]
    fn a_file_in_the_first_layout_is_read() {
        let first = r#"{
          "version": 1, "max_connections": 5000, "max_frame_bytes": 1048576,
          "max_message_bytes": 4194304, "fragment_bytes": 65536, "send_queue_bytes": 262144,
          "backpressure_close": 1013, "heartbeat_interval_ms": 20000,
          "heartbeat_timeout_ms": 60000, "handshake_timeout_ms": 5000, "max_header_bytes": 8192,
          "allowed_origins": [], "subprotocols": [], "offload_pool_size": 4,
          "offload_queue_size": 512, "shutdown_grace_ms": 3000,
          "deflate": {"enabled": true, "window_bits": 12, "mem_level": 5, "level": 3,
                      "threshold": 256, "context_takeover": false},
          "inflate_budget": 67108864,
          "limits": {"max_connections_per_ip": 100, "connection_rate_per_ip": [10, 20],
                     "connection_rate": null, "message_rate": [50, 100],
                     "message_rate_close": 1008, "exempt": ["10.0.0.0/8"],
                     "trusted_proxies": []}
        }"#;
        let own = ServerConfig {
            memory_budget: Some(99 << 20),
            notsent_lowat_bytes: 0,
            ..ServerConfig::default()
        };
        let Ok(c) = from_json(first, own) else {
            panic!("the first layout is read")
        };
        assert_eq!(c.max_connections, 5000);
        assert_eq!(c.backpressure_close, crate::BackpressureClose::TryAgain);
        assert_eq!(c.heartbeat_interval, std::time::Duration::from_secs(20));
        assert_eq!(c.shutdown_grace, std::time::Duration::from_secs(3));
        assert!(c.deflate.enabled && c.deflate.window_bits == 12 && !c.deflate.context_takeover);
        assert_eq!(c.limits.connection_rate_per_ip, crate::Rate::new(10, 20));
        assert_eq!(c.limits.message_rate, crate::Rate::new(50, 100));
        assert_eq!(c.limits.exempt[0].to_string(), "10.0.0.0/8");
        // What that layout did not carry is the program's.
        assert_eq!(c.memory_budget, Some(99 << 20));
        assert_eq!(c.notsent_lowat_bytes, 0);
        assert_eq!(c.limits.fd_reserve, None);
    }

    #[test]
    fn a_bad_value_in_the_file_is_named() {
        let mut v: serde_json::Value =
            serde_json::from_str(&to_json(&ServerConfig::default())).unwrap();
        v["backpressure_close"] = 1011.into();
        let Err(FromJson::Format(e)) = from_json(&v.to_string(), ServerConfig::default()) else {
            panic!("1011 is refused")
        };
        assert!(
            e.contains("backpressure close code 1011: write 1008"),
            "{e}"
        );
        v["backpressure_close"] = 1008.into();
        v["limits"]["exempt"] = serde_json::json!(["10.0.0.300"]);
        let Err(FromJson::Format(e)) = from_json(&v.to_string(), ServerConfig::default()) else {
            panic!("a bad address is refused")
        };
        assert!(
            e.contains("'10.0.0.300' is not an address or network"),
            "{e}"
        );
        assert!(
            e.starts_with("limits.exempt[0]: "),
            "the field is named: {e}"
        );
        v["limits"]["exempt"] = serde_json::json!([]);
        v["max_connections"] = "many".into();
        let Err(FromJson::Format(e)) = from_json(&v.to_string(), ServerConfig::default()) else {
            panic!("a string for a count is refused")
        };
        assert!(
            e.starts_with("max_connections: invalid type: string"),
            "{e}"
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
