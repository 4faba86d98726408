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

/// The whole of docs/checks.md.
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
            format!("{role}: {}", what.join(" "))
        })
        .collect();
    Some(format!("{}; other roles as written", parts.join("; ")))
}

pub fn checks_markdown() -> String {
    let known: BTreeSet<String> = crate::profile::load(crate::profile::DEFAULT)
        .expect("the default profile loads")
        .profile
        .variables()
        .into_keys()
        .collect();
    let mut out = String::from(
        "# Check ids\n\n\
         Every finding `wstune check` reports carries one of these ids: the table's `Check` \
         column, `results[].id` in JSON, the JUnit test case name, the Prometheus `id` label. \
         Placeholders in a fix (`{target}`, `{desired}`, `{nic}`, `{file}`...) are filled in \
         with this host's values in the report itself. *Follows* names the sources each \
         recommendation rests on (also `results[].refs` in JSON and the list under \
         `check --show all`).\n\n\
         Generated from `checks/linux.yaml`, `checks/windows.yaml`, `checks/lb.yaml` and \
         `checks/wstune.yaml` \
         (`src/report/checks_doc.rs`); a unit test fails when this file is stale, and \
         `UPDATE_SNAPSHOTS=1 cargo test --lib checks_doc` rewrites it.\n",
    );
    for (platform, file, about) in [
        (
            Platform::Linux,
            "checks/linux.yaml",
            "A sysctl check marked *and `ID.boot`* also reports the value the next boot sets \
             and the sysctl.d file and line it comes from (`linux.net.core.somaxconn.boot`). \
             A check on a NIC is reported once per physical NIC (`ID.eth0`).",
        ),
        (
            Platform::Windows,
            "checks/windows.yaml",
            "A check on a network adapter is reported once per adapter.",
        ),
    ] {
        let cat = catalog::load(platform, None, &known).expect("the built-in catalogs load");
        out.push_str(&format!(
            "\n## {} (`{file}`)\n\n{about}\n\n| id | what it checks | platform | fix | follows |\n|---|---|---|---|---|\n",
            match platform {
                Platform::Linux => "Linux",
                Platform::Windows => "Windows",
            }
        ));
        let name = match platform {
            Platform::Linux => "Linux",
            Platform::Windows => "Windows",
        };
        for d in &cat.checks {
            let c = &d.check;
            let id = if d.has_boot_view() {
                format!("`{}` and `{}.boot`", c.id, c.id)
            } else {
                format!("`{}`", c.id)
            };
            let fix = match (&c.fix.runtime, &c.fix.persistent) {
                (Some(r), Some(p)) => format!("now: {r}; persistent: {p}"),
                (Some(r), None) => r.clone(),
                (None, Some(p)) => format!("persistent: {p}"),
                (None, None) => "-".into(),
            };
            let what = match by_role(c) {
                Some(r) => format!("{}. *By role:* {r}", c.title),
                None => c.title.clone(),
            };
            out.push_str(&row(&[&id, &what, name, &fix, &links(&c.refs)]));
        }
    }
    out.push_str(
        "\n## Load balancer (`checks/lb.yaml`, `check --lb-config FILE`)\n\n\
         The values come from the proxy's configuration file and the running proxy's fd limit.\n\n\
         | id | what it checks | platform | fix | follows |\n|---|---|---|---|---|\n",
    );
    for d in crate::lb::wording::defs() {
        out.push_str(&row(&[
            &format!("`{}`", d.id),
            &d.title.replace("{proxy}", "HAProxy or nginx"),
            if d.id == "lb.backlog" {
                "nginx"
            } else {
                "HAProxy, nginx"
            },
            &d.fix.for_kind(None),
            &links(&d.refs),
        ]));
    }
    out.push_str(
        "\n## wstune's own journal (`checks/wstune.yaml`)\n\n\
         `check` also reads the journal `apply` keeps (under `--prefix` or `--root` when given).\n\n\
         | id | what it checks | platform | fix |\n|---|---|---|---|\n",
    );
    for c in catalog::computed::all() {
        let fix = match (&c.fix.runtime, COMPUTED_FIX.iter().find(|f| f.0 == c.id)) {
            (_, Some((_, f))) => f.to_string(),
            (Some(r), None) => r.clone(),
            (None, None) => "-".into(),
        };
        out.push_str(&row(&[
            &format!("`{}`", c.id),
            &c.title,
            "Linux, Windows",
            &fix,
        ]));
    }
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
fn row(cells: &[&str]) -> String {
    let cells: Vec<String> = cells
        .iter()
        .map(|c| c.replace('|', "\\|").replace('\n', " "))
        .collect();
    format!("| {} |\n", cells.join(" | "))
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
        assert!(md.contains("| `linux.net.core.somaxconn` and `linux.net.core.somaxconn.boot` |"));
        for id in [
            "windows.tcpip.dynamic_port_range",
            "lb.fd_limit",
            "wstune.journal.pending",
        ] {
            assert_eq!(md.matches(&format!("`{id}`")).count(), 1, "{id}");
        }
    }
}
