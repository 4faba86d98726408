//! `apply`'s plan for people: one row per setting (its change now and at boot side by side),
//! grouped by area in the check table's order, then the files it writes.

use crate::apply::plan::{Op, Plan};
use crate::output;

/// The plan for people: one row per setting (its change now and at boot side by side, not two
/// rows), grouped by area in the check table's order, then the files it writes.
pub fn plan_table(p: &Plan) -> String {
    // (area, setting) -> (now, at boot), in first-seen order within each area.
    let mut rows: Vec<(&'static str, String, Option<String>, Option<String>)> = Vec::new();
    for a in &p.actions {
        let change = format!("{} -> {}", a.from.as_deref().unwrap_or("-"), a.to);
        let area = super::area(&a.check);
        let i = match rows.iter().position(|r| r.0 == area && r.1 == a.setting) {
            Some(i) => i,
            None => {
                rows.push((area, a.setting.clone(), None, None));
                rows.len() - 1
            }
        };
        let slot = if a.op.is_runtime() {
            &mut rows[i].2
        } else {
            &mut rows[i].3
        };
        *slot = Some(match &a.op {
            Op::Sysctl { .. } | Op::SysctlFile { .. } | Op::LimitsFile { .. } => change,
            op => format!("{change} ({})", op.place()),
        });
    }
    let order = |area: &str| {
        super::AREAS
            .iter()
            .position(|a| *a == area)
            .unwrap_or(usize::MAX)
    };
    rows.sort_by_key(|r| order(r.0));
    let mut t = output::new_table();
    t.set_header(vec!["Area", "Setting", "Now", "At boot"]);
    let mut last = "";
    for (area, setting, now, boot) in &rows {
        t.add_row(vec![
            if *area == last {
                String::new()
            } else {
                area.to_string()
            },
            setting.clone(),
            now.clone().unwrap_or_else(|| "-".into()),
            boot.clone().unwrap_or_else(|| "-".into()),
        ]);
        last = area;
    }
    let mut files: Vec<String> = Vec::new();
    for a in p.actions.iter().filter(|a| !a.op.is_runtime()) {
        if !files.contains(&a.op.place()) {
            files.push(a.op.place());
        }
    }
    let mut out = format!(
        "Plan ({} change(s) to {} setting(s)):\n{t}",
        p.actions.len(),
        rows.len()
    );
    if !files.is_empty() {
        out.push_str(&format!("\nAt boot: written to {}", files.join(", ")));
    }
    out
}
