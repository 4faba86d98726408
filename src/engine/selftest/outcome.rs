//! The end of a run: the report printed in the asked format, the HTML page and the
//! Prometheus file written, and the verdict turned into an outcome.

use super::Load;
use crate::outcome::Outcome;
use crate::report::ListFormat;
use crate::selftest::report::{self, Report};
use anyhow::{bail, Result};

/// Print the report, write the HTML page and the Prometheus file, and conclude: Ok on a pass, Failed on a miss (or a
/// partial run), an error when nothing could be measured.
pub fn finish(report: &Report, error: Option<anyhow::Error>, load: &Load) -> Result<Outcome> {
    let owned;
    let report = if load.baseline.is_some() || !report.refused.is_empty() {
        let mut r = report.clone();
        if let Some(b) = &load.baseline {
            r.baseline = Some(b.clone());
        }
        if !r.refused.is_empty() {
            // Nothing ran: no verdict of the load's (combined with the host's or not) stands.
            let v = &mut r.verdict;
            v.pass = false;
            v.load_pass = false;
            v.inconclusive = false;
            v.summary = format!(
                "NOT RUN: {}",
                r.refused
                    .iter()
                    .map(|x| x.line())
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        owned = r;
        &owned
    } else {
        report
    };
    if report.scenarios.is_empty() && report.refused.is_empty() {
        if let Some(e) = error {
            return Err(e);
        }
    }
    let stopped = error.as_ref().map(|e| format!("{e:#}"));
    let text = if load.html {
        report::html(report, stopped.as_deref())
    } else {
        match load.format {
            ListFormat::Json => serde_json::to_string_pretty(report)? + "\n",
            ListFormat::Table => report::table(report, &table_layout(load)),
        }
    };
    // A refusal is the error's to say on a terminal; a file or JSON carries it too.
    let refused_table = !report.refused.is_empty()
        && !load.html
        && load.format == ListFormat::Table
        && load.output.is_none();
    if !refused_table {
        crate::output::emit(load.output.as_deref(), &text)?;
    }
    if let Some(path) = &load.output {
        eprintln!("wstune: wrote {}", path.display());
    }
    if let Some(path) = &load.report {
        crate::output::write_atomic(path, &report::html(report, stopped.as_deref()))?;
        eprintln!("wstune: wrote {}", path.display());
    }
    if let Some(path) = &load.out_prometheus {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        crate::output::write_atomic(path, &report::prometheus(report, stopped.as_deref(), now))?;
        eprintln!("wstune: wrote {}", path.display());
    }
    if !report.refused.is_empty() {
        // Nothing ran: the command as given cannot work against this server (a usage error,
        // exit 3, as an unreachable URL is), not a run that could not be judged (4).
        bail!(
            "{}\nnothing was run: one message to the server before the load showed it",
            report
                .refused
                .iter()
                .map(|r| r.message())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    if let Some(e) = error {
        eprintln!("wstune: error: {e:#}");
        eprintln!("  the report above covers the scenarios that ran before it");
        return Ok(Outcome::Failed);
    }
    Ok(if report.verdict.pass {
        Outcome::Ok
    } else if report.verdict.inconclusive {
        Outcome::Inconclusive
    } else {
        Outcome::Failed
    })
}

/// The summary's layout: the terminal's width on one (the table where it fits, else a block
/// per scenario, every line fitting it); piped or in a file, blocks unless `--format table`
/// asked for the table ($COLUMNS or 160 columns wide), lines kept whole for grep.
fn table_layout(load: &Load) -> report::Layout {
    use std::io::IsTerminal;
    let tty = load.output.is_none() && std::io::stdout().is_terminal();
    let width = if tty {
        comfy_table::Table::new()
            .width()
            .unwrap_or_else(crate::output::table_width)
    } else {
        crate::output::table_width()
    };
    report::Layout {
        wrap: tty,
        ..report::Layout::for_width(width as usize, tty || load.table_asked)
    }
}
