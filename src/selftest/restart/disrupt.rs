//! How the server is disrupted: the trigger a user names (`--restart-by`, `--restart-cmd`,
//! `--drain-url`), the command or drain request run for it, and the disruption run once,
//! [`RESTART_AT`](super::RESTART_AT) into the window.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// What the disruption does; run once per restart scenario. Its answer is what happened, in
/// words for the report, or why it failed.
pub type DisruptFn =
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<String, String>> + Send>> + Send + Sync;

/// How the server is disrupted (`--restart-by`, `--restart-cmd`, `--drain-url`).
#[derive(Clone)]
pub struct Disrupt {
    /// The trigger's name as the report shows it (`sigterm`, `command: systemctl restart ws`).
    pub by: String,
    pub run: Arc<DisruptFn>,
    /// How long the disruption goes on after it starts (a rolling restart's drains, one
    /// process after another), added to the window so the fleet has time to come back.
    pub lasts_secs: f64,
}

impl std::fmt::Debug for Disrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Disrupt").field("by", &self.by).finish()
    }
}

/// `--restart-by`: what `serve --self-test` does to the server it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestartBy {
    /// One server process: stopped as on SIGTERM (it drains: 1012 closes spread over its drain window) and
    /// a new one started on the same port. The default for one process.
    Sigterm,
    /// `--processes N`: SIGTERM to one server process; the supervisor starts another. The
    /// default for several processes.
    SigtermChild,
    /// `--processes N`: SIGHUP to the supervisor, for a supervisor that restarts its
    /// processes one by one on it (refused when the supervisor does not catch SIGHUP).
    Sighup,
    /// `POST /api/drain` on the server's admin listener (a server that drains on it).
    DrainApi,
    /// `command:CMD`: `sh -c CMD`, as `--restart-cmd`.
    Command(String),
}

impl std::str::FromStr for RestartBy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "sigterm" => RestartBy::Sigterm,
            "sigterm-child" => RestartBy::SigtermChild,
            "sighup" => RestartBy::Sighup,
            "drain-api" => RestartBy::DrainApi,
            _ => match s.strip_prefix("command:") {
                Some(c) if !c.trim().is_empty() => RestartBy::Command(c.to_string()),
                _ => {
                    return Err(format!(
                        "'{s}': give sigterm, sigterm-child, sighup, drain-api or command:CMD (e.g. 'command:systemctl restart ws')"
                    ))
                }
            },
        })
    }
}

/// The restart flags as given (`--restart-by`, `--restart-cmd`, `--drain-url`).
#[derive(Debug, Clone, Default)]
pub struct RestartAsk {
    pub by: Option<RestartBy>,
    pub drain_url: Option<String>,
    /// Set by `serve --self-test` once its servers run (against its own server); `selftest`
    /// builds it from `by` and `drain_url` ([`RestartAsk::external`]).
    pub disrupt: Option<Disrupt>,
}

impl RestartAsk {
    pub fn any_set(&self) -> bool {
        self.by.is_some() || self.drain_url.is_some()
    }

    /// The disruption against a server this run did not start: a command or a drain URL.
    pub fn external(&self) -> Result<Option<Disrupt>, String> {
        match (&self.by, &self.drain_url) {
            (Some(_), Some(_)) => Err(
                "--drain-url and --restart-by/--restart-cmd each say how to restart the server: give one"
                    .into(),
            ),
            (Some(RestartBy::Command(c)), None) => Ok(Some(Disrupt::command(c))),
            (Some(by), None) => Err(format!(
                "--restart-by {}: only `wstune serve --self-test` can signal the server it started; against another server give --restart-cmd 'CMD' (e.g. 'systemctl restart ws') or --drain-url http://ADMIN/api/drain",
                by.name()
            )),
            (None, Some(u)) => Disrupt::drain_url(u, crate::host::take_env(ENV_API_KEY).ok().flatten()).map(Some),
            (None, None) => Ok(None),
        }
    }
}

/// The admin API key `--drain-url` sends, from the environment like `serve`'s.
const ENV_API_KEY: &str = "WSTUNE_API_KEY";

impl RestartBy {
    pub fn name(&self) -> String {
        match self {
            RestartBy::Sigterm => "sigterm".into(),
            RestartBy::SigtermChild => "sigterm-child".into(),
            RestartBy::Sighup => "sighup".into(),
            RestartBy::DrainApi => "drain-api".into(),
            RestartBy::Command(c) => format!("command:{c}"),
        }
    }
}

/// How long a `--restart-cmd` may run before the restart counts as failed.
const COMMAND_BUDGET: Duration = Duration::from_secs(120);

impl Disrupt {
    /// `--restart-cmd CMD` (also `--restart-by command:CMD`): `sh -c CMD`, which must exit 0
    /// within [`COMMAND_BUDGET`].
    pub fn command(cmd: &str) -> Disrupt {
        let cmd = cmd.to_string();
        Disrupt {
            lasts_secs: 0.0,
            by: format!("command: {cmd}"),
            run: Arc::new(move || {
                let cmd = cmd.clone();
                Box::pin(async move {
                    let mut c = tokio::process::Command::new("sh");
                    c.arg("-c")
                        .arg(&cmd)
                        .stdin(std::process::Stdio::null())
                        .kill_on_drop(true);
                    let out = tokio::time::timeout(COMMAND_BUDGET, c.status())
                        .await
                        .map_err(|_| {
                            format!(
                                "`{cmd}` was still running after {} s; make the restart command \
                                 return once the restart is under way",
                                COMMAND_BUDGET.as_secs()
                            )
                        })?
                        .map_err(|e| format!("cannot run `sh -c {cmd}`: {e}"))?;
                    if out.success() {
                        Ok(format!("`{cmd}` ran"))
                    } else {
                        Err(format!(
                            "`{cmd}` failed ({out}); check it restarts the server when run by hand"
                        ))
                    }
                })
            }),
        }
    }

    /// `--drain-url URL` (and `--restart-by drain-api`): `POST URL` (http:// only), answered
    /// with a 2xx (a drain API answers 202 Accepted), the key sent as a bearer token.
    pub fn drain_url(url: &str, key: Option<String>) -> Result<Disrupt, String> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("--drain-url {url}: give an http:// URL of the server's admin listener, like http://127.0.0.1:9090/api/drain")
        })?;
        let (hostport, path) = match rest.find('/') {
            Some(i) => (rest[..i].to_string(), rest[i..].to_string()),
            None => (rest.to_string(), "/".to_string()),
        };
        let hostport = if hostport.contains(':') {
            hostport
        } else {
            format!("{hostport}:80")
        };
        let url = url.to_string();
        Ok(Disrupt {
            lasts_secs: 0.0,
            by: format!("drain: POST {url}"),
            run: Arc::new(move || {
                let (hostport, path, url, key) =
                    (hostport.clone(), path.clone(), url.clone(), key.clone());
                Box::pin(async move { post(&hostport, &path, key.as_deref(), &url).await })
            }),
        })
    }
}

/// A bodiless HTTP/1.0 POST; Ok with the status line on a 2xx.
async fn post(hostport: &str, path: &str, key: Option<&str>, url: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let go = async {
        let mut s = tokio::net::TcpStream::connect(hostport)
            .await
            .map_err(|e| format!("POST {url}: cannot connect: {e}"))?;
        let auth = key
            .map(|k| format!("Authorization: Bearer {k}\r\n"))
            .unwrap_or_default();
        s.write_all(
            format!("POST {path} HTTP/1.0\r\nHost: {hostport}\r\n{auth}Content-Length: 0\r\n\r\n")
                .as_bytes(),
        )
        .await
        .map_err(|e| format!("POST {url}: {e}"))?;
        let mut head = vec![0u8; 1024];
        let mut n = 0;
        while n < head.len() {
            match s.read(&mut head[n..]).await {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) => return Err(format!("POST {url}: {e}")),
            }
            if head[..n].contains(&b'\n') {
                break;
            }
        }
        let text = String::from_utf8_lossy(&head[..n]);
        let status = text.lines().next().unwrap_or("").trim().to_string();
        match status.split_whitespace().nth(1) {
            Some(c) if c.starts_with('2') => Ok(format!("POST {url}: {status}")),
            _ => Err(format!(
                "POST {url} answered '{status}', not 2xx: is it the server's drain endpoint (and \
                 its API key set)?"
            )),
        }
    };
    tokio::time::timeout(Duration::from_secs(10), go)
        .await
        .map_err(|_| format!("POST {url}: no answer in 10 s"))?
}

/// The disruption as it happened.
#[derive(Debug, Clone)]
pub struct Disrupted {
    pub by: String,
    pub at_unix_ms: u64,
    pub outcome: Result<String, String>,
}

/// Run `d` once, [`RESTART_AT`] from now.
pub fn disrupt_later(d: Disrupt) -> tokio::task::JoinHandle<Disrupted> {
    tokio::spawn(async move {
        tokio::time::sleep(super::RESTART_AT).await;
        let at_unix_ms = crate::selftest::shard::unix_ms();
        let outcome = (d.run)().await;
        Disrupted {
            by: d.by,
            at_unix_ms,
            outcome,
        }
    })
}
