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
            super::shown::target_text(f)
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
    let s = String::from_utf8(w.into_inner()).expect("quick-xml writes UTF-8");
    // quick-xml escapes markup, not the characters XML 1.0 forbids outright (C0 controls but
    // tab, newline and carriage return; U+FFFE, U+FFFF): a sysctl.d file name, an osrelease or
    // a profile name holding one made the report unreadable to every CI. The markup itself
    // never holds one, so the whole text is made safe at once.
    let mut s = xml_safe(&s).into_owned();
    s.push('\n');
    s
}

/// Whether XML 1.0 allows `c` anywhere in a document (its `Char` production; a Rust string
/// holds no surrogates).
fn xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | ' '..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// `s` with every character XML 1.0 forbids written as `\xNN` (`\u{FFFE}` above 0xFF), so a
/// reader sees which one it was.
pub fn xml_safe(s: &str) -> std::borrow::Cow<'_, str> {
    if s.chars().all(xml_char) {
        return s.into();
    }
    s.chars()
        .map(|c| match c {
            c if xml_char(c) => c.to_string(),
            c if (c as u32) < 0x100 => format!("\\x{:02x}", c as u32),
            c => format!("\\u{{{:X}}}", c as u32),
        })
        .collect::<String>()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use quick_xml::events::{BytesEnd, BytesStart, BytesText, Event};

    /// A small deterministic generator (xorshift), so the property runs on stable with no
    /// extra dependency and a failure is reproducible from its seed.
    fn strings(seed: u64, n: usize) -> Vec<String> {
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        // Weighted towards the edges: controls, markup, the non-characters, astral planes.
        let pick = |r: u64| -> char {
            let pool = [
                (r % 0x20) as u32,
                0x7f,
                ['<', '>', '&', '"', '\''][(r % 5) as usize] as u32,
                0xFFFE + (r % 2) as u32,
                0xFFFD,
                0x20 + (r % 0x5f) as u32,
                0x10000 + (r % 0x1000) as u32,
                0xE000 + (r % 0x100) as u32,
            ];
            char::from_u32(pool[((r >> 32) % pool.len() as u64) as usize]).unwrap()
        };
        (0..n)
            .map(|_| {
                let len = (next() % 24) as usize;
                (0..len).map(|_| pick(next())).collect()
            })
            .collect()
    }

    /// Property: whatever a string holds, the document it ends up in is XML 1.0 (every
    /// character allowed; it parses), and reading it back gives the string made safe.
    #[test]
    fn any_string_in_an_attribute_or_text_gives_valid_xml_that_reads_back() {
        for (i, s) in strings(0x5eed_0f0a, 3000).into_iter().enumerate() {
            let mut w = quick_xml::Writer::new(Vec::new());
            let mut el = BytesStart::new("property");
            el.push_attribute(("value", s.as_str()));
            w.write_event(Event::Start(el)).unwrap();
            w.write_event(Event::Text(BytesText::new(&s))).unwrap();
            w.write_event(Event::End(BytesEnd::new("property")))
                .unwrap();
            let doc = xml_safe(&String::from_utf8(w.into_inner()).unwrap()).into_owned();
            assert!(doc.chars().all(xml_char), "case {i}: {s:?} -> {doc:?}");
            let mut r = quick_xml::Reader::from_str(&doc);
            let (mut attr, mut text) = (None, String::new());
            loop {
                match r
                    .read_event()
                    .unwrap_or_else(|e| panic!("case {i}: {doc:?}: {e}"))
                {
                    Event::Start(e) => {
                        let a = e.attributes().next().unwrap().unwrap();
                        // Unescaped, not normalized: the escaping itself is what is checked.
                        #[allow(deprecated)]
                        let v = a.unescape_value().unwrap().into_owned();
                        attr = Some(v);
                    }
                    Event::Text(t) => {
                        text.push_str(&t.xml_content(quick_xml::XmlVersion::Implicit1_0))
                    }
                    Event::GeneralRef(g) if g.is_char_ref() => {
                        text.push(g.resolve_char_ref().unwrap().unwrap());
                    }
                    Event::GeneralRef(g) => {
                        let name = g.xml_content(quick_xml::XmlVersion::Implicit1_0);
                        text.push(match name.as_ref() {
                            "lt" => '<',
                            "gt" => '>',
                            "amp" => '&',
                            "quot" => '"',
                            "apos" => '\'',
                            other => panic!("case {i}: unexpected entity {other}"),
                        });
                    }
                    Event::Eof => break,
                    _ => {}
                }
            }
            let want = xml_safe(&s).into_owned();
            assert_eq!(
                attr.as_deref(),
                Some(want.as_str()),
                "case {i}: attribute of {s:?}"
            );
            assert_eq!(text, want, "case {i}: text of {s:?}");
        }
    }

    #[test]
    fn forbidden_characters_are_named_and_allowed_ones_kept() {
        assert_eq!(
            xml_safe("a\u{1}b\tc\u{FFFE}\u{10348}"),
            "a\\x01b\tc\\u{FFFE}\u{10348}"
        );
        assert!(matches!(
            xml_safe("plain <text>"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
