//! `wstune check`: the check pipeline (`engine::check`), the load balancer's findings when
//! asked, one rendering of the report (for people: the table where the terminal has room for it,
//! else one block per finding), and the outcome from the findings.

use crate::engine::check::{self, HostInputs, LbConfig};
use crate::host::store::Store;
use crate::outcome::Outcome;
use crate::output;
use crate::report::{self, Format, Layout, Show};
use anyhow::Result;
use std::path::PathBuf;
use std::time::SystemTime;

/// How the report is written: for people (the table or the blocks) or for machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The table on a terminal of [`report::TABLE_MIN_COLUMNS`] or more, else the blocks (a
    /// narrower terminal, a pipe, `-o FILE`).
    Auto,
    /// `--format table`: the table, whatever the width.
    Table,
    /// `--compact`: the blocks, whatever the width.
    Blocks,
    Machine(Format),
}

/// `check`, resolved: inputs and backend, where the journal lives, and how to report.
pub struct Request {
    pub host: HostInputs,
    /// The journal to look at (an interrupted apply, drift since the last one).
    pub store: Store,
    pub format: Shape,
    /// Each listed finding's why under it (`--why`; the machine formats always carry it).
    pub why: bool,
    /// Warnings count (`--strict`).
    pub strict: bool,
    /// Table rows.
    pub show: Show,
    /// `-o FILE`, else standard output.
    pub output: Option<PathBuf>,
    /// `--lb-config FILE` (read) and `--lb-pid`.
    pub lb: Option<LbConfig>,
}

pub fn run(r: Request) -> Result<Outcome> {
    let HostInputs { inputs, backend } = &r.host;
    let mut report = check::report(inputs, backend.as_ref(), Some(&r.store));
    if let Some(lb) = &r.lb {
        check::add_lb(&mut report, lb, &inputs.profile.profile)?;
    }
    // The terminal's own width when there is one; else $COLUMNS, else 160 (a pipe, a file).
    let terminal = if r.output.is_none() {
        crate::terminal::columns()
    } else {
        None
    };
    let human = |layout| {
        report::table(
            &report,
            &report::Human {
                layout,
                colour: output::colour_wanted(r.output.is_some()),
                width: terminal.unwrap_or_else(output::table_width),
                show: r.show,
                why: r.why,
            },
        )
    };
    let text = match r.format {
        Shape::Auto => human(match terminal {
            Some(w) if w >= report::TABLE_MIN_COLUMNS => Layout::Table,
            _ => Layout::Blocks,
        }),
        Shape::Table => human(Layout::Table),
        Shape::Blocks => human(Layout::Blocks),
        Shape::Machine(Format::Table) => human(Layout::Table),
        Shape::Machine(Format::Json) => report::json(&report),
        Shape::Machine(Format::Junit) => report::junit(
            &report,
            r.strict,
            &humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        ),
        Shape::Machine(Format::Prometheus) => {
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            report::prometheus(&report, now)
        }
    };
    output::emit(r.output.as_deref(), &text)?;
    Ok(Outcome::of_checks(
        report.summary.fail,
        report.summary.warn,
        r.strict,
    ))
}
