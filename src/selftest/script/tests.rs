use super::guard::{may_alias, too_deep};
use super::*;

struct NoTokens;
impl Tokens for NoTokens {
    fn read(&self, path: &str) -> Result<String, String> {
        Ok(format!("token-from-{path}"))
    }
    fn mint(&self, m: &MintFile, _: Option<&str>) -> Result<String, String> {
        Ok(format!("minted-{}", m.channels.join("+")))
    }
}

#[test]
fn a_json_expectation_matches_a_subset_with_wildcards() {
    let want = serde_json::json!({"channel": "a", "data": {"px": "*"}});
    assert!(json_subset(
        &want,
        &serde_json::json!({"channel": "a", "data": {"px": 1, "q": 2}, "x": 0})
    ));
    assert!(!json_subset(
        &want,
        &serde_json::json!({"channel": "b", "data": {"px": 1}})
    ));
    assert!(!json_subset(&want, &serde_json::json!({"channel": "a"})));
    assert!(Matcher::Contains("pong".into()).matches(b"a pong!"));
    assert!(!Matcher::Json(want).matches(b"not json"));
    assert_eq!(fill("c{{conn}}-s{{seq}}", 7, 3), "c7-s3");
}

#[test]
fn populations_get_their_path_headers_and_token_and_split_over_processes() {
    let text = "populations:
  - name: v
    conns: 5
    path: /ws?room=1
    headers: {X-Client: wstune}
    subprotocol: chat.v1
    token: {file: v.jwt, send_in: query}
    steps:
      - subscribe: a
      - think: 1s
  - name: t
    conns: 2
    token: {mint: {channels: [a]}}
    steps:
      - send: {json: {op: ping}}
      - expect: {contains: pong}
";
    let (s, _) = parse(text, "s.yaml", &NoTokens).unwrap();
    let v = &s.populations[0];
    assert_eq!(v.path, "/ws?room=1&token=token-from-v.jwt");
    assert_eq!(
        v.headers,
        "X-Client: wstune\r\nSec-WebSocket-Protocol: chat.v1\r\n"
    );
    assert_eq!(
        s.populations[1].headers,
        "Authorization: Bearer minted-a\r\n"
    );
    assert_eq!(s.waiting_steps(), ["v.subscribe1", "t.expect2"]);
    // 7 connections over 3 processes: every population split, nothing lost.
    let shares: Vec<Script> = (0..3).map(|w| s.share(w, 3)).collect();
    assert_eq!(shares.iter().map(Script::conns).sum::<usize>(), 7);
    assert_eq!(shares[0].population_of(1), Some(0));
    assert_eq!(shares[0].population_of(2), Some(1));
}

#[test]
fn stages_open_connections_on_the_way_up_and_close_the_newest_on_the_way_down() {
    let text = "stages:
  - {to: 4, over: 10s}
  - {hold: 10s}
  - {to: 2, over: 10s}
populations:
  - name: a
    conns: 2
    steps: [{idle: 1s}]
  - name: b
    conns: 2
    steps: [{idle: 1s}]
";
    let (s, _) = parse(text, "s.yaml", &NoTokens).unwrap();
    assert_eq!(s.stages_secs(), Some(30.0));
    let mut sched = s.schedule();
    sched.sort_by(|x, y| x.1.total_cmp(&y.1));
    let opens: Vec<f64> = sched.iter().map(|x| x.1).collect();
    assert_eq!(opens, [2.5, 5.0, 7.5, 10.0]);
    // The populations ramp together: a's first, then b's first, then the seconds.
    let pops: Vec<Option<usize>> = sched.iter().map(|x| s.population_of(x.0)).collect();
    assert_eq!(pops, [Some(0), Some(1), Some(0), Some(1)]);
    let closes: Vec<f64> = sched.iter().map(|x| x.2).collect();
    assert_eq!(closes, [30.0, 30.0, 25.0, 20.0], "the newest close first");
    let pops = "populations:\n  - name: a\n    conns: 2\n    steps: [{idle: 1s}]\n";
    let bad = format!("stages:\n  - {{to: 9, over: 1s}}\n  - {{to: 1, over: 1s}}\n{pops}");
    let e = parse(&bad, "s.yaml", &NoTokens).unwrap_err();
    assert!(e.contains("s.yaml:2: stage 1: to 9 is more than"), "{e}");
    assert!(e.contains("the stages never reach"), "{e}");
    let bad = format!(
            "stages:\n  - {{to: 2, over: 1s}}\n  - {{to: 1, over: 1s}}\n  - {{to: 2, over: 1s}}\n{pops}"
        );
    let e = parse(&bad, "s.yaml", &NoTokens).unwrap_err();
    assert!(
        e.contains("s.yaml:4: stage 3: the count may only fall"),
        "{e}"
    );
    let bad = format!(
            "stages:\n  - {{to: 1, over: 1s}}\n  - {{to: 0, over: 1s}}\n  - {{to: 2, over: 1s}}\n{pops}"
        );
    let e = parse(&bad, "s.yaml", &NoTokens).unwrap_err();
    assert!(
        e.contains("s.yaml:3: stage 2: the count may only rise"),
        "{e}"
    );
    let e = parse("duration: 1e20\npopulations: []\n", "s.yaml", &NoTokens).unwrap_err();
    assert!(e.contains("at most a year"), "{e}");
}

/// The example scripts in the book read and check cleanly.
#[test]
fn the_book_s_example_scripts_are_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/scripts");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap();
        let (s, f) =
            parse(&text, &p.display().to_string(), &NoTokens).unwrap_or_else(|e| panic!("{e}"));
        assert!(s.conns() > 0 && !s.waiting_steps().is_empty());
        for t in &f.thresholds {
            let step = t.split(' ').next().unwrap().rsplit_once('.').unwrap().0;
            assert!(s.waiting_steps().iter().any(|w| w == step), "{t}");
        }
        n += 1;
    }
    assert!(n >= 2);
}

#[test]
fn every_mistake_is_named_with_its_line() {
    let text = "populations:
  - name: a.b
    conns: 0
    steps:
      - think: 1s
      - expect: {text: x}
        send: {text: y}
      - expect: {text: x, contains: y}
";
    let e = parse(text, "s.yaml", &NoTokens).unwrap_err();
    assert!(e.contains("s.yaml:2: population name 'a.b'"), "{e}");
    assert!(e.contains("s.yaml:3: population 'a.b': conns 0"), "{e}");
    assert!(
        e.contains("s.yaml:6: population 'a.b', step 2: give exactly one"),
        "{e}"
    );
    assert!(
        e.contains("s.yaml:8: population 'a.b', step expect3: expect needs one of"),
        "{e}"
    );
    let e = parse("populations: []\nbogus: 1\n", "s.yaml", &NoTokens).unwrap_err();
    assert!(e.starts_with("s.yaml:2: unknown field `bogus`"), "{e}");
    let e = parse("duration: soon\npopulations: []\n", "s.yaml", &NoTokens).unwrap_err();
    assert!(e.contains("'soon' is not a duration"), "{e}");
}

#[test]
fn aliases_nesting_and_sums_are_bounded_before_anything_grows() {
    // An alias reused honestly is read.
    let reuse = "populations:\n- name: a\n  conns: 1\n  steps: &s\n  - publish: {channel: x, data: {px: 1}}\n  - think: 1s\n- name: b\n  conns: 1\n  steps: *s\n";
    let (s, _) = parse(reuse, "s.yaml", &NoTokens).unwrap();
    assert_eq!(s.populations[1].steps.len(), 2);
    // Quoted stars, globs and brackets in plain text are neither aliases nor nesting.
    assert!(!may_alias("a: \"*\"\nb: [x.*]\nc: 2*3\n"));
    assert!(may_alias("a: *b\n") && may_alias("- [1, *b]\n"));
    assert!(may_alias("a: [\"]\", *b]\n") && may_alias("a: {\"k\":*b}\n"));
    let brackets = format!(
        "a: '{}'\nb: x{}\n# {}\n",
        "[".repeat(100),
        "[".repeat(100),
        "{".repeat(100)
    );
    assert_eq!(too_deep(&brackets), None);
    let deep = format!("a: 1\nb: {}{}\n", "[".repeat(65), "]".repeat(65));
    assert_eq!(too_deep(&deep), Some(2));
    assert_eq!(
        too_deep(&format!("b: {}{}\n", "[".repeat(64), "]".repeat(64))),
        None
    );
    // A bomb: refused while counting, long before it is built.
    let bomb = format!(
            "populations:\n- name: a\n  conns: 1\n  steps:\n  - publish: {{channel: x, data: &z [{}0]}}\n  - publish: {{channel: x, data: [{}*z]}}\n",
            "0,".repeat(999),
            "*z,".repeat(999)
        );
    let e = parse(&bomb, "s.yaml", &NoTokens).unwrap_err();
    assert!(
        e.contains("its aliases (*NAME) expand it to more than"),
        "{e}"
    );
    // Sums that would wrap are refused.
    let huge = format!("populations:\n- {{name: a, conns: {}, steps: [{{think: 1}}]}}\n- {{name: b, conns: {}, steps: [{{think: 1}}]}}\n- {{name: c, conns: 2, steps: [{{think: 1}}]}}\n", 1usize << 63, 1usize << 63);
    let e = parse(&huge, "s.yaml", &NoTokens).unwrap_err();
    assert!(
        e.contains("s.yaml:2: population 'a': conns 9223372036854775808; give 1..=100000"),
        "{e}"
    );
    assert!(
        e.contains("s.yaml:1: the populations' connections add up to more than"),
        "{e}"
    );
    let e = parse("populations:\n- {name: a, conns: 60000, steps: [{think: 1}]}\n- {name: b, conns: 60000, steps: [{think: 1}]}\n", "s.yaml", &NoTokens).unwrap_err();
    assert!(e.contains("add up to 120000"), "{e}");
}

#[test]
fn finding_every_step_s_line_is_linear() {
    let mut text = String::from("populations:\n- name: a\n  conns: 1\n  steps:\n");
    text.push_str(&"  - think: 1\n".repeat(54_999));
    text.push_str("  - {think: 1, idle: 1}\n");
    let t0 = std::time::Instant::now();
    let e = parse(&text, "s.yaml", &NoTokens).unwrap_err();
    assert!(
        e.contains("s.yaml:55004: population 'a', step 55000: give exactly one of"),
        "{e}"
    );
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        t0.elapsed()
    );
}
