//! Tuning profiles: loading (embedded or from a file), validation, and the variables that check
//! targets are written in.
//!
//! Flow: `--profile NAME|PATH` -> [`load`] -> [`Profile`] (validated) -> [`Profile::variables`],
//! the flat name -> value map that catalog expressions such as `2 * connections` are evaluated in.
//!
//! Beside this file: [`validate()`] (every bound a value must respect), the memory and CPU
//! estimates, the variables, and how many server processes the connections need
//! ([`processes_needed`]).

mod builtin;
mod estimate;
mod model;
mod processes;
mod shape;
#[cfg(test)]
mod tests;
mod validate;
mod variables;

use crate::yaml_lines;
pub use builtin::{text as builtin_text, written_out, BASE, DEFAULT, EMBEDDED};
pub use estimate::{CpuEstimate, Estimate, CORE_BUSY_PCT};
pub use model::*;
pub use processes::{
    connections_per_process, nofile_per_process, per_process, processes_needed, size_processes,
    ProcessSizing, MAX_PROCESSES, RESERVE_FDS,
};
use std::fmt;
use std::path::{Path, PathBuf};
pub use validate::validate;

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
    /// Keys the file (or a file it extends) writes under an older name: read, with the new
    /// name to write instead (see [`RETIRED`]).
    pub warnings: Vec<Problem>,
}

/// Where [`load`] hands each warning as it loads a profile: the command line prints them on
/// stderr before the command's own output. Unset (a library caller, a test), they are only in
/// [`Loaded::warnings`].
static ON_WARNING: std::sync::OnceLock<fn(&Problem)> = std::sync::OnceLock::new();

/// The warnings already handed to [`ON_WARNING`]: a command that loads its profile more than
/// once (`serve` for its server and its host checks) tells each one once.
static SHOWN: std::sync::Mutex<Vec<(String, Option<usize>, String)>> =
    std::sync::Mutex::new(Vec::new());

/// Whether `w` (its file, line and message) has not been handed on yet; it counts as handed on.
fn first_time(w: &Problem) -> bool {
    let key = (w.file.clone(), w.line, w.message.clone());
    let mut shown = SHOWN.lock().unwrap_or_else(|e| e.into_inner());
    if shown.contains(&key) {
        return false;
    }
    shown.push(key);
    true
}

/// Have `f` told of every warning a profile load finds, once per file, line and message in
/// this process however often the profile is loaded (the first call wins).
pub fn on_warning(f: fn(&Problem)) {
    let _ = ON_WARNING.set(f);
}

/// Resolve `--profile`: a built-in name, or else a path to a YAML file. A value that looks like a
/// path (has a separator or a .yaml/.yml ending) is never taken for a name.
pub fn load(spec: &str) -> Result<Loaded, ProfileError> {
    let mut warnings = Vec::new();
    let mut loaded = load_in(spec, &mut Vec::new(), &mut warnings)?;
    if let Some(f) = ON_WARNING.get() {
        warnings.iter().filter(|w| first_time(w)).for_each(f);
    }
    loaded.warnings = warnings;
    Ok(loaded)
}

/// [`load`], with the profiles being read that extend this one (`chain`), for cycles, and the
/// warnings found so far.
fn load_in(
    spec: &str,
    chain: &mut Vec<String>,
    warnings: &mut Vec<Problem>,
) -> Result<Loaded, ProfileError> {
    if let Some(text) = builtin::text(spec) {
        chain.push(format!("builtin:{spec}"));
        let profile = parse_in(text, &format!("builtin:{spec}"), chain, warnings)?;
        return Ok(Loaded {
            profile,
            source: format!("builtin:{spec}"),
            warnings: Vec::new(),
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
    let profile = parse_in(&text, spec, chain, warnings)?;
    Ok(Loaded {
        profile,
        source: spec.to_string(),
        warnings: Vec::new(),
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
    warnings: &mut Vec<Problem>,
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
    let builtin = builtin::text(&spec).is_some();
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
    match load_in(&base_spec, chain, warnings) {
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
    use crate::host::input::{io_words, read_bounded, Refused};
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
    parse_in(text, file, &mut Vec::new(), &mut Vec::new())
}

fn parse_in(
    text: &str,
    file: &str,
    chain: &mut Vec<String>,
    warnings: &mut Vec<Problem>,
) -> Result<Profile, ProfileError> {
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
    not_a_profile(&doc).map_or(Ok(()), |m| {
        Err(ProfileError::Invalid(vec![problem(None, m)]))
    })?;
    let base = take_extends(&mut doc, text, file, chain, warnings)?;
    // `nic:` with every key commented out is `nic` left out, not a block of nothing.
    let emptied = shape::drop_empty_blocks(&mut doc, profile_shape(), base.is_some());
    // Older names first, in this file's own keys: a base's value under the new name is
    // overridden by this file's under the old one, as if the file said the new name.
    let (renamed, retired_problems, noted) = fold_retired(&mut doc, text, RETIRED);
    warnings.extend(noted.into_iter().map(|(l, m)| problem(l, m)));
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
    if folded && rss_problems.is_empty() {
        warnings.push(problem(
            yaml_lines::line_of(text, "windows.rss_profile"),
            format!(
                "windows.rss_profile is the older name of nic.rss (one word for Windows and Linux): write `nic: rss: {}` and remove windows.rss_profile; the older name is still read",
                doc.get("nic")
                    .and_then(|n| n.get("rss"))
                    .and_then(|r| r.as_str())
                    .unwrap_or("...")
            ),
        ));
    }
    let mismatches = shape::check(&mut doc, profile_shape());
    let mut problems: Vec<Problem> = mismatches
        .iter()
        .map(|m| problem(line_of_path(text, &m.path), m.message.clone()))
        .chain(rss_problems.into_iter().map(|(l, m)| problem(l, m)))
        .chain(retired_problems.into_iter().map(|(l, m)| problem(l, m)))
        .collect();
    let untouched = mismatches.is_empty() && base.is_none() && !folded && !renamed && !emptied;
    let profile: Profile = if untouched {
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

/// The shape every profile must have: the default built-in profile's keys and value kinds,
/// every block written out, and which keys the model defaults when a file leaves them out.
fn profile_shape() -> &'static shape::Shape {
    static SHAPE: std::sync::OnceLock<shape::Shape> = std::sync::OnceLock::new();
    SHAPE.get_or_init(|| {
        // The base writes every key out; the sizes only what they change.
        let mut p: Profile =
            serde_yaml_ng::from_str(builtin::BASE_TEXT).expect("the built-in profiles are valid");
        // Keys that stay out unless set: shown with a value of their kind.
        p.role.get_or_insert(Role::Server);
        p.server.deflate.inflate_budget_bytes.get_or_insert(0);
        shape::Shape::of::<Profile>(p.written_out())
    })
}

/// Why `doc` is no profile at all, when it is a mapping none of whose top-level keys a
/// profile has: some other file named by mistake (or through a link), such as /etc/shadow,
/// whose lines YAML reads as keys. Nothing of such a file is quoted back: its keys and values
/// may be secrets, and the message must say only that it is the wrong file.
fn not_a_profile(doc: &serde_yaml_ng::Value) -> Option<String> {
    let serde_yaml_ng::Value::Mapping(map) = doc else {
        return None;
    };
    let shape = profile_shape();
    let known = |k: &serde_yaml_ng::Value| {
        k.as_str().is_some_and(|k| {
            k == "extends"
                || shape.has_top_level(k)
                || RETIRED
                    .iter()
                    .any(|(old, _)| old.split('.').next() == Some(k))
        })
    };
    if map.is_empty() || map.keys().any(known) {
        return None;
    }
    Some(format!(
        "not a wstune profile: none of its {} top-level key(s) is a profile's ({}, or `extends`), so none is shown; pass a profile file (`wstune profiles show 100k` prints one to start from) or a built-in name",
        map.len(),
        shape.top_level_keys()
    ))
}

/// What became of a key that a release renamed or removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retired {
    /// Renamed to this dotted path: the old name is read into it, with a warning naming the
    /// new one, for at least one release; then the entry becomes [`Retired::Removed`].
    Renamed(&'static str),
    /// No longer read: refused, with this fix.
    Removed(&'static str),
}

/// Keys that releases renamed or removed, by their old dotted path (docs/profiles.md,
/// "Compatibility"). `windows.rss_profile`, renamed to `nic.rss` with its values changed
/// from Windows' names to the one word, is read by [`fold_rss`] instead (it warns the same).
pub const RETIRED: &[(&str, Retired)] = &[];

/// Take each retired key in `table` out of `doc`: a renamed one's value moves to its new
/// path (unless the file sets that too: the two must agree), a removed one is refused.
/// Returns whether `doc` changed, the problems and the warnings, each as (line, message).
#[allow(clippy::type_complexity)]
fn fold_retired(
    doc: &mut serde_yaml_ng::Value,
    text: &str,
    table: &[(&str, Retired)],
) -> (
    bool,
    Vec<(Option<usize>, String)>,
    Vec<(Option<usize>, String)>,
) {
    use serde_yaml_ng::Value as Yaml;
    let (mut changed, mut problems, mut warnings) = (false, Vec::new(), Vec::new());
    for (old, fate) in table {
        let (parent, leaf) = old.rsplit_once('.').unwrap_or(("", old));
        let map = parent
            .split('.')
            .filter(|k| !k.is_empty())
            .try_fold(&mut *doc, |v, k| v.get_mut(k));
        let Some(value) = map
            .and_then(Yaml::as_mapping_mut)
            .and_then(|m| m.remove(leaf))
        else {
            continue;
        };
        changed = true;
        let line = yaml_lines::line_of(text, old);
        let new = match fate {
            Retired::Removed(fix) => {
                problems.push((line, format!("{old} is no longer read: {fix}")));
                continue;
            }
            Retired::Renamed(new) => *new,
        };
        let (parent, leaf) = new.rsplit_once('.').unwrap_or(("", new));
        // The new key's block, made where missing; a parent that is not a mapping is left to
        // the shape check, which names it.
        let block = parent
            .split('.')
            .filter(|k| !k.is_empty())
            .try_fold(&mut *doc, |at, key| {
                at.as_mapping_mut().map(|m| {
                    m.entry(Yaml::from(key))
                        .or_insert_with(|| Yaml::Mapping(Default::default()))
                })
            });
        let Some(m) = block.and_then(Yaml::as_mapping_mut) else {
            continue;
        };
        match m.get(leaf) {
            Some(written) if *written != value => problems.push((
                line,
                format!(
                    "{old} is the older name of {new}, which this file also sets{} to another value: keep {new} and remove {old}",
                    yaml_lines::line_of(text, new).map_or(String::new(), |l| format!(" (line {l})"))
                ),
            )),
            _ => {
                m.insert(Yaml::from(leaf), value);
                warnings.push((
                    line,
                    format!(
                        "{old} is the older name of {new}: rename it; the older name is still read, and a later release will refuse it"
                    ),
                ));
            }
        }
    }
    (changed, problems, warnings)
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
