//! docs/coverage.md: the coverage ledger. Every parameter of the public sources the catalog rests
//! on (ip-sysctl.rst, net.rst, scaling.rst, fs.rst, nf_conntrack-sysctl.rst, the cgroup v2 memory
//! and pids files, systemd's resource properties, Windows' TCP/IP registry values and RSS
//! keywords), each with a verdict: checked by a check, shown by one, not relevant to a
//! many-connection host and why, or a gap. Completeness is shown row by row, not claimed.
//!
//! The rows are data (`checks/coverage.yaml`, beside the catalogs they answer for, so a new
//! check and its row land in one change); this module parses and validates them and renders
//! the page. The unit tests below fail when the page is stale, when a row names a check the
//! built-in catalogs do not define, and when a built-in check's key has no row naming it.

use super::checks_doc::row;
use crate::catalog::{self, Compare, Source as CheckSource};
use crate::host::Platform;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// The ledger's data, compiled in so the page and its tests read exactly the committed rows.
const LEDGER: &str = include_str!("../../checks/coverage.yaml");

/// What wstune does about one parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Checks that judge it (pass, warn or fail against a target).
    Checked(Vec<String>),
    /// Checks that report it without judging (`compare: report`).
    Shown(Vec<String>),
    /// Why it does not bear on a host holding many connections.
    NotRelevant(String),
    /// Why it bears on one although no check reads it yet.
    Gap(String),
}

impl Verdict {
    /// The check ids a verdict names (none for `not relevant` and `gap`).
    pub fn ids(&self) -> &[String] {
        match self {
            Verdict::Checked(ids) | Verdict::Shown(ids) => ids,
            Verdict::NotRelevant(_) | Verdict::Gap(_) => &[],
        }
    }
}

/// One source of the ledger, as its header says.
#[derive(Debug, Clone)]
pub struct SourceInfo {
    /// Short name, the page's anchor.
    pub name: String,
    pub title: String,
    pub url: String,
    /// Where and at which revision the source was read.
    pub revision: String,
    /// What the source's rows leave out or group, if anything.
    pub note: Option<String>,
}

/// One parameter of one source, with its verdict.
#[derive(Debug, Clone)]
pub struct Row {
    /// Index into [`Ledger::sources`].
    pub source: usize,
    pub section: String,
    pub name: String,
    pub verdict: Verdict,
}

/// The whole ledger, validated: rows are in the sources' order.
#[derive(Debug, Clone)]
pub struct Ledger {
    pub sources: Vec<SourceInfo>,
    pub rows: Vec<Row>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    sources: Vec<RawSource>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    name: String,
    title: String,
    url: String,
    revision: String,
    #[serde(default)]
    note: Option<String>,
    sections: Vec<RawSection>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSection {
    section: String,
    rows: Vec<RawRow>,
}

/// A row as written: one parameter (`name`) or several sharing a verdict (`names`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRow {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    names: Option<Vec<String>>,
    #[serde(default)]
    checked: Option<Ids>,
    #[serde(default)]
    shown: Option<Ids>,
    #[serde(default)]
    not_relevant: Option<String>,
    #[serde(default)]
    gap: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Ids {
    One(String),
    Many(Vec<String>),
}

impl Ids {
    fn into_vec(self) -> Vec<String> {
        match self {
            Ids::One(id) => vec![id],
            Ids::Many(ids) => ids,
        }
    }
}

/// Parses and validates ledger text, collecting every problem (with the row's source and
/// section) before failing: a row with no name or no verdict, or two verdicts, an empty
/// reason, a parameter listed twice in one source, a source name used twice.
pub fn parse(text: &str) -> Result<Ledger, Vec<String>> {
    let raw: RawFile = serde_yaml_ng::from_str(text)
        .map_err(|e| vec![format!("checks/coverage.yaml does not parse: {e}")])?;
    let mut problems = Vec::new();
    let mut ledger = Ledger {
        sources: Vec::new(),
        rows: Vec::new(),
    };
    let mut source_names = BTreeSet::new();
    for (si, s) in raw.sources.into_iter().enumerate() {
        if !source_names.insert(s.name.clone()) {
            problems.push(format!("source `{}` is listed twice", s.name));
        }
        if !s.url.starts_with("https://") {
            problems.push(format!(
                "source `{}`: its url must be an https:// address",
                s.name
            ));
        }
        let mut seen = BTreeSet::new();
        for sec in s.sections {
            for r in sec.rows {
                let at = format!("{} / {}", s.name, sec.section);
                let names: Vec<String> = match (r.name, r.names) {
                    (Some(n), None) => vec![n],
                    (None, Some(ns)) if !ns.is_empty() => ns,
                    (None, _) => {
                        problems.push(format!("{at}: a row has no `name` (or an empty `names`)"));
                        continue;
                    }
                    (Some(n), Some(_)) => {
                        problems.push(format!("{at}: `{n}` has both `name` and `names`"));
                        continue;
                    }
                };
                let label = names.join(", ");
                let mut verdicts = Vec::new();
                if let Some(ids) = r.checked {
                    verdicts.push(Verdict::Checked(ids.into_vec()));
                }
                if let Some(ids) = r.shown {
                    verdicts.push(Verdict::Shown(ids.into_vec()));
                }
                if let Some(why) = r.not_relevant {
                    verdicts.push(Verdict::NotRelevant(why));
                }
                if let Some(why) = r.gap {
                    verdicts.push(Verdict::Gap(why));
                }
                if verdicts.len() != 1 {
                    problems.push(format!(
                        "{at}: `{label}` needs exactly one of checked, shown, not_relevant, gap \
                         (it has {})",
                        verdicts.len()
                    ));
                    continue;
                }
                let verdict = verdicts.remove(0);
                match &verdict {
                    Verdict::Checked(ids) | Verdict::Shown(ids) if ids.is_empty() => {
                        problems.push(format!("{at}: `{label}` names no check id"))
                    }
                    Verdict::NotRelevant(why) | Verdict::Gap(why) if why.trim().is_empty() => {
                        problems.push(format!("{at}: `{label}` gives no reason"))
                    }
                    _ => {}
                }
                for name in names {
                    if !seen.insert(name.to_ascii_lowercase()) {
                        problems.push(format!("{at}: `{name}` is listed twice in this source"));
                    }
                    ledger.rows.push(Row {
                        source: si,
                        section: sec.section.clone(),
                        name,
                        verdict: verdict.clone(),
                    });
                }
            }
        }
        ledger.sources.push(SourceInfo {
            name: s.name,
            title: s.title,
            url: s.url,
            revision: s.revision,
            note: s.note,
        });
    }
    if problems.is_empty() {
        Ok(ledger)
    } else {
        Err(problems)
    }
}

/// The committed ledger. It is compiled in and its tests keep it valid, so a problem here is a
/// build that skipped them.
pub fn ledger() -> Ledger {
    parse(LEDGER).unwrap_or_else(|p| panic!("checks/coverage.yaml: {}", p.join("; ")))
}

/// A check id as the catalogs define it: a `.boot` view or a per-NIC suffix (`[nic]`,
/// `.{nic}`) names its base check.
pub fn base_id(id: &str) -> &str {
    ["[nic]", ".{nic}", ".boot"]
        .iter()
        .find_map(|s| id.strip_suffix(s))
        .unwrap_or(id)
}

/// The parameter a check reads, as the ledger names it, or `None` when the check reads a
/// counter or a computed fact rather than a parameter of a source (exempt from the ledger):
/// - a sysctl, or its boot entry: the dotted name (`net.core.somaxconn`);
/// - a systemd property: its name (`LimitNOFILE`);
/// - a process resource limit: the systemd.exec property that sets it (`LimitNOFILE`);
/// - a file under /proc/sys: its sysctl name; a cgroup file: its file name (`pids.max`);
///   any other file (a NIC's statistics) is a counter;
/// - a registry value: its value name (`TcpTimedWaitDelay`, `*RSSProfile`);
/// - Windows' dynamic port range or its size: `netsh int ipv4|ipv6 dynamicport tcp`;
/// - netstat, sockstat, softnet, conntrack and softirq counters, a NIC driver's `ethtool -S`
///   counters and facts: exempt.
///
/// A source kind not classified here is an error, so a new kind gets a decision.
#[allow(unreachable_patterns)]
pub fn key(source: &CheckSource) -> Result<Option<String>, String> {
    Ok(match source {
        CheckSource::Sysctl(k) | CheckSource::BootEntry(k) => Some(k.clone()),
        CheckSource::Systemd(p) => Some(p.clone()),
        CheckSource::Rlimit(r) => Some(format!(
            "Limit{}",
            format!("{:?}", r.resource).to_ascii_uppercase()
        )),
        CheckSource::File(path) => {
            if let Some(rest) = path.strip_prefix("/proc/sys/") {
                Some(rest.replace('/', "."))
            } else if path.contains("cgroup") {
                path.rsplit('/').next().map(str::to_string)
            } else {
                None
            }
        }
        CheckSource::Registry(r) => Some(r.value.clone()),
        CheckSource::DynamicPorts(v) | CheckSource::DynamicPortCount(v) => {
            Some(format!("netsh int {} dynamicport tcp", v.as_str()))
        }
        CheckSource::Netstat(_)
        | CheckSource::Sockstat(_)
        | CheckSource::Softnet(_)
        | CheckSource::ConntrackStat(_)
        | CheckSource::Softirq(_)
        | CheckSource::NicStat(_)
        | CheckSource::Fact(_) => None,
        other => {
            return Err(format!(
                "a check source of a kind the ledger does not classify ({other:?}): say in \
                 coverage_doc::key whether it reads a parameter (and which) or a counter"
            ))
        }
    })
}

/// The built-in checks of both platforms' catalogs (checks/linux.yaml, checks/windows.yaml).
pub fn builtin_checks() -> Vec<catalog::Check> {
    let known = super::checks_doc::default_variables();
    [Platform::Linux, Platform::Windows]
        .into_iter()
        .flat_map(|p| {
            catalog::load(p, None, &known)
                .expect("the built-in catalogs load")
                .checks
                .into_iter()
                .map(|d| d.check)
        })
        .collect()
}

/// Every check id a report can carry (base ids): both catalogs, `--lb-config`'s checks and
/// the journal's.
pub fn builtin_ids() -> BTreeSet<String> {
    let mut ids: BTreeSet<String> = builtin_checks().into_iter().map(|c| c.id).collect();
    ids.extend(crate::lb::wording::defs().iter().map(|d| d.id.clone()));
    ids.extend(catalog::computed::all().iter().map(|c| c.id.clone()));
    ids
}

/// Problems between a ledger and the checks: a check whose key has no row naming it, a row
/// that says `checked` for checks that only report, or `shown` for one that judges.
pub fn check_problems(ledger: &Ledger, checks: &[catalog::Check]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut by_name: BTreeMap<String, Vec<&Row>> = BTreeMap::new();
    for r in &ledger.rows {
        by_name
            .entry(r.name.to_ascii_lowercase())
            .or_default()
            .push(r);
    }
    let compare: BTreeMap<&str, Compare> =
        checks.iter().map(|c| (c.id.as_str(), c.compare)).collect();
    for c in checks {
        let key = match key(&c.source) {
            Ok(Some(k)) => k,
            Ok(None) => continue,
            Err(e) => {
                problems.push(format!("{}: {e}", c.id));
                continue;
            }
        };
        let rows = by_name.get(&key.to_ascii_lowercase());
        let named = rows.is_some_and(|rows| {
            rows.iter()
                .any(|r| r.verdict.ids().iter().any(|id| base_id(id) == c.id))
        });
        if !named {
            problems.push(match rows {
                None => format!(
                    "{} reads `{key}`, which has no row in checks/coverage.yaml: add it \
                     (under its source's section) with `checked: {}` or `shown: {}`",
                    c.id, c.id, c.id
                ),
                Some(_) => format!(
                    "{} reads `{key}`, whose row in checks/coverage.yaml does not name it: \
                     list {} in that row's checked (or shown) ids",
                    c.id, c.id
                ),
            });
        }
    }
    for r in &ledger.rows {
        let known: Vec<Compare> = r
            .verdict
            .ids()
            .iter()
            .filter_map(|id| compare.get(base_id(id)).copied())
            .collect();
        if known.is_empty() {
            continue;
        }
        let all_report = known.iter().all(|c| *c == Compare::Report);
        match &r.verdict {
            Verdict::Checked(_) if all_report => problems.push(format!(
                "`{}` says checked, but its checks only report it: say `shown`",
                r.name
            )),
            Verdict::Shown(_) if !all_report => problems.push(format!(
                "`{}` says shown, but a check judges it: say `checked`",
                r.name
            )),
            _ => {}
        }
    }
    problems
}

/// Ids a ledger names that are not in `ids` (base ids compared).
pub fn unknown_ids(ledger: &Ledger, ids: &BTreeSet<String>) -> Vec<String> {
    let mut out = BTreeSet::new();
    for r in &ledger.rows {
        for id in r.verdict.ids() {
            if !ids.contains(base_id(id)) {
                out.insert(id.clone());
            }
        }
    }
    out.into_iter().collect()
}

/// The whole of docs/coverage.md.
pub fn coverage_markdown() -> String {
    render(&ledger(), &builtin_ids())
}

/// The page for a ledger; an id in `ids` links to its entry in docs/checks.md.
fn render(ledger: &Ledger, ids: &BTreeSet<String>) -> String {
    let mut out = String::from(
        "# Coverage ledger\n\n\
         Which parameters of the public sources wstune's checks rest on are checked, which \
         are shown, and which do not bear on a host that holds many connections (a WebSocket \
         server, the proxy in front of it, a Kubernetes node running either), one row per \
         parameter the source documents. Completeness is shown here rather than claimed: each \
         source was read end to end (its revision is named under its heading; a source read \
         only in part says so), and a relevant parameter no check reads yet is listed as a \
         **gap**, with why it matters.\n\n\
         - *checked*: a check judges it against a target (the link leads to the check in \
         [checks.md](checks.md));\n\
         - *shown*: a check reports it without judging;\n\
         - *not relevant*: why it does not bear on many connections;\n\
         - *gap*: why it does, although no check reads it yet.\n\n\
         A check that reads a counter or a computed fact (`/proc/net/netstat`, sockstat, \
         softnet, conntrack statistics, a NIC's statistics, CPU and memory facts) reads no \
         parameter of a source and has no row. A check of a process's resource limit counts \
         as a check of the systemd.exec `Limit*=` that sets it.\n\n\
         Generated from `checks/coverage.yaml` (`src/report/coverage_doc.rs`); unit tests \
         fail when this file is stale, when a row names a check the catalogs do not define, \
         and when a check's parameter has no row naming it. \
         `UPDATE_SNAPSHOTS=1 cargo test --lib coverage_doc` rewrites it.\n",
    );
    // Counts per source and overall.
    out.push_str(
        "\n| source | checked | shown | not relevant | gap | parameters |\n|---|---|---|---|---|---|\n",
    );
    let mut total = [0usize; 5];
    for (i, s) in ledger.sources.iter().enumerate() {
        let mut n = [0usize; 5];
        for r in ledger.rows.iter().filter(|r| r.source == i) {
            n[slot(&r.verdict)] += 1;
            n[4] += 1;
        }
        for (t, v) in total.iter_mut().zip(n) {
            *t += v;
        }
        out.push_str(&row(&[
            &format!("[{}](#{})", short_title(&s.title), anchor(&s.name)),
            &n[0].to_string(),
            &n[1].to_string(),
            &n[2].to_string(),
            &n[3].to_string(),
            &n[4].to_string(),
        ]));
    }
    out.push_str(&row(&[
        "**all**",
        &total[0].to_string(),
        &total[1].to_string(),
        &total[2].to_string(),
        &total[3].to_string(),
        &total[4].to_string(),
    ]));
    // The gaps together, where a reader deciding the next check looks first: lists, not a
    // table, so long parameter names and reasons wrap in the book's column.
    out.push_str("\n## Gaps\n\nRelevant parameters no check reads yet, by source.\n");
    for (i, s) in ledger.sources.iter().enumerate() {
        let gaps: Vec<&Row> = ledger
            .rows
            .iter()
            .filter(|r| r.source == i && matches!(r.verdict, Verdict::Gap(_)))
            .collect();
        if gaps.is_empty() {
            continue;
        }
        out.push_str(&format!(
            "\n[{}](#{}):\n\n",
            short_title(&s.title),
            anchor(&s.name)
        ));
        for r in gaps {
            if let Verdict::Gap(why) = &r.verdict {
                out.push_str(&format!("- {}: {}\n", name_cell(&r.name), prose(why)));
            }
        }
    }
    for (i, s) in ledger.sources.iter().enumerate() {
        out.push_str(&format!(
            "\n<a id=\"{}\"></a>\n\n## {}\n\n[The source]({}), read at {}.",
            anchor(&s.name),
            s.title,
            s.url,
            s.revision
        ));
        if let Some(note) = &s.note {
            out.push(' ');
            out.push_str(&prose(note));
        }
        out.push('\n');
        let mut section: Option<&str> = None;
        for r in ledger.rows.iter().filter(|r| r.source == i) {
            if section != Some(r.section.as_str()) {
                section = Some(&r.section);
                out.push_str(&format!(
                    "\n**{}**\n\n| parameter | verdict |\n|---|---|\n",
                    prose(&r.section)
                ));
            }
            out.push_str(&row(&[&name_cell(&r.name), &verdict_cell(&r.verdict, ids)]));
        }
    }
    out
}

/// The column of a verdict in the counts: checked, shown, not relevant, gap.
fn slot(v: &Verdict) -> usize {
    match v {
        Verdict::Checked(_) => 0,
        Verdict::Shown(_) => 1,
        Verdict::NotRelevant(_) => 2,
        Verdict::Gap(_) => 3,
    }
}

fn verdict_cell(v: &Verdict, known: &BTreeSet<String>) -> String {
    let links = |ids: &[String]| {
        ids.iter()
            .map(|id| {
                let base = base_id(id);
                if known.contains(base) {
                    format!("[`{id}`](checks.md#{base})")
                } else {
                    format!("`{id}`")
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    match v {
        Verdict::Checked(ids) => format!("checked: {}", links(ids)),
        Verdict::Shown(ids) => format!("shown: {}", links(ids)),
        Verdict::NotRelevant(why) => format!("not relevant: {}", prose(why)),
        Verdict::Gap(why) => format!("**gap**: {}", prose(why)),
    }
}

/// Words from the ledger on one line, with `*` (as in `conf/all/*`, `Limit*=`) kept literal
/// rather than read as emphasis.
fn prose(text: &str) -> String {
    text.replace('\n', " ").replace('*', "\\*")
}

/// A parameter's name as code; a description (`receive queues (ethtool -L)`) as words.
fn name_cell(name: &str) -> String {
    if name.contains(' ') {
        name.to_string()
    } else {
        format!("`{name}`")
    }
}

fn anchor(name: &str) -> String {
    format!("ledger-{name}")
}

/// A source's title up to its parenthesis, for the counts and the gaps (`Linux: IP sysctl`).
fn short_title(title: &str) -> &str {
    title.split(" (").next().unwrap_or(title)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_coverage_md_is_current() {
        crate::report::book::assert_current(
            "docs/coverage.md",
            &coverage_markdown(),
            "the ledger or a check id changed",
            "coverage_doc",
        );
    }

    #[test]
    fn the_ledger_parses_without_problems() {
        if let Err(p) = parse(LEDGER) {
            panic!("checks/coverage.yaml:\n{}", p.join("\n"));
        }
    }

    /// Every id a row names is a check a report can carry.
    #[test]
    fn every_id_the_ledger_names_exists() {
        let ids = builtin_ids();
        let unknown = unknown_ids(&ledger(), &ids);
        assert!(
            unknown.is_empty(),
            "checks/coverage.yaml names check ids no catalog defines: {}",
            unknown.join(", ")
        );
    }

    /// Every built-in check's parameter has a row that names the check, and checked/shown
    /// agree with what the check does.
    #[test]
    fn every_check_key_has_a_row_naming_it() {
        let problems = check_problems(&ledger(), &builtin_checks());
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    /// A built-in check made over into the one a test needs.
    fn check(id: &str, source: CheckSource, compare: Compare) -> catalog::Check {
        let mut c = builtin_checks().remove(0);
        c.id = id.to_string();
        c.source = source;
        c.compare = compare;
        c
    }

    const SMALL: &str = "sources:\n  - name: s\n    title: T\n    url: https://example.org\n    \
                         revision: r\n    sections:\n      - section: S\n        rows:\n";

    /// The key test can fail: a check with no row, and a row that does not name the check.
    #[test]
    fn a_check_without_its_row_is_reported() {
        let c = check(
            "linux.net.core.somaxconn",
            CheckSource::Sysctl("net.core.somaxconn".into()),
            Compare::AtLeast,
        );
        let none = parse(&format!(
            "{SMALL}          - {{name: net.ipv4.tcp_rmem, gap: g}}\n"
        ))
        .unwrap();
        let p = check_problems(&none, std::slice::from_ref(&c));
        assert_eq!(p.len(), 1);
        assert!(p[0].contains("has no row"), "{p:?}");
        let unnamed = parse(&format!(
            "{SMALL}          - {{name: net.core.somaxconn, gap: g}}\n"
        ))
        .unwrap();
        let p = check_problems(&unnamed, std::slice::from_ref(&c));
        assert!(p[0].contains("does not name it"), "{p:?}");
        let named = parse(&format!(
            "{SMALL}          - {{name: net.core.somaxconn, checked: linux.net.core.somaxconn.boot}}\n"
        ))
        .unwrap();
        assert!(check_problems(&named, &[c]).is_empty());
    }

    #[test]
    fn checked_and_shown_follow_what_the_check_does() {
        let c = check(
            "linux.net.core.rps_sock_flow_entries",
            CheckSource::Sysctl("net.core.rps_sock_flow_entries".into()),
            Compare::Report,
        );
        let l = parse(&format!(
            "{SMALL}          - {{name: net.core.rps_sock_flow_entries, checked: linux.net.core.rps_sock_flow_entries}}\n"
        ))
        .unwrap();
        let p = check_problems(&l, &[c]);
        assert!(p[0].contains("say `shown`"), "{p:?}");
    }

    #[test]
    fn an_unknown_id_is_reported_and_suffixes_name_their_base() {
        let l = parse(&format!(
            "{SMALL}          - {{name: a, checked: [\"linux.nic.rx_queues[nic]\", linux.x.boot]}}\n"
        ))
        .unwrap();
        let ids: BTreeSet<String> = ["linux.nic.rx_queues".to_string()].into();
        assert_eq!(unknown_ids(&l, &ids), vec!["linux.x.boot".to_string()]);
    }

    #[test]
    fn malformed_rows_are_all_reported() {
        let p = parse(&format!(
            "{SMALL}          - {{name: a}}\n          - {{name: b, gap: g, shown: x}}\n          \
             - {{gap: g}}\n          - {{name: c, not_relevant: \" \"}}\n          \
             - {{name: d, gap: g}}\n          - {{name: D, gap: g}}\n"
        ))
        .unwrap_err();
        assert_eq!(p.len(), 5, "{p:?}");
    }

    #[test]
    fn keys_follow_the_source_kind() {
        use crate::catalog::RlimitSource;
        let k = |s: CheckSource| key(&s).unwrap();
        assert_eq!(
            k(CheckSource::Sysctl("fs.nr_open".into())).as_deref(),
            Some("fs.nr_open")
        );
        assert_eq!(
            k(CheckSource::File("/sys/fs/cgroup/{cgroup}/pids.max".into())).as_deref(),
            Some("pids.max")
        );
        assert_eq!(
            k(CheckSource::File("/proc/sys/kernel/threads-max".into())).as_deref(),
            Some("kernel.threads-max")
        );
        assert_eq!(
            k(CheckSource::File(
                "/sys/class/net/{nic}/statistics/rx_missed_errors".into()
            )),
            None
        );
        let r: RlimitSource =
            serde_yaml_ng::from_str("{resource: nofile, limit: soft, process: pid}").unwrap();
        assert_eq!(k(CheckSource::Rlimit(r)).as_deref(), Some("LimitNOFILE"));
    }

    /// The page's tables stay tables: one line per row and no stray cell separator, two
    /// columns per source table, six in the counts.
    #[test]
    fn rows_are_one_line_each() {
        let md = coverage_markdown();
        for line in md.lines().filter(|l| l.starts_with("| ")) {
            let seps = line.matches(" | ").count();
            assert!(seps == 1 || seps == 5, "{line}");
            assert!(line.ends_with(" |"), "{line}");
        }
    }
}
