//! The checks wstune computes itself from its journal (checks/wstune.yaml): their words come
//! from the catalog file like every other check's, their verdict from the code that compares
//! the journal with the host (apply/mod.rs, apply/recover.rs).

use super::eval::{compare_str, Finding, FixText, Status};
use super::{Compare, Fix, Scope, Severity};
use crate::value::Value;
use serde::Deserialize;
use std::sync::OnceLock;

const FILE: &str = "checks/wstune.yaml";
const TEXT: &str = include_str!("../../checks/wstune.yaml");

/// One computed check's words.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Computed {
    pub id: String,
    pub title: String,
    pub scope: Scope,
    pub compare: Compare,
    pub severity: Severity,
    pub why: String,
    #[serde(default)]
    pub fix: Fix,
}

/// Every computed check, in file order. The file is compiled in and checked by a unit test,
/// so a parse failure here is a build defect, not an input error.
pub fn all() -> &'static [Computed] {
    static CHECKS: OnceLock<Vec<Computed>> = OnceLock::new();
    CHECKS.get_or_init(|| super::words::load(FILE, TEXT))
}

/// The computed check `id` (one of the ids in checks/wstune.yaml).
pub fn get(id: &str) -> &'static Computed {
    all()
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("{FILE} has no check {id}"))
}

impl Computed {
    /// The finding for this check with the verdict the caller computed. `fix` replaces the
    /// file's runtime fix when the fix names something only the caller knows (an entry id).
    pub fn finding(
        &self,
        status: Status,
        current: Value,
        target: Value,
        note: String,
        fix: Option<String>,
    ) -> Finding {
        Finding {
            id: self.id.clone(),
            title: self.title.clone(),
            status,
            current: Some(current),
            compare: compare_str(self.compare),
            target: Some(target),
            severity: self.severity,
            scope: self.scope,
            why: self.why.trim().to_string(),
            fix: FixText {
                runtime: fix.or_else(|| self.fix.runtime.clone()),
                persistent: self.fix.persistent.clone(),
            },
            refs: Vec::new(),
            note: Some(note),
            key: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_parses_and_ids_are_unique_and_namespaced() {
        let ids: Vec<&str> = all().iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["wstune.journal.pending", "wstune.journal.drift"]);
        assert!(all().iter().all(|c| !c.why.contains('\n')));
        assert_eq!(get("wstune.journal.drift").severity, Severity::Warn);
        // The words reports have always shown, to the byte.
        assert_eq!(
            get("wstune.journal.drift").why,
            "Something changed a setting wstune applied (a config manager, a package update, a person): the host no longer matches what was applied and journaled."
        );
        assert_eq!(
            get("wstune.journal.pending").why,
            "An apply that was killed midway leaves the host half changed: some settings new, some old, files maybe not written. Its journal entry says exactly what to put back; a damaged entry cannot be rolled back automatically."
        );
    }
}
