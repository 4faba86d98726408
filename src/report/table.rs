//! The table for people: one row per finding, the fix where something is wrong, and a summary.

use super::CheckReport;
use crate::catalog::eval::{Finding, Status};
use crate::catalog::Scope;
use comfy_table::{
    presets::UTF8_FULL_CONDENSED, Cell, Color, ColumnConstraint, ContentArrangement, Table, Width,
};

/// `colour` is decided by the caller (a terminal, and NO_COLOR unset); `width` is used when the
/// output is not a terminal, where comfy-table cannot ask for one.
pub fn table(report: &CheckReport, colour: bool, width: u16) -> String {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic);
    if colour {
        t.enforce_styling();
    } else {
        t.force_no_tty().set_width(width);
    }
    t.set_header(vec!["Check", "Current", "Target", "Status", "Fix / note"]);
    // Ids must stay readable; values are short and may wrap.
    let widths = [
        (0, Width::Fixed(36), true),
        (1, Width::Fixed(16), false),
        (2, Width::Fixed(20), false),
    ];
    for (i, w, lower) in widths {
        if let Some(c) = t.column_mut(i) {
            c.set_constraint(if lower {
                ColumnConstraint::LowerBoundary(w)
            } else {
                ColumnConstraint::UpperBoundary(w)
            });
        }
    }
    for f in &report.results {
        let status = Cell::new(f.status.as_str().to_uppercase());
        let status = if colour {
            status.fg(match f.status {
                Status::Pass => Color::Green,
                Status::Warn => Color::Yellow,
                Status::Fail => Color::Red,
                Status::Skip | Status::Info => Color::DarkGrey,
            })
        } else {
            status
        };
        t.add_row(vec![
            Cell::new(format!(
                "{}\n{}{}",
                f.id,
                f.title,
                if f.scope == Scope::Netns {
                    " [per netns]"
                } else {
                    ""
                }
            )),
            Cell::new(
                f.current
                    .as_ref()
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "-".into()),
            ),
            Cell::new(target_text(f)),
            status,
            Cell::new(advice(f)),
        ]);
    }
    let s = &report.summary;
    let mut out = format!(
        "wstune check: profile {} ({} connections) on {} [{}]\n",
        report.profile.name,
        report.profile.connections,
        report.host.info.hostname,
        report.host.info.source
    );
    out.push_str(&t.to_string());
    out.push('\n');
    out.push_str(&format!(
        "{} checks: {} pass, {} fail, {} warn, {} skip, {} info\n",
        s.total, s.pass, s.fail, s.warn, s.skip, s.info
    ));
    out
}

/// "<= 30", "covers 10000 65535", "absent".
pub fn target_text(f: &Finding) -> String {
    match (&f.target, f.compare) {
        (Some(t), c) => format!("{c} {t}"),
        (None, "absent") => "absent".into(),
        (None, "no_growth") => "no growth".into(),
        (None, _) => "-".into(),
    }
}

/// What a person should read in the last column: the fix when something is wrong, else the note.
fn advice(f: &Finding) -> String {
    let mut parts = Vec::new();
    // An informational check that missed its target has no note: its fix is the useful part.
    if matches!(f.status, Status::Fail | Status::Warn)
        || (f.status == Status::Info && f.note.is_none())
    {
        if let Some(n) = &f.note {
            parts.push(n.clone());
        }
        if let Some(r) = &f.fix.runtime {
            parts.push(format!("now: {r}"));
        }
        if let Some(p) = &f.fix.persistent {
            parts.push(format!("persist: {p}"));
        }
    } else if let Some(n) = &f.note {
        parts.push(n.clone());
    }
    parts.join("\n")
}
