//! `serve`'s configuration, resolved once: the embedded server's [`ServerConfig`] and what serve
//! itself needs around it (listen address, admin, runtime, processes, TLS files, logs, cluster),
//! with the settings table that says where each value came from.
//!
//! `cli::resolve` builds it from the flags and the profile (ripgrep's split: the clap structs
//! hold what was typed, this holds what it means). Child servers (the `--processes`
//! supervisor's processes, the self-test's servers) receive the parent's configuration, with the
//! few values that differ per child, as versioned JSON in [`ENV_CONFIG`]; the secrets (the HTTP
//! API key, the JWT secret) never enter that JSON or any file: they travel in the child's
//! environment only ([`ServeConfig::child_env`]).

use super::config_error::in_flags;
use crate::profile::Processes;
use crate::serve::backplane::Cluster;
use embedded_server::channels::ApiKey;
use embedded_server::{App, BuiltinConfig, ServerConfig, SimulatedWork};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// The environment variable a child `wstune serve` reads its configuration from: the JSON of
/// [`ServeConfig::to_json`]. Internal to wstune and its own children.
pub const ENV_CONFIG: &str = "WSTUNE_SERVE_CONFIG";
/// The environment variable holding the HTTP API key (when no --api-key-file is given).
pub const ENV_API_KEY: &str = "WSTUNE_API_KEY";
/// The environment variable holding the JWT secret (when no --auth-secret-file is given).
pub const ENV_AUTH_SECRET: &str = "WSTUNE_AUTH_SECRET";

/// The handed-over format's version: a child that reads another refuses it, never runs a
/// partial configuration (a parent and child are the same binary, so this is a guard against
/// a binary replaced under a running supervisor).
const VERSION: u32 = 2;

/// One row of the settings table: setting, value, where it came from (flag, profile, default,
/// env).
pub type Row = (String, String, String);

/// Log lines for people or for log shippers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogFormat {
    Text,
    Json,
}

/// `--tls-cert` and `--tls-key`: read by each serving process at start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// `--tls-resumption`.
    #[serde(default)]
    pub resumption: TlsResumption,
}

/// How clients may resume TLS sessions (see `embedded_server::tls::Resumption`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TlsResumption {
    #[default]
    Tickets,
    Cache,
    Off,
}

/// The secrets the channels app runs with. Never serialised: a child gets them in its
/// environment ([`ServeConfig::child_env`]), and Debug prints none.
#[derive(Clone, Default)]
pub struct Secrets {
    /// The admin listener's HTTP API key (None: the API is off).
    pub api_key: Option<ApiKey>,
    /// The JWT secret as read (the verifier in `BuiltinConfig::channels.auth` is built from it).
    pub auth_secret: Option<String>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("api_key", &self.api_key.as_ref().map(|_| "set"))
            .field("auth_secret", &self.auth_secret.as_ref().map(|_| "set"))
            .finish()
    }
}

/// `serve`, resolved: every flag given, else the profile's value, within its bounds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServeConfig {
    /// The profile as named: the host check the server warns from.
    pub profile: String,
    /// `--bind` and `--port` (0: any free port).
    pub bind: IpAddr,
    pub port: u16,
    /// The admin listener (None: `--admin off`).
    pub admin: Option<SocketAddr>,
    /// Several accept loops on one port with SO_REUSEPORT (`--acceptors`, 0: one per worker).
    pub reuseport: bool,
    pub acceptors: usize,
    /// I/O threads in force (0 in the flag or profile already made one per core).
    pub workers: usize,
    /// Neither the flag nor the profile fixed the I/O threads: a supervisor gives each of its
    /// processes its share of the cores instead.
    pub workers_follow_cores: bool,
    /// The I/O threads' wake-up coalescing window (`embedded_server::coalesce`).
    pub coalesce: Duration,
    /// How many server processes, and what asked for them (`--processes` or
    /// `server.processes`, for the errors).
    pub processes: Processes,
    pub processes_from: String,
    pub tls: Option<TlsFiles>,
    pub log_format: LogFormat,
    /// `--log-level` (None: RUST_LOG, else the command's default).
    pub log_level: Option<String>,
    /// `--cluster`: the backplane, its URL read (a child gets the URL as typed).
    pub cluster: Option<Cluster>,
    /// In a supervised process: the whole node's reconnect rate (`server.drain.reconnect_rate`),
    /// what it drains at when a rolling restart replaces it (SIGUSR1 from the supervisor):
    /// then it is the only process draining. 0 elsewhere.
    #[serde(default)]
    pub replaced_drain_rate: u32,
    /// The embedded server's configuration.
    pub server: ServerConfig,
    /// The built-in application it runs (`--app`, `--handler`, the channels app's settings;
    /// the token verifier is rebuilt from the secret, never written).
    pub builtin: BuiltinConfig,
    /// The settings table, in the order `serve` prints it.
    pub settings: Vec<Row>,
    /// The memory budget was derived from the connection count (no flag, no profile key): a
    /// child with another count derives its own.
    pub memory_budget_derived: bool,
    /// Upgrades present a JWT, checked with these limits (the secret is in `secrets`).
    pub token_auth: Option<TokenAuth>,
    #[serde(skip)]
    pub secrets: Secrets,
}

/// The JWT check's limits: what a child needs besides the secret to build the same verifier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenAuth {
    pub max_lifetime: Option<u64>,
    pub audience: Option<String>,
}

impl TokenAuth {
    /// The verifier for `secret` (a file's trailing newline is not part of the secret;
    /// anything else is).
    pub fn verifier(&self, secret: &str) -> Result<embedded_server::channels::Verifier, String> {
        let v = embedded_server::channels::Verifier::new(
            secret.trim_end_matches(['\n', '\r']).as_bytes(),
        )?;
        Ok(v.with_limits(self.max_lifetime, self.audience.as_deref()))
    }
}

/// What a child reads: the version first, so a mismatch is named as such.
#[derive(Serialize, Deserialize)]
struct Handover<C> {
    version: u32,
    config: C,
}

/// The settings table's row of the drain window (`refresh_drain_row` keeps its value).
pub const DRAIN_ROW: &str = "drain: closes spread over s (1012)";

impl ServeConfig {
    /// The configuration as a child reads it from [`ENV_CONFIG`] (no secret in it).
    pub fn to_json(&self) -> String {
        serde_json::to_string(&Handover {
            version: VERSION,
            config: self,
        })
        .expect("plain data serializes")
    }

    /// Read what [`Self::to_json`] wrote, with the secrets the parent put in the environment.
    pub fn from_json(text: &str, secrets: Secrets) -> anyhow::Result<ServeConfig> {
        #[derive(Deserialize)]
        struct Versioned {
            version: u32,
        }
        let bad = |e: serde_json::Error| {
            anyhow::anyhow!("${ENV_CONFIG}: not a configuration written by this wstune: {e}")
        };
        let v: Versioned = serde_json::from_str(text).map_err(bad)?;
        if v.version != VERSION {
            anyhow::bail!(
                "${ENV_CONFIG}: the configuration is format {}, this wstune reads {VERSION}: \
                 run the child with the same wstune as its parent",
                v.version
            );
        }
        let h: Handover<ServeConfig> = serde_json::from_str(text).map_err(bad)?;
        let mut c = h.config;
        if let Some(t) = &c.token_auth {
            let secret = secrets.auth_secret.as_deref().ok_or_else(|| {
                anyhow::anyhow!(
                    "${ENV_AUTH_SECRET}: not set for a child server whose configuration checks tokens"
                )
            })?;
            c.builtin.channels.auth = Some(std::sync::Arc::new(
                t.verifier(secret)
                    .map_err(|e| anyhow::anyhow!("${ENV_AUTH_SECRET}: {e}"))?,
            ));
        }
        c.secrets = secrets;
        c.server.validate().map_err(in_flags)?;
        c.builtin.validate().map_err(in_flags)?;
        Ok(c)
    }

    /// A child server's environment: the configuration and the secrets, each in its variable
    /// (and only there: no file on disk holds a secret, no argument shows one to `ps`).
    pub fn child_env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![(ENV_CONFIG, self.to_json())];
        if let Some(k) = &self.secrets.api_key {
            env.push((ENV_API_KEY, k.expose().to_string()));
        }
        if let Some(s) = &self.secrets.auth_secret {
            env.push((ENV_AUTH_SECRET, s.clone()));
        }
        env
    }

    /// Set `name`'s row in the settings table (in place, so the table keeps its order).
    fn set_row(&mut self, name: &str, value: String, from: &str) {
        self.set_row_before(name, value, from, &[]);
    }

    /// `set_row`; a row not yet in the table goes before the first of `before` present (else
    /// last), where resolving the same flags would have put it.
    fn set_row_before(&mut self, name: &str, value: String, from: &str, before: &[&str]) {
        if let Some(r) = self.settings.iter_mut().find(|r| r.0 == name) {
            (r.1, r.2) = (value, from.to_string());
            return;
        }
        let at = self
            .settings
            .iter()
            .position(|r| before.contains(&r.0.as_str()))
            .unwrap_or(self.settings.len());
        self.settings.insert(at, (name.into(), value, from.into()));
    }

    /// The connection cap, with what follows from it: a derived memory budget is derived
    /// again, and the per-connection share's row shows the share in force.
    fn set_max_connections(&mut self, n: usize) {
        self.server.max_connections = n;
        self.set_row("max connections", n.to_string(), "flag");
        if self.memory_budget_derived {
            self.server.memory_budget = None;
            let b = self.server.memory_budget();
            self.server.memory_budget = Some(b);
            self.set_row("memory budget bytes", b.to_string(), "default");
        }
        self.refresh_share_row();
        self.refresh_drain_row();
    }

    /// The settings table's drain window: what the most connections take at the drain's rate
    /// (a server holding fewer finishes sooner), or the window as typed.
    pub fn refresh_drain_row(&mut self) {
        let s = &self.server;
        let over = s.drain_over.as_secs();
        let value = if s.drain_rate == 0 {
            over.to_string()
        } else {
            format!(
                "{} ({} closes/s, at most {over})",
                s.drain_most().as_secs_f64().ceil(),
                s.drain_rate
            )
        };
        if let Some(r) = self.settings.iter_mut().find(|r| r.0 == DRAIN_ROW) {
            r.1 = value;
        }
    }

    fn refresh_share_row(&mut self) {
        let share = self.server.conn_memory_share().to_string();
        if let Some(r) = self
            .settings
            .iter_mut()
            .find(|r| r.0 == "memory share per connection bytes")
        {
            r.1 = share;
        }
    }

    /// Server process `port`'s configuration under a `--processes` supervisor: the shared port
    /// with SO_REUSEPORT, an admin listener on a free loopback port (the supervisor serves the
    /// one named), its share of the connections, the I/O threads it gets, and its share of the
    /// server's memory budget (the budget is the server's, not each process's: N processes that
    /// each derived their own from the host's memory would promise it N times).
    pub fn for_supervised_process(
        &self,
        port: u16,
        max_connections: usize,
        workers: usize,
        memory_budget: usize,
    ) -> ServeConfig {
        let mut c = self.clone();
        c.port = port;
        c.reuseport = true;
        c.admin = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
        c.workers = workers;
        c.workers_follow_cores = false;
        c.set_row("io workers (0 = cores)", workers.to_string(), "flag");
        c.memory_budget_derived = false;
        c.server.memory_budget = Some(memory_budget);
        c.set_row("memory budget bytes", memory_budget.to_string(), "flag");
        c.set_max_connections(max_connections);
        c.replaced_drain_rate = self.server.drain_rate;
        // Each process paces its share: the node's reconnect rate stays the profile's.
        let share = max_connections as f64 / self.server.max_connections.max(1) as f64;
        if self.server.drain_rate > 0 {
            c.server.drain_rate = ((self.server.drain_rate as f64 * share).ceil() as u32).max(1);
            c.refresh_drain_row();
        }
        c
    }

    /// One of the self-test's servers when one process cannot hold its connections: `app` on a
    /// free loopback port, as `processes` processes holding `max_connections` in all, with an
    /// admin listener for the budget, the self-test's loopback sources exempt from the abuse
    /// limits, and the log settings a child's lines are read with (its stderr is the report's).
    pub fn for_self_test_child(
        &self,
        app: App,
        processes: usize,
        max_connections: usize,
    ) -> ServeConfig {
        let mut c = self.clone();
        c.bind = IpAddr::from([127, 0, 0, 1]);
        c.port = 0;
        c.admin = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
        c.processes = Processes::Count(processes as u64);
        c.processes_from = "--processes".into();
        c.log_format = LogFormat::Text;
        c.log_level = None;
        c.builtin.app = app;
        c.set_row("app", format!("{app:?}").to_lowercase(), "flag");
        if app != App::Echo {
            // The simulated work is echo's.
            c.builtin.handler = SimulatedWork::Echo;
            c.set_row("handler", "echo".into(), "flag");
        }
        exempt_self_test(&mut c.server.limits);
        let exempt = c
            .server
            .limits
            .exempt
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        // Where `serve --limit-exempt` puts the row: after the other limits.
        c.set_row_before(
            "limits exempt",
            exempt,
            "flag",
            &[
                "trusted proxies",
                "max pending handshakes",
                "descriptor reserve",
                "api key",
                "token auth",
                "max subscriptions",
                "memory budget bytes",
            ],
        );
        c.set_max_connections(max_connections);
        c
    }
}

/// The self-test's load comes from loopback: its own source addresses (127.0.0.0/8, spread
/// over many to get past the port range, and ::1) are exempt from every limit, so a host
/// tuned with per-address caps and rates does not fail its own proof. The limits themselves
/// are covered by tests/serving/limits.rs, not by the load test.
pub const SELF_TEST_EXEMPT: [&str; 2] = ["127.0.0.0/8", "::1"];

/// Exempt the self-test's own sources (see `SELF_TEST_EXEMPT`).
pub fn exempt_self_test(s: &mut embedded_server::abuse::LimitSettings) {
    use embedded_server::abuse::Cidr;
    for c in SELF_TEST_EXEMPT {
        let c = Cidr::parse(c).expect("a valid built-in network");
        if !s.exempt.contains(&c) {
            s.exempt.push(c);
        }
    }
}

#[cfg(test)]
mod tests;
