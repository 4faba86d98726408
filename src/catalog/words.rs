//! The one loader of the compiled-in files that hold the words of checks whose verdict code
//! computes (checks/wstune.yaml for the journal's, checks/lb.yaml for the load balancer's):
//! `checks:` and a list, unknown fields refused. Each file's unit test parses it, so a failure
//! here is a build defect, not an input error.

use serde::de::DeserializeOwned;
use serde::Deserialize;

/// The `checks:` of `text` (the compiled-in `file`).
pub fn load<T: DeserializeOwned>(file: &str, text: &str) -> Vec<T> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, bound = "T: DeserializeOwned")]
    struct File<T> {
        checks: Vec<T>,
    }
    serde_yaml_ng::from_str::<File<T>>(text)
        .unwrap_or_else(|e| panic!("{file} does not parse: {e}"))
        .checks
}
