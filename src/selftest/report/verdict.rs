//! The verdict: each scenario's checks against the profile's targets, judged only on a quiet
//! window, and the run's verdict with the host check beside it.

use super::super::threshold::Threshold;
use super::super::{Scenario, ScenarioReport};
use super::{count, Report, Targets};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Check {
    pub scenario: Scenario,
    pub what: String,
    pub ok: bool,
    pub detail: String,
    /// The check counts toward the verdict: false when it rests on timing and its window was
    /// too noisy to judge, or (a threshold) when its figure was not measured or rests on too
    /// few samples (its result is still shown, never dropped).
    pub judged: bool,
    /// A criterion the user gave (`--threshold`), not one of the profile's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub threshold: bool,
}

/// How a run is judged, beside the profile's targets.
#[derive(Debug, Clone, Default)]
pub struct Judging {
    /// Judge every window as measured, however noisy (`--accept-noise`).
    pub accept_noise: bool,
    /// The user's criteria (`--threshold`), judged after the profile's checks.
    pub thresholds: Vec<Threshold>,
    /// Leave out the profile's p99 and throughput checks (`--no-default-checks`): the
    /// thresholds replace them. Finishing, errors and server closes are always checked.
    pub no_default_checks: bool,
}

/// Checks a busy host cannot produce: a server that closed connections did so whatever else
/// ran. They are judged on any window.
pub(super) fn noise_proof(what: &str) -> bool {
    what == "no server closes"
}

#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// Thresholds that could not be judged: their figure was not measured, or rests on too
    /// few samples ("echo-rate.p999 < 5ms: 240 samples, too few ..."). Like noise, they leave
    /// the run NOT PROVEN unless a judged check missed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmeasured: Vec<String>,
    /// The run would have been judged but for the noise or an unmeasured threshold (and
    /// nothing else failed): exit code 4, NOT PROVEN.
    pub inconclusive: bool,
    pub checks: Vec<Check>,
}

impl Verdict {
    /// The load could not be judged, for either reason: the noise, or a threshold whose
    /// figure was not measured (or a merge missing shards).
    pub fn undecided(&self) -> bool {
        self.too_noisy || !self.unmeasured.is_empty()
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
pub fn verdict(scenarios: &[ScenarioReport], t: &Targets, j: &Judging) -> Verdict {
    let mut checks = Vec::new();
    let mut noisy = Vec::new();
    for s in scenarios {
        let quiet = j.accept_noise
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
                threshold: false,
            })
        };
        let defaults = !j.no_default_checks;
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
        // A restart's closes are what it measures: judged by whether the clients came back
        // (its own checks below), not as a fault.
        if !s.scenario.disrupts_server() {
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
        }
        // What the scenario itself is held to (its own file says).
        for (what, ok, detail) in s.scenario.workload().judge(s, t, defaults) {
            add(&what, ok, detail);
        }
    }
    let unmeasured = thresholds(scenarios, j, &mut checks);
    let judged_miss = checks.iter().any(|c| c.judged && !c.ok);
    let too_noisy = !noisy.is_empty() && !judged_miss;
    let load_pass = !checks.is_empty() && !judged_miss && noisy.is_empty() && unmeasured.is_empty();
    Verdict {
        pass: load_pass,
        load_pass,
        host_pass: None,
        full_size: false,
        summary: String::new(),
        too_noisy,
        noise: (!noisy.is_empty()).then(|| noisy.join("; ")),
        unmeasured: if judged_miss { Vec::new() } else { unmeasured },
        inconclusive: false,
        checks,
    }
}

/// The user's thresholds, judged on each scenario they cover, after the profile's checks.
/// Returns the ones that could not be judged, with why. A threshold on a timed scenario whose
/// window was too noisy is shown and not judged, as the profile's timing checks are.
fn thresholds(scenarios: &[ScenarioReport], j: &Judging, checks: &mut Vec<Check>) -> Vec<String> {
    let mut unmeasured = Vec::new();
    for th in &j.thresholds {
        let covered = th.scenarios(scenarios);
        if covered.is_empty() {
            // A `*` threshold, or one given to `report merge` for a scenario the merged run
            // does not have (`selftest` checks a named scenario before anything starts).
            unmeasured.push(format!("{th}: no scenario of this run measures it"));
            continue;
        }
        for s in covered {
            let quiet = j.accept_noise
                || !s.scenario.timed()
                || !s.disturbance.as_ref().is_some_and(|d| d.too_noisy);
            let r = th.judge(s);
            if let Some(why) = &r.unmeasured {
                unmeasured.push(format!("{} on {}: {why}", th.text, s.scenario.name()));
            }
            checks.push(Check {
                scenario: s.scenario,
                what: th.text.clone(),
                ok: r.ok,
                detail: r.detail,
                judged: quiet && r.unmeasured.is_none(),
                threshold: true,
            });
        }
    }
    unmeasured
}

/// Turn the load verdict into the run's: with `host` (`serve --self-test`) PASS only when the
/// load passed at the profile's full count and the host check passed; without it (`selftest`
/// against a server of its own) the load decides, but the line still says when the count was
/// below the profile's, so a small run never reads as a proof for the profile.
pub fn combine(r: &mut Report, host_required: bool) {
    let want = r.targets.connections;
    let smallest = r.smallest_conns();
    let v = &mut r.verdict;
    v.full_size = smallest >= want;
    let undecided = v.undecided();
    let mut noise = match (&v.noise, v.too_noisy) {
        (Some(n), true) => format!(", host too noisy to judge it ({n})"),
        _ => String::new(),
    };
    if let Some(first) = v.unmeasured.first() {
        noise += &format!(
            ", {} threshold check{} not judged ({first})",
            v.unmeasured.len(),
            if v.unmeasured.len() == 1 { "" } else { "s" }
        );
    }
    let user: Vec<&Check> = v.checks.iter().filter(|c| c.threshold).collect();
    if !user.is_empty() {
        let held = user.iter().filter(|c| c.judged && c.ok).count();
        noise += &format!(", {held} of {} threshold checks held", user.len());
        if let Some(miss) = user.iter().find(|c| c.judged && !c.ok) {
            noise += &format!(
                " (missed: {} on {}: {})",
                miss.what,
                miss.scenario.name(),
                miss.detail
            );
        }
    }
    let load = format!(
        "load: {} at {}{noise}",
        if v.load_pass {
            "PASS"
        } else if undecided {
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
        v.inconclusive = undecided;
        let word = if v.pass {
            "PASS"
        } else if undecided {
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
    v.inconclusive = undecided && host_ok && v.full_size;
    let word = if v.pass {
        "PASS"
    } else if (v.load_pass || undecided) && host_ok {
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
