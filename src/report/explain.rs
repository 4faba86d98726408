//! `wstune explain ID`: one check as the catalog has it (title, why, fix, sources), where it
//! sits (area, scope, per network namespace), how the host's role changes it, and the target
//! each built-in profile sets; or a list of ids. The command gathers it (cmd/explain.rs);
//! this lays it out for people or as JSON.

use super::blocks::fix_lines_at;
use super::text::wrapped;
use crate::catalog::{Ref, Scope, Severity};
use crate::value::Value;
use serde::Serialize;

/// Everything `explain` says about one check. The JSON shape of `explain ID --format json`.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    pub id: String,
    pub title: String,
    /// `linux`, `windows`, `load balancer` or `wstune` (its own journal).
    pub platform: String,
    /// The area the check report groups it under.
    pub area: &'static str,
    /// What the value is read from (`sysctl net.core.somaxconn`).
    pub reads: Option<String>,
    pub scope: Option<Scope>,
    /// A container has its own value (set by its runtime).
    pub per_netns: bool,
    /// Also judged as the next boot will set it (`ID.boot`).
    pub boot_view: bool,
    pub severity: Option<Severity>,
    /// How the current value is compared with the target (`>=`, `<=`, `covers`, ...).
    pub compare: Option<&'static str>,
    pub why: String,
    /// With `{target}` and the other placeholders as the catalog writes them: a report fills
    /// them in with the host's values.
    pub fix: FixTemplate,
    pub refs: Vec<Ref>,
    /// What changes on a host of each role the catalog names; roles not named take the check
    /// as written.
    pub roles: Vec<RoleChange>,
    /// The target under each built-in profile (none: the check has no target).
    pub targets: Vec<ProfileTarget>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct FixTemplate {
    pub runtime: Option<String>,
    pub persistent: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RoleChange {
    pub role: String,
    /// Not checked on this role, and why.
    pub skip: Option<String>,
    pub compare: Option<&'static str>,
    /// The role's own target, as the catalog writes it.
    pub target: Option<String>,
    pub severity: Option<Severity>,
    pub why: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProfileTarget {
    pub profile: String,
    /// The target this profile sets, when the profile alone decides it.
    pub target: Option<Value>,
    /// The expression, when it needs the host's own values (its memory, tcp_mem): `check`
    /// computes it on the host.
    pub from_host: Option<String>,
}

/// One entry of a list of ids.
#[derive(Debug, Clone, Serialize)]
pub struct IdEntry {
    pub id: String,
    pub title: String,
}

/// The explanation for people, `width` columns wide (prose at most 100).
pub fn explain_text(e: &Explanation, width: u16) -> String {
    let w = width.min(100) as usize;
    let mut out = wrapped(&format!("{}: {}", e.id, e.title), w, "", "  ");
    out.push('\n');
    let field = |name: &str, text: &str| wrapped(text, w, &format!("{name:<10}"), "          ");
    out.push_str(&field("Area:", e.area));
    let platform = match e.platform.as_str() {
        "linux" => "Linux",
        "windows" => "Windows",
        other => other,
    };
    out.push_str(&field("Platform:", platform));
    if let Some(r) = &e.reads {
        let boot = if e.boot_view {
            format!("; also as the next boot sets it ({}.boot)", e.id)
        } else {
            String::new()
        };
        out.push_str(&field("Reads:", &format!("{r}{boot}")));
    }
    if let Some(s) = e.scope {
        out.push_str(&field("Scope:", scope_words(s)));
    }
    if let Some(sev) = e.severity {
        let how = match sev {
            Severity::Fail => "fail when missed",
            Severity::Warn => "warn when missed",
            Severity::Info => "info: advice, never a failure",
        };
        let how = match e.compare {
            Some(c @ (">=" | "<=" | "==" | "covers" | "reserves" | "version>=")) => {
                format!("{how} (current {c} target)")
            }
            Some("absent") => format!("{how} (the setting must not exist)"),
            Some("no_growth") => {
                format!("{how} (a counter: fails only when it grows during --watch)")
            }
            Some("report") => "shown, never judged".to_string(),
            _ => how.to_string(),
        };
        out.push_str(&field("Verdict:", &how));
    }
    out.push_str("\nWhy:\n");
    out.push_str(&wrapped(e.why.trim(), w, "  ", "  "));
    if e.fix.runtime.is_some() || e.fix.persistent.is_some() {
        if advice(e) {
            out.push_str(
                "\nAdvice, optional (an info check: wstune apply leaves it, and a report shows these \
                 commands only with `check --why`; it fills in {target} and the other placeholders):\n",
            );
        } else {
            out.push_str("\nFix (a report fills in {target} and the other placeholders):\n");
        }
        for (label, text) in [("now", &e.fix.runtime), ("persist", &e.fix.persistent)] {
            if let Some(t) = text {
                out.push_str(&fix_lines_at(label, t, w, "  ", "    "));
            }
        }
        for r in crate::catalog::kube::remark(&fix_text(e)) {
            out.push_str(&wrapped(&r, w, "  ", "    "));
        }
    }
    let one_expression = e
        .targets
        .first()
        .and_then(|t| t.from_host.as_ref())
        .filter(|x| {
            e.targets
                .iter()
                .all(|t| t.target.is_none() && t.from_host.as_ref() == Some(*x))
        });
    if let Some(x) = one_expression {
        out.push_str(&format!(
            "\nTarget{}: computed on the host by `check`, for any profile:\n",
            e.compare.map(|c| format!(" ({c})")).unwrap_or_default()
        ));
        out.push_str(&wrapped(x, w, "  ", "    "));
    } else if !e.targets.is_empty() {
        out.push_str(&format!(
            "\nTarget by built-in profile{}:\n",
            e.compare.map(|c| format!(" ({c})")).unwrap_or_default()
        ));
        for t in &e.targets {
            let value = match (&t.target, &t.from_host) {
                (Some(v), _) => super::value_shown(&e.id, v),
                (None, Some(x)) => format!("computed on the host: {x}"),
                (None, None) => "-".into(),
            };
            out.push_str(&wrapped(
                &value,
                w,
                &format!("  {:<6}", t.profile),
                "        ",
            ));
        }
    }
    if e.roles.is_empty() {
        if e.platform == "linux" || e.platform == "windows" {
            out.push_str("\nBy role: the same for a server, a proxy and a Kubernetes node.\n");
        }
    } else {
        out.push_str("\nBy role (`--role`, the profile's `role:`; roles not named take the check as written):\n");
        for r in &e.roles {
            let text = match &r.skip {
                Some(why) => format!("not checked: {}", why.trim()),
                None => {
                    let mut parts = Vec::new();
                    if let Some(c) = r.compare {
                        parts.push(format!("compared {c}"));
                    }
                    if let Some(t) = &r.target {
                        parts.push(format!("target {t}"));
                    }
                    if let Some(s) = r.severity {
                        parts.push(format!("{} when missed", format!("{s:?}").to_lowercase()));
                    }
                    if let Some(why) = &r.why {
                        parts.push(format!("why: {}", why.trim()));
                    }
                    if parts.is_empty() {
                        "as written".into()
                    } else {
                        parts.join("; ")
                    }
                }
            };
            out.push_str(&wrapped(&format!("{}: {text}", r.role), w, "  ", "    "));
        }
    }
    if !e.refs.is_empty() {
        out.push_str("\nSources:\n");
        for r in &e.refs {
            out.push_str(&wrapped(&r.section, w, "  ", "  "));
            out.push_str(&format!("    {}\n", r.url));
        }
    }
    out
}

/// What a scope means to an operator.
fn scope_words(s: Scope) -> &'static str {
    match s {
        Scope::Netns => {
            "per network namespace: a container has its own value, set by its runtime (docker run --sysctl; Kubernetes securityContext.sysctls, where the kubelet allows the key: the fix's Kubernetes line says)"
        }
        Scope::Global => "kernel-wide: one value for the host and every container on it",
        Scope::Process => "per process: the limit a server started from this shell (or --pid) has",
        Scope::Unit => "a systemd unit's setting (check --unit NAME)",
        Scope::Host => "a property of the host",
        Scope::Boot => "what the host keeps across a reboot (configuration files, wstune's journal)",
        Scope::Registry => "a Windows registry value",
        Scope::Proxy => {
            "a proxy's: the connections a proxy on this host opens, or the load balancer's configuration (check --lb-config FILE)"
        }
    }
}

/// An info check's fix is advice: optional, and `wstune apply` leaves it.
fn advice(e: &Explanation) -> bool {
    e.severity == Some(Severity::Info)
}

/// The fix's texts as one, for the sysctls they name.
fn fix_text(e: &Explanation) -> String {
    [&e.fix.runtime, &e.fix.persistent]
        .into_iter()
        .flatten()
        .cloned()
        .collect::<Vec<_>>()
        .join(" ; ")
}

/// The explanation as JSON, with `advice` and `kubernetes` (each sysctl the fix names, with
/// where Kubernetes lets it be set) as the check report has them.
pub fn explain_json(e: &Explanation) -> String {
    #[derive(Serialize)]
    struct Out<'a> {
        #[serde(flatten)]
        e: &'a Explanation,
        advice: bool,
        kubernetes: Vec<crate::catalog::kube::KeyClass>,
    }
    let out = Out {
        e,
        advice: advice(e),
        kubernetes: crate::catalog::kube::classes(&fix_text(e)),
    };
    serde_json::to_string_pretty(&out).expect("an explanation always serializes") + "\n"
}

/// A list of ids with their titles (`explain PREFIX`, `explain 'GLOB'`), or its JSON.
pub fn id_list(ids: &[IdEntry], json: bool, width: u16) -> String {
    if json {
        return serde_json::to_string_pretty(ids).expect("a list always serializes") + "\n";
    }
    let w = width.min(100) as usize;
    let mut out = String::new();
    for e in ids {
        out.push_str(&format!("{}\n", e.id));
        out.push_str(&wrapped(&e.title, w, "    ", "    "));
    }
    out.push_str(&format!(
        "{} check(s). `wstune explain ID` says why one matters and how to fix it.\n",
        ids.len()
    ));
    out
}
