//! docs/checks.md: every check id an operator can meet in a report, what it checks, on which
//! platform, and the fix, generated from the catalogs (checks/linux.yaml, checks/windows.yaml,
//! checks/lb.yaml, checks/wstune.yaml) so the list cannot drift from them. A unit test below fails when the
//! committed file is stale; `UPDATE_SNAPSHOTS=1 cargo test --lib checks_doc` rewrites it.

use crate::catalog;
use crate::host::Platform;
use std::collections::BTreeSet;

/// The fix of a journal check whose fix is computed (it names the entry), for the list.
const COMPUTED_FIX: &[(&str, &str)] = &[(
    "wstune.journal.pending",
    "`wstune rollback --id ID` restores the state before the interrupted apply (a new `wstune apply` also undoes it first); for a damaged entry the report names the file and what to do",
)];

/// How a check changes with the host's role (`roles:` in the catalog), in a few words.
fn by_role(c: &crate::catalog::Check) -> Option<String> {
    if c.roles.is_empty() {
        return None;
    }
    let parts: Vec<String> = c
        .roles
        .iter()
        .map(|(role, o)| {
            if o.skip.is_some() {
                return format!("{role}: not checked");
            }
            let mut what = Vec::new();
            if let Some(cmp) = o.compare {
                what.push(crate::catalog::eval::compare_str(cmp).to_string());
            }
            if let Some(t) = &o.target {
                what.push(match t {
                    serde_yaml_ng::Value::String(s) => s.clone(),
                    other => serde_yaml_ng::to_string(other)
                        .unwrap_or_default()
                        .trim()
                        .to_string(),
                });
            }
            if let Some(sev) = o.severity {
                what.push(format!("({})", format!("{sev:?}").to_lowercase()));
            }
            // Same target, other words: say which, never an empty entry.
            if what.is_empty() {
                what.push(
                    match (&o.why, &o.fix) {
                        (Some(_), Some(_)) => "its own why and fix",
                        (Some(_), None) => "its own why",
                        _ => "its own fix",
                    }
                    .to_string(),
                );
            }
            format!("{role}: {}", what.join(" "))
        })
        .collect();
    Some(format!("{}; other roles as written", parts.join("; ")))
}

/// One check as the page shows it: its row in a section's index table and its entry below the
/// table (the fix and the sources, too long for a table cell in the book's column).
struct Entry {
    id: String,
    /// What the index table says after the id (the check's title, a few words more).
    what: String,
    /// The entry's lines after its title: the fix and the sources.
    lines: Vec<String>,
    /// Said once after the title: how the check changes by role, the `.boot` view.
    more: Vec<String>,
}

impl Entry {
    fn new(id: &str, what: &str) -> Self {
        Entry {
            id: id.to_string(),
            what: what.to_string(),
            lines: Vec::new(),
            more: Vec::new(),
        }
    }
}

/// A section: a heading, a paragraph, an index table of ids (linked to their entries), then
/// one entry per check. `extra` is a third column of the table, `(header, cell per entry)`.
fn section(
    out: &mut String,
    heading: &str,
    about: &str,
    entries: &[Entry],
    extra: Option<(&str, Vec<&str>)>,
) {
    out.push_str(&format!("\n## {heading}\n\n{about}\n\n"));
    match &extra {
        Some((header, _)) => out.push_str(&format!(
            "| id | what it checks | {header} |\n|---|---|---|\n"
        )),
        None => out.push_str("| id | what it checks |\n|---|---|\n"),
    }
    for (i, e) in entries.iter().enumerate() {
        let link = format!("[`{}`](#{})", e.id, e.id);
        match &extra {
            Some((_, cells)) => out.push_str(&row(&[&link, &e.what, cells[i]])),
            None => out.push_str(&row(&[&link, &e.what])),
        }
    }
    for e in entries {
        let mut title = format!("<a id=\"{}\"></a>**`{}`**: {}.", e.id, e.id, e.what);
        for m in &e.more {
            title.push(' ');
            title.push_str(m);
        }
        out.push_str(&format!("\n{}\n\n", one_line(&title)));
        for l in &e.lines {
            out.push_str(&format!("- {}\n", one_line(l)));
        }
    }
}

/// The variables a built-in catalog's targets may name: the default profile's.
pub(crate) fn default_variables() -> BTreeSet<String> {
    crate::profile::load(crate::profile::DEFAULT)
        .expect("the default profile loads")
        .profile
        .variables()
        .into_keys()
        .collect()
}

/// The whole of docs/checks.md.
pub fn checks_markdown() -> String {
    let known = default_variables();
    let mut out = String::from(
        "# Check ids\n\n\
         Every finding `wstune check` reports carries one of these ids: the table's `Check` \
         column, `results[].id` in JSON, the JUnit test case name, the Prometheus `id` label. \
         Each section lists its ids in a table; below the table, each check has its fix and \
         the sources its recommendation rests on (*follows*; also `results[].refs` in JSON and \
         the list under `check --show all`), and the link on an id leads there. Placeholders \
         in a fix (`{target}`, `{desired}`, `{nic}`, `{file}`...) are filled in with this \
         host's values in the report itself. Which parameters of the kernel, systemd and \
         Windows sources these checks read, and which they leave out and why, is the \
         [coverage ledger](coverage.md).\n\n\
         Generated from `checks/linux.yaml`, `checks/windows.yaml`, `checks/lb.yaml` and \
         `checks/wstune.yaml` \
         (`src/report/checks_doc.rs`); a unit test fails when this file is stale, and \
         `UPDATE_SNAPSHOTS=1 cargo test --lib checks_doc` rewrites it.\n",
    );
    for (platform, file, about) in [
        (
            Platform::Linux,
            "checks/linux.yaml",
            "A sysctl check marked *also `.boot`* reports, as `ID.boot`, the value the next \
             boot sets and the sysctl.d file and line it comes from \
             (`linux.net.core.somaxconn.boot`). \
             A check on a NIC is reported once per physical NIC (`ID.eth0`).",
        ),
        (
            Platform::Windows,
            "checks/windows.yaml",
            "A check on a network adapter is reported once per adapter.",
        ),
    ] {
        let cat = catalog::load(platform, None, &known).expect("the built-in catalogs load");
        let name = match platform {
            Platform::Linux => "Linux",
            Platform::Windows => "Windows",
        };
        let entries: Vec<Entry> = cat
            .checks
            .iter()
            .map(|d| {
                let c = &d.check;
                let mut e = Entry::new(&c.id, &c.title);
                if d.has_boot_view() {
                    e.what.push_str("; also `.boot`");
                    e.more
                        .push(format!("`{}.boot` is what the next boot sets.", c.id));
                }
                if let Some(r) = by_role(c) {
                    e.more.push(format!("*By role:* {r}."));
                }
                match (&c.fix.runtime, &c.fix.persistent) {
                    (Some(r), Some(p)) => {
                        e.lines.push(format!("now: {r}"));
                        e.lines.push(format!("persistent: {p}"));
                    }
                    (Some(r), None) => e.lines.push(format!("fix: {r}")),
                    (None, Some(p)) => e.lines.push(format!("persistent: {p}")),
                    (None, None) => {}
                }
                if !c.refs.is_empty() {
                    e.lines.push(format!("follows: {}", links(&c.refs)));
                }
                e
            })
            .collect();
        section(
            &mut out,
            &format!("{name} (`{file}`)"),
            about,
            &entries,
            None,
        );
    }
    let defs = crate::lb::wording::defs();
    let entries: Vec<Entry> = defs
        .iter()
        .map(|d| {
            let mut e = Entry::new(&d.id, &d.title.replace("{proxy}", "HAProxy or nginx"));
            e.lines.push(format!("fix: {}", d.fix.for_kind(None)));
            if !d.refs.is_empty() {
                e.lines.push(format!("follows: {}", links(&d.refs)));
            }
            e
        })
        .collect();
    let proxies: Vec<&str> = defs
        .iter()
        .map(|d| {
            if d.id == "lb.backlog" {
                "nginx"
            } else {
                "HAProxy, nginx"
            }
        })
        .collect();
    section(
        &mut out,
        "Load balancer (`checks/lb.yaml`, `check --lb-config FILE`)",
        "The values come from the proxy's configuration file and the running proxy's fd limit.",
        &entries,
        Some(("proxy", proxies)),
    );
    let entries: Vec<Entry> = catalog::computed::all()
        .iter()
        .map(|c| {
            let mut e = Entry::new(&c.id, &c.title);
            match (&c.fix.runtime, COMPUTED_FIX.iter().find(|f| f.0 == c.id)) {
                (_, Some((_, f))) => e.lines.push(format!("fix: {f}")),
                (Some(r), None) => e.lines.push(format!("fix: {r}")),
                (None, None) => {}
            }
            e
        })
        .collect();
    section(
        &mut out,
        "wstune's own journal (`checks/wstune.yaml`)",
        "`check` also reads the journal `apply` keeps (under `--prefix` or `--root` when \
         given), on Linux and on Windows.",
        &entries,
        None,
    );
    out
}

/// A check's sources as Markdown links.
fn links(refs: &[catalog::Ref]) -> String {
    refs.iter()
        .map(|r| format!("[{}]({})", r.section.replace(['[', ']'], ""), r.url))
        .collect::<Vec<_>>()
        .join("; ")
}

/// One table row; `|` inside a cell would end it, and a line break would end the table.
pub(crate) fn row(cells: &[&str]) -> String {
    let cells: Vec<String> = cells
        .iter()
        .map(|c| c.replace('|', "\\|").replace('\n', " "))
        .collect();
    format!("| {} |\n", cells.join(" | "))
}

/// Text on one line: a line break inside an entry's title or list item would end it early.
fn one_line(text: &str) -> String {
    text.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An operator looks up an id from a report in docs/checks.md: it must list every id the
    /// catalogs define, as they are now.
    #[test]
    fn docs_checks_md_is_current() {
        crate::report::book::assert_current(
            "docs/checks.md",
            &checks_markdown(),
            "a check was added, removed or reworded",
            "checks_doc",
        );
    }

    #[test]
    fn the_list_holds_every_id_once_and_somaxconn_with_its_fix() {
        let md = checks_markdown();
        assert!(md.contains(
            "| [`linux.net.core.somaxconn`](#linux.net.core.somaxconn) | Accept queue cap (somaxconn); also `.boot` |"
        ));
        assert!(md.contains(
            "- persistent: echo 'net.core.somaxconn = {target}' | sudo tee -a /etc/sysctl.d/60-wstune.conf >/dev/null\n"
        ));
        for id in [
            "linux.net.core.somaxconn",
            "windows.tcpip.dynamic_port_range",
            "lb.fd_limit",
            "wstune.journal.pending",
        ] {
            // Its row in the index table, and its entry below the table.
            assert_eq!(md.matches(&format!("[`{id}`](#{id})")).count(), 1, "{id}");
            assert_eq!(
                md.matches(&format!("<a id=\"{id}\"></a>")).count(),
                1,
                "{id}"
            );
        }
    }

    /// The book's column is 750 px: the index tables hold two or three short columns, and
    /// the long text (fixes, sources) stays out of them.
    #[test]
    fn the_tables_hold_only_ids_and_titles() {
        for line in checks_markdown().lines().filter(|l| l.starts_with('|')) {
            assert!(line.matches(" | ").count() <= 2, "{line}");
            assert!(!line.contains("http"), "{line}");
            assert!(line.chars().count() < 240, "{line}");
        }
    }
}
