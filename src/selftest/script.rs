//! Scripted sessions (`selftest --script FILE.yaml`): client populations that each connect
//! their own way (path and query, headers, subprotocol, a token) and run a sequence of steps
//! (send, expect a reply, subscribe, publish, think, idle), the way Artillery and k6 describe a
//! WebSocket user. Each waiting step is timed from the message it waits on, into a histogram
//! of its own, so a threshold can name it: `traders.price.p99 < 50ms`.
//!
//! The file is read once by the orchestrator: every mistake is reported with its file and
//! line before anything connects. Tokens are minted (or read) here too, and reach the
//! generator processes on their input, never in argv.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptFile {
    /// How long the populations run once connected (default: `--secs`).
    #[serde(default, with = "opt_duration")]
    pub duration: Option<Duration>,
    /// Spread the connections' opening over this long (default: as fast as they open).
    #[serde(default, with = "opt_duration")]
    pub ramp: Option<Duration>,
    /// Connections over time instead of `ramp` and `duration`: `{to: N, over: 30s}` moves the
    /// count to N linearly (up: connections open; down: the newest close), `{hold: 60s}` keeps
    /// it. The count rises to the populations' total, then may only fall.
    #[serde(default)]
    pub stages: Vec<StageFile>,
    pub populations: Vec<PopulationFile>,
    /// Thresholds judged on the run, as `--threshold`'s (a step is `POPULATION.STEP.STAT`).
    #[serde(default)]
    pub thresholds: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageFile {
    #[serde(default)]
    pub to: Option<usize>,
    #[serde(default, with = "opt_duration")]
    pub over: Option<Duration>,
    #[serde(default, with = "opt_duration")]
    pub hold: Option<Duration>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PopulationFile {
    pub name: String,
    /// Connections of this population.
    pub conns: usize,
    /// The URL's path and query for this population (default: the URL's).
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub subprotocol: Option<String>,
    #[serde(default)]
    pub token: Option<TokenFile>,
    /// Run the steps again and again until the duration ends (default: once, then hold).
    #[serde(default)]
    pub repeat: bool,
    pub steps: Vec<StepFile>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenFile {
    /// A file holding the token.
    #[serde(default)]
    pub file: Option<String>,
    /// A token minted for wstune's channels server (`wstune token`), with the secret in
    /// `$WSTUNE_AUTH_SECRET` or `secret_file`.
    #[serde(default)]
    pub mint: Option<MintFile>,
    #[serde(default)]
    pub secret_file: Option<String>,
    /// Where it is sent: `header` (Authorization: Bearer, the default) or `query` (?token=).
    #[serde(default)]
    pub send_in: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MintFile {
    pub channels: Vec<String>,
    #[serde(default)]
    pub publish: Vec<String>,
    #[serde(default, with = "opt_duration")]
    pub ttl: Option<Duration>,
}

/// One step, as written: exactly one of the kinds, and an optional name.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepFile {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub send: Option<Payload>,
    #[serde(default)]
    pub expect: Option<ExpectFile>,
    #[serde(default)]
    pub subscribe: Option<String>,
    #[serde(default)]
    pub publish: Option<PublishFile>,
    #[serde(default, with = "opt_duration")]
    pub think: Option<Duration>,
    #[serde(default, with = "opt_duration")]
    pub idle: Option<Duration>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Payload {
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub json: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectFile {
    /// The reply's text is exactly this.
    #[serde(default)]
    pub text: Option<String>,
    /// The reply's text contains this.
    #[serde(default)]
    pub contains: Option<String>,
    /// The reply is JSON holding these fields with these values (others may be there too;
    /// `"*"` matches any value).
    #[serde(default)]
    pub json: Option<serde_json::Value>,
    /// How long to wait (default 5 s).
    #[serde(default, with = "opt_duration")]
    pub timeout: Option<Duration>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishFile {
    pub channel: String,
    #[serde(default)]
    pub data: serde_json::Value,
}

/// What a generator process runs: each population's connections for this process, its
/// target (path, headers, token in place) and its steps.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Script {
    pub populations: Vec<Population>,
    /// `stages:`: (the count as a share of the populations' total, seconds to reach it from
    /// the last). Empty: every connection opens before the run and stays to its end.
    #[serde(default)]
    pub stages: Vec<(f64, f64)>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Population {
    pub name: String,
    /// Connections of this population in the whole run (a process gets its share).
    pub conns: usize,
    /// The request's path and query, the token in it when sent as a query.
    pub path: String,
    /// Extra request header lines, each ending in CRLF (headers, subprotocol, token).
    pub headers: String,
    pub repeat: bool,
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Step {
    /// A text frame (templates `{{conn}}` and `{{seq}}` filled in).
    Send {
        text: String,
    },
    /// Wait for a message that matches; timed from the last message this connection sent.
    Expect {
        name: String,
        matcher: Matcher,
        timeout_ms: u64,
    },
    Think {
        ms: u64,
    },
    Idle {
        ms: u64,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Matcher {
    Text(String),
    Contains(String),
    Json(serde_json::Value),
}

impl Matcher {
    pub fn matches(&self, msg: &[u8]) -> bool {
        let Ok(text) = std::str::from_utf8(msg) else {
            return false;
        };
        match self {
            Matcher::Text(t) => text == t,
            Matcher::Contains(t) => text.contains(t.as_str()),
            Matcher::Json(want) => serde_json::from_str::<serde_json::Value>(text)
                .is_ok_and(|got| json_subset(want, &got)),
        }
    }
}

/// `want`'s fields are all in `got` with equal values (objects recursively; `"*"` is any).
pub fn json_subset(want: &serde_json::Value, got: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (want, got) {
        (Value::String(s), _) if s == "*" => true,
        (Value::Object(w), Value::Object(g)) => w
            .iter()
            .all(|(k, v)| g.get(k).is_some_and(|gv| json_subset(v, gv))),
        _ => want == got,
    }
}

/// `{{conn}}` (the connection's number in the run) and `{{seq}}` (how many times it has run
/// its steps) filled in.
pub fn fill(template: &str, conn: usize, seq: u64) -> String {
    template
        .replace("{{conn}}", &conn.to_string())
        .replace("{{seq}}", &seq.to_string())
}

/// The step's name in the report and in thresholds: its `name`, else its kind and number
/// (`expect3`: the population's third step).
fn step_name(s: &StepFile, i: usize) -> String {
    if let Some(n) = &s.name {
        return n.clone();
    }
    let kind = if s.expect.is_some() {
        "expect"
    } else if s.subscribe.is_some() {
        "subscribe"
    } else if s.publish.is_some() {
        "publish"
    } else if s.send.is_some() {
        "send"
    } else if s.think.is_some() {
        "think"
    } else {
        "idle"
    };
    format!("{kind}{}", i + 1)
}

/// The script's lines, to name the line of a problem. Each lookup searches only the part of
/// the file it concerns (a population's lines, a list's items), and all of them together scan
/// at most a few times the file's lines ([`Lines::budget`]): naming every step's line of a
/// file of 55,000 steps took 34 s when each step's lookup read the file from its start. Past
/// the budget a lookup answers the nearest line it knows.
struct Lines<'a> {
    lines: Vec<&'a str>,
    /// Lines lookups may still read.
    budget: std::cell::Cell<usize>,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Lines<'a> {
        let lines: Vec<&str> = text.lines().collect();
        let budget = 4 * lines.len() + 10_000;
        Lines {
            lines,
            budget: std::cell::Cell::new(budget),
        }
    }

    /// The lines after the file's last (for a search's end).
    fn end(&self) -> usize {
        self.lines.len() + 1
    }

    /// Take one line's reading from the budget; false once it is spent.
    fn spend(&self) -> bool {
        let left = self.budget.get();
        self.budget.set(left.saturating_sub(1));
        left > 0
    }

    /// The first line in `from..to` (1-based) that contains `needle`; `from` when none.
    fn find(&self, needle: &str, from: usize, to: usize) -> usize {
        let from = from.max(1);
        for n in from..to.min(self.end()) {
            if !self.spend() {
                break;
            }
            if self.lines[n - 1].contains(needle) {
                return n;
            }
        }
        from
    }

    /// The lines (1-based) of the items of the list that starts after line `after`: the
    /// lines beginning with `- ` at the first item's indentation, up to the first line less
    /// indented. Empty when the list is not written one item a line (`[a, b]`).
    fn items(&self, after: usize) -> Vec<usize> {
        let mut indent = None;
        let mut out = Vec::new();
        for (n, l) in self.lines.iter().enumerate().skip(after) {
            if !self.spend() {
                break;
            }
            let trimmed = l.trim_start();
            let here = l.len() - trimmed.len();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            match indent {
                None if trimmed.starts_with("- ") => indent = Some(here),
                None => break,
                Some(ind) if here < ind => break,
                _ => {}
            }
            if Some(here) == indent && trimmed.starts_with("- ") {
                out.push(n + 1);
            }
        }
        out
    }
}

/// The deepest nesting of flow collections (`[`, `{`) a script may have. The YAML parser's
/// time grows with the square of the depth (100,000 levels took 41 s, 200,000 over 100 s,
/// and 1 MiB holds 500,000), so it is checked on the raw text before the parser runs; a
/// script needs a handful, and the parser refuses values nested deeper than 128 anyway.
pub const MAX_NESTING: usize = 64;

/// Where a YAML token may start, as the raw text is read byte by byte: at a line's start, and
/// after an indicator that ends one (`- `, `? `, `: `, and in a flow collection `[`, `{`,
/// `,` and `:`). A quote, a bracket or a star anywhere else is part of a plain scalar
/// (`it's`, `a[1]`, `2*3`) and means nothing. Spaces leave it as it was.
struct TokenStart {
    at_start: bool,
}

impl TokenStart {
    fn new() -> TokenStart {
        TokenStart { at_start: true }
    }

    /// Move past byte `c` (`next` follows it), at flow depth `depth`.
    fn step(&mut self, c: u8, next: Option<u8>, depth: usize) {
        let spaced = matches!(next, None | Some(b' ' | b'\t' | b'\r' | b'\n'));
        self.at_start = match c {
            b'\n' => true,
            b' ' | b'\t' | b'\r' => self.at_start,
            b'-' | b'?' => self.at_start && spaced,
            b':' => spaced || depth > 0,
            b'[' | b'{' => self.at_start,
            b',' => depth > 0,
            _ => false,
        };
    }
}

/// The line where the raw text nests flow collections deeper than [`MAX_NESTING`], if it
/// does: brackets counted where a token may start, outside quoted scalars and comments.
fn too_deep(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    let (mut depth, mut line, mut i) = (0usize, 1usize, 0usize);
    let mut quote: Option<u8> = None;
    let mut tokens = TokenStart::new();
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
        }
        match quote {
            Some(b'"') if c == b'\\' => {
                // An escape: the next byte is taken whatever it is (a line break too).
                if b.get(i + 1) == Some(&b'\n') {
                    line += 1;
                }
                i += 2;
                continue;
            }
            Some(b'\'') if c == b'\'' && b.get(i + 1) == Some(&b'\'') => {
                i += 2;
                continue;
            }
            Some(q) if c == q => {
                quote = None;
                tokens.at_start = false;
                i += 1;
                continue;
            }
            Some(_) => {
                i += 1;
                continue;
            }
            None => {}
        }
        let before = tokens.at_start;
        match c {
            b'#' if i == 0 || matches!(b[i - 1], b' ' | b'\t' | b'\n') => {
                // A comment, to the end of its line.
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'\'' | b'"' if before => quote = Some(c),
            b'[' | b'{' if before => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Some(line);
                }
            }
            b']' | b'}' if depth > 0 => depth -= 1,
            _ => {}
        }
        tokens.step(c, b.get(i + 1).copied(), depth);
        i += 1;
    }
    None
}

/// Whether the raw text may hold an alias (`*NAME` where a token starts). Over-inclusive on
/// purpose (quotes are not followed, and `,` and `:` are read as in a flow collection
/// everywhere): a yes only costs [`expansion`]'s count, a no must be right.
fn may_alias(text: &str) -> bool {
    let b = text.as_bytes();
    let mut tokens = TokenStart::new();
    for (i, &c) in b.iter().enumerate() {
        if c == b'*' && tokens.at_start {
            return true;
        }
        tokens.step(c, b.get(i + 1).copied(), 1);
    }
    false
}

/// The most values a script's aliases may expand it to: as many as the text has bytes (a
/// file without aliases never has more), plus room for a small file's honest reuse. The
/// YAML reader's own limit counts alias jumps, not the values each replays: a 60 KB file of
/// one 10,000-value list aliased 10,000 times grew past 4 GiB before it was refused.
fn max_values(text: &str) -> usize {
    text.len() + 65_536
}

/// Count the values `text` expands to, aliases replayed, and stop at [`max_values`]: the
/// line where it passed them, when it did. Nothing is kept while counting. A file the YAML
/// reader refuses for another reason passes here: parsing it names that reason.
fn expansion(text: &str) -> Option<usize> {
    use serde::de::{
        DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
    };
    use std::cell::Cell;
    const SPENT: &str = "the aliases expand past the limit";
    #[derive(Clone, Copy)]
    struct Count<'c>(&'c Cell<usize>);
    impl Count<'_> {
        fn tick<E: serde::de::Error>(self) -> Result<(), E> {
            match self.0.get() {
                0 => Err(E::custom(SPENT)),
                n => {
                    self.0.set(n - 1);
                    Ok(())
                }
            }
        }
    }
    impl<'de> DeserializeSeed<'de> for Count<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Count<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any value")
        }
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
            self.tick()
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
            self.tick()
        }
        fn visit_i128<E: serde::de::Error>(self, _: i128) -> Result<(), E> {
            self.tick()
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
            self.tick()
        }
        fn visit_u128<E: serde::de::Error>(self, _: u128) -> Result<(), E> {
            self.tick()
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
            self.tick()
        }
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
            self.tick()
        }
        fn visit_bytes<E: serde::de::Error>(self, _: &[u8]) -> Result<(), E> {
            self.tick()
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
            self.tick()
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
            self.tick()
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            self.tick()?;
            d.deserialize_any(self)
        }
        fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            self.tick()?;
            d.deserialize_any(self)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            self.tick()?;
            while seq.next_element_seed(self)?.is_some() {}
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            self.tick()?;
            while map.next_key_seed(self)?.is_some() {
                map.next_value_seed(self)?;
            }
            Ok(())
        }
        fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
            // A tagged value (`!tag x`): the tag, then its value.
            self.tick()?;
            let ((), v) = data.variant_seed(self)?;
            v.newtype_variant_seed(self)
        }
    }
    let left = Cell::new(max_values(text));
    let r = Count(&left).deserialize(serde_yaml_ng::Deserializer::from_str(text));
    match r {
        Err(e) if left.get() == 0 => Some(e.location().map_or(1, |l| l.line())),
        _ => None,
    }
}

/// The most connections a script's populations may open in all, as `--conns` allows.
pub const MAX_CONNS: usize = 100_000;

/// How a token of the file is got: read from a file, or minted with a secret.
pub trait Tokens {
    fn read(&self, path: &str) -> Result<String, String>;
    fn mint(&self, mint: &MintFile, secret_file: Option<&str>) -> Result<String, String>;
}

/// Read and check a script. Every problem is `FILE:LINE: what; the fix`, all of them at once.
pub fn parse(text: &str, file: &str, tokens: &dyn Tokens) -> Result<(Script, ScriptFile), String> {
    // Checked before the YAML reader runs: what would take it minutes or gigabytes.
    if let Some(line) = too_deep(text) {
        return Err(format!(
            "{file}:{line}: nested deeper than {MAX_NESTING} levels of [ and {{; a script \
             needs a few: flatten the data (or quote a text that holds brackets)"
        ));
    }
    if may_alias(text) {
        if let Some(line) = expansion(text) {
            return Err(format!(
                "{file}:{line}: its aliases (*NAME) expand it to more than {} values, far \
                 more than a file of {} bytes holds; write the repeated part out where it is \
                 used (or generate the file) instead of aliasing it",
                max_values(text),
                text.len()
            ));
        }
    }
    let f: ScriptFile = serde_yaml_ng::from_str(text).map_err(|e| {
        let line = e.location().map_or(1, |l| l.line());
        let msg = e.to_string();
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        format!("{file}:{line}: {msg}")
    })?;
    let lines = Lines::new(text);
    let mut problems: Vec<(usize, String)> = Vec::new();
    let pops_line = lines.find("populations", 1, lines.end());
    // Each population's lines: from its item to the next one's.
    let pop_items = lines.items(pops_line);
    if f.populations.is_empty() {
        problems.push((
            pops_line,
            "no population: give at least one under populations:".into(),
        ));
    }
    let mut names = std::collections::BTreeSet::new();
    let mut pops = Vec::new();
    let mut total = 0usize;
    // Where the last population was found: the next is searched from there.
    let mut after = pops_line;
    for (pi, p) in f.populations.iter().enumerate() {
        let start = pop_items.get(pi).copied().unwrap_or(after);
        let end = pop_items.get(pi + 1).copied().unwrap_or(lines.end());
        let at = lines.find(&format!("name: {}", p.name), start, end);
        after = at;
        if p.name.is_empty() || p.name.contains(['.', ' ', '*']) {
            problems.push((at, format!("population name '{}': use letters, digits, - and _ (a threshold names it as NAME.STEP.STAT)", p.name)));
        }
        if !names.insert(p.name.clone()) {
            problems.push((at, format!("population '{}' is named twice", p.name)));
        }
        if p.conns == 0 || p.conns > MAX_CONNS {
            problems.push((
                lines.find("conns:", at, end),
                format!(
                    "population '{}': conns {}; give 1..={MAX_CONNS} connections",
                    p.name, p.conns
                ),
            ));
        }
        // Added checked: populations of 2^63 + 2^63 + 2 connections wrapped to 2.
        total = total.saturating_add(p.conns);
        if p.steps.is_empty() {
            problems.push((
                lines.find("steps:", at, end),
                format!(
                    "population '{}': no steps; give at least one (idle: 10s holds the connection)",
                    p.name
                ),
            ));
        }
        let mut path = p.path.clone().unwrap_or_default();
        if !path.is_empty() && !path.starts_with('/') {
            problems.push((
                lines.find("path:", at, end),
                format!("population '{}': path '{path}' must start with /", p.name),
            ));
        }
        let mut headers = String::new();
        for (k, v) in &p.headers {
            if k.is_empty() || k.contains([':', '\r', '\n', ' ']) || v.contains(['\r', '\n']) {
                problems.push((
                    lines.find(k, at, end),
                    format!(
                        "population '{}': header '{k}' is not a valid header line",
                        p.name
                    ),
                ));
            }
            headers.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some(sp) = &p.subprotocol {
            headers.push_str(&format!("Sec-WebSocket-Protocol: {sp}\r\n"));
        }
        if let Some(t) = &p.token {
            let tline = lines.find("token:", at, end);
            let got = match (&t.file, &t.mint) {
                (Some(path), None) => tokens.read(path),
                (None, Some(m)) => tokens.mint(m, t.secret_file.as_deref()),
                _ => Err("give exactly one of file: or mint:".into()),
            };
            match (got, t.send_in.as_deref()) {
                (Err(e), _) => {
                    problems.push((tline, format!("population '{}': token: {e}", p.name)))
                }
                (Ok(tok), None | Some("header")) => {
                    headers.push_str(&format!("Authorization: Bearer {}\r\n", tok.trim()))
                }
                (Ok(tok), Some("query")) => {
                    let sep = if path.contains('?') { '&' } else { '?' };
                    path = format!(
                        "{}{sep}token={}",
                        if path.is_empty() { "/" } else { &path },
                        tok.trim()
                    );
                }
                (Ok(_), Some(other)) => problems.push((
                    tline,
                    format!(
                        "population '{}': send_in '{other}': header or query",
                        p.name
                    ),
                )),
            }
        }
        let mut steps = Vec::new();
        let mut step_names = std::collections::BTreeSet::new();
        let steps_line = lines.find("steps:", at, end);
        let step_items = lines.items(steps_line);
        for (i, s) in p.steps.iter().enumerate() {
            let sline = step_items.get(i).copied().unwrap_or(steps_line + 1);
            let kinds = [
                s.send.is_some(),
                s.expect.is_some(),
                s.subscribe.is_some(),
                s.publish.is_some(),
                s.think.is_some(),
                s.idle.is_some(),
            ]
            .iter()
            .filter(|k| **k)
            .count();
            if kinds != 1 {
                problems.push((sline, format!("population '{}', step {}: give exactly one of send, expect, subscribe, publish, think, idle", p.name, i + 1)));
                continue;
            }
            let name = step_name(s, i);
            if !step_names.insert(name.clone()) {
                problems.push((
                    sline,
                    format!("population '{}': step name '{name}' is used twice", p.name),
                ));
            }
            if let Some(pl) = &s.send {
                match (&pl.text, &pl.json) {
                    (Some(t), None) => steps.push(Step::Send { text: t.clone() }),
                    (None, Some(j)) => steps.push(Step::Send {
                        text: j.to_string(),
                    }),
                    _ => problems.push((
                        sline,
                        format!(
                            "population '{}', step {name}: send needs text: or json:",
                            p.name
                        ),
                    )),
                }
            } else if let Some(e) = &s.expect {
                let matcher = match (&e.text, &e.contains, &e.json) {
                    (Some(t), None, None) => Matcher::Text(t.clone()),
                    (None, Some(c), None) => Matcher::Contains(c.clone()),
                    (None, None, Some(j)) => Matcher::Json(j.clone()),
                    _ => {
                        problems.push((sline, format!("population '{}', step {name}: expect needs one of text:, contains:, json:", p.name)));
                        continue;
                    }
                };
                steps.push(Step::Expect {
                    name,
                    matcher,
                    timeout_ms: timeout_ms(e.timeout),
                });
            } else if let Some(ch) = &s.subscribe {
                // The channels protocol: the server answers {"op":"subscribed","channel":ch}.
                steps.push(Step::Send {
                    text: serde_json::json!({"op": "subscribe", "channel": ch}).to_string(),
                });
                steps.push(Step::Expect {
                    name,
                    matcher: Matcher::Json(serde_json::json!({"op": "subscribed", "channel": ch})),
                    timeout_ms: 5000,
                });
            } else if let Some(pb) = &s.publish {
                steps.push(Step::Send {
                    text:
                        serde_json::json!({"op": "publish", "channel": pb.channel, "data": pb.data})
                            .to_string(),
                });
            } else if let Some(d) = s.think {
                steps.push(Step::Think {
                    ms: d.as_millis() as u64,
                });
            } else if let Some(d) = s.idle {
                steps.push(Step::Idle {
                    ms: d.as_millis() as u64,
                });
            }
        }
        pops.push(Population {
            name: p.name.clone(),
            conns: p.conns,
            path,
            headers,
            repeat: p.repeat,
            steps,
        });
    }
    if total > MAX_CONNS {
        problems.push((
            pops_line,
            format!(
                "the populations' connections add up to {}; a run opens at most {MAX_CONNS} \
                 (as --conns): give fewer",
                if total == usize::MAX {
                    "more than the count can hold".to_string()
                } else {
                    total.to_string()
                }
            ),
        ));
    }
    let stages = stages(&f, &lines, total, &mut problems);
    for t in &f.thresholds {
        if let Err(e) = t.parse::<super::threshold::Threshold>() {
            problems.push((lines.find(t, 1, lines.end()), e));
        }
    }
    if problems.is_empty() {
        return Ok((
            Script {
                populations: pops,
                stages,
            },
            f,
        ));
    }
    problems.sort();
    Err(problems
        .into_iter()
        .map(|(l, m)| format!("{file}:{l}: {m}"))
        .collect::<Vec<_>>()
        .join("\n"))
}

/// `stages:` checked and made relative: each (level as a share of `total`, seconds). The
/// count must rise to `total` (every connection of the populations opens) and may then only
/// fall: a connection opens once and closes once.
fn stages(
    f: &ScriptFile,
    lines: &Lines,
    total: usize,
    problems: &mut Vec<(usize, String)>,
) -> Vec<(f64, f64)> {
    if f.stages.is_empty() {
        return Vec::new();
    }
    let at = lines.find("stages:", 1, lines.end());
    let items = lines.items(at);
    if f.ramp.is_some() || f.duration.is_some() {
        problems.push((
            at,
            "stages replace ramp and duration: give one or the other".into(),
        ));
    }
    let mut out = Vec::new();
    let (mut level, mut peaked) = (0usize, false);
    for (i, s) in f.stages.iter().enumerate() {
        let line = items.get(i).copied().unwrap_or(at + 1);
        match (s.to, s.over, s.hold) {
            (Some(to), Some(over), None) => {
                if to > total {
                    problems.push((
                        line,
                        format!(
                            "stage {}: to {to} is more than the populations' {total} connections",
                            i + 1
                        ),
                    ));
                } else if to > level && peaked {
                    problems.push((
                        line,
                        format!(
                            "stage {}: the count may only fall once it has risen to {total}",
                            i + 1
                        ),
                    ));
                } else if to < level && !peaked {
                    problems.push((
                        line,
                        format!(
                            "stage {}: the count may only rise until it reaches {total}",
                            i + 1
                        ),
                    ));
                }
                if to == total {
                    peaked = true;
                }
                level = to;
                out.push((to as f64 / total.max(1) as f64, over.as_secs_f64()));
            }
            (None, None, Some(hold)) => {
                out.push((level as f64 / total.max(1) as f64, hold.as_secs_f64()))
            }
            _ => problems.push((
                line,
                format!(
                    "stage {}: give {{to: N, over: DURATION}} or {{hold: DURATION}}",
                    i + 1
                ),
            )),
        }
    }
    if !peaked {
        problems.push((at, format!("the stages never reach the populations' {total} connections: end a rise at to: {total}")));
    }
    out
}

fn timeout_ms(d: Option<Duration>) -> u64 {
    d.map_or(5000, |d| d.as_millis() as u64)
}

impl Script {
    pub fn conns(&self) -> usize {
        self.populations.iter().map(|p| p.conns).sum()
    }

    /// The names of the steps that wait (`POPULATION.STEP`), for thresholds and the report.
    pub fn waiting_steps(&self) -> Vec<String> {
        self.populations
            .iter()
            .flat_map(|p| {
                p.steps.iter().filter_map(move |s| match s {
                    Step::Expect { name, .. } => Some(format!("{}.{name}", p.name)),
                    _ => None,
                })
            })
            .collect()
    }

    /// How long the stages take, seconds (None: no stages).
    pub fn stages_secs(&self) -> Option<f64> {
        (!self.stages.is_empty()).then(|| self.stages.iter().map(|s| s.1).sum())
    }

    /// With stages: when each of this share's connections opens and closes, seconds from the
    /// start, by connection number. The populations ramp together (each connection's place is
    /// its share of its own population), and on the way down the newest close first.
    pub fn schedule(&self) -> Vec<(usize, f64, f64)> {
        let n = self.conns();
        let mut order: Vec<(f64, usize)> = Vec::with_capacity(n);
        let mut i = 0;
        for p in &self.populations {
            for q in 0..p.conns {
                order.push(((q as f64 + 0.5) / p.conns as f64, i));
                i += 1;
            }
        }
        order.sort_by(|a, b| a.0.total_cmp(&b.0));
        let end: f64 = self.stages.iter().map(|s| s.1).sum();
        order
            .into_iter()
            .enumerate()
            .map(|(rank, (_, conn))| {
                let need = (rank + 1) as f64;
                let (mut open, mut close) = (None, None);
                let (mut t, mut level) = (0.0, 0.0);
                for &(to, secs) in &self.stages {
                    let target = to * n as f64;
                    if open.is_none() && target >= need - 1e-9 && target > level {
                        open = Some(t + secs * ((need - level) / (target - level)).max(0.0));
                    } else if open.is_some()
                        && close.is_none()
                        && target < need - 1e-9
                        && target < level
                    {
                        close =
                            Some(t + secs * ((level - need) / (level - target)).clamp(0.0, 1.0));
                    }
                    t += secs;
                    level = target;
                }
                (conn, open.unwrap_or(end), close.unwrap_or(end))
            })
            .collect()
    }

    /// Generator process `w` of `workers`'s share: each population split evenly, the first
    /// processes one more.
    pub fn share(&self, w: usize, workers: usize) -> Script {
        Script {
            stages: self.stages.clone(),
            populations: self
                .populations
                .iter()
                .map(|p| Population {
                    conns: p.conns / workers + usize::from(w < p.conns % workers),
                    ..p.clone()
                })
                .collect(),
        }
    }

    /// Connection `i` of this share: its population.
    pub fn population_of(&self, mut i: usize) -> Option<usize> {
        for (k, p) in self.populations.iter().enumerate() {
            if i < p.conns {
                return Some(k);
            }
            i -= p.conns;
        }
        None
    }
}

/// `10s`, `500ms`, `1h` (humantime), or seconds as a number.
mod opt_duration {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(f64),
            Text(String),
        }
        match Option::<Raw>::deserialize(d)? {
            None => Ok(None),
            Some(Raw::Secs(s)) if s.is_finite() && s > 0.0 && s <= 86_400.0 * 366.0 => {
                Ok(Some(Duration::from_secs_f64(s)))
            }
            Some(Raw::Secs(s)) => Err(serde::de::Error::custom(format!(
                "{s}: give a duration above 0 and at most a year (10s, 500ms)"
            ))),
            Some(Raw::Text(t)) => humantime::parse_duration(t.trim())
                .ok()
                .filter(|d| !d.is_zero() && d.as_secs() <= 86_400 * 366)
                .map(Some)
                .ok_or_else(|| {
                    serde::de::Error::custom(format!(
                        "'{t}' is not a duration of at most a year (10s, 500ms, 1m)"
                    ))
                }),
        }
    }
}

#[cfg(test)]
mod tests {
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
}
