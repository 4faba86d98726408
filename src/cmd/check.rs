//! `wstune check`: gather, evaluate, report, and the exit code from the findings.

use crate::apply::store::Store;
use crate::catalog::eval::{evaluate, Summary};
use crate::cli::args::{CheckArgs, Format, ShowArg};
use crate::cli::exit;
use crate::cli::resolve::{self, Inputs, Resolved};
use crate::gather::{gather, HostFacts};
use crate::host::Backend;
use crate::output;
use crate::report::{self, CheckReport, HostRef, ProfileRef};
use anyhow::Result;
use std::time::SystemTime;

pub fn run(r: Resolved, a: &CheckArgs) -> Result<u8> {
    let store = resolve::store(a.root.as_deref(), a.prefix.as_deref());
    let mut report = make_report(&r.inputs, r.backend.as_ref(), Some(&store));
    if let Some(path) = &a.lb_config {
        let text = std::fs::read_to_string(path).map_err(|e| {
            anyhow::anyhow!(
                "--lb-config {}: {e}; give the proxy's configuration file",
                path.display()
            )
        })?;
        let lb = crate::lb::findings(path, &text, &r.inputs.profile.profile, a.lb_pid)
            .map_err(anyhow::Error::msg)?;
        report.results.extend(lb);
        report.summary = Summary::of(&report.results);
    }
    let text = match a.format {
        Format::Table => report::table(
            &report,
            output::colour_wanted(a.output.is_some()),
            output::table_width(),
            match a.show {
                ShowArg::Problems => report::Show::Problems,
                ShowArg::All => report::Show::All,
            },
        ),
        Format::Json => report::json(&report),
        Format::Junit => report::junit(
            &report,
            a.strict,
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
    output::emit(a.output.as_deref(), &text)?;
    Ok(exit_code(&report.summary, a.strict))
}

/// Gather, evaluate and, with a `store`, report an interrupted or damaged journal entry and
/// compare the host with the last applied one.
pub fn make_report(r: &Inputs, backend: &dyn Backend, store: Option<&Store>) -> CheckReport {
    make_report_and_facts(r, backend, store).0
}

/// [`make_report`] and the host facts it was made from (what `apply`'s pure plan needs too).
pub fn make_report_and_facts(
    r: &Inputs,
    backend: &dyn Backend,
    store: Option<&Store>,
) -> (CheckReport, HostFacts) {
    let facts = gather(&r.catalog, backend, &r.options);
    let mut results = evaluate(&r.catalog, &r.profile.profile.variables(), &facts);
    if let Some(s) = store {
        results.extend(crate::apply::journal_findings(s, backend));
    }
    let summary = Summary::of(&results);
    let report = CheckReport {
        schema_version: report::SCHEMA_VERSION,
        profile: ProfileRef {
            name: r.profile.profile.name.clone(),
            source: r.profile.source.clone(),
            connections: r.profile.profile.connections,
        },
        host: HostRef {
            platform: r.catalog.platform,
            info: facts.info.clone(),
        },
        results,
        summary,
    };
    (report, facts)
}

/// 2 on any failure; 1 on warnings with --strict; else 0.
pub fn exit_code(s: &Summary, strict: bool) -> u8 {
    if s.fail > 0 {
        exit::FAIL
    } else if strict && s.warn > 0 {
        exit::WARN
    } else {
        exit::OK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_policy() {
        let s = |fail, warn| Summary {
            fail,
            warn,
            ..Summary::default()
        };
        assert_eq!(exit_code(&s(0, 0), true), 0);
        assert_eq!(exit_code(&s(0, 3), false), 0);
        assert_eq!(exit_code(&s(0, 3), true), 1);
        assert_eq!(exit_code(&s(1, 3), true), 2);
    }
}
