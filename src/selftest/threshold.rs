//! Thresholds: the user's own pass/fail criteria over a run (`--threshold 'echo-rate.p99 < 5ms'`),
//! judged beside the profile's checks so the table, the JSON, the HTML page and the exit code
//! have one list. The grammar follows k6's thresholds and Artillery's `ensure`, which made a
//! load test a CI gate for their users: `SCOPE.METRIC OP VALUE[UNIT]`.
//!
//! A threshold is never guessed: a figure the run did not measure, or a percentile over too few
//! samples to mean anything (fewer than 100 for a p99), leaves it not judged, and the run NOT
//! PROVEN (exit 4), instead of passing on nothing.

use super::{Scenario, ScenarioReport};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Which scenarios a threshold is judged on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Scope {
    One(Scenario),
    /// `*`: every scenario of the run that measures the metric.
    Every,
    /// `POPULATION.STEP`: one waiting step of a `--script` (its latency, or `met`).
    Step(String),
}

/// A percentile or extreme of a latency distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stat {
    P50,
    P90,
    P99,
    P999,
    Max,
    Mean,
}

/// Which latency distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Series {
    /// `latency_ms`: from when each message was due (echo-rate, deflate), sent (echo-sat),
    /// connect (storm) or published (broadcast).
    Latency,
    /// `service_latency_ms`: from the actual send (echo-rate, deflate).
    Service,
    /// `broadcast_last_ms`: per round, until the last subscriber had it.
    Round,
    /// `connect_ms`: opening a connection (TCP, TLS, the upgrade).
    Connect,
    /// `tls.handshake_ms`: the TLS handshake alone (wss://).
    TlsHandshake,
    /// `restart.back_ms`: each client's close until its new upgrade.
    Back,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Metric {
    Latency(Series, Stat),
    /// Errors over connections asked for plus messages sent (a fraction).
    ErrorRate,
    /// Messages delivered over those due: echoes over measured sends, broadcast deliveries
    /// over subscribers x rounds, storm echoes over clients (a fraction).
    Delivered,
    /// Connections open over connections asked for (a fraction).
    Connected,
    /// Echoes or deliveries per second over the run.
    Rate,
    /// The server's CPU over the measured window, in cores (`150%` = 1.5 cores).
    ServerCpu,
    /// The server's CPU per message received back, in microseconds.
    CpuPerMsg,
    /// storm: connections completed (connect, echo) per second.
    ConnectRate,
    /// tls-handshake: handshakes per CPU-second of the server.
    HandshakesPerCore,
    /// wss://: the share of handshakes that resumed a session (a fraction).
    Resumed,
    /// A script's step: the share of its expectations met (a fraction).
    Met,
    /// restart: reconnect attempts refused (reset, timed out, 503, closed in the upgrade).
    Refused,
    /// restart: clients still down when the window ended.
    NotBack,
    /// restart: from the disruption until the last client was back, in ms.
    AllBack,
    /// restart: reconnect upgrades per second in the best one-second window.
    PeakAcceptRate,
    /// restart: growth of TcpExt ListenOverflows (a server on this host).
    ListenOverflows,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    fn holds(self, figure: f64, bound: f64) -> bool {
        match self {
            Op::Lt => figure < bound,
            Op::Le => figure <= bound,
            Op::Gt => figure > bound,
            Op::Ge => figure >= bound,
        }
    }

    fn text(self) -> &'static str {
        match self {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }
}

/// One criterion: `value` in the metric's base unit (milliseconds for latencies, a fraction
/// for shares, cores for CPU, microseconds for CPU per message, per second for rates).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Threshold {
    pub scope: Scope,
    pub metric: Metric,
    pub op: Op,
    pub value: f64,
    /// As the user wrote it, for the checks list.
    pub text: String,
}

/// The names the parser knows, for its error messages.
pub const METRICS: &str = "p50, p90, p99, p999, max, mean (latency); service.p50 .. service.max \
    (from the actual send); round.p50 .. round.max (broadcast: until the last subscriber); \
    connect.p50 .. connect.max (TCP, TLS and the upgrade); tls.p50 .. tls.max (the TLS \
    handshake); error_rate, delivered, connected, resumed (fractions or %); rate (msgs/s); \
    server_cpu (cores or %); cpu_per_msg (us, ms); connect_rate, handshakes_per_core (per \
    second); restart: back.p50 .. back.max (close to new upgrade), all_back (until the last \
    client), refused, not_back, listen_overflows (counts), peak_accept_rate (per second); for a \
    --script step, POPULATION.STEP.p50 .. .max, .mean or .met";

const SCENARIOS: &str =
    "echo-rate, echo-sat, idle, storm, tls-handshake, broadcast, deflate, restart, or * for every one";

fn stat(s: &str) -> Option<Stat> {
    Some(match s {
        "p50" => Stat::P50,
        "p90" => Stat::P90,
        "p99" => Stat::P99,
        "p999" | "p99.9" => Stat::P999,
        "max" => Stat::Max,
        "mean" => Stat::Mean,
        _ => return None,
    })
}

fn metric(s: &str) -> Option<Metric> {
    if let Some(st) = stat(s) {
        return Some(Metric::Latency(Series::Latency, st));
    }
    if let Some(rest) = s.strip_prefix("service.") {
        return stat(rest).map(|st| Metric::Latency(Series::Service, st));
    }
    if let Some(rest) = s.strip_prefix("round.") {
        return stat(rest).map(|st| Metric::Latency(Series::Round, st));
    }
    if let Some(rest) = s.strip_prefix("connect.") {
        return stat(rest).map(|st| Metric::Latency(Series::Connect, st));
    }
    // `back_p99` too: the spelling of the profile's `selftest.restart.back_p99_ms`.
    if let Some(rest) = s.strip_prefix("back.").or_else(|| s.strip_prefix("back_")) {
        return stat(rest).map(|st| Metric::Latency(Series::Back, st));
    }
    if let Some(rest) = s.strip_prefix("tls.") {
        return stat(rest).map(|st| Metric::Latency(Series::TlsHandshake, st));
    }
    Some(match s {
        "error_rate" => Metric::ErrorRate,
        "delivered" => Metric::Delivered,
        "connected" => Metric::Connected,
        "rate" => Metric::Rate,
        "server_cpu" => Metric::ServerCpu,
        "cpu_per_msg" => Metric::CpuPerMsg,
        "connect_rate" => Metric::ConnectRate,
        "handshakes_per_core" => Metric::HandshakesPerCore,
        "resumed" => Metric::Resumed,
        "met" => Metric::Met,
        "refused" => Metric::Refused,
        "not_back" => Metric::NotBack,
        "all_back" => Metric::AllBack,
        "peak_accept_rate" => Metric::PeakAcceptRate,
        "listen_overflows" => Metric::ListenOverflows,
        _ => return None,
    })
}

/// The number and its unit, converted to the metric's base unit.
fn value(metric: Metric, s: &str, whole: &str) -> Result<f64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == 'e'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)
        .ok_or_else(|| {
            format!("threshold '{whole}': '{s}' is not a number (give e.g. 5ms, 99.9%, 0.001)")
        })?;
    let unit = unit.trim();
    let bad_unit = |want: &str| format!("threshold '{whole}': unit '{unit}': {want}");
    match metric {
        Metric::Refused | Metric::NotBack | Metric::ListenOverflows => match unit {
            "" if n.fract() == 0.0 => Ok(n),
            _ => Err(bad_unit(
                "a count is a whole number without a unit (e.g. 0 or 500)",
            )),
        },
        Metric::Latency(..) | Metric::CpuPerMsg | Metric::AllBack => {
            let ms = match unit {
                "us" | "µs" => n / 1000.0,
                "ms" => n,
                "s" => n * 1000.0,
                "" => {
                    return Err(bad_unit(
                        "a duration needs its unit: us, ms or s (e.g. 5ms)",
                    ))
                }
                _ => return Err(bad_unit("give us, ms or s")),
            };
            // CPU per message is kept in microseconds, as the report shows it.
            Ok(if metric == Metric::CpuPerMsg {
                ms * 1000.0
            } else {
                ms
            })
        }
        Metric::ErrorRate
        | Metric::Delivered
        | Metric::Connected
        | Metric::Resumed
        | Metric::Met => match unit {
            "%" if n <= 100.0 => Ok(n / 100.0),
            "" if n <= 1.0 => Ok(n),
            "%" | "" => Err(format!(
                "threshold '{whole}': a share is 0..100% or a fraction 0..1"
            )),
            _ => Err(bad_unit("give a percentage (99.9%) or a fraction (0.999)")),
        },
        Metric::ServerCpu => match unit {
            "%" => Ok(n / 100.0),
            "" => Ok(n),
            _ => Err(bad_unit(
                "give cores (1.5) or a percentage of one core (150%)",
            )),
        },
        Metric::Rate | Metric::ConnectRate | Metric::HandshakesPerCore | Metric::PeakAcceptRate => {
            match unit {
                "" | "/s" => Ok(n),
                _ => Err(bad_unit("give a number per second (e.g. 40000 or 40000/s)")),
            }
        }
    }
}

impl std::str::FromStr for Threshold {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let whole = text.trim();
        let (lhs, op, rhs) = ["<=", ">=", "<", ">"]
            .iter()
            .find_map(|o| {
                whole.find(o).map(|i| {
                    let op = match *o {
                        "<=" => Op::Le,
                        ">=" => Op::Ge,
                        "<" => Op::Lt,
                        _ => Op::Gt,
                    };
                    (&whole[..i], op, &whole[i + o.len()..])
                })
            })
            .ok_or_else(|| {
                format!(
                    "threshold '{whole}': no comparison; write SCOPE.METRIC OP VALUE, e.g. \
                     'echo-rate.p99 < 5ms' (OP is <, <=, > or >=)"
                )
            })?;
        let lhs = lhs.trim();
        let (scope, name) = lhs.split_once('.').ok_or_else(|| {
            format!(
                "threshold '{whole}': '{lhs}' names no scenario; write SCOPE.METRIC, e.g. \
                 echo-rate.p99 or *.error_rate"
            )
        })?;
        let (scope, name) = match scope.trim() {
            "*" => (Scope::Every, name),
            s => match Scenario::ALL.into_iter().find(|sc| sc.name() == s) {
                Some(sc) => (Scope::One(sc), name),
                // POPULATION.STEP.STAT: a script's step.
                None => match name.rsplit_once('.') {
                    Some((step, stat)) if !step.is_empty() => {
                        (Scope::Step(format!("{s}.{}", step.trim())), stat)
                    }
                    _ => {
                        return Err(format!(
                            "threshold '{whole}': unknown scenario '{s}'; give {SCENARIOS} (or \
                             POPULATION.STEP.STAT for a --script step)"
                        ))
                    }
                },
            },
        };
        let metric = metric(name.trim()).ok_or_else(|| {
            format!(
                "threshold '{whole}': unknown metric '{}'; the metrics are {METRICS}",
                name.trim()
            )
        })?;
        let value = value(metric, rhs, whole)?;
        match (&scope, metric) {
            (Scope::Step(_), Metric::Met | Metric::Latency(Series::Latency, _)) => {}
            (Scope::Step(_), _) => {
                return Err(format!(
                    "threshold '{whole}': a script's step takes p50, p90, p99, p999, max, mean \
                     or met"
                ))
            }
            (_, Metric::Met) => {
                return Err(format!(
                    "threshold '{whole}': met is a script step's: write POPULATION.STEP.met"
                ))
            }
            _ => {}
        }
        if let Scope::One(s) = scope {
            if !measures(s, metric) {
                return Err(format!(
                    "threshold '{whole}': {} does not measure {}; {}",
                    s.name(),
                    name.trim(),
                    match measured_by(metric) {
                        v if v.is_empty() => "no scenario does".to_string(),
                        v => format!("it is measured by {}", v.join(", ")),
                    }
                ));
            }
        }
        Ok(Threshold {
            scope,
            metric,
            op,
            value,
            text: whole.to_string(),
        })
    }
}

/// Whether a scenario produces the figure at all (checked when the threshold is read, so a
/// threshold on a figure that cannot exist is refused before anything runs).
pub fn measures(s: Scenario, m: Metric) -> bool {
    let has = s.workload().figures();
    match m {
        Metric::Latency(Series::Latency, _) | Metric::Delivered | Metric::Rate => has.messages,
        Metric::Latency(Series::Service, _) | Metric::CpuPerMsg => s.open_loop(),
        Metric::Latency(Series::Round, _) => has.rounds,
        // Every scenario but storm and tls-handshake opens its connections before it is
        // measured, and records how long that took; those two open theirs in the window.
        Metric::Latency(Series::Connect, _) => true,
        // Against a wss:// server only: checked when the figure is read.
        Metric::Latency(Series::TlsHandshake, _) | Metric::Resumed => true,
        Metric::HandshakesPerCore => has.handshakes_per_core,
        Metric::Met => has.steps,
        Metric::ErrorRate | Metric::Connected | Metric::ServerCpu => true,
        Metric::ConnectRate => has.connect_rate,
        Metric::Latency(Series::Back, _)
        | Metric::Refused
        | Metric::NotBack
        | Metric::AllBack
        | Metric::PeakAcceptRate
        | Metric::ListenOverflows => has.disruption,
    }
}

fn measured_by(m: Metric) -> Vec<&'static str> {
    Scenario::ALL
        .into_iter()
        .filter(|s| measures(*s, m))
        .map(|s| s.name())
        .collect()
}

/// The smallest sample a statistic means something over: a p99 of 20 latencies is the
/// largest but one, not a 99th percentile.
fn min_samples(st: Stat) -> u64 {
    match st {
        Stat::P50 | Stat::Mean | Stat::Max => 1,
        Stat::P90 => 10,
        Stat::P99 => 100,
        Stat::P999 => 1000,
    }
}

/// A threshold judged on one scenario's figures.
#[derive(Debug, Clone)]
pub struct Judged {
    pub scenario: Scenario,
    pub ok: bool,
    /// The figure, or why there is none.
    pub detail: String,
    /// Why it could not be judged (no figure, too few samples).
    pub unmeasured: Option<String>,
}

impl Threshold {
    /// The scenarios of the run it applies to.
    pub fn scenarios<'a>(&self, run: &'a [ScenarioReport]) -> Vec<&'a ScenarioReport> {
        run.iter()
            .filter(|s| match &self.scope {
                Scope::One(sc) => s.scenario == *sc,
                Scope::Every => measures(s.scenario, self.metric),
                Scope::Step(_) => s.scenario.workload().figures().steps,
            })
            .collect()
    }

    /// Judge it on one scenario's report.
    pub fn judge(&self, s: &ScenarioReport) -> Judged {
        let (figure, shown) = match self.figure(s) {
            Ok(f) => f,
            Err(why) => {
                return Judged {
                    scenario: s.scenario,
                    ok: false,
                    detail: format!("not judged: {why}"),
                    unmeasured: Some(why),
                }
            }
        };
        let ok = self.op.holds(figure, self.value);
        Judged {
            scenario: s.scenario,
            ok,
            detail: format!(
                "{shown} ({} {})",
                if ok { "holds" } else { "misses" },
                self.bound_text()
            ),
            unmeasured: None,
        }
    }

    fn bound_text(&self) -> String {
        format!("{} {}", self.op.text(), show(self.metric, self.value))
    }

    /// The scenario's figure in the metric's base unit, and as shown; or why there is none.
    fn figure(&self, s: &ScenarioReport) -> Result<(f64, String), String> {
        if let Scope::Step(name) = &self.scope {
            let st = s
                .steps
                .iter()
                .find(|st| st.name == *name)
                .ok_or("the step never ran")?;
            let f = match self.metric {
                Metric::Met => {
                    let all = st.matched + st.timeouts;
                    if all == 0 {
                        return Err("the step never waited".into());
                    }
                    st.matched as f64 / all as f64
                }
                Metric::Latency(_, stat) => {
                    let l = &st.latency_ms;
                    if l.count < min_samples(stat).max(1) {
                        return Err(format!(
                            "{} samples, too few for this statistic (it needs {})",
                            l.count,
                            min_samples(stat).max(1)
                        ));
                    }
                    match stat {
                        Stat::P50 => l.p50,
                        Stat::P90 => l.p90,
                        Stat::P99 => l.p99,
                        Stat::P999 => l.p999,
                        Stat::Max => l.max,
                        Stat::Mean => l.mean,
                    }
                }
                _ => return Err("not a step's figure".into()),
            };
            return Ok((f, show(self.metric, f)));
        }
        let f = match self.metric {
            Metric::Latency(series, st) => {
                let l = match series {
                    Series::Latency => Some(&s.latency_ms),
                    Series::Service => s.service_latency_ms.as_ref(),
                    Series::Round => s.broadcast_last_ms.as_ref(),
                    Series::Connect => s.connect_ms.as_ref(),
                    Series::TlsHandshake => s.tls.as_ref().map(|t| &t.handshake_ms),
                    Series::Back => s.own.restart().map(|r| &r.back_ms),
                }
                .filter(|l| l.count > 0)
                .ok_or(match series {
                    Series::TlsHandshake => "no TLS handshake was made (a ws:// server?)",
                    _ => "no latencies were measured",
                })?;
                if l.count < min_samples(st) {
                    return Err(format!(
                        "{} samples, too few for this statistic (it needs {})",
                        l.count,
                        min_samples(st)
                    ));
                }
                match st {
                    Stat::P50 => l.p50,
                    Stat::P90 => l.p90,
                    Stat::P99 => l.p99,
                    Stat::P999 => l.p999,
                    Stat::Max => l.max,
                    Stat::Mean => l.mean,
                }
            }
            Metric::ErrorRate => {
                let base = s.conns_requested as u64 + s.sent;
                if base == 0 {
                    return Err("nothing was attempted".into());
                }
                s.errors as f64 / base as f64
            }
            Metric::Delivered => {
                let due = s.scenario.workload().due(s);
                if due == 0 {
                    return Err("no message was due".into());
                }
                (s.received as f64 / due as f64).min(1.0)
            }
            Metric::Connected => {
                if s.conns_requested == 0 {
                    return Err("no connection was asked for".into());
                }
                s.conns_connected as f64 / s.conns_requested as f64
            }
            Metric::Rate => s.achieved_rate,
            Metric::ServerCpu => {
                s.server
                    .as_ref()
                    .ok_or("the server's CPU was not sampled (give --pid)")?
                    .cpu_pct
                    / 100.0
            }
            Metric::CpuPerMsg => s
                .server_cpu_us_per_msg
                .ok_or("the server's CPU per message was not measured (give --pid)")?,
            Metric::ConnectRate => s.connects_per_sec.ok_or("no connect rate was measured")?,
            Metric::HandshakesPerCore => s.handshakes_per_server_core_sec.ok_or(
                "the server's CPU was not sampled, so handshakes per core are unknown (give --pid)",
            )?,
            Metric::Met => return Err("met is a script step's figure".into()),
            Metric::Refused
            | Metric::NotBack
            | Metric::AllBack
            | Metric::PeakAcceptRate
            | Metric::ListenOverflows => {
                let r = s.own.restart().ok_or("no restart figures were reported")?;
                match self.metric {
                    Metric::Refused => r.refused_total as f64,
                    Metric::NotBack => r.not_back as f64,
                    // Some never came back (or none was closed): no time is short enough.
                    Metric::AllBack => r.all_back_secs.map_or(f64::INFINITY, |t| t * 1000.0),
                    Metric::PeakAcceptRate => r.peak_accept_rate,
                    _ => {
                        r.kernel
                            .as_ref()
                            .ok_or(
                                "the kernel's counters were not read (the server is not on this \
                                 host)",
                            )?
                            .listen_overflows as f64
                    }
                }
            }
            Metric::Resumed => {
                let t = s
                    .tls
                    .as_ref()
                    .ok_or("no TLS handshake was made (a ws:// server?)")?;
                let all = t.full + t.resumed;
                if all == 0 {
                    return Err("no TLS handshake completed".into());
                }
                t.resumed as f64 / all as f64
            }
        };
        Ok((f, show(self.metric, f)))
    }
}

/// A figure in the metric's unit, for people.
fn show(m: Metric, v: f64) -> String {
    match m {
        Metric::AllBack if v.is_infinite() => "never (some clients did not come back)".into(),
        Metric::AllBack => format!("{:.2} s", v / 1000.0),
        Metric::Refused | Metric::NotBack | Metric::ListenOverflows => format!("{v:.0}"),
        Metric::PeakAcceptRate => format!("{v:.0} upgrades/s"),
        Metric::Latency(..) if v < 1.0 => format!("{:.0} us", v * 1000.0),
        Metric::Latency(..) if v >= 1000.0 => format!("{:.2} s", v / 1000.0),
        Metric::Latency(..) => format!("{v:.2} ms"),
        Metric::ErrorRate
        | Metric::Delivered
        | Metric::Connected
        | Metric::Resumed
        | Metric::Met => {
            let pct = v * 100.0;
            if pct != 0.0 && pct != 100.0 && !(0.01..=99.99).contains(&pct) {
                format!("{pct:.4} %")
            } else {
                format!("{pct:.2} %")
            }
        }
        Metric::Rate | Metric::ConnectRate => format!("{v:.0}/s"),
        Metric::HandshakesPerCore => format!("{v:.0} per core-second"),
        Metric::ServerCpu => format!("{:.0} % of a core", v * 100.0),
        Metric::CpuPerMsg => format!("{v:.1} us"),
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Threshold {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn err(s: &str) -> String {
        s.parse::<Threshold>().expect_err(s)
    }

    #[test]
    fn units_ops_and_scopes_read_to_base_units() {
        let p = t("echo-rate.p99 < 5ms");
        assert_eq!(p.scope, Scope::One(Scenario::EchoRate));
        assert_eq!(p.metric, Metric::Latency(Series::Latency, Stat::P99));
        assert_eq!((p.op, p.value), (Op::Lt, 5.0));
        assert_eq!(t("storm.p99<=1s").value, 1000.0);
        assert_eq!(t("echo-rate.service.p999 < 250us").value, 0.25);
        assert_eq!(t("broadcast.round.max < 2 s").value, 2000.0);
        let e = t("*.error_rate <= 0.1%");
        assert_eq!((e.scope.clone(), e.op), (Scope::Every, Op::Le));
        assert!((e.value - 0.001).abs() < 1e-12);
        assert_eq!(t("broadcast.delivered >= 0.999").value, 0.999);
        assert_eq!(t("echo-sat.server_cpu < 150%").value, 1.5);
        assert_eq!(t("echo-sat.server_cpu < 2").value, 2.0);
        assert_eq!(t("echo-rate.cpu_per_msg < 20us").value, 20.0);
        assert_eq!(t("echo-rate.rate >= 40000/s").value, 40000.0);
        assert_eq!(t("storm.connect_rate > 5000").op, Op::Gt);
        assert_eq!(
            t("*.connect.p99 < 1s").metric,
            Metric::Latency(Series::Connect, Stat::P99)
        );
        assert_eq!(t("echo-rate.tls.p99 < 50ms").value, 50.0);
        assert_eq!(t("tls-handshake.resumed >= 95%").value, 0.95);
        assert_eq!(
            t("tls-handshake.handshakes_per_core > 500").metric,
            Metric::HandshakesPerCore
        );
        assert!(err("echo-rate.handshakes_per_core > 5").contains("measured by tls-handshake"));
        let st = t("traders.price.p99 < 50ms");
        assert_eq!(st.scope, Scope::Step("traders.price".into()));
        assert_eq!(st.metric, Metric::Latency(Series::Latency, Stat::P99));
        assert_eq!(t("traders.price.met >= 99%").metric, Metric::Met);
        assert!(err("traders.price.rate > 5").contains("a script's step takes"));
        assert!(err("echo-rate.met > 0.5").contains("POPULATION.STEP.met"));
    }

    #[test]
    fn bad_thresholds_name_the_problem_and_the_fix() {
        assert!(err("echo-rate.p99 5ms").contains("no comparison"));
        assert!(err("p99 < 5ms").contains("names no scenario"));
        assert!(err("nosuch.p99 < 5ms").contains("unknown scenario 'nosuch'"));
        assert!(err("echo-rate.p98 < 5ms").contains("unknown metric 'p98'"));
        assert!(err("echo-rate.p99 < 5").contains("needs its unit"));
        assert!(err("echo-rate.p99 < 5 min").contains("give us, ms or s"));
        assert!(err("echo-rate.p99 < NaNms").contains("not a number"));
        assert!(err("echo-rate.p99 < -1ms").contains("not a number"));
        assert!(err("*.delivered >= 120%").contains("0..100%"));
        assert!(err("*.delivered >= 5").contains("fraction"));
        let e = err("idle.p99 < 5ms");
        assert!(e.contains("idle does not measure p99"), "{e}");
        assert!(e.contains("echo-rate"), "{e}");
        assert!(err("echo-sat.service.p99 < 5ms").contains("echo-rate, deflate"));
    }

    #[test]
    fn every_scope_covers_only_scenarios_with_the_figure() {
        assert!(measures(Scenario::Idle, Metric::ErrorRate));
        assert!(!measures(Scenario::Idle, Metric::Rate));
        assert!(!measures(
            Scenario::EchoSat,
            Metric::Latency(Series::Round, Stat::P99)
        ));
    }

    #[test]
    fn restart_metrics_parse_with_their_units_and_only_on_restart() {
        let th = t("restart.back_p99 < 3s");
        assert_eq!(
            (th.scope.clone(), th.metric, th.value),
            (
                Scope::One(Scenario::Restart),
                Metric::Latency(Series::Back, Stat::P99),
                3000.0
            )
        );
        assert_eq!(
            t("restart.back.max <= 500ms").metric,
            Metric::Latency(Series::Back, Stat::Max)
        );
        assert_eq!(t("restart.all_back < 10s").value, 10_000.0);
        assert_eq!(t("restart.refused <= 500").metric, Metric::Refused);
        assert_eq!(
            t("restart.listen_overflows <= 0").metric,
            Metric::ListenOverflows
        );
        assert_eq!(t("restart.peak_accept_rate >= 5000/s").value, 5000.0);
        assert!(err("restart.refused <= 1.5").contains("whole number"));
        assert!(err("restart.refused <= 5ms").contains("whole number"));
        assert!(err("echo-rate.refused <= 5").contains("measured by restart"));
        assert!(err("storm.back.p99 < 1s").contains("measured by restart"));
    }
}
