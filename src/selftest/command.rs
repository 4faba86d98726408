//! The user's own server (`--command "PROGRAM ARGS"`): a program built on `embedded-server`,
//! started with the tuned configuration in its environment (see `embedded_server::wstune`),
//! waited for until it listens, measured by pid, and always stopped with its whole process
//! group: at the end, on an error, on Ctrl-C, and (Linux: a reaper process, see
//! `host::process_group`) when wstune is killed, however.

use crate::host::process_group::Group;
use anyhow::{bail, Context, Result};
use embedded_server::ServerConfig;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

/// How long the program may take to listen: a debug build of an application starting its
/// runtime and pool takes well under a second; 30 s covers a loaded CI machine without letting
/// a program that never listens hold the run for long. `WSTUNE_COMMAND_START_SECS` changes it
/// (an application that loads data before it listens; tests).
pub const START_BUDGET: Duration = Duration::from_secs(30);

fn start_budget() -> Result<Duration> {
    match std::env::var("WSTUNE_COMMAND_START_SECS") {
        Err(_) => Ok(START_BUDGET),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(s) if (1..=3600).contains(&s) => Ok(Duration::from_secs(s)),
            _ => bail!("WSTUNE_COMMAND_START_SECS={v:?}: give the seconds your server may take to listen, 1..=3600"),
        },
    }
}

/// Lines of the program's output kept for an error message.
const TAIL_LINES: usize = 20;

/// `--command`'s words: POSIX shell quoting (no shell runs it), at least a program.
pub fn parse(command: &str) -> Result<Vec<String>> {
    match shlex::split(command) {
        Some(w) if !w.is_empty() => Ok(w),
        Some(_) => bail!("--command is empty: give the program that runs your server and its arguments, e.g. --command \"./target/release/my-server --flag\""),
        None => bail!("--command {command:?}: unbalanced quotes or a trailing backslash; quote as in a shell"),
    }
}

/// A running user server; dropping it kills the process group.
pub struct UserServer {
    /// The process wstune started: on Linux the reaper, which leads the process group and
    /// exits as the program does, with its status; elsewhere the program itself.
    child: tokio::process::Child,
    /// Its process group, which every stop reaches.
    group: Group,
    /// The program's own pid (measured).
    pub pid: u32,
    pub addr: SocketAddr,
    pub admin: Option<SocketAddr>,
    /// The command as given, for the report and for messages.
    pub program: String,
    config_file: PathBuf,
    tail: Arc<Mutex<VecDeque<String>>>,
    stopped: bool,
}

/// A loopback port free now, held (the listener) until just before the program starts, so
/// the WS and admin ports are always two different ones. The program binds it moments later;
/// another process taking it in between makes the program fail to bind, which
/// `wait_listening` and the checks after it report (it exits; or its admin /metrics does not
/// answer as an embedded-server's does).
fn free_port() -> Result<std::net::TcpListener> {
    std::net::TcpListener::bind("127.0.0.1:0").context("cannot find a free port on 127.0.0.1")
}

/// The longest line of the program's output kept whole; the rest of a longer line (or of
/// output that never ends a line) is cut, so a program printing without newlines cannot make
/// wstune buffer without bound.
const MAX_LINE: usize = 4096;

/// Pass the program's output on to our stderr line by line, keeping the last lines for an error
/// message. Bytes that are not UTF-8 are shown lossily, never a reason to stop: the pipe's read
/// end stays open until the program closes its end, so the program never dies of SIGPIPE because
/// of what it printed. A read error drains the rest into a sink.
async fn read_output(
    stream: Box<dyn tokio::io::AsyncRead + Unpin + Send>,
    name: String,
    tail: Arc<Mutex<VecDeque<String>>>,
) {
    let mut reader = tokio::io::BufReader::new(stream);
    let mut line = Vec::with_capacity(256);
    loop {
        // Read one line, keeping at most MAX_LINE bytes of it.
        line.clear();
        let mut cut = false;
        let mut eof = false;
        loop {
            let buf = match reader.fill_buf().await {
                Ok(b) => b,
                Err(_) => {
                    let _ = tokio::io::copy(&mut reader, &mut tokio::io::sink()).await;
                    return;
                }
            };
            if buf.is_empty() {
                eof = true;
                break;
            }
            let (take, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            let room = MAX_LINE.saturating_sub(line.len());
            line.extend_from_slice(&buf[..take.min(room)]);
            cut |= take > room;
            reader.consume(take);
            if done {
                break;
            }
        }
        if line.is_empty() && eof {
            return;
        }
        while matches!(line.last(), Some(b'\n' | b'\r')) {
            line.pop();
        }
        let mut l = String::from_utf8_lossy(&line).into_owned();
        if cut {
            l.push_str(" [line cut]");
        }
        eprintln!("[{name}] {l}");
        let mut t = tail.lock().unwrap();
        if t.len() == TAIL_LINES {
            t.pop_front();
        }
        t.push_back(l);
        drop(t);
        if eof {
            return;
        }
    }
}

/// Config files of wstune processes that are gone (killed while their program started).
fn remove_stale_configs() {
    for (rest, path) in crate::host::temp::named(CONFIG_PREFIX) {
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(crate::host::process::gone) {
            crate::host::temp::remove(&path);
        }
    }
}

/// The name of the configuration files handed to a user's program, before `PID-PORT.json`.
const CONFIG_PREFIX: &str = "wstune-server-config-";

impl UserServer {
    /// Start `words` with `config` handed over; with `admin`, also an admin listener (whose
    /// `/metrics` carries the offload pool's timings). Waits (bounded) until the program
    /// accepts connections on each address.
    pub async fn start(words: &[String], config: &ServerConfig, admin: bool) -> Result<UserServer> {
        let program = words.join(" ");
        let budget = start_budget()?;
        let held_ws = free_port()?;
        let held_admin = if admin { Some(free_port()?) } else { None };
        let addr = held_ws.local_addr()?;
        let admin = held_admin.as_ref().map(|l| l.local_addr()).transpose()?;
        assert_ne!(
            Some(addr),
            admin,
            "two listeners held at once have two ports"
        );
        let config_file = crate::host::temp::path(&format!(
            "{CONFIG_PREFIX}{}-{}.json",
            std::process::id(),
            addr.port()
        ));
        remove_stale_configs();
        crate::output::write_atomic(&config_file, &embedded_server::wstune::to_json(config))?;
        let mut cmd = tokio::process::Command::new(&words[0]);
        cmd.args(&words[1..])
            .env(embedded_server::wstune::LISTEN_VAR, addr.to_string())
            .env(embedded_server::wstune::CONFIG_VAR, &config_file)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        match admin {
            Some(a) => cmd.env(embedded_server::wstune::ADMIN_VAR, a.to_string()),
            None => cmd.env_remove(embedded_server::wstune::ADMIN_VAR),
        };
        let prepared = crate::host::process_group::prepare(&mut cmd)
            .context("--command: cannot create the reaper's socket pair")?;
        drop((held_ws, held_admin));
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                crate::host::temp::remove(&config_file);
                bail!("--command: cannot start `{program}`: {e}");
            }
        };
        let group = match crate::host::process_group::started(prepared, &child) {
            Ok(g) => g,
            Err(e) => {
                crate::host::temp::remove(&config_file);
                bail!("--command: cannot start `{program}`: {e}");
            }
        };
        let pid = group.pid;
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        // Its output goes on to our stderr (stdout carries wstune's report), prefixed with the
        // program's name; the last lines are kept for an error message.
        let name = std::path::Path::new(&words[0])
            .file_name()
            .map_or_else(|| words[0].clone(), |n| n.to_string_lossy().into_owned());
        let out = child.stdout.take().expect("piped stdout");
        let err = child.stderr.take().expect("piped stderr");
        for stream in [
            Box::new(out) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
            Box::new(err),
        ] {
            let (tail, name) = (tail.clone(), name.clone());
            tokio::spawn(read_output(stream, name, tail));
        }
        let mut server = UserServer {
            child,
            group,
            pid,
            addr,
            admin,
            program,
            config_file,
            tail,
            stopped: false,
        };
        let listening = match server.wait_listening(budget).await {
            Ok(()) => server.check_ours().await,
            Err(e) => Err(e),
        };
        // Read at start: it has no use once the program listens, and a SIGKILLed wstune must
        // not leave it behind for long (`remove_stale_configs` sweeps what a kill during the
        // start left).
        crate::host::temp::remove(&server.config_file);
        listening?;
        Ok(server)
    }

    fn tail(&self) -> String {
        let t = self.tail.lock().unwrap();
        if t.is_empty() {
            "  (it printed nothing)".into()
        } else {
            t.iter()
                .map(|l| format!("  | {l}\n"))
                .collect::<String>()
                .trim_end()
                .into()
        }
    }

    /// Poll until every address accepts a connection, the program exits, or the budget ends.
    async fn wait_listening(&mut self, budget: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + budget;
        let mut waiting: Vec<SocketAddr> = std::iter::once(self.addr).chain(self.admin).collect();
        while !waiting.is_empty() {
            if let Some(status) = self.child.try_wait()? {
                // Let the output readers catch up with its last words.
                tokio::time::sleep(Duration::from_millis(100)).await;
                self.stopped = true;
                bail!(
                    "--command: `{}` exited ({status}) before it listened on {}; its last output:\n{}\n  \
                     a server run by wstune must serve on the address in WSTUNE_LISTEN (with \
                     embedded-server: embedded_server::wstune::Launch::from_env)",
                    self.program,
                    self.addr,
                    self.tail()
                );
            }
            if tokio::time::Instant::now() >= deadline {
                let waited: Vec<String> = waiting.iter().map(|a| a.to_string()).collect();
                let msg =
                    format!(
                    "--command: `{}` did not listen on {} within {} s; its last output:\n{}\n  \
                     a server run by wstune must serve on WSTUNE_LISTEN{} (with embedded-server: \
                     embedded_server::wstune::Launch::from_env does both)",
                    self.program,
                    waited.join(" and "),
                    budget.as_secs(),
                    self.tail(),
                    if self.admin.is_some() { " and its /metrics on WSTUNE_ADMIN" } else { "" },
                );
                self.kill().await;
                bail!(msg);
            }
            let a = waiting[0];
            if let Ok(Ok(_)) = tokio::time::timeout(
                Duration::from_millis(200),
                tokio::net::TcpStream::connect(a),
            )
            .await
            {
                waiting.remove(0);
                continue;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// The addresses that accepted are the program's: it is still running a moment after
    /// (one that lost its port to another process exits with a bind error), and its admin
    /// listener answers /metrics with embedded-server's series.
    async fn check_ours(&mut self) -> Result<()> {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Some(e) = self.exited() {
            self.stopped = true;
            bail!("--command: {e}");
        }
        if let Some(admin) = self.admin {
            let body = crate::selftest::server::fetch_metrics(admin)
                .await
                .unwrap_or_default();
            if !body.contains("ws_") {
                let msg = format!(
                    "--command: {} accepts connections but does not answer /metrics as \
                     embedded-server does (another process on the port, or the program does not \
                     serve its admin on WSTUNE_ADMIN); its last output:\n{}",
                    admin,
                    self.tail()
                );
                self.kill().await;
                bail!(msg);
            }
        }
        Ok(())
    }

    /// Whether the program is still running (it may crash under load).
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!(
                "`{}` exited ({status}); its last output:\n{}",
                self.program,
                self.tail()
            )),
            _ => None,
        }
    }

    /// SIGKILL to the whole group, and reap the program.
    async fn kill(&mut self) {
        self.group.kill();
        let _ = self.child.kill().await;
        self.stopped = true;
    }

    /// SIGTERM to the process group (a graceful shutdown, bounded to 5 s), then SIGKILL to
    /// whatever of the group is left.
    pub async fn stop(mut self) {
        self.group.terminate(&mut self.child);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        self.kill().await;
    }
}

impl Drop for UserServer {
    fn drop(&mut self) {
        // An error or Ctrl-C dropped it mid-run: nothing of the group may outlive us. Once
        // stopped (the leader reaped), its pid may be reused and is left alone; what the
        // group had started was killed with it.
        if !self.stopped {
            self.group.kill();
            let _ = self.child.start_kill();
        }
        crate::host::temp::remove(&self.config_file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_split_like_a_shell_without_one() {
        assert_eq!(
            parse(r#"./srv --name "a b" 'c d'"#).unwrap(),
            ["./srv", "--name", "a b", "c d"]
        );
        assert!(parse("  ").unwrap_err().to_string().contains("empty"));
        assert!(parse("srv \"open")
            .unwrap_err()
            .to_string()
            .contains("quotes"));
    }
}
