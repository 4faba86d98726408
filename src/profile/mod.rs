//! Tuning profiles: loading (embedded or from a file), validation, and the variables that check
//! targets are written in.
//!
//! Flow: `--profile NAME|PATH` -> [`load`] -> [`Profile`] (validated) -> [`Profile::variables`],
//! the flat name -> value map that catalog expressions such as `2 * connections` are evaluated in.

mod model;
mod shape;

pub use model::*;

use crate::value::Value;
use crate::yaml_lines;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The profiles compiled into the binary, in ascending size.
pub const EMBEDDED: &[(&str, &str)] = &[
    ("10k", include_str!("../../profiles/10k.yaml")),
    ("50k", include_str!("../../profiles/50k.yaml")),
    ("100k", include_str!("../../profiles/100k.yaml")),
    ("250k", include_str!("../../profiles/250k.yaml")),
    ("1m", include_str!("../../profiles/1m.yaml")),
];

/// The profile used when none is named.
pub const DEFAULT: &str = "100k";

/// Why a profile could not be used. Each variant's message names the fix.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("unknown profile '{name}': the built-in profiles are {}; or pass a path to a YAML file", available.join(", "))]
    Unknown {
        name: String,
        available: Vec<String>,
    },
    /// `reason` is already in wstune's words (see [`read_config_file`]): the io::Error is not
    /// kept as a source, or the error chain would print the OS text a second time.
    #[error("cannot read profile {}: {reason}; pass a built-in name ({}) or the path of a YAML file", path.display(), EMBEDDED.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "))]
    Io { path: PathBuf, reason: String },
    #[error("{}", Problems(.0))]
    Invalid(Vec<Problem>),
}

/// One thing wrong in a profile file, with where it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub file: String,
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.file, line, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

struct Problems<'a>(&'a [Problem]);

impl fmt::Display for Problems<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

/// A loaded profile and where it came from (for reports).
#[derive(Debug, Clone)]
pub struct Loaded {
    pub profile: Profile,
    /// `builtin:NAME` or the file path.
    pub source: String,
}

/// Resolve `--profile`: a built-in name, or else a path to a YAML file. A value that looks like a
/// path (has a separator or a .yaml/.yml ending) is never taken for a name.
pub fn load(spec: &str) -> Result<Loaded, ProfileError> {
    load_in(spec, &mut Vec::new())
}

/// [`load`], with the profiles being read that extend this one (`chain`), for cycles.
fn load_in(spec: &str, chain: &mut Vec<String>) -> Result<Loaded, ProfileError> {
    if let Some((_, text)) = EMBEDDED.iter().find(|(n, _)| *n == spec) {
        chain.push(format!("builtin:{spec}"));
        let profile = parse_in(text, &format!("builtin:{spec}"), chain)?;
        return Ok(Loaded {
            profile,
            source: format!("builtin:{spec}"),
        });
    }
    let looks_like_path = spec.contains('/') || spec.ends_with(".yaml") || spec.ends_with(".yml");
    let path = Path::new(spec);
    if !looks_like_path && !path.exists() {
        return Err(ProfileError::Unknown {
            name: spec.to_string(),
            available: EMBEDDED.iter().map(|(n, _)| n.to_string()).collect(),
        });
    }
    let text = read_config_file(path).map_err(|reason| ProfileError::Io {
        path: path.to_path_buf(),
        reason,
    })?;
    chain.push(
        path.canonicalize()
            .map_or_else(|_| spec.to_string(), |p| p.display().to_string()),
    );
    let profile = parse_in(&text, spec, chain)?;
    Ok(Loaded {
        profile,
        source: spec.to_string(),
    })
}

/// How many profiles an `extends` chain may hold: tuned's include chains are a few deep; a
/// longer one is a mistake, and the cap keeps a chain of generated files bounded.
pub const MAX_EXTENDS: usize = 8;

/// The profile `extends:` names, loaded, with what it is called in messages; None when the
/// document has no `extends`. The key is removed from `doc`: it is not a setting. A relative
/// path is taken from the directory of the file that names it, as tuned's `include=` is.
fn take_extends(
    doc: &mut serde_yaml_ng::Value,
    text: &str,
    file: &str,
    chain: &mut Vec<String>,
) -> Result<Option<(String, Profile)>, ProfileError> {
    let serde_yaml_ng::Value::Mapping(map) = doc else {
        return Ok(None);
    };
    let Some(value) = map.remove("extends") else {
        return Ok(None);
    };
    let line = yaml_lines::line_of(text, "extends");
    let at = |message: String| Problem {
        file: file.to_string(),
        line,
        message,
    };
    let names = EMBEDDED
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ");
    let serde_yaml_ng::Value::String(spec) = value else {
        return Err(ProfileError::Invalid(vec![at(format!(
            "extends: expected the name of a built-in profile ({names}) or the path of a profile file"
        ))]));
    };
    if !map.contains_key("name") {
        return Err(ProfileError::Invalid(vec![at(format!(
            "a profile that extends another needs a `name` of its own (reports would call it by {spec}'s): add `name: ...`"
        ))]));
    }
    let builtin = EMBEDDED.iter().any(|(n, _)| *n == spec);
    // As for --profile: a word is a built-in's name (an unknown one says which exist).
    let path_like = spec.contains('/') || spec.ends_with(".yaml") || spec.ends_with(".yml");
    let base_spec = match Path::new(file).parent() {
        Some(dir)
            if path_like && !file.starts_with("builtin:") && Path::new(&spec).is_relative() =>
        {
            dir.join(&spec).display().to_string()
        }
        _ => spec.clone(),
    };
    let key = if builtin {
        format!("builtin:{spec}")
    } else {
        Path::new(&base_spec)
            .canonicalize()
            .map_or_else(|_| base_spec.clone(), |p| p.display().to_string())
    };
    if chain.contains(&key) {
        return Err(ProfileError::Invalid(vec![at(format!(
            "extends: {spec} is already being read ({} -> {spec}): a profile cannot extend itself, directly or through others",
            chain.join(" -> ")
        ))]));
    }
    if chain.len() >= MAX_EXTENDS {
        return Err(ProfileError::Invalid(vec![at(format!(
            "extends: more than {MAX_EXTENDS} profiles in one chain ({}): extend the built-in profile directly",
            chain.join(" -> ")
        ))]));
    }
    match load_in(&base_spec, chain) {
        Ok(base) => Ok(Some((base.source, base.profile))),
        Err(ProfileError::Invalid(mut problems)) => {
            problems.insert(
                0,
                at(format!(
                    "extends: {spec} has problems of its own (below): fix them there"
                )),
            );
            Err(ProfileError::Invalid(problems))
        }
        Err(e) => Err(ProfileError::Invalid(vec![at(format!("extends: {e}"))])),
    }
}

/// Lay `over` on `base`: mappings merge key by key, anything else (numbers, text, lists)
/// replaces what the base had, as a tuned child profile's values replace its parent's.
fn merge(base: &mut serde_yaml_ng::Value, over: serde_yaml_ng::Value) {
    use serde_yaml_ng::Value::Mapping;
    match (base, over) {
        (Mapping(b), Mapping(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

/// The largest profile or catalog file accepted. The built-in ones are a few KiB and the
/// whole check catalog is under 64 KiB; 1 MiB is far beyond any real one and keeps
/// `-p /dev/zero`-style mistakes from reading without end.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Read a profile or catalog file. The error is the problem in plain words, without the
/// path (callers name the file once, in front) and without "(os error N)".
pub fn read_config_file(path: &Path) -> Result<String, String> {
    use crate::input::{io_words, read_bounded, Refused};
    read_bounded(path, MAX_CONFIG_BYTES, None).map_err(|r| match r {
        Refused::Io(e) => io_words(&e),
        Refused::Directory => "is a directory, not a YAML file".into(),
        Refused::NotRegular => "not a regular file (a device, pipe or socket)".into(),
        Refused::Outside(real) => format!("resolves to {}", real.display()),
        Refused::TooLarge(cap) => format!(
            "larger than {} MiB, which no profile or catalog is",
            cap >> 20
        ),
        Refused::NotUtf8 => "not UTF-8 text".into(),
    })
}

/// Parse and validate profile text; `file` names it in errors. Every problem of the file is
/// reported at once, sorted by line: unknown and missing keys, wrongly typed values (found by
/// comparing with a built-in profile's shape), then the bounds of [`validate`]. Only a YAML
/// syntax error stops early, since nothing after it can be read.
///
/// `extends: NAME|PATH` starts from that profile (itself resolved and validated) and lays this
/// document's keys over it (see [`merge`]); this file then needs only what it changes, and a
/// problem in a value it inherits says where it came from.
pub fn parse(text: &str, file: &str) -> Result<Profile, ProfileError> {
    parse_in(text, file, &mut Vec::new())
}

fn parse_in(text: &str, file: &str, chain: &mut Vec<String>) -> Result<Profile, ProfileError> {
    let problem = |line: Option<usize>, message: String| Problem {
        file: file.to_string(),
        line,
        message,
    };
    let serde_problem = |e: serde_yaml_ng::Error| {
        ProfileError::Invalid(vec![problem(
            e.location().map(|l| l.line()),
            strip_location(&e.to_string()),
        )])
    };
    let mut doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).map_err(serde_problem)?;
    let base = take_extends(&mut doc, text, file, chain)?;
    if let Some((_, base)) = &base {
        let mut merged = serde_yaml_ng::to_value(base).expect("a profile always serializes");
        merge(&mut merged, doc);
        doc = merged;
    }
    // A value this file does not set came from the profile it extends: say so.
    let inherited = |path: &str| match &base {
        Some((from, _)) if yaml_lines::line_of(text, path).is_none() => {
            format!(" (inherited from {from})")
        }
        _ => String::new(),
    };
    let (folded, rss_problems) = fold_rss(&mut doc, text);
    let mismatches = shape::check(&mut doc, &template());
    let mut problems: Vec<Problem> = mismatches
        .iter()
        .map(|m| problem(line_of_path(text, &m.path), m.message.clone()))
        .chain(rss_problems.into_iter().map(|(l, m)| problem(l, m)))
        .collect();
    let profile: Profile = if mismatches.is_empty() && base.is_none() && !folded {
        // Untouched: serde reads the text itself, so whatever the shape check does not know
        // about still comes with serde's own line.
        serde_yaml_ng::from_str(text).map_err(serde_problem)?
    } else {
        match serde_yaml_ng::from_value(doc) {
            Ok(p) => p,
            Err(e) => {
                problems.push(problem(None, e.to_string()));
                return Err(ProfileError::Invalid(problems));
            }
        }
    };
    // Bounds on values that were patched in from the built-in profile say nothing about the
    // file; neither do comparisons with them.
    let patched = |path: &str, message: &str| {
        mismatches
            .iter()
            .any(|m| !m.path.is_empty() && (path == m.path || message.contains(&m.path)))
    };
    problems.extend(
        validate(&profile)
            .into_iter()
            .filter(|(path, message)| !patched(path, message))
            .map(|(path, message)| {
                problem(
                    yaml_lines::line_of(text, path),
                    format!("{path}: {message}{}", inherited(path)),
                )
            }),
    );
    problems.sort_by_key(|p| p.line.unwrap_or(usize::MAX));
    if problems.is_empty() {
        Ok(profile)
    } else {
        Err(ProfileError::Invalid(problems))
    }
}

/// `windows.rss_profile`, the older Windows-only spelling of the adapters' RSS profile, read
/// into `nic.rss`, the one word both systems follow, and taken out of `doc` so that a resolved
/// profile shows only that word. A file that writes both keys must say the same thing in both;
/// one that extends another and writes only the old key overrides the inherited word. Returns
/// whether `doc` changed, and what is wrong as (line, message).
fn fold_rss(doc: &mut serde_yaml_ng::Value, text: &str) -> (bool, Vec<(Option<usize>, String)>) {
    use serde_yaml_ng::Value as Yaml;
    let Yaml::Mapping(map) = doc else {
        return (false, Vec::new());
    };
    let Some(old) = map
        .get_mut("windows")
        .and_then(|w| w.as_mapping_mut())
        .and_then(|w| w.remove("rss_profile"))
    else {
        return (false, Vec::new());
    };
    let line = yaml_lines::line_of(text, "windows.rss_profile");
    let names = RssProfile::ALL
        .iter()
        .map(|r| format!("{} (`nic: rss: {}`)", r.windows_name(), r.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    let Some(word) = old.as_str().and_then(RssProfile::from_windows_name) else {
        let found = old.as_str().map_or_else(
            || "a value that is not text".to_string(),
            |s| format!("'{s}'"),
        );
        return (
            true,
            vec![(
                line,
                format!(
                    "windows.rss_profile: {found} is not an RSS profile; allowed: {names}. Better: write the word under `nic: rss:` (both systems follow it) and remove windows.rss_profile"
                ),
            )],
        );
    };
    let nic = map
        .entry(Yaml::from("nic"))
        .or_insert_with(|| Yaml::Mapping(Default::default()));
    let Some(nic) = nic.as_mapping_mut() else {
        // `nic` is not a mapping: the shape check says so.
        return (true, Vec::new());
    };
    match yaml_lines::line_of(text, "nic.rss") {
        // Written here too: the two must agree.
        Some(nic_line) => {
            let written = nic.get("rss").and_then(|v| v.as_str()).unwrap_or_default();
            if written != word.as_str() && RssProfile::ALL.iter().any(|r| r.as_str() == written) {
                let twin = RssProfile::ALL
                    .into_iter()
                    .find(|r| r.as_str() == written)
                    .map_or("", |r| r.windows_name());
                return (
                    true,
                    vec![(
                        line,
                        format!(
                            "windows.rss_profile: {} disagrees with nic.rss: {written} (line {nic_line}, which is {twin} on Windows); both name the adapters' RSS profile: keep `nic: rss:` (the word both systems follow; {} is `{}`) and remove windows.rss_profile",
                            word.windows_name(),
                            word.windows_name(),
                            word.as_str()
                        ),
                    )],
                );
            }
        }
        None => {
            nic.insert(Yaml::from("rss"), Yaml::from(word.as_str()));
        }
    }
    (true, Vec::new())
}

/// The shape every profile must have: the default built-in profile's keys and value kinds.
fn template() -> serde_json::Value {
    let text = EMBEDDED
        .iter()
        .find(|(n, _)| *n == DEFAULT)
        .map(|(_, t)| *t)
        .expect("the default profile is built in");
    let p: Profile = serde_yaml_ng::from_str(text).expect("the built-in profiles are valid");
    serde_json::to_value(p).expect("a profile always serializes")
}

/// The line of a dotted key path, or of the nearest enclosing key that can be found (a key
/// inside a flow mapping `{...}` is not indexed; its parent is).
fn line_of_path(text: &str, path: &str) -> Option<usize> {
    let mut p = path;
    loop {
        if p.is_empty() {
            return None;
        }
        if let Some(line) = yaml_lines::line_of(text, p) {
            return Some(line);
        }
        p = p.rsplit_once('.').map_or("", |(head, _)| head);
    }
}

/// serde_yaml appends " at line L column C"; we print the line ourselves in front.
fn strip_location(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// Every bound a profile value must respect, as (key path, what is allowed). All problems are
/// collected so one edit can fix them all.
pub fn validate(p: &Profile) -> Vec<(&'static str, String)> {
    let mut b = Bounds(Vec::new());
    b.range("connections", p.connections, 1, 100_000_000, "");
    let l = &p.linux;
    b.range(
        "linux.nofile",
        l.nofile,
        1024,
        1 << 30,
        "the kernel's nr_open ceiling is at most 2^30",
    );
    b.range("linux.nr_open", l.nr_open, 1024, 1 << 30, "");
    b.range(
        "nic.rps_flow_entries",
        p.nic.rps_flow_entries,
        1,
        1 << 29,
        "the kernel refuses a flow table above 2^29 entries",
    );
    b.range("linux.file_max", l.file_max, 1024, i64::MAX as u64, "");
    // The kernel keeps these three in an int: a larger value is refused with EINVAL at apply.
    const INT: &str = "the kernel's maximum is 2147483647, an int";
    b.range("linux.somaxconn", l.somaxconn, 128, i32::MAX as u64, INT);
    b.range(
        "linux.tcp_max_syn_backlog",
        l.tcp_max_syn_backlog,
        128,
        i32::MAX as u64,
        INT,
    );
    b.range(
        "linux.netdev_max_backlog",
        l.netdev_max_backlog,
        1,
        i32::MAX as u64,
        INT,
    );
    b.range(
        "linux.tcp_tw_reuse",
        l.tcp_tw_reuse,
        0,
        2,
        "0 off, 1 on, 2 loopback only",
    );
    b.range(
        "linux.tcp_fin_timeout",
        l.tcp_fin_timeout,
        1,
        600,
        "seconds",
    );
    b.range(
        "linux.nf_conntrack_max",
        l.nf_conntrack_max,
        1,
        u32::MAX as u64,
        "",
    );
    b.range(
        "linux.tcp_max_tw_buckets",
        l.tcp_max_tw_buckets,
        1,
        u32::MAX as u64,
        "",
    );
    b.range(
        "linux.epoll_max_user_watches",
        l.epoll_max_user_watches,
        1,
        i64::MAX as u64,
        "",
    );
    let [lo, hi] = l.ip_local_port_range;
    if !(1024..=65535).contains(&lo) || !(1024..=65535).contains(&hi) || lo >= hi {
        b.problem("linux.ip_local_port_range", format!("[{lo}, {hi}] is not a port range; write [low, high] with 1024 <= low < high <= 65535"));
    }
    if l.nofile > l.nr_open {
        b.problem("linux.nofile", format!("{} is above linux.nr_open {}: the kernel refuses a nofile limit above nr_open; raise nr_open too", l.nofile, l.nr_open));
    }

    let w = &p.windows;
    b.range(
        "windows.max_user_port",
        w.max_user_port,
        5000,
        65534,
        "REG_DWORD 5000..65534",
    );
    b.range(
        "windows.dynamic_port_start",
        w.dynamic_port_start,
        1025,
        65535,
        "netsh accepts start 1025..65535",
    );
    b.range(
        "windows.dynamic_port_count",
        w.dynamic_port_count,
        255,
        64511,
        "netsh needs at least 255 ports",
    );
    b.range(
        "windows.tcp_timed_wait_delay",
        w.tcp_timed_wait_delay,
        30,
        300,
        "seconds; Windows clamps outside 30..300",
    );
    b.range(
        "windows.tcp_max_connect_response_retransmissions",
        w.tcp_max_connect_response_retransmissions,
        0,
        255,
        "REG_DWORD 0..255",
    );
    if w.dynamic_port_start + w.dynamic_port_count > 65536 {
        b.problem(
            "windows.dynamic_port_count",
            format!(
                "start {} + count {} runs past port 65535",
                w.dynamic_port_start, w.dynamic_port_count
            ),
        );
    }
    let s = &p.server;
    b.range(
        "server.io_workers",
        s.io_workers,
        0,
        1024,
        "0 = one per core",
    );
    b.range(
        "server.offload_pool_size",
        s.offload_pool_size,
        0,
        4096,
        "0 = one per core",
    );
    b.range(
        "server.offload_queue_size",
        s.offload_queue_size,
        1,
        1 << 24,
        "",
    );
    b.range(
        "server.max_connections",
        s.max_connections,
        1,
        100_000_000,
        "",
    );
    b.range(
        "server.read_buffer_bytes",
        s.read_buffer_bytes,
        256,
        16 << 20,
        "",
    );
    b.range(
        "server.write_buffer_bytes",
        s.write_buffer_bytes,
        256,
        16 << 20,
        "",
    );
    b.range(
        "server.deflate.window_bits",
        s.deflate.window_bits as u64,
        9,
        15,
        "zlib turns 8 into 9 for raw deflate, so 8 cannot be honoured",
    );
    b.range(
        "server.deflate.mem_level",
        s.deflate.mem_level as u64,
        1,
        9,
        "",
    );
    b.range("server.deflate.level", s.deflate.level as u64, 0, 9, "");
    b.range(
        "server.deflate.threshold_bytes",
        s.deflate.threshold_bytes,
        0,
        1 << 30,
        "",
    );
    b.range(
        "server.max_frame_bytes",
        s.max_frame_bytes,
        125,
        1 << 31,
        "",
    );
    b.range(
        "server.max_message_bytes",
        s.max_message_bytes,
        125,
        1 << 32,
        "",
    );
    b.range("server.fragment_bytes", s.fragment_bytes, 125, 1 << 31, "");
    b.range(
        "server.heartbeat.interval_secs",
        s.heartbeat.interval_secs,
        1,
        3600,
        "",
    );
    b.range(
        "server.heartbeat.timeout_secs",
        s.heartbeat.timeout_secs,
        1,
        4 * 3600,
        "",
    );
    b.range(
        "server.send_queue_bytes",
        s.send_queue_bytes,
        1024,
        1 << 32,
        "",
    );
    if s.notsent_lowat_bytes != 0 {
        let r = embedded_server::config::NOTSENT_LOWAT_BOUNDS;
        b.range(
            "server.notsent_lowat_bytes",
            s.notsent_lowat_bytes,
            *r.start() as u64,
            *r.end() as u64,
            "or 0: the system's tcp_notsent_lowat",
        );
    }
    b.range(
        "server.cpu_ns_per_message",
        s.cpu_ns_per_message,
        100,
        100_000_000,
        "nanoseconds of server CPU per message",
    );
    b.range(
        "server.coalesce_us",
        s.coalesce_us,
        0,
        embedded_server::coalesce::MAX_WINDOW.as_micros() as u64,
        "0 serves every message at once",
    );
    if let model::Processes::Count(n) = s.processes {
        b.range("server.processes", n, 1, MAX_PROCESSES, "or auto / cores");
    }
    if s.max_frame_bytes > s.max_message_bytes {
        b.problem(
            "server.max_frame_bytes",
            format!(
                "{} is above server.max_message_bytes {}: a frame is part of a message",
                s.max_frame_bytes, s.max_message_bytes
            ),
        );
    }
    if s.fragment_bytes > s.max_frame_bytes {
        b.problem("server.fragment_bytes", format!("{} is above server.max_frame_bytes {}: peers with the same cap would reject our fragments", s.fragment_bytes, s.max_frame_bytes));
    }
    validate_limits(&mut b, &s.limits);
    validate_budget(&mut b, &s.budget);
    if s.heartbeat.timeout_secs <= s.heartbeat.interval_secs {
        b.problem("server.heartbeat.timeout_secs", format!("{} must be longer than interval_secs {}, or every connection times out before its pong", s.heartbeat.timeout_secs, s.heartbeat.interval_secs));
    }

    let t = &p.selftest;
    b.range("selftest.payload_bytes", t.payload_bytes, 1, 16 << 20, "");
    b.range(
        "selftest.rate_per_client",
        t.rate_per_client,
        1,
        100_000,
        "",
    );
    b.range("selftest.p99_ms", t.p99_ms, 1, 600_000, "");
    b.0
}

/// `server.budget`: sizes a server can hold and bounds it can keep.
fn validate_budget(b: &mut Bounds, v: &model::BudgetProfile) {
    let tib = 1u64 << 40;
    b.range(
        "server.budget.memory_bytes",
        v.memory_bytes,
        0,
        tib,
        "bytes; 0 derives it from the host's memory",
    );
    b.range(
        "server.budget.conn_share_bytes",
        v.conn_share_bytes,
        0,
        tib,
        "bytes; 0 derives it from the message and queue caps",
    );
    for (key, value) in [
        ("server.budget.message_timeout_secs", v.message_timeout_secs),
        ("server.budget.drain_timeout_secs", v.drain_timeout_secs),
    ] {
        b.range(key, value, 0, 86_400, "seconds; 0 turns it off");
    }
    b.range(
        "server.budget.inflate_ratio_limit",
        v.inflate_ratio_limit,
        0,
        u32::MAX as u64,
        "0 turns it off",
    );
    b.range(
        "server.budget.inflate_rate_bytes",
        v.inflate_rate_bytes,
        0,
        tib,
        "bytes per second; 0 turns it off",
    );
}

/// `server.limits`: rates and bursts a u32 holds, a close code that says what happened, and
/// addresses the server can parse.
fn validate_limits(b: &mut Bounds, l: &model::LimitsProfile) {
    let per_sec = "per second; 0 turns it off";
    b.range(
        "server.limits.max_connections_per_ip",
        l.max_connections_per_ip,
        0,
        u32::MAX as u64,
        "0 turns it off",
    );
    b.range(
        "server.limits.connection_rate_per_ip",
        l.connection_rate_per_ip,
        0,
        1_000_000_000,
        per_sec,
    );
    b.range(
        "server.limits.connection_burst_per_ip",
        l.connection_burst_per_ip,
        0,
        u32::MAX as u64,
        "",
    );
    b.range(
        "server.limits.connection_rate",
        l.connection_rate,
        0,
        1_000_000_000,
        per_sec,
    );
    b.range(
        "server.limits.connection_burst",
        l.connection_burst,
        0,
        u32::MAX as u64,
        "",
    );
    b.range(
        "server.limits.message_rate",
        l.message_rate,
        0,
        1_000_000_000,
        per_sec,
    );
    b.range(
        "server.limits.message_burst",
        l.message_burst,
        0,
        u32::MAX as u64,
        "",
    );
    if !matches!(l.message_rate_close, 1008 | 1013) {
        b.problem(
            "server.limits.message_rate_close",
            format!(
                "{} is not allowed; use 1008 (policy violation) or 1013 (try again later)",
                l.message_rate_close
            ),
        );
    }
    for (path, list) in [
        ("server.limits.exempt", &l.exempt),
        ("server.limits.trusted_proxies", &l.trusted_proxies),
    ] {
        for entry in list {
            if let Err(e) = embedded_server::limits::Cidr::parse(entry) {
                b.problem(path, e);
            }
        }
    }
}

/// Collects (key path, problem) pairs.
struct Bounds(Vec<(&'static str, String)>);

impl Bounds {
    fn problem(&mut self, path: &'static str, message: String) {
        self.0.push((path, message));
    }

    /// `v` must lie in `lo..=hi`; `why` (may be empty) explains the bound.
    fn range(&mut self, path: &'static str, v: u64, lo: u64, hi: u64, why: &str) {
        if v < lo || v > hi {
            let why = if why.is_empty() {
                String::new()
            } else {
                format!(" ({why})")
            };
            self.problem(
                path,
                format!("{v} is out of range; allowed {lo}..={hi}{why}"),
            );
        }
    }
}

/// How the memory for the target connections is estimated; every figure is also a variable
/// (`estimate.*`) that checks can use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub kernel_bytes_per_conn: u64,
    pub socket_buffer_bytes_per_conn: u64,
    pub server_bytes_per_conn: u64,
    pub deflate_bytes_per_conn: u64,
    pub base_bytes: u64,
    pub connections: u64,
}

impl Estimate {
    pub fn bytes_per_conn(&self) -> u64 {
        self.kernel_bytes_per_conn
            + self.socket_buffer_bytes_per_conn
            + self.server_bytes_per_conn
            + self.deflate_bytes_per_conn
    }
    /// What a connection that exchanges no compressed message holds while idle: its kernel
    /// socket and the server's idle state (no buffers, no contexts). The self-test's idle,
    /// storm and plain echo connections are these; the deflate scenario is sized on its own.
    pub fn plain_bytes_per_conn(&self) -> u64 {
        self.kernel_bytes_per_conn + self.server_bytes_per_conn
    }
    pub fn total_bytes(&self) -> u64 {
        self.connections * self.bytes_per_conn() + self.base_bytes
    }
}

/// How busy the capacity estimate lets a core be: the guide's reference host ran its 1,000,000
/// msgs/s at 71 % of its cores, and the rest is the headroom for bursts, reconnects and the
/// kernel's own work on other cores' behalf.
pub const CORE_BUSY_PCT: u64 = 70;

/// What the profile's message rate costs in CPU (`estimate.messages_per_sec`,
/// `estimate.cores_for_rate`): connections x `selftest.rate_per_client` messages a second at
/// `server.cpu_ns_per_message` each, with each core [`CORE_BUSY_PCT`] busy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuEstimate {
    pub messages_per_sec: u64,
    pub ns_per_message: u64,
    pub cores: u64,
}

impl CpuEstimate {
    /// The cores `messages_per_sec` need at `ns_per_message` each, every core
    /// [`CORE_BUSY_PCT`] busy (at least one).
    pub fn cores_at(messages_per_sec: f64, ns_per_message: f64) -> u64 {
        let busy_ns = 1e9 * CORE_BUSY_PCT as f64 / 100.0;
        ((messages_per_sec * ns_per_message / busy_ns).ceil() as u64).max(1)
    }
}

impl Profile {
    /// The CPU the profile's message rate needs at the profile's cost per message.
    pub fn cpu_estimate(&self) -> CpuEstimate {
        let messages_per_sec = self.connections * self.selftest.rate_per_client;
        let ns_per_message = self.server.cpu_ns_per_message;
        CpuEstimate {
            messages_per_sec,
            ns_per_message,
            cores: CpuEstimate::cores_at(messages_per_sec as f64, ns_per_message as f64),
        }
    }

    /// The memory estimate for this profile's connections:
    /// kernel socket + in-flight socket buffers (one read and one write buffer's worth) + the
    /// server's idle state + deflate contexts (when context takeover keeps them alive).
    pub fn estimate(&self) -> Estimate {
        use embedded_server::memory;
        let d = &self.server.deflate;
        Estimate {
            kernel_bytes_per_conn: memory::KERNEL_BYTES_PER_SOCKET,
            socket_buffer_bytes_per_conn: self.server.read_buffer_bytes
                + self.server.write_buffer_bytes,
            server_bytes_per_conn: memory::SERVER_BYTES_PER_IDLE_CONN,
            deflate_bytes_per_conn: if d.enabled && d.context_takeover {
                memory::deflate_bytes_per_conn(d.window_bits, d.mem_level)
            } else {
                0
            },
            base_bytes: memory::SERVER_BASE_BYTES,
            connections: self.connections,
        }
    }

    /// Flat variables for catalog expressions: every profile key by its dotted path
    /// (`linux.somaxconn`, `server.deflate.window_bits`, ...) plus `estimate.*`.
    pub fn variables(&self) -> BTreeMap<String, Value> {
        // Straight from the typed fields: `linux.somaxconn: u64` -> `Value::Num` once.
        let mut vars = crate::value::flatten(self).expect("a profile has no map or float");
        let e = self.estimate();
        for (k, v) in [
            ("kernel_bytes_per_conn", e.kernel_bytes_per_conn),
            (
                "socket_buffer_bytes_per_conn",
                e.socket_buffer_bytes_per_conn,
            ),
            ("server_bytes_per_conn", e.server_bytes_per_conn),
            ("deflate_bytes_per_conn", e.deflate_bytes_per_conn),
            ("bytes_per_conn", e.bytes_per_conn()),
            ("base_bytes", e.base_bytes),
            ("total_bytes", e.total_bytes()),
            (
                "socket_buffer_bytes",
                e.connections * e.socket_buffer_bytes_per_conn,
            ),
        ] {
            vars.insert(format!("estimate.{k}"), Value::Num(v as i64));
        }
        // `nic.rss` in Windows' name: what an adapter's *RSSProfile check targets. Always
        // there, since a profile with the default `nic` block serializes none of it.
        vars.insert(
            "nic.rss.windows".into(),
            Value::Text(self.nic.rss.windows_name().into()),
        );
        let cpu = self.cpu_estimate();
        vars.insert(
            "estimate.messages_per_sec".into(),
            Value::Num(cpu.messages_per_sec as i64),
        );
        vars.insert(
            "estimate.cores_for_rate".into(),
            Value::Num(cpu.cores as i64),
        );
        let (processes, per_process) = nofile_per_process(
            vars.get("server.processes"),
            self.connections,
            self.linux.nofile,
        );
        vars.insert("estimate.processes".into(), Value::Num(processes as i64));
        vars.insert(
            "estimate.nofile_per_process".into(),
            Value::Num(per_process as i64),
        );
        vars
    }
}

/// Processes `auto` may start at most (more is a typo, not a plan: nginx and Envoy run one per
/// core); the nofile target of an `auto` layout is what one of that many processes needs.
pub const MAX_PROCESSES: u64 = 1024;

/// File descriptors a server process keeps besides its connections (listeners, admin, relay,
/// epoll, runtime, logs), in one process or under the supervisor.
pub const RESERVE_FDS: u64 = 64;

/// One process's connections when `connections` are shared by `n` (the supervisor's rule: the
/// kernel spreads connections over SO_REUSEPORT sockets evenly on average, not exactly, so each
/// gets its share plus 10%).
pub fn connections_per_process(connections: u64, n: u64) -> u64 {
    if n <= 1 {
        return connections;
    }
    let share = connections.div_ceil(n);
    (share + share.div_ceil(10)).min(connections)
}

/// `server.processes` (a number, `auto` or `cores`; absent: 1) and the open files each process
/// needs: the profile's `linux.nofile` for one process (the guide's 2 x connections), and
/// connections / processes + 10% + the reserve for several. `auto` and `cores` pick as many
/// processes as the host's limit needs, so their floor is one of `MAX_PROCESSES` processes;
/// they report 0 processes (decided at start).
pub fn nofile_per_process(processes: Option<&Value>, connections: u64, nofile: u64) -> (u64, u64) {
    match processes {
        Some(Value::Num(n)) if *n > 1 => {
            let n = *n as u64;
            (n, connections_per_process(connections, n) + RESERVE_FDS)
        }
        Some(Value::Text(_)) => (
            0,
            connections_per_process(connections, MAX_PROCESSES) + RESERVE_FDS,
        ),
        _ => (1, nofile),
    }
}

/// The fewest processes whose share of `connections` fits under `limit` open files each.
pub fn processes_needed(connections: u64, limit: u64) -> Option<u64> {
    (1..=MAX_PROCESSES).find(|&n| connections_per_process(connections, n) + RESERVE_FDS <= limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nofile_per_process_shares_the_connections() {
        // One process (absent or 1): the profile's nofile, the guide's 2 x connections.
        assert_eq!(nofile_per_process(None, 100_000, 200_000), (1, 200_000));
        assert_eq!(
            nofile_per_process(Some(&Value::Num(1)), 100_000, 200_000),
            (1, 200_000)
        );
        // Six: 16,667 each plus 10% plus the reserve, under this VM's 20,000.
        assert_eq!(
            nofile_per_process(Some(&Value::Num(6)), 100_000, 200_000),
            (6, 16_667 + 1_667 + 64)
        );
        let (n, per) = nofile_per_process(Some(&Value::Text("auto".into())), 100_000, 200_000);
        assert_eq!(n, 0);
        assert!(per < 1000, "{per}");
        assert_eq!(processes_needed(100_000, 20_000), Some(6));
        assert_eq!(processes_needed(100_000, 200_000), Some(1));
        assert_eq!(processes_needed(100_000, 64), None);
    }

    #[test]
    fn every_embedded_profile_is_valid_and_named_after_its_file() {
        for (name, text) in EMBEDDED {
            let p = parse(text, name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(&p.name, name);
            assert!(
                p.linux.nofile >= 2 * p.connections,
                "{name}: the guide's nofile rule"
            );
            assert!(p.linux.somaxconn >= 4096, "{name}");
        }
    }

    #[test]
    fn profiles_grow_with_connections() {
        let ps: Vec<Profile> = EMBEDDED.iter().map(|(n, t)| parse(t, n).unwrap()).collect();
        for w in ps.windows(2) {
            assert!(w[0].connections < w[1].connections);
            assert!(w[0].linux.somaxconn <= w[1].linux.somaxconn);
            assert!(
                w[0].server.deflate.window_bits >= w[1].server.deflate.window_bits,
                "bigger profiles save deflate memory"
            );
        }
    }

    #[test]
    fn the_channels_block_is_optional_and_partial_and_checks_its_keys() {
        let base = EMBEDDED[0].1;
        assert!(parse(base, "p.yaml").unwrap().server.channels.is_default());
        let with = |block: &str| {
            base.replace(
                "  send_queue_bytes:",
                &format!("  channels:\n{block}\n  send_queue_bytes:"),
            )
        };
        let p = parse(
            &with("    auth:\n      secret_file: /etc/wstune/jwt\n    max_subscriptions: 8"),
            "p.yaml",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.server.channels.auth.secret_file, "/etc/wstune/jwt");
        assert_eq!(p.server.channels.max_subscriptions, 8);
        assert_eq!(p.server.channels.api_key_file, "", "absent keys default");
        let err = parse(&with("    api_key: hunter2"), "p.yaml").unwrap_err();
        assert!(err.to_string().contains("api_key"), "{err}");
    }

    #[test]
    fn the_limits_block_is_optional_and_its_bad_values_have_lines() {
        let base = EMBEDDED[0].1;
        assert!(parse(base, "p.yaml").unwrap().server.limits.is_default());
        let with = |block: &str| {
            base.replace(
                "  send_queue_bytes:",
                &format!("  limits:\n{block}\n  send_queue_bytes:"),
            )
        };
        let p = parse(
            &with(
                "    max_connections_per_ip: 100\n    message_rate: 50\n    exempt: [10.0.0.0/8]",
            ),
            "p.yaml",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.server.limits.max_connections_per_ip, 100);
        assert_eq!(
            p.server.limits.message_rate_close, 1008,
            "default close code"
        );
        let text = with("    message_rate_close: 1000\n    trusted_proxies: [10.0.0.0/33]");
        let err = parse(&text, "p.yaml").unwrap_err();
        let ProfileError::Invalid(problems) = &err else {
            panic!("{err}")
        };
        let msgs: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        let line = |k| yaml_lines::line_of(&text, k).unwrap();
        assert!(
            msgs.iter().any(|m| m.starts_with(&format!(
                "p.yaml:{}: server.limits.message_rate_close: 1000 is not allowed; use 1008",
                line("server.limits.message_rate_close")
            ))),
            "{msgs:?}"
        );
        assert!(
            msgs.iter().any(|m| m.contains(&format!(
                "p.yaml:{}: server.limits.trusted_proxies: '10.0.0.0/33' is not an address",
                line("server.limits.trusted_proxies")
            ))),
            "{msgs:?}"
        );
        let typo = parse(&with("    max_conns_per_ip: 1"), "p.yaml")
            .unwrap_err()
            .to_string();
        assert!(typo.contains("max_conns_per_ip"), "{typo}");
    }

    #[test]
    fn optional_keys_are_accepted_and_type_checked() {
        let with = |v: &str| {
            EMBEDDED[0].1.replace(
                "    context_takeover: true",
                &format!("    context_takeover: true\n    inflate_budget_bytes: {v}"),
            )
        };
        let p = parse(&with("134217728"), "p.yaml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.server.deflate.inflate_budget_bytes, Some(134217728));
        let err = parse(&with("lots"), "p.yaml").unwrap_err().to_string();
        assert!(
            err.contains("server.deflate.inflate_budget_bytes: expected a whole number"),
            "{err}"
        );
    }

    /// A built-in profile as an older file wrote it: the Windows-only RSS key, no `nic` block.
    fn with_old_rss_key(windows_name: &str) -> String {
        let text = EMBEDDED[0].1;
        let text = &text[..=text
            .find("\nnic:\n")
            .expect("the built-in profiles say nic.rss")];
        text.replace(
            "windows:\n",
            &format!("windows:\n  rss_profile: {windows_name}\n"),
        )
    }

    #[test]
    fn the_older_windows_rss_key_alone_is_read_into_the_one_word() {
        let p = parse(&with_old_rss_key("ClosestProcessorStatic"), "old.yaml")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.nic.rss, RssProfile::ClosestStatic);
        // Resolved, the profile says the one word, and the Windows check's target follows it.
        let shown = serde_yaml_ng::to_string(&p).unwrap();
        assert!(!shown.contains("rss_profile"), "{shown}");
        assert!(shown.contains("rss: closest_static"), "{shown}");
        assert_eq!(
            p.variables().get("nic.rss.windows"),
            Some(&Value::Text("ClosestProcessorStatic".into()))
        );
        // A profile extending a built-in one overrides the inherited word with the old key.
        let child = "extends: 100k\nname: mine\nwindows:\n  rss_profile: ConservativeScaling\n";
        let p = parse(child, "child.yaml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.nic.rss, RssProfile::Conservative);
    }

    #[test]
    fn both_rss_keys_must_agree_and_the_error_names_both_with_the_line() {
        let agree = with_old_rss_key("NUMAScaling") + "nic:\n  rss: numa_scaling\n";
        let p = parse(&agree, "p.yaml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.nic.rss, RssProfile::NumaScaling);
        let text = with_old_rss_key("NUMAScalingStatic") + "nic:\n  rss: closest\n";
        let old_line = yaml_lines::line_of(&text, "windows.rss_profile").unwrap();
        let nic_line = yaml_lines::line_of(&text, "nic.rss").unwrap();
        let err = parse(&text, "p.yaml").unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("p.yaml:{old_line}: windows.rss_profile: NUMAScalingStatic disagrees with nic.rss: closest (line {nic_line}")),
            "{err}"
        );
        assert!(
            err.contains("remove windows.rss_profile") && err.contains("`numa_scaling_static`"),
            "{err}"
        );
        // A name Windows does not have says which ones it does, and where the word belongs.
        let err = parse(&with_old_rss_key("Balanced"), "p.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!(
                "p.yaml:{old_line}: windows.rss_profile: 'Balanced' is not an RSS profile"
            )) && err.contains("NUMAScaling (`nic: rss: numa_scaling`)"),
            "{err}"
        );
    }

    #[test]
    fn every_rss_word_is_one_windows_name_and_back() {
        for r in RssProfile::ALL {
            assert_eq!(RssProfile::from_windows_name(r.windows_name()), Some(r));
            let yaml: RssProfile = serde_yaml_ng::from_str(r.as_str()).unwrap();
            assert_eq!(yaml, r);
        }
    }

    #[test]
    fn unknown_key_names_the_line_and_the_allowed_keys() {
        let text = EMBEDDED[0]
            .1
            .replace("  somaxconn: 4096", "  somaxconn: 4096\n  somaxcon: 1");
        let err = parse(&text, "p.yaml").unwrap_err().to_string();
        assert!(err.starts_with("p.yaml:"), "{err}");
        assert!(
            err.contains("unknown field `somaxcon`") && err.contains("somaxconn"),
            "{err}"
        );
    }

    #[test]
    fn bad_values_are_all_reported_with_lines() {
        let text = EMBEDDED[0]
            .1
            .replace("window_bits: 15", "window_bits: 8")
            .replace("timeout_secs: 90", "timeout_secs: 10");
        let err = parse(&text, "p.yaml").unwrap_err();
        let ProfileError::Invalid(problems) = err else {
            panic!()
        };
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0]
            .message
            .contains("server.deflate.window_bits: 8 is out of range; allowed 9..=15"));
        assert_eq!(
            problems[0].line,
            yaml_lines::line_of(&text, "server.deflate.window_bits")
        );
        assert!(problems[0].line.is_some());
        assert!(problems[1].message.contains("longer than interval_secs"));
    }

    #[test]
    fn processes_is_optional_a_number_auto_or_cores() {
        let base = EMBEDDED[0].1;
        assert_eq!(
            parse(base, "p.yaml").unwrap().server.processes,
            Processes::Count(1)
        );
        let with = |v: &str| {
            let t = base.replace(
                "  send_queue_bytes:",
                &format!("  processes: {v}\n  send_queue_bytes:"),
            );
            assert_ne!(t, base);
            parse(&t, "p.yaml")
        };
        assert_eq!(with("auto").unwrap().server.processes, Processes::Auto);
        assert_eq!(with("cores").unwrap().server.processes, Processes::Cores);
        assert_eq!(with("4").unwrap().server.processes, Processes::Count(4));
        let err = with("0").unwrap_err().to_string();
        assert!(err.contains("server.processes: 0 is out of range"), "{err}");
        let err = with("lots").unwrap_err().to_string();
        assert!(err.contains("'lots' is not a process count"), "{err}");
    }

    #[test]
    fn a_profile_extends_another_and_changes_only_what_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let child = dir.path().join("edge.yaml");
        std::fs::write(
            &child,
            "extends: 100k\nname: edge\nlinux:\n  somaxconn: 32768\n  ip_local_port_range: [20000, 60999]\nserver:\n  deflate:\n    enabled: false\n",
        )
        .unwrap();
        let p = load(child.to_str().unwrap()).unwrap().profile;
        let base = load("100k").unwrap().profile;
        assert_eq!(p.name, "edge");
        assert_eq!(p.linux.somaxconn, 32768);
        // A list replaces the base's; a mapping merges key by key.
        assert_eq!(p.linux.ip_local_port_range, [20000, 60999]);
        assert!(!p.server.deflate.enabled);
        assert_eq!(
            p.server.deflate.window_bits,
            base.server.deflate.window_bits
        );
        assert_eq!(p.connections, base.connections);
        assert_eq!(p.windows, base.windows);

        // A grandchild, by a path relative to its own file.
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let grand = sub.join("edge-eu.yaml");
        std::fs::write(
            &grand,
            "extends: ../edge.yaml\nname: edge-eu\nconnections: 50000\n",
        )
        .unwrap();
        let g = load(grand.to_str().unwrap()).unwrap().profile;
        assert_eq!((g.connections, g.linux.somaxconn), (50000, 32768));
    }

    #[test]
    fn an_extending_profile_is_validated_with_its_own_lines_and_names_inherited_values() {
        let dir = tempfile::tempdir().unwrap();
        let child = dir.path().join("bad.yaml");
        let path = child.to_str().unwrap().to_string();
        let text = "extends: 100k\nname: bad\nserver:\n  deflate:\n    window_bits: 8\n    window_bitz: 9\n  heartbeat:\n    interval_secs: 120\n";
        std::fs::write(&child, text).unwrap();
        let ProfileError::Invalid(problems) = load(&path).unwrap_err() else {
            panic!()
        };
        let find = |needle: &str| {
            problems
                .iter()
                .find(|p| p.message.contains(needle))
                .unwrap_or_else(|| panic!("no `{needle}` in {problems:?}"))
        };
        assert_eq!(find("unknown field `window_bitz`").line, Some(6));
        assert_eq!(find("window_bits: 8 is out of range").line, Some(5));
        // The interval this file sets meets the timeout it inherits (90 s).
        let hb = find("longer than interval_secs");
        assert!(
            hb.message.contains("(inherited from builtin:100k)"),
            "{hb:?}"
        );
        assert!(problems.iter().all(|p| p.file == path), "{problems:?}");
    }

    #[test]
    fn extends_refuses_cycles_unknown_bases_and_a_missing_name() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.yaml");
        let b = dir.path().join("b.yaml");
        std::fs::write(&a, "extends: b.yaml\nname: a\n").unwrap();
        std::fs::write(&b, "extends: a.yaml\nname: b\n").unwrap();
        let err = load(a.to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains("cannot extend itself"), "{err}");
        assert!(err.contains("a.yaml:1:"), "{err}");

        std::fs::write(&a, "name: a\nextends: 200k\n").unwrap();
        let err = load(a.to_str().unwrap()).unwrap_err().to_string();
        assert!(
            err.contains("a.yaml:2: extends: unknown profile '200k'"),
            "{err}"
        );

        std::fs::write(&a, "extends: 10k\nconnections: 5000\n").unwrap();
        let err = load(a.to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains("needs a `name` of its own"), "{err}");

        std::fs::write(&a, "extends: [10k]\nname: a\n").unwrap();
        let err = load(a.to_str().unwrap()).unwrap_err().to_string();
        assert!(
            err.contains("extends: expected the name of a built-in profile"),
            "{err}"
        );

        // A base with problems of its own: named with its file and line, below the child's.
        std::fs::write(&b, "extends: 10k\nname: b\nlinux:\n  somaxconn: lots\n").unwrap();
        std::fs::write(&a, "extends: b.yaml\nname: a\n").unwrap();
        let err = load(a.to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains("has problems of its own"), "{err}");
        assert!(
            err.contains("b.yaml:4: linux.somaxconn: expected a whole number"),
            "{err}"
        );
    }

    #[test]
    fn unknown_name_lists_the_builtins() {
        let err = load("200k").unwrap_err().to_string();
        assert!(
            err.contains("unknown profile '200k'") && err.contains("10k, 50k, 100k, 250k, 1m"),
            "{err}"
        );
    }

    #[test]
    fn variables_cover_nested_keys_and_estimates() {
        let p = load("100k").unwrap().profile;
        let v = p.variables();
        assert_eq!(v["connections"], Value::Num(100_000));
        assert_eq!(
            v["linux.ip_local_port_range"],
            Value::List(vec![10000, 65535])
        );
        assert_eq!(v["server.deflate.window_bits"], Value::Num(11));
        let e = p.estimate();
        assert_eq!(
            v["estimate.total_bytes"],
            Value::Num(e.total_bytes() as i64)
        );
        // window 11, memLevel 4: 8 KiB + 8 KiB + 11 KiB to compress, 2 KiB + 17 KiB to inflate.
        assert_eq!(e.deflate_bytes_per_conn, 46 * 1024);
    }

    #[test]
    fn the_cores_for_the_rate_follow_the_cost_per_message() {
        let mut p = load("100k").unwrap().profile;
        // 100,000 clients x 10/s = 1,000,000 msgs/s; at 14 us each and 70 % busy: 20 cores.
        let v = p.variables();
        assert_eq!(v["estimate.messages_per_sec"], Value::Num(1_000_000));
        assert_eq!(v["estimate.cores_for_rate"], Value::Num(20));
        // The guide's own host: ~11 us per message (71 % of 16 cores), 16 cores.
        p.server.cpu_ns_per_message = 11_000;
        assert_eq!(p.cpu_estimate().cores, 16);
        // A slow handler ten times dearer needs ten times the cores.
        p.server.cpu_ns_per_message = 140_000;
        assert_eq!(p.cpu_estimate().cores, 200);
        // A trickle still needs a core.
        assert_eq!(CpuEstimate::cores_at(10.0, 14_000.0), 1);
    }
}
