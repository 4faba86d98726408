//! clap's side of the value enums a flag parses into. The enums live beside their meaning
//! (`selftest::Scenario`, `lb::Kind`, `lb::Sticky`) and know nothing of clap; here each is given
//! its command-line names and the help line `--help` lists for it.

use crate::lb::{Kind, Sticky};
use crate::selftest::Scenario;
use clap::builder::PossibleValue;
use clap::ValueEnum;

/// The names and help come from each scenario's own file (`selftest::scenario`).
impl ValueEnum for Scenario {
    /// The scenarios chosen by name: those with a help line (script is run by `--script`).
    fn value_variants<'a>() -> &'a [Self] {
        static BY_NAME: std::sync::LazyLock<Vec<Scenario>> = std::sync::LazyLock::new(|| {
            Scenario::ALL
                .into_iter()
                .filter(|s| s.workload().help().is_some())
                .collect()
        });
        &BY_NAME
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        let w = self.workload();
        Some(PossibleValue::new(w.name()).help(w.help()?))
    }
}

impl ValueEnum for Kind {
    fn value_variants<'a>() -> &'a [Self] {
        &[Kind::Haproxy, Kind::Nginx]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(match self {
            Kind::Haproxy => "haproxy",
            Kind::Nginx => "nginx",
        }))
    }
}

impl ValueEnum for Sticky {
    fn value_variants<'a>() -> &'a [Self] {
        &[Sticky::Cookie, Sticky::Source]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Sticky::Cookie => {
                PossibleValue::new("cookie").help("HAProxy inserts a cookie naming the backend")
            }
            Sticky::Source => {
                PossibleValue::new("source").help("The client's address picks the backend")
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names are also the JSON report's (serde) for scenarios: one spelling each.
    #[test]
    fn every_scenario_parses_from_its_own_name_and_matches_its_json_name() {
        for s in Scenario::value_variants() {
            let name = s.to_possible_value().unwrap().get_name().to_string();
            assert_eq!(Scenario::from_str(&name, false), Ok(*s));
            assert_eq!(serde_json::to_string(s).unwrap(), format!("\"{name}\""));
        }
    }
}
