//! Reading and checking a script: every problem found at once, each named by file and line.

use super::file::{MintFile, PopulationFile, ScriptFile, StepFile, TokenFile};
use super::guard::{expansion, max_values, may_alias, too_deep, MAX_NESTING};
use super::lines::Lines;
use super::model::{Matcher, Population, Script, Step};
use std::time::Duration;

/// The most connections a script's populations may open in all, as `--conns` allows.
pub const MAX_CONNS: usize = 100_000;

/// How a token of the file is got: read from a file, or minted with a secret.
pub trait Tokens {
    fn read(&self, path: &str) -> Result<String, String>;
    fn mint(&self, mint: &MintFile, secret_file: Option<&str>) -> Result<String, String>;
}

/// Where a problem is and what it is; sorted by line before they are reported.
type Problems = Vec<(usize, String)>;

/// Read and check a script. Every problem is `FILE:LINE: what; the fix`, all of them at once.
pub fn parse(text: &str, file: &str, tokens: &dyn Tokens) -> Result<(Script, ScriptFile), String> {
    refuse_what_the_reader_cannot_bear(text, file)?;
    let f: ScriptFile = serde_yaml_ng::from_str(text).map_err(|e| {
        let line = e.location().map_or(1, |l| l.line());
        let msg = e.to_string();
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        format!("{file}:{line}: {msg}")
    })?;
    let lines = Lines::new(text);
    let mut problems: Problems = Vec::new();
    let pops_line = lines.find("populations", 1, lines.end());
    // Each population's lines: from its item to the next one's.
    let pop_items = lines.items(pops_line);
    if f.populations.is_empty() {
        problems.push((
            pops_line,
            "no population: give at least one under populations:".into(),
        ));
    }
    let mut names = std::collections::BTreeSet::new();
    let mut pops = Vec::new();
    let mut total = 0usize;
    // Where the last population was found: the next is searched from there.
    let mut after = pops_line;
    for (pi, p) in f.populations.iter().enumerate() {
        let start = pop_items.get(pi).copied().unwrap_or(after);
        let end = pop_items.get(pi + 1).copied().unwrap_or(lines.end());
        let at = lines.find(&format!("name: {}", p.name), start, end);
        after = at;
        if !names.insert(p.name.clone()) {
            problems.push((at, format!("population '{}' is named twice", p.name)));
        }
        // Added checked: populations of 2^63 + 2^63 + 2 connections wrapped to 2.
        total = total.saturating_add(p.conns);
        let place = Place {
            lines: &lines,
            at,
            end,
        };
        pops.push(population(p, &place, tokens, &mut problems));
    }
    if total > MAX_CONNS {
        problems.push((
            pops_line,
            format!(
                "the populations' connections add up to {}; a run opens at most {MAX_CONNS} \
                 (as --conns): give fewer",
                if total == usize::MAX {
                    "more than the count can hold".to_string()
                } else {
                    total.to_string()
                }
            ),
        ));
    }
    let stages = stages(&f, &lines, total, &mut problems);
    for t in &f.thresholds {
        if let Err(e) = t.parse::<crate::selftest::threshold::Threshold>() {
            problems.push((lines.find(t, 1, lines.end()), e));
        }
    }
    if problems.is_empty() {
        return Ok((
            Script {
                populations: pops,
                stages,
            },
            f,
        ));
    }
    problems.sort();
    Err(problems
        .into_iter()
        .map(|(l, m)| format!("{file}:{l}: {m}"))
        .collect::<Vec<_>>()
        .join("\n"))
}

/// Checked before the YAML reader runs: what would take it minutes or gigabytes.
fn refuse_what_the_reader_cannot_bear(text: &str, file: &str) -> Result<(), String> {
    if let Some(line) = too_deep(text) {
        return Err(format!(
            "{file}:{line}: nested deeper than {MAX_NESTING} levels of [ and {{; a script \
             needs a few: flatten the data (or quote a text that holds brackets)"
        ));
    }
    if may_alias(text) {
        if let Some(line) = expansion(text) {
            return Err(format!(
                "{file}:{line}: its aliases (*NAME) expand it to more than {} values, far \
                 more than a file of {} bytes holds; write the repeated part out where it is \
                 used (or generate the file) instead of aliasing it",
                max_values(text),
                text.len()
            ));
        }
    }
    Ok(())
}

/// One population's lines in the file: its item's line and where the next begins.
struct Place<'l, 'a> {
    lines: &'l Lines<'a>,
    at: usize,
    end: usize,
}

impl Place<'_, '_> {
    /// The line of `needle` within the population (its first line when absent).
    fn find(&self, needle: &str) -> usize {
        self.lines.find(needle, self.at, self.end)
    }
}

/// A population checked and resolved: its target (path, headers, subprotocol, token) and steps.
fn population(
    p: &PopulationFile,
    place: &Place,
    tokens: &dyn Tokens,
    problems: &mut Problems,
) -> Population {
    if p.name.is_empty() || p.name.contains(['.', ' ', '*']) {
        problems.push((place.at, format!("population name '{}': use letters, digits, - and _ (a threshold names it as NAME.STEP.STAT)", p.name)));
    }
    if p.conns == 0 || p.conns > MAX_CONNS {
        problems.push((
            place.find("conns:"),
            format!(
                "population '{}': conns {}; give 1..={MAX_CONNS} connections",
                p.name, p.conns
            ),
        ));
    }
    if p.steps.is_empty() {
        problems.push((
            place.find("steps:"),
            format!(
                "population '{}': no steps; give at least one (idle: 10s holds the connection)",
                p.name
            ),
        ));
    }
    let mut path = p.path.clone().unwrap_or_default();
    if !path.is_empty() && !path.starts_with('/') {
        problems.push((
            place.find("path:"),
            format!("population '{}': path '{path}' must start with /", p.name),
        ));
    }
    let mut headers = String::new();
    for (k, v) in &p.headers {
        if k.is_empty() || k.contains([':', '\r', '\n', ' ']) || v.contains(['\r', '\n']) {
            problems.push((
                place.find(k),
                format!(
                    "population '{}': header '{k}' is not a valid header line",
                    p.name
                ),
            ));
        }
        headers.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(sp) = &p.subprotocol {
        headers.push_str(&format!("Sec-WebSocket-Protocol: {sp}\r\n"));
    }
    if let Some(t) = &p.token {
        token(
            t,
            &p.name,
            place,
            tokens,
            (&mut path, &mut headers),
            problems,
        );
    }
    Population {
        name: p.name.clone(),
        conns: p.conns,
        path,
        headers,
        repeat: p.repeat,
        steps: steps(p, place, problems),
    }
}

/// The population's token read or minted, and put where it is sent: an Authorization
/// header, or the query.
fn token(
    t: &TokenFile,
    population: &str,
    place: &Place,
    tokens: &dyn Tokens,
    (path, headers): (&mut String, &mut String),
    problems: &mut Problems,
) {
    let tline = place.find("token:");
    let got = match (&t.file, &t.mint) {
        (Some(path), None) => tokens.read(path),
        (None, Some(m)) => tokens.mint(m, t.secret_file.as_deref()),
        _ => Err("give exactly one of file: or mint:".into()),
    };
    match (got, t.send_in.as_deref()) {
        (Err(e), _) => problems.push((tline, format!("population '{population}': token: {e}"))),
        (Ok(tok), None | Some("header")) => {
            headers.push_str(&format!("Authorization: Bearer {}\r\n", tok.trim()))
        }
        (Ok(tok), Some("query")) => {
            let sep = if path.contains('?') { '&' } else { '?' };
            *path = format!(
                "{}{sep}token={}",
                if path.is_empty() { "/" } else { path.as_str() },
                tok.trim()
            );
        }
        (Ok(_), Some(other)) => problems.push((
            tline,
            format!("population '{population}': send_in '{other}': header or query"),
        )),
    }
}

/// The population's steps as the generator runs them: `subscribe` is the channels
/// protocol's request and its answer, `publish` its message.
fn steps(p: &PopulationFile, place: &Place, problems: &mut Problems) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut step_names = std::collections::BTreeSet::new();
    let steps_line = place.find("steps:");
    let step_items = place.lines.items(steps_line);
    for (i, s) in p.steps.iter().enumerate() {
        let sline = step_items.get(i).copied().unwrap_or(steps_line + 1);
        let kinds = [
            s.send.is_some(),
            s.expect.is_some(),
            s.subscribe.is_some(),
            s.publish.is_some(),
            s.think.is_some(),
            s.idle.is_some(),
        ]
        .iter()
        .filter(|k| **k)
        .count();
        if kinds != 1 {
            problems.push((sline, format!("population '{}', step {}: give exactly one of send, expect, subscribe, publish, think, idle", p.name, i + 1)));
            continue;
        }
        let name = step_name(s, i);
        if !step_names.insert(name.clone()) {
            problems.push((
                sline,
                format!("population '{}': step name '{name}' is used twice", p.name),
            ));
        }
        if let Some(pl) = &s.send {
            match (&pl.text, &pl.json) {
                (Some(t), None) => steps.push(Step::Send { text: t.clone() }),
                (None, Some(j)) => steps.push(Step::Send {
                    text: j.to_string(),
                }),
                _ => problems.push((
                    sline,
                    format!(
                        "population '{}', step {name}: send needs text: or json:",
                        p.name
                    ),
                )),
            }
        } else if let Some(e) = &s.expect {
            let matcher = match (&e.text, &e.contains, &e.json) {
                (Some(t), None, None) => Matcher::Text(t.clone()),
                (None, Some(c), None) => Matcher::Contains(c.clone()),
                (None, None, Some(j)) => Matcher::Json(j.clone()),
                _ => {
                    problems.push((sline, format!("population '{}', step {name}: expect needs one of text:, contains:, json:", p.name)));
                    continue;
                }
            };
            steps.push(Step::Expect {
                name,
                matcher,
                timeout_ms: timeout_ms(e.timeout),
            });
        } else if let Some(ch) = &s.subscribe {
            // The channels protocol: the server answers {"op":"subscribed","channel":ch}.
            steps.push(Step::Send {
                text: serde_json::json!({"op": "subscribe", "channel": ch}).to_string(),
            });
            steps.push(Step::Expect {
                name,
                matcher: Matcher::Json(serde_json::json!({"op": "subscribed", "channel": ch})),
                timeout_ms: 5000,
            });
        } else if let Some(pb) = &s.publish {
            steps.push(Step::Send {
                text: serde_json::json!({"op": "publish", "channel": pb.channel, "data": pb.data})
                    .to_string(),
            });
        } else if let Some(d) = s.think {
            steps.push(Step::Think {
                ms: d.as_millis() as u64,
            });
        } else if let Some(d) = s.idle {
            steps.push(Step::Idle {
                ms: d.as_millis() as u64,
            });
        }
    }
    steps
}

/// `stages:` checked and made relative: each (level as a share of `total`, seconds). The
/// count must rise to `total` (every connection of the populations opens) and may then only
/// fall: a connection opens once and closes once.
fn stages(f: &ScriptFile, lines: &Lines, total: usize, problems: &mut Problems) -> Vec<(f64, f64)> {
    if f.stages.is_empty() {
        return Vec::new();
    }
    let at = lines.find("stages:", 1, lines.end());
    let items = lines.items(at);
    if f.ramp.is_some() || f.duration.is_some() {
        problems.push((
            at,
            "stages replace ramp and duration: give one or the other".into(),
        ));
    }
    let mut out = Vec::new();
    let (mut level, mut peaked) = (0usize, false);
    for (i, s) in f.stages.iter().enumerate() {
        let line = items.get(i).copied().unwrap_or(at + 1);
        match (s.to, s.over, s.hold) {
            (Some(to), Some(over), None) => {
                if to > total {
                    problems.push((
                        line,
                        format!(
                            "stage {}: to {to} is more than the populations' {total} connections",
                            i + 1
                        ),
                    ));
                } else if to > level && peaked {
                    problems.push((
                        line,
                        format!(
                            "stage {}: the count may only fall once it has risen to {total}",
                            i + 1
                        ),
                    ));
                } else if to < level && !peaked {
                    problems.push((
                        line,
                        format!(
                            "stage {}: the count may only rise until it reaches {total}",
                            i + 1
                        ),
                    ));
                }
                if to == total {
                    peaked = true;
                }
                level = to;
                out.push((to as f64 / total.max(1) as f64, over.as_secs_f64()));
            }
            (None, None, Some(hold)) => {
                out.push((level as f64 / total.max(1) as f64, hold.as_secs_f64()))
            }
            _ => problems.push((
                line,
                format!(
                    "stage {}: give {{to: N, over: DURATION}} or {{hold: DURATION}}",
                    i + 1
                ),
            )),
        }
    }
    if !peaked {
        problems.push((at, format!("the stages never reach the populations' {total} connections: end a rise at to: {total}")));
    }
    out
}

fn timeout_ms(d: Option<Duration>) -> u64 {
    d.map_or(5000, |d| d.as_millis() as u64)
}

/// The step's name in the report and in thresholds: its `name`, else its kind and number
/// (`expect3`: the population's third step).
fn step_name(s: &StepFile, i: usize) -> String {
    if let Some(n) = &s.name {
        return n.clone();
    }
    let kind = if s.expect.is_some() {
        "expect"
    } else if s.subscribe.is_some() {
        "subscribe"
    } else if s.publish.is_some() {
        "publish"
    } else if s.send.is_some() {
        "send"
    } else if s.think.is_some() {
        "think"
    } else {
        "idle"
    };
    format!("{kind}{}", i + 1)
}
