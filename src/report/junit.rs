//! JUnit XML, the format every CI system reads: one testcase per finding; fail is a
//! `<failure>`, skip is `<skipped>`, warn is a failure only with `--strict`.

use super::CheckReport;
use crate::catalog::eval::Status;
use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};
use quick_xml::Writer;

pub fn junit(report: &CheckReport, strict: bool, timestamp: &str) -> String {
    let failed = |s: Status| s == Status::Fail || (strict && s == Status::Warn);
    let failures = report
        .results
        .iter()
        .filter(|f| failed(f.status))
        .count()
        .to_string();
    let skipped = report
        .results
        .iter()
        .filter(|f| f.status == Status::Skip)
        .count()
        .to_string();
    let tests = report.results.len().to_string();
    let suite_name = format!("wstune check {}", report.profile.name);

    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    let mut ev = |e: Event| w.write_event(e).expect("writing to a Vec cannot fail");
    ev(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)));
    let mut suites = BytesStart::new("testsuites");
    suites.push_attribute(("name", "wstune"));
    suites.push_attribute(("tests", tests.as_str()));
    suites.push_attribute(("failures", failures.as_str()));
    suites.push_attribute(("errors", "0"));
    suites.push_attribute(("skipped", skipped.as_str()));
    ev(Event::Start(suites));
    let mut suite = BytesStart::new("testsuite");
    suite.push_attribute(("name", suite_name.as_str()));
    suite.push_attribute(("tests", tests.as_str()));
    suite.push_attribute(("failures", failures.as_str()));
    suite.push_attribute(("errors", "0"));
    suite.push_attribute(("skipped", skipped.as_str()));
    suite.push_attribute(("timestamp", timestamp));
    suite.push_attribute(("hostname", report.host.info.hostname.as_str()));
    ev(Event::Start(suite));
    ev(Event::Start(BytesStart::new("properties")));
    let connections = report.profile.connections.to_string();
    for (k, v) in [
        ("profile", report.profile.name.as_str()),
        ("profile.source", report.profile.source.as_str()),
        ("connections", connections.as_str()),
        ("host.source", report.host.info.source.as_str()),
    ] {
        let mut p = BytesStart::new("property");
        p.push_attribute(("name", k));
        p.push_attribute(("value", v));
        ev(Event::Empty(p));
    }
    ev(Event::End(BytesEnd::new("properties")));
    for f in &report.results {
        let classname =
            f.id.rsplit_once('.')
                .map(|(c, _)| c)
                .unwrap_or(&f.id)
                .to_string();
        let mut case = BytesStart::new("testcase");
        case.push_attribute(("classname", classname.as_str()));
        case.push_attribute(("name", f.id.as_str()));
        case.push_attribute(("time", "0"));
        ev(Event::Start(case));
        let current = f
            .current
            .as_ref()
            .map(|v| v.to_string())
            .unwrap_or_else(|| "-".into());
        let summary = format!(
            "{}: current {current}, target {}",
            f.title,
            super::table::target_text(f)
        );
        if failed(f.status) {
            let mut fail = BytesStart::new("failure");
            fail.push_attribute(("message", summary.as_str()));
            fail.push_attribute(("type", f.status.as_str()));
            ev(Event::Start(fail));
            let mut body = f.why.clone();
            if let Some(n) = &f.note {
                body.push_str(&format!("\nNote: {n}"));
            }
            if let Some(r) = &f.fix.runtime {
                body.push_str(&format!("\nFix now: {r}"));
            }
            if let Some(p) = &f.fix.persistent {
                body.push_str(&format!("\nPersist: {p}"));
            }
            ev(Event::Text(BytesText::new(&body)));
            ev(Event::End(BytesEnd::new("failure")));
        } else if f.status == Status::Skip {
            let mut skip = BytesStart::new("skipped");
            skip.push_attribute(("message", f.note.as_deref().unwrap_or("skipped")));
            ev(Event::Empty(skip));
        } else {
            let mut out = format!("{} ({})", summary, f.status.as_str());
            if let Some(n) = &f.note {
                out.push_str(&format!("\n{n}"));
            }
            ev(Event::Start(BytesStart::new("system-out")));
            ev(Event::Text(BytesText::new(&out)));
            ev(Event::End(BytesEnd::new("system-out")));
        }
        ev(Event::End(BytesEnd::new("testcase")));
    }
    ev(Event::End(BytesEnd::new("testsuite")));
    ev(Event::End(BytesEnd::new("testsuites")));
    let mut s = String::from_utf8(w.into_inner()).expect("quick-xml writes UTF-8");
    s.push('\n');
    s
}
