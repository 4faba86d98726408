//! `wstune check`: the check pipeline (`engine::check`), the load balancer's findings when
//! asked, one rendering of the report, and the outcome from the findings.

use crate::engine::check::{self, HostInputs, LbConfig};
use crate::host::store::Store;
use crate::outcome::Outcome;
use crate::output;
use crate::report::{self, Format, Show};
use anyhow::Result;
use std::path::PathBuf;
use std::time::SystemTime;

/// `check`, resolved: inputs and backend, where the journal lives, and how to report.
pub struct Request {
    pub host: HostInputs,
    /// The journal to look at (an interrupted apply, drift since the last one).
    pub store: Store,
    pub format: Format,
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
    let text = match r.format {
        Format::Table => report::table(
            &report,
            output::colour_wanted(r.output.is_some()),
            output::table_width(),
            r.show,
        ),
        Format::Json => report::json(&report),
        Format::Junit => report::junit(
            &report,
            r.strict,
            &humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        ),
        Format::Prometheus => {
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
