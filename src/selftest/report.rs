//! The self-test's outputs: the verdict against the profile's targets, a table for people,
//! JSON for machines, and a self-contained HTML page with inline SVG charts.

use super::{Scenario, ScenarioReport};
use serde::Serialize;

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize)]
pub struct Targets {
    pub profile: String,
    /// The profile's connection count: a run is a proof for the profile only at this size.
    pub connections: usize,
    pub p99_ms: f64,
    pub rate_per_client: f64,
    pub payload_bytes: usize,
    /// The profile's memory estimate per connection (check's `estimate.*`), to hold against
    /// what the idle scenario measured.
    pub estimate: MemoryEstimate,
    /// The profile's CPU estimate for its message rate, to hold against what echo-rate
    /// measured.
    pub cpu: CpuTarget,
}

/// The profile's capacity estimate (`estimate.cores_for_rate`): its message rate at its cost
/// per message.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct CpuTarget {
    /// The profile's connections x `selftest.rate_per_client`.
    pub messages_per_sec: u64,
    /// `server.cpu_ns_per_message`.
    pub ns_per_message: u64,
    /// Cores that rate needs at that cost, each 70 % busy.
    pub cores: u64,
}

impl CpuTarget {
    pub fn of(p: &crate::profile::Profile) -> CpuTarget {
        let e = p.cpu_estimate();
        CpuTarget {
            messages_per_sec: e.messages_per_sec,
            ns_per_message: e.ns_per_message,
            cores: e.cores,
        }
    }
}

/// The server's CPU per message as echo-rate measured it, and the cores the profile's message
/// rate needs at that cost beside the profile's own estimate.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CapacityReport {
    /// The scenario measured (echo-rate, else deflate).
    pub scenario: String,
    pub measured_us_per_message: f64,
    /// The rate it was measured at (msgs/s offered in the scenario).
    pub measured_messages_per_sec: f64,
    pub profile_us_per_message: f64,
    pub messages_per_sec: u64,
    /// Cores the profile's rate needs at the measured cost (70 % busy each).
    pub cores_at_measured: u64,
    /// The profile's estimate (`estimate.cores_for_rate`).
    pub cores_at_profile: u64,
    pub host_cores: usize,
}

impl CapacityReport {
    /// From echo-rate (or deflate, when echo-rate did not run) if the server's CPU was read.
    pub fn of(scenarios: &[ScenarioReport], t: &CpuTarget, host_cores: usize) -> Option<Self> {
        let s = [Scenario::EchoRate, Scenario::Deflate]
            .iter()
            .find_map(|k| scenarios.iter().find(|s| s.scenario == *k))?;
        let us = s.server_cpu_us_per_msg?;
        Some(CapacityReport {
            scenario: s.scenario.name().to_string(),
            measured_us_per_message: us,
            measured_messages_per_sec: s.offered_rate.unwrap_or(s.achieved_rate),
            profile_us_per_message: t.ns_per_message as f64 / 1000.0,
            messages_per_sec: t.messages_per_sec,
            cores_at_measured: crate::profile::CpuEstimate::cores_at(
                t.messages_per_sec as f64,
                us * 1000.0,
            ),
            cores_at_profile: t.cores,
            host_cores,
        })
    }

    /// One line for people.
    pub fn line(&self) -> String {
        // A message that arrives alone pays its wake-up alone: measured far below the
        // profile's rate, the cost per message is an upper bound for the busy server.
        let low = self.measured_messages_per_sec * 2.0 < self.messages_per_sec as f64;
        format!(
            "capacity: the server spent {} us of CPU per message in {} at {} msgs/s (the profile \
             budgets {} us, server.cpu_ns_per_message): the profile's {} msgs/s need {} core(s) at \
             that cost, each 70% busy ({} at the profile's); this host has {}{}\n",
            num(self.measured_us_per_message),
            self.scenario,
            num(self.measured_messages_per_sec),
            num(self.profile_us_per_message),
            num(self.messages_per_sec as f64),
            self.cores_at_measured,
            self.cores_at_profile,
            self.host_cores,
            if low {
                format!(
                    ". Measured at {:.1}% of the profile's rate, where each message more often \
                     wakes the server on its own: an upper bound for the busier server",
                    100.0 * self.measured_messages_per_sec / self.messages_per_sec.max(1) as f64
                )
            } else {
                String::new()
            }
        )
    }
}

/// The parts of the profile's memory estimate that an idle connection can be measured against.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct MemoryEstimate {
    /// `estimate.server_bytes_per_conn`: the server's state for an idle connection.
    pub server_bytes_per_conn: u64,
    /// `estimate.kernel_bytes_per_conn`: one socket's kernel objects.
    pub kernel_bytes_per_socket: u64,
    /// `estimate.bytes_per_conn`: everything, deflate and buffers in flight included.
    pub bytes_per_conn: u64,
}

impl MemoryEstimate {
    pub fn of(p: &crate::profile::Profile) -> MemoryEstimate {
        let e = p.estimate();
        MemoryEstimate {
            server_bytes_per_conn: e.server_bytes_per_conn,
            kernel_bytes_per_socket: e.kernel_bytes_per_conn,
            bytes_per_conn: e.bytes_per_conn(),
        }
    }
}

/// How far the estimate may be from the measurement before it must change (25%).
pub const ESTIMATE_TOLERANCE: f64 = 0.25;

/// One estimated figure held against its measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Compared {
    pub what: &'static str,
    pub estimate_bytes: u64,
    pub measured_bytes: f64,
    /// (estimate - measured) / measured: positive when the estimate is conservative.
    pub error: f64,
    pub within_tolerance: bool,
}

/// Memory for the idle connections, measured, beside the profile's estimate.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryReport {
    pub conns: usize,
    /// Server RSS growth while connecting / connections (all server processes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_rss_per_conn_bytes: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_rss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<super::KernelMemory>,
    pub compared: Vec<Compared>,
}

impl MemoryReport {
    /// From the idle scenario, if it ran and anything was measured.
    pub fn of(scenarios: &[ScenarioReport], e: &MemoryEstimate) -> Option<MemoryReport> {
        let idle = scenarios.iter().find(|s| s.scenario == Scenario::Idle)?;
        let rss = idle.server.as_ref().and_then(|s| s.rss_per_conn_bytes);
        let kernel = idle.kernel.clone();
        if rss.is_none() && kernel.is_none() {
            return None;
        }
        let mut compared = Vec::new();
        let mut cmp = |what: &'static str, est: u64, measured: Option<f64>| {
            if let Some(m) = measured.filter(|m| *m > 0.0) {
                let error = (est as f64 - m) / m;
                compared.push(Compared {
                    what,
                    estimate_bytes: est,
                    measured_bytes: m,
                    error,
                    within_tolerance: error.abs() <= ESTIMATE_TOLERANCE,
                });
            }
        };
        cmp(
            "server bytes per idle connection",
            e.server_bytes_per_conn,
            rss,
        );
        cmp(
            "kernel bytes per socket",
            e.kernel_bytes_per_socket,
            kernel.as_ref().and_then(|k| k.slab_bytes_per_socket),
        );
        Some(MemoryReport {
            conns: idle.conns_connected,
            server_rss_per_conn_bytes: rss,
            server_rss_bytes: idle.server.as_ref().and_then(|s| s.rss_after_bytes),
            kernel,
            compared,
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub scenario: Scenario,
    pub what: String,
    pub ok: bool,
    pub detail: String,
    /// The check counts toward the verdict: false when it rests on timing and its window was
    /// too noisy to judge (its result is still shown, never dropped).
    pub judged: bool,
}

/// Checks a busy host cannot produce: a server that closed connections did so whatever else
/// ran. They are judged on any window.
fn noise_proof(what: &str) -> bool {
    what == "no server closes"
}

#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// The whole verdict, the exit code's: for `serve --self-test` the load passed at the
    /// profile's full connection count and the host check passed; for `selftest` the load.
    pub pass: bool,
    /// Every load check below passed (at `conns` connections).
    pub load_pass: bool,
    /// The host check passed (None: not part of this verdict, `selftest --url`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_pass: Option<bool>,
    /// The scenarios ran at the profile's connection count.
    pub full_size: bool,
    /// One line: which part passed, which failed, at how many connections.
    pub summary: String,
    /// The load could not be judged: a scenario's measurement was too noisy (also after one
    /// re-measure) and no judged check missed. Never a PASS, never a MISS.
    pub too_noisy: bool,
    /// What was too noisy, where ("other processes 98 % of a core in echo-rate").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub noise: Option<String>,
    /// The run would have been judged but for the noise (`too_noisy`, and nothing else
    /// failed): exit code 4, NOT PROVEN.
    pub inconclusive: bool,
    pub checks: Vec<Check>,
}

/// What `check` said about this host before a `serve --self-test`: half of its verdict.
#[derive(Debug, Clone, Serialize)]
pub struct HostCheck {
    pub profile: String,
    pub failed: Vec<String>,
    pub warnings: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub url: String,
    /// The user's server the run measured (`--command`), as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// Scenarios left out, and why (a user's server that does not do what they need).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub skipped: Vec<String>,
    pub cores: usize,
    pub targets: Targets,
    /// Connections the scenarios ran with.
    pub conns: usize,
    /// Where the run was made smaller than the profile, and why.
    pub scaled_down: Vec<String>,
    /// Why the rate scenarios offer less per connection than the profile says (CPU budget).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_note: Option<String>,
    /// Server processes the self-test's server ran as.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_processes: Option<usize>,
    /// Memory for the idle connections, measured, against the profile's estimate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryReport>,
    /// The server's CPU per message, measured, and the cores the profile's rate needs at it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityReport>,
    /// The servers' memory budget over the run: what clients made them hold at most, against
    /// the budget (the embedded server's, or a user's that serves its /metrics).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_budget: Option<BudgetReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_check: Option<HostCheck>,
    pub scenarios: Vec<ScenarioReport>,
    pub verdict: Verdict,
}

/// The memory budget of the servers a self-test ran against, summed over them (the echo and
/// broadcast servers, and every process of a supervised one): from their /metrics, or from an
/// in-process server's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BudgetReport {
    /// The budgets, in all.
    pub limit_bytes: u64,
    /// The most each server held at once, summed (an upper bound on what they held together).
    pub peak_bytes: u64,
    /// Connections closed with 1013 (or subscribes refused) because the budget was full.
    pub budget_closes: u64,
    /// Connections closed with 1009 for passing their own share.
    pub share_closes: u64,
}

impl BudgetReport {
    /// Read from a server's Prometheus text; None when it has no budget series (an older
    /// server, or another program).
    pub fn from_metrics(text: &str) -> Option<BudgetReport> {
        let mut r = BudgetReport::default();
        let mut seen = false;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(v) = value.parse::<f64>() else {
                continue;
            };
            let v = v as u64;
            let series = name.split('{').next().unwrap_or(name);
            match series {
                "ws_memory_budget_bytes" => {
                    r.limit_bytes += v;
                    seen = true;
                }
                "ws_memory_budget_peak_bytes" => r.peak_bytes += v,
                "ws_memory_budget_closes_total" => r.budget_closes += v,
                "ws_memory_share_closes_total" => r.share_closes += v,
                _ => {}
            }
        }
        seen.then_some(r)
    }

    /// The report's line.
    pub fn line(&self) -> String {
        let pct = if self.limit_bytes > 0 {
            format!(
                " ({:.1}%)",
                self.peak_bytes as f64 * 100.0 / self.limit_bytes as f64
            )
        } else {
            String::new()
        };
        format!(
            "memory budget: clients made the server hold at most {} of {}{pct}; {} closed \
             over the budget (1013), {} past their share (1009)\n",
            bytes(self.peak_bytes as f64),
            bytes(self.limit_bytes as f64),
            self.budget_closes,
            self.share_closes
        )
    }
}

/// Two servers' budgets as one.
impl std::ops::Add for BudgetReport {
    type Output = BudgetReport;
    fn add(self, o: BudgetReport) -> BudgetReport {
        BudgetReport {
            limit_bytes: self.limit_bytes + o.limit_bytes,
            peak_bytes: self.peak_bytes + o.peak_bytes,
            budget_closes: self.budget_closes + o.budget_closes,
            share_closes: self.share_closes + o.share_closes,
        }
    }
}

/// Judge the scenarios against the targets. Every scenario must finish without errors or
/// server-side closes; the echo-rate ones must also deliver 95% of the offered rate within
/// the profile's p99; broadcast must reach every subscriber in every round.
///
/// A timed scenario (`Scenario::timed`) whose window was too noisy is not judged (unless
/// `accept_noise`): its checks are shown but decide nothing, except the noise-proof ones.
/// The load then passes only if every judged check passed and nothing went unjudged; it
/// misses if any judged check missed; otherwise it is too noisy to tell.
pub fn verdict(scenarios: &[ScenarioReport], t: &Targets, accept_noise: bool) -> Verdict {
    let mut checks = Vec::new();
    let mut noisy = Vec::new();
    for s in scenarios {
        let quiet = accept_noise
            || !s.scenario.timed()
            || !s.disturbance.as_ref().is_some_and(|d| d.too_noisy);
        if !quiet {
            let why = s
                .disturbance
                .as_ref()
                .and_then(|d| d.why.clone())
                .unwrap_or_default();
            noisy.push(format!("{why} in {}", s.scenario.name()));
        }
        let mut add = |what: &str, ok: bool, detail: String| {
            checks.push(Check {
                scenario: s.scenario,
                what: what.to_string(),
                ok,
                detail,
                judged: quiet || noise_proof(what),
            })
        };
        add(
            "finished",
            s.incomplete.is_none(),
            s.incomplete
                .clone()
                .unwrap_or_else(|| "ran to the end".into()),
        );
        add(
            "no errors",
            s.errors == 0,
            match &s.first_error {
                Some(e) if s.errors > 0 => format!("{} errors; first: {e}", s.errors),
                _ => format!("{} errors", s.errors),
            },
        );
        add(
            "no server closes",
            s.disconnects == 0,
            if s.close_codes.is_empty() {
                format!("{} connections closed by the server", s.disconnects)
            } else {
                format!(
                    "{} connections closed by the server (codes {:?})",
                    s.disconnects, s.close_codes
                )
            },
        );
        match s.scenario {
            Scenario::EchoRate | Scenario::Deflate => {
                add(
                    "p99 latency",
                    s.latency_ms.count > 0 && s.latency_ms.p99 <= t.p99_ms,
                    format!("{:.2} ms (target {} ms)", s.latency_ms.p99, t.p99_ms),
                );
                add(
                    "every message answered",
                    s.lost == 0,
                    format!("{} messages never echoed by the end of the run", s.lost),
                );
                let offered = s.offered_rate.unwrap_or(0.0);
                add(
                    "throughput",
                    s.achieved_rate >= offered * 0.95,
                    format!("{:.0} of {:.0} msgs/s offered", s.achieved_rate, offered),
                );
            }
            Scenario::Broadcast => {
                let want = s.conns_connected as u64 * s.broadcast_rounds.unwrap_or(0) as u64;
                add(
                    "every subscriber, every round",
                    want > 0 && s.received >= want,
                    format!("{} of {want} deliveries", s.received),
                );
            }
            _ => {}
        }
    }
    let judged_miss = checks.iter().any(|c| c.judged && !c.ok);
    let too_noisy = !noisy.is_empty() && !judged_miss;
    let load_pass = !checks.is_empty() && !judged_miss && noisy.is_empty();
    Verdict {
        pass: load_pass,
        load_pass,
        host_pass: None,
        full_size: false,
        summary: String::new(),
        too_noisy,
        noise: (!noisy.is_empty()).then(|| noisy.join("; ")),
        inconclusive: false,
        checks,
    }
}

/// Thousands separated by commas: 100,000.
pub fn count(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Turn the load verdict into the run's: with `host` (`serve --self-test`) PASS only when the
/// load passed at the profile's full count and the host check passed; without it (`selftest`
/// against a server of its own) the load decides, but the line still says when the count was
/// below the profile's, so a small run never reads as a proof for the profile.
pub fn combine(r: &mut Report, host_required: bool) {
    let v = &mut r.verdict;
    let want = r.targets.connections;
    // Every scenario, not only the headline count: deflate may run fewer (its own memory).
    let smallest = r
        .scenarios
        .iter()
        .map(|s| s.conns_requested)
        .chain([r.conns])
        .min()
        .unwrap_or(r.conns);
    v.full_size = smallest >= want;
    let noise = match (&v.noise, v.too_noisy) {
        (Some(n), true) => format!(", host too noisy to judge it ({n})"),
        _ => String::new(),
    };
    let load = format!(
        "load: {} at {}{noise}",
        if v.load_pass {
            "PASS"
        } else if v.too_noisy {
            "NOT PROVEN"
        } else {
            "MISS"
        },
        if v.full_size {
            format!("{} connections", count(r.conns))
        } else if r.conns >= want {
            let short: Vec<String> = r
                .scenarios
                .iter()
                .filter(|s| s.conns_requested < want)
                .map(|s| format!("{} at {}", s.scenario.name(), count(s.conns_requested)))
                .collect();
            format!(
                "{} connections, but {} (not a proof for profile {})",
                count(r.conns),
                short.join(", "),
                r.targets.profile
            )
        } else {
            format!(
                "{} of the profile's {} connections ({}not a proof for profile {})",
                count(r.conns),
                count(want),
                if r.scaled_down.is_empty() {
                    ""
                } else {
                    "scaled down, see above: "
                },
                r.targets.profile
            )
        }
    );
    if !host_required {
        v.pass = v.load_pass;
        v.inconclusive = v.too_noisy;
        let word = if v.pass {
            "PASS"
        } else if v.too_noisy {
            "NOT PROVEN"
        } else {
            "MISS"
        };
        v.summary = format!("{word}: {load}");
        return;
    }
    let host_ok = r.host_check.as_ref().is_some_and(|h| h.failed.is_empty());
    v.host_pass = Some(host_ok);
    let host = match &r.host_check {
        Some(h) if h.failed.is_empty() => format!("host: READY for {}", h.profile),
        Some(h) => format!(
            "host: NOT READY for {}, {} failed check{}",
            h.profile,
            h.failed.len(),
            if h.failed.len() == 1 { "" } else { "s" }
        ),
        None => "host: NOT CHECKED (the host could not be read)".into(),
    };
    v.pass = v.load_pass && host_ok && v.full_size;
    // Exit 4 means exactly: this would have been judged, but the host was too noisy.
    v.inconclusive = v.too_noisy && host_ok && v.full_size;
    let word = if v.pass {
        "PASS"
    } else if (v.load_pass || v.too_noisy) && host_ok {
        // Everything that ran passed but not at the profile's size, or the host was too
        // noisy to judge the load.
        "NOT PROVEN"
    } else {
        "MISS"
    };
    v.summary = format!(
        "{word} against profile {}: {load}; {host}",
        r.targets.profile
    );
}

fn num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn bytes(b: f64) -> String {
    if b >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", b / 1024.0 / 1024.0)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{b:.0} B")
    }
}

pub fn table(r: &Report) -> String {
    let mut t = crate::output::new_table();
    t.set_header(vec![
        "scenario",
        "conns",
        "msgs/s",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "max ms",
        "server CPU, RSS",
        "generator CPU, RSS",
        "notes",
    ]);
    for s in &r.scenarios {
        let mut notes = Vec::new();
        if let Some(o) = s.offered_rate {
            notes.push(format!("offered {}/s", num(o)));
        }
        if let Some(l) = s.service_latency_ms.as_ref().filter(|l| l.count > 0) {
            notes.push(format!(
                "from the send: p50 {} / p99 {} / p99.9 {} / max {} ms",
                num(l.p50),
                num(l.p99),
                num(l.p999),
                num(l.max)
            ));
        }
        if s.workers > 0 {
            // Each generator process is one thread: what is left of its cores is the margin
            // by which the load could grow before the generator, not the server, is the limit.
            let busy = s.generator.cpu_pct / s.workers as f64;
            notes.push(format!(
                "generator headroom {:.0}%",
                (100.0 - busy).max(0.0)
            ));
        }
        if let Some(e) = s.echoes_per_server_cpu_sec {
            notes.push(format!("{} echoes per server CPU-s", num(e)));
        }
        if let Some(us) = s.server_cpu_us_per_msg {
            notes.push(format!("{} us server CPU per message", num(us)));
        }
        if let Some(p) = s.server.as_ref().and_then(|s| s.rss_per_conn_bytes) {
            notes.push(format!("{} RSS per connection", bytes(p)));
        }
        if let (Some(st), Some(c)) = (s.storm_secs, s.connects_per_sec) {
            notes.push(format!(
                "{} connected+echoed in {st:.2} s ({}/s)",
                s.conns_connected,
                num(c)
            ));
        }
        if let Some(b) = &s.broadcast_last_ms {
            notes.push(format!(
                "last subscriber: p50 {} ms, p99 {} ms over {} rounds",
                num(b.p50),
                num(b.p99),
                b.count
            ));
        }
        if s.errors > 0 || s.disconnects > 0 {
            notes.push(format!(
                "{} errors, {} server closes",
                s.errors, s.disconnects
            ));
        }
        if let Some(i) = &s.incomplete {
            notes.push(format!("INCOMPLETE: {i}"));
        }
        if let Some(b) = s.kernel_drops.as_ref().and_then(|k| k.bound.as_ref()) {
            notes.push(format!("kernel: {b}"));
        }
        let l = &s.latency_ms;
        t.add_row(vec![
            s.scenario.name().to_string(),
            format!("{}/{}", s.conns_connected, s.conns_requested),
            num(s.achieved_rate),
            num(l.p50),
            num(l.p99),
            num(l.p999),
            num(l.max),
            s.server
                .as_ref()
                .map(|p| match p.rss_after_bytes {
                    Some(b) => format!("{:.0}%, {}", p.cpu_pct, bytes(b as f64)),
                    None => format!("{:.0}%", p.cpu_pct),
                })
                .unwrap_or_else(|| "-".into()),
            match s.generator.peak_rss_bytes {
                Some(b) => format!(
                    "{:.0}% ({}p), {}",
                    s.generator.cpu_pct,
                    s.workers,
                    bytes(b as f64)
                ),
                None => format!("{:.0}% ({}p)", s.generator.cpu_pct, s.workers),
            },
            notes.join("; "),
        ]);
    }
    let mut out = match &r.program {
        Some(p) => format!(
            "wstune self-test of your server `{p}` at {} ({} cores)\n{t}\n",
            r.url, r.cores
        ),
        None => format!("wstune self-test of {} ({} cores)\n{t}\n", r.url, r.cores),
    };
    for s in &r.skipped {
        out.push_str(&format!("skipped: {s}\n"));
    }
    if let Some(h) = &r.host_check {
        if h.failed.is_empty() {
            out.push_str(&format!(
                "host check: no failures for profile {} ({} warnings)\n",
                h.profile, h.warnings
            ));
        } else {
            out.push_str(&format!(
                "host check: {} failure(s) for profile {}: {} (`wstune check --profile {}` says how to fix them)\n",
                h.failed.len(),
                h.profile,
                h.failed.join(", "),
                h.profile
            ));
        }
    }
    for s in &r.scaled_down {
        out.push_str(&format!("scaled down: {s}\n"));
    }
    if let Some(n) = &r.rate_note {
        out.push_str(&format!("rate: {n}\n"));
    }
    if let Some(m) = &r.memory {
        out.push_str(&memory_lines(m, r.program.is_some()));
    }
    if let Some(c) = &r.capacity {
        out.push_str(&c.line());
    }
    if let Some(b) = &r.memory_budget {
        out.push_str(&b.line());
    }
    for s in &r.scenarios {
        out.push_str(&disturbance_lines(s));
    }
    for c in &r.verdict.checks {
        if !c.ok {
            out.push_str(&format!(
                "MISS {} {}: {}{}\n",
                c.scenario.name(),
                c.what,
                c.detail,
                if c.judged {
                    ""
                } else {
                    " (not judged: the host was too noisy)"
                }
            ));
        }
    }
    out.push_str(&format!(
        "load targets of profile {}: p99 <= {} ms, 95% of the offered rate, no errors, no server closes\n",
        r.targets.profile, r.targets.p99_ms
    ));
    out.push_str(&format!("verdict: {}\n", r.verdict.summary));
    out
}

/// Per scenario: the disturbance of its window, how spread out its sends were, and what an
/// earlier, noisier measurement said.
fn disturbance_lines(s: &ScenarioReport) -> String {
    let mut out = String::new();
    if let Some(d) = &s.disturbance {
        out.push_str(&format!(
            "disturbance {}: {}{}\n",
            s.scenario.name(),
            d.line(),
            match &d.why {
                Some(w) if s.scenario.timed() => format!(" -- TOO NOISY to judge ({w})"),
                Some(w) => format!(" -- noisy ({w}; not a timing verdict, judged anyway)"),
                None => String::new(),
            }
        ));
    }
    for (i, a) in s.attempts.iter().enumerate() {
        out.push_str(&format!(
            "  measured {} time{} before: p99 {} ms, server CPU {}, {}{}\n",
            i + 1,
            if i == 0 { "" } else { "s" },
            num(a.p99_ms),
            a.server_cpu_pct
                .map(|c| format!("{c:.0}%"))
                .unwrap_or_else(|| "-".into()),
            a.disturbance
                .as_ref()
                .map(|d| d.line())
                .unwrap_or_else(|| "disturbance not measured".into()),
            if a.missed.is_empty() {
                "; passed".to_string()
            } else {
                format!("; missed {}", a.missed.join(", "))
            }
        ));
    }
    if let Some(a) = &s.arrivals {
        out.push_str(&format!(
            "arrivals {}: each connection on its own schedule, phases even; per generator \
             process: gap {:.0} us, CV {:.2}, sends per 1 ms p50 {} / p99 {} / max {}\n",
            s.scenario.name(),
            a.gap_mean_us,
            a.gap_cv,
            a.sends_per_ms_p50,
            a.sends_per_ms_p99,
            a.sends_per_ms_max
        ));
    }
    out
}

/// `users`: the server is the user's program (`--command`), whose memory is its own
/// application's, not what the profile's estimate models: a gap is reported, not blamed on
/// the estimate.
fn memory_lines(m: &MemoryReport, users: bool) -> String {
    let mut out = String::new();
    let mut parts = Vec::new();
    if let (Some(p), Some(total)) = (m.server_rss_per_conn_bytes, m.server_rss_bytes) {
        parts.push(format!(
            "server RSS {} per connection ({} in all)",
            bytes(p),
            bytes(total as f64)
        ));
    }
    if let Some(k) = &m.kernel {
        parts.push(format!(
            "kernel: TCP sockets {} -> {}, TCP buffers {} -> {} (sockstat mem), slab {} -> {}{}",
            k.before.tcp_inuse,
            k.during.tcp_inuse,
            bytes((k.before.tcp_mem_pages * k.page_size) as f64),
            bytes(k.tcp_mem_bytes_during as f64),
            bytes(k.before.slab_bytes as f64),
            bytes(k.during.slab_bytes as f64),
            k.slab_bytes_per_socket
                .map(|b| format!(" ({} per socket)", bytes(b)))
                .unwrap_or_default()
        ));
    }
    out.push_str(&format!(
        "memory at {} idle connections: {}\n",
        count(m.conns),
        parts.join("; ")
    ));
    for c in &m.compared {
        out.push_str(&format!(
            "memory estimate: {} {} vs {} measured ({:+.0}%{})\n",
            c.what,
            bytes(c.estimate_bytes as f64),
            bytes(c.measured_bytes),
            c.error * 100.0,
            if c.within_tolerance {
                ", within 25%"
            } else if users {
                ", more than 25% apart: the estimate models the built-in server, not your \
                 application's own memory"
            } else {
                ", OFF by more than 25%: the estimate needs changing"
            }
        ));
    }
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const PALETTE: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf",
];

/// A line chart as inline SVG: one polyline per series over shared axes.
fn svg_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(Scenario, Vec<(f64, f64)>)],
    x_ticks: &[(f64, String)],
) -> String {
    let (w, h, l, b, top, right) = (640.0, 300.0, 60.0, 40.0, 30.0, 150.0);
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .collect();
    let ys: Vec<f64> = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .collect();
    if xs.is_empty() {
        return format!("<p>{}: no data</p>", esc(title));
    }
    let (x0, x1) = (
        xs.iter().cloned().fold(f64::MAX, f64::min),
        xs.iter()
            .cloned()
            .fold(f64::MIN, f64::max)
            .max(xs[0] + 1e-9),
    );
    let y1 = ys.iter().cloned().fold(0.0, f64::max).max(1e-9) * 1.1;
    let px = |x: f64| l + (x - x0) / (x1 - x0).max(1e-9) * (w - l - right);
    let py = |y: f64| top + (1.0 - y / y1) * (h - top - b);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\
         <text x=\"{}\" y=\"18\" font-size=\"14\" text-anchor=\"middle\">{}</text>\
         <line x1=\"{l}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/><line x1=\"{l}\" y1=\"{top}\" x2=\"{l}\" y2=\"{}\" stroke=\"#333\"/>\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\
         <text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">{}</text>",
        (w - right) / 2.0 + l / 2.0, esc(title), h - b, w - right, h - b, h - b,
        (w - right) / 2.0 + l / 2.0, h - 6.0, esc(x_label), h / 2.0, h / 2.0, esc(y_label)
    );
    for i in 0..=4 {
        let y = y1 * i as f64 / 4.0;
        s.push_str(&format!(
            "<line x1=\"{l}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            w - right, py(y), py(y), l - 4.0, py(y) + 4.0, num(y)
        ));
    }
    for (x, label) in x_ticks {
        s.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            px(*x),
            h - b + 14.0,
            esc(label)
        ));
    }
    for (i, (scenario, pts)) in series.iter().enumerate() {
        // One colour per scenario, the same in every chart.
        let c = PALETTE[*scenario as usize % PALETTE.len()];
        let name = scenario.name();
        let d: Vec<String> = pts
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        s.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>\
             <rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{c}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            d.join(" "), w - right + 10.0, top + 16.0 * i as f64, w - right + 24.0, top + 9.0 + 16.0 * i as f64, esc(name)
        ));
    }
    s.push_str("</svg>");
    s
}

/// Percentile positions on a "nines" axis: 50 -> 1, 90 -> 2, 99 -> 3, 99.9 -> 4 ...
fn nines(p: f64) -> f64 {
    if p >= 100.0 {
        5.0
    } else {
        (-(1.0 - p / 100.0).log10()).min(5.0) + 0.7
    }
}

pub fn html(r: &Report) -> String {
    let lat: Vec<(Scenario, Vec<(f64, f64)>)> = r
        .scenarios
        .iter()
        .filter(|s| s.latency_ms.count > 0)
        .map(|s| {
            (
                s.scenario,
                s.latency_ms
                    .curve
                    .iter()
                    .map(|(p, ms)| (nines(*p), *ms))
                    .collect(),
            )
        })
        .collect();
    let ticks: Vec<(f64, String)> = [50.0, 90.0, 99.0, 99.9, 99.99, 100.0]
        .iter()
        .map(|&p| {
            (
                nines(p),
                if p >= 100.0 {
                    "max".into()
                } else {
                    format!("p{p}")
                },
            )
        })
        .collect();
    let thr: Vec<(Scenario, Vec<(f64, f64)>)> = r
        .scenarios
        .iter()
        .filter(|s| !s.timeline.is_empty() && s.scenario != Scenario::Idle)
        .map(|s| {
            (
                s.scenario,
                s.timeline
                    .iter()
                    .map(|p| (p.t as f64, p.received_per_sec as f64))
                    .collect(),
            )
        })
        .collect();
    let secs = r
        .scenarios
        .iter()
        .map(|s| s.timeline.len())
        .max()
        .unwrap_or(0);
    let t_ticks: Vec<(f64, String)> = (1..=secs)
        .step_by((secs / 10).max(1))
        .map(|t| (t as f64, format!("{t}")))
        .collect();
    let json = serde_json::to_string_pretty(r).unwrap_or_default();
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>wstune self-test</title>\
         <style>body{{font-family:sans-serif;margin:2em;max-width:1000px}}pre{{background:#f6f6f6;padding:1em;overflow:auto}}\
         .pass{{color:#2a2}}.miss{{color:#c22}}</style></head><body>\
         <h1>wstune self-test: <span class=\"{}\">{}</span></h1><p>{}</p><p>{} &middot; {} cores &middot; profile {} (p99 target {} ms)</p>\
         {}{}<h2>Figures</h2><pre>{}</pre><h2>Report (JSON)</h2><pre>{}</pre></body></html>\n",
        if r.verdict.pass { "pass" } else { "miss" },
        if r.verdict.pass {
            "PASS"
        } else if r.verdict.too_noisy {
            "NOT PROVEN"
        } else {
            "MISS"
        },
        esc(&r.verdict.summary),
        esc(&r.url),
        r.cores,
        esc(&r.targets.profile),
        r.targets.p99_ms,
        svg_chart("Latency by percentile", "percentile", "ms", &lat, &ticks),
        svg_chart("Echoes (or deliveries) per second", "second of the run", "msgs/s", &thr, &t_ticks),
        esc(&table(r)),
        esc(&json)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selftest::noise::Disturbance;
    use crate::selftest::{Latency, ScenarioReport};

    fn targets() -> Targets {
        Targets {
            profile: "10k".into(),
            connections: 200,
            p99_ms: 5.0,
            rate_per_client: 10.0,
            payload_bytes: 100,
            estimate: MemoryEstimate {
                server_bytes_per_conn: 0,
                kernel_bytes_per_socket: 0,
                bytes_per_conn: 0,
            },
            cpu: CpuTarget {
                messages_per_sec: 2000,
                ns_per_message: 14_000,
                cores: 1,
            },
        }
    }

    fn disturbance(other_pct: f64) -> Disturbance {
        let (too_noisy, why) = crate::selftest::noise::judge(Some(0.0), Some(other_pct), 2);
        Disturbance {
            secs: 5.0,
            host_cores: 2,
            steal_pct: Some(0.0),
            other_cpu_pct: Some(other_pct),
            kernel_threads_cpu_pct: None,
            other_not_measured: None,
            too_noisy,
            why,
        }
    }

    /// An echo-rate at 200 x 10 msgs/s with this p99, on a window with this much other CPU.
    #[test]
    fn capacity_comes_from_echo_rate_and_says_when_the_rate_was_low() {
        let t = CpuTarget::of(&crate::profile::load("100k").unwrap().profile);
        assert_eq!((t.messages_per_sec, t.cores), (1_000_000, 20));
        let mut e = echo(Scenario::EchoRate, 1.0, 0.0);
        e.server_cpu_us_per_msg = Some(28.0);
        let mut d = echo(Scenario::Deflate, 1.0, 0.0);
        d.server_cpu_us_per_msg = Some(50.0);
        // echo-rate wins over deflate; 28 us is twice the profile's 14: twice the cores.
        let c = CapacityReport::of(&[d.clone(), e], &t, 2).unwrap();
        assert_eq!(c.scenario, "echo-rate");
        assert_eq!((c.cores_at_measured, c.cores_at_profile), (40, 20));
        let line = c.line();
        assert!(
            line.contains("28.0 us of CPU per message in echo-rate at 2000 msgs/s"),
            "{line}"
        );
        assert!(
            line.contains("need 40 core(s)") && line.contains("(20 at the profile's)"),
            "{line}"
        );
        assert!(
            line.contains("Measured at 0.2% of the profile's rate"),
            "{line}"
        );
        // Deflate alone serves; no server CPU read, no line.
        assert_eq!(CapacityReport::of(&[d], &t, 2).unwrap().scenario, "deflate");
        assert_eq!(
            CapacityReport::of(&[echo(Scenario::EchoRate, 1.0, 0.0)], &t, 2),
            None
        );
        // At the profile's own rate there is nothing to caveat.
        let full = CpuTarget {
            messages_per_sec: 2000,
            ..t
        };
        let mut e = echo(Scenario::EchoRate, 1.0, 0.0);
        e.server_cpu_us_per_msg = Some(14.0);
        assert!(!CapacityReport::of(&[e], &full, 2)
            .unwrap()
            .line()
            .contains("upper bound"));
    }

    fn echo(scenario: Scenario, p99: f64, other_pct: f64) -> ScenarioReport {
        ScenarioReport {
            scenario,
            conns_requested: 200,
            conns_connected: 200,
            workers: 1,
            sources: 1,
            secs: 5.0,
            warmup_secs: 1.0,
            payload_bytes: 100,
            offered_rate: Some(2000.0),
            inflight: None,
            sent: 10_000,
            received: 10_000,
            achieved_rate: 2000.0,
            errors: 0,
            disconnects: 0,
            lost: 0,
            close_codes: Default::default(),
            latency_ms: Latency {
                count: 10_000,
                p99,
                ..Latency::default()
            },
            service_latency_ms: None,
            arrivals: None,
            server: None,
            generator: Default::default(),
            kernel: None,
            kernel_drops: None,
            echoes_per_server_cpu_sec: None,
            server_cpu_us_per_msg: None,
            storm_secs: None,
            connects_per_sec: None,
            broadcast_last_ms: None,
            broadcast_rounds: None,
            timeline: Vec::new(),
            disturbance: Some(disturbance(other_pct)),
            attempts: Vec::new(),
            incomplete: None,
            first_error: None,
        }
    }

    fn report(scenarios: Vec<ScenarioReport>, accept_noise: bool, host: bool) -> Report {
        let t = targets();
        let verdict = verdict(&scenarios, &t, accept_noise);
        let mut r = Report {
            schema_version: SCHEMA_VERSION,
            url: "ws://127.0.0.1:1/".into(),
            program: None,
            skipped: Vec::new(),
            cores: 2,
            targets: t,
            conns: 200,
            scaled_down: Vec::new(),
            rate_note: None,
            server_processes: None,
            memory: None,
            capacity: None,
            memory_budget: None,
            host_check: Some(HostCheck {
                profile: "10k".into(),
                failed: Vec::new(),
                warnings: 0,
            }),
            scenarios,
            verdict,
        };
        combine(&mut r, host);
        r
    }

    #[test]
    fn a_quiet_pass_is_a_pass_and_a_quiet_miss_a_miss() {
        let r = report(vec![echo(Scenario::EchoRate, 1.2, 3.0)], false, true);
        assert!(r.verdict.pass && !r.verdict.too_noisy && !r.verdict.inconclusive);
        assert!(r
            .verdict
            .summary
            .starts_with("PASS against profile 10k: load: PASS"));
        let r = report(vec![echo(Scenario::EchoRate, 9.0, 3.0)], false, true);
        assert!(!r.verdict.pass && !r.verdict.too_noisy && !r.verdict.inconclusive);
        assert!(r
            .verdict
            .summary
            .starts_with("MISS against profile 10k: load: MISS"));
    }

    #[test]
    fn a_noisy_window_is_neither_pass_nor_miss() {
        // A pass under a CPU hog (other processes a whole core) is not a PASS...
        let r = report(vec![echo(Scenario::EchoRate, 1.2, 100.0)], false, true);
        assert!(
            !r.verdict.pass && r.verdict.too_noisy && r.verdict.inconclusive,
            "{:?}",
            r.verdict
        );
        assert!(
            r.verdict
                .summary
                .starts_with("NOT PROVEN against profile 10k: load: NOT PROVEN"),
            "{}",
            r.verdict.summary
        );
        assert!(r
            .verdict
            .summary
            .contains("host too noisy to judge it (other processes 100 % of a core in echo-rate)"));
        // ... and a miss under it is not a MISS, but it is shown, marked as not judged.
        let r = report(vec![echo(Scenario::EchoRate, 40.0, 100.0)], false, false);
        assert!(r.verdict.too_noisy && r.verdict.inconclusive);
        assert!(r
            .verdict
            .summary
            .starts_with("NOT PROVEN: load: NOT PROVEN at 200"));
        let t = table(&r);
        assert!(
            t.contains("MISS echo-rate p99 latency: 40.00 ms (target 5 ms) (not judged: the host was too noisy)"),
            "{t}"
        );
        assert!(
            t.contains("TOO NOISY to judge (other processes 100 % of a core)"),
            "{t}"
        );
    }

    #[test]
    fn a_miss_on_a_quiet_window_is_not_hidden_by_noise_elsewhere() {
        // echo-rate missed on a quiet window (its re-measure, say); storm was too noisy: the
        // judged miss decides.
        let mut quiet_miss = echo(Scenario::EchoRate, 9.0, 3.0);
        quiet_miss.attempts.push(crate::selftest::Attempt {
            p99_ms: 30.0,
            service_p99_ms: None,
            achieved_rate: 2000.0,
            server_cpu_pct: Some(40.0),
            disturbance: Some(disturbance(100.0)),
            missed: vec!["p99 latency".into()],
        });
        let r = report(
            vec![quiet_miss, echo(Scenario::Storm, 1.0, 100.0)],
            false,
            false,
        );
        assert!(!r.verdict.pass && !r.verdict.too_noisy && !r.verdict.inconclusive);
        assert!(
            r.verdict.summary.starts_with("MISS: load: MISS"),
            "{}",
            r.verdict.summary
        );
        assert_eq!(
            r.verdict.noise.as_deref(),
            Some("other processes 100 % of a core in storm")
        );
        let t = table(&r);
        assert!(
            t.contains("measured 1 time before: p99 30.0 ms, server CPU 40%"),
            "{t}"
        );
        assert!(t.contains("missed p99 latency"), "{t}");
    }

    #[test]
    fn server_closes_are_judged_on_any_window() {
        let mut closed = echo(Scenario::EchoRate, 1.0, 100.0);
        closed.disconnects = 3;
        let r = report(vec![closed], false, false);
        assert!(!r.verdict.too_noisy && !r.verdict.pass, "{:?}", r.verdict);
        assert!(r.verdict.summary.starts_with("MISS"));
    }

    #[test]
    fn untimed_scenarios_and_accept_noise_are_judged_as_measured() {
        // idle holds connections: a busy host does not make it pass or fail.
        let r = report(vec![echo(Scenario::Idle, 0.0, 100.0)], false, false);
        assert!(r.verdict.pass, "{:?}", r.verdict);
        assert!(table(&r).contains("noisy (other processes 100 % of a core; not a timing verdict"));
        let r = report(vec![echo(Scenario::EchoRate, 1.0, 100.0)], true, false);
        assert!(r.verdict.pass && !r.verdict.too_noisy);
        let r = report(vec![echo(Scenario::EchoRate, 9.0, 100.0)], true, false);
        assert!(!r.verdict.pass && !r.verdict.inconclusive);
    }

    #[test]
    fn a_noisy_run_with_a_failed_host_check_is_a_miss_not_exit_4() {
        let mut r = report(vec![echo(Scenario::EchoRate, 1.0, 100.0)], false, true);
        r.host_check
            .as_mut()
            .unwrap()
            .failed
            .push("fs.nr_open".into());
        combine(&mut r, true);
        assert!(r.verdict.too_noisy && !r.verdict.inconclusive);
        assert!(
            r.verdict
                .summary
                .starts_with("MISS against profile 10k: load: NOT PROVEN"),
            "{}",
            r.verdict.summary
        );
        assert!(r
            .verdict
            .summary
            .ends_with("host: NOT READY for 10k, 1 failed check"));
    }

    #[test]
    fn the_budget_row_sums_servers_and_stores_and_needs_the_series() {
        let text = "# HELP ws_memory_budget_bytes x\nws_memory_budget_bytes 1000\n\
                    ws_memory_budget_peak_bytes 250\n\
                    ws_memory_budget_closes_total{store=\"queue\"} 2\n\
                    ws_memory_budget_closes_total{store=\"input\"} 1\n\
                    ws_memory_share_closes_total 4\nws_connections 7\n";
        let one = BudgetReport::from_metrics(text).unwrap();
        assert_eq!(
            one,
            BudgetReport {
                limit_bytes: 1000,
                peak_bytes: 250,
                budget_closes: 3,
                share_closes: 4
            }
        );
        assert_eq!((one + one).limit_bytes, 2000);
        assert!(
            one.line()
                .contains("at most 250 B of 1000 B (25.0%); 3 closed"),
            "{}",
            one.line()
        );
        assert_eq!(BudgetReport::from_metrics("ws_connections 7\n"), None);
    }
}
