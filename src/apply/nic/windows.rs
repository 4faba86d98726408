//! The NIC plan on Windows: an adapter's RSS keywords in the registry, as the catalog's
//! per-adapter checks want them.

use super::NicPlan;
use crate::apply::plan::{Action, Op, Scope};
use crate::profile::{NicProfile, NicWhen};

/// A Windows adapter's RSS keywords (`*RSS`, `*RSSProfile`, `*NumRssQueues` under its network
/// class key, the standardized INF keywords) set to what the catalog's per-adapter checks want:
/// what `Set-NetAdapterRss` and `Set-NetAdapterAdvancedProperty` write. Only for the adapters
/// named (`--nic`), or every adapter with `nic.when: always`: the driver reads them when the
/// adapter restarts, and its link drops for that moment. Returns the plan and the adapters to
/// restart once the values are written.
pub fn plan_windows(
    catalog: &crate::catalog::Catalog,
    findings: &[crate::catalog::eval::Finding],
    facts: &crate::catalog::facts::HostFacts,
    named: &[String],
    profile: &NicProfile,
    scope: Scope,
) -> (NicPlan, Vec<String>) {
    use crate::catalog::eval::{desired, Status};
    use crate::catalog::Source;
    use crate::value::Value;
    let mut p = NicPlan::default();
    let mut restart: Vec<String> = Vec::new();
    let all = profile.when == NicWhen::Always;
    let mut seen: Vec<String> = Vec::new();
    for inst in &facts.instances {
        let (Some(link), Some(def)) = (&inst.nic, catalog.checks.get(inst.check)) else {
            continue;
        };
        let Source::Registry(r) = &def.check.source else {
            continue;
        };
        if !seen.contains(&link.name) {
            seen.push(link.name.clone());
        }
        if !(all || named.contains(&link.name)) || !scope.runtime {
            continue;
        }
        let (Some(sub), id) = (
            &link.registry_key,
            format!("{}[{}]", def.check.id, link.name),
        ) else {
            continue;
        };
        // By id: a finding's key names its check but not its adapter (one key per NIC check).
        let Some(f) = findings.iter().find(|f| f.id == id) else {
            continue;
        };
        // A keyword the driver does not have (no current value, no documented default) is
        // not one it reads: writing it would change nothing.
        let known = f.current.is_some();
        if !known || matches!(f.status, Status::Pass | Status::Skip) || f.compare == "report" {
            continue;
        }
        let Some(target) = &f.target else { continue };
        let value = match (f.current.as_ref(), target) {
            (Some(c @ Value::Num(_)), Value::Num(_)) => {
                desired(def.check.compare, c, None, target).unwrap_or_else(|| target.clone())
            }
            _ => target.clone(),
        };
        // An enumerated keyword is written as its number (*RSSProfile NUMAScaling -> "3").
        let data = r
            .names
            .iter()
            .find(|(_, n)| Value::Text((*n).clone()) == value)
            .map(|(raw, _)| raw.clone())
            .unwrap_or_else(|| value.to_string());
        p.actions.push(Action {
            check: id.clone(),
            setting: format!("{} {}", link.name, r.value),
            from: f.current.as_ref().map(|v| v.to_string()),
            to: value.to_string(),
            op: Op::Registry {
                key: r.key.replace("{nic_key}", sub),
                value: r.value.clone(),
                reg_type: r.kind,
                data,
            },
        });
        if !restart.contains(&link.name) {
            restart.push(link.name.clone());
        }
    }
    if restart.is_empty() && !all && named.is_empty() && !seen.is_empty() {
        p.notes.push(format!(
            "adapters' RSS keywords not changed ({}): the change restarts an adapter (its link drops for a moment), so apply makes it only for one named with --nic NAME, or every one with the profile's nic.when: always",
            seen.join(", ")
        ));
    }
    for name in &restart {
        p.notes.push(format!(
            "{name}: the adapter restarts after its keywords are written (Restart-NetAdapter), and its link drops for a moment"
        ));
    }
    (p, restart)
}
