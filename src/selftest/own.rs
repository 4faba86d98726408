//! The figures only one scenario has, in that scenario's own type: the report's
//! ([`OwnFigures`]) and the generator processes' counts behind them ([`OwnCounts`]). The
//! figures every scenario has stay on `ScenarioReport` and `WorkerResult`; what one scenario
//! adds is a variant here, filled by that scenario's run alone, not an `Option` on the shared
//! struct that every other scenario leaves empty.
//!
//! On the wire each is one key of the scenario's object, named after the scenario
//! (`"restart": {...}`), absent for the scenarios with none: the shared structs hold it with
//! `#[serde(flatten)]`, so the JSON report reads as it did when the figures were a field.

use super::restart::{RestartCounts, RestartReport};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A scenario's own figures in the report.
#[derive(Debug, Clone, Default)]
pub enum OwnFigures {
    /// Nothing beyond the figures every scenario has.
    #[default]
    Common,
    /// restart: closes, refusals, reconnects and the time until every client was back
    /// (boxed: the other scenarios' reports need not carry its size).
    Restart(Box<RestartReport>),
}

impl OwnFigures {
    /// The restart scenario's figures when it has them; none for every other scenario.
    pub fn of_restart(r: Option<RestartReport>) -> Self {
        r.map_or(OwnFigures::Common, |r| OwnFigures::Restart(Box::new(r)))
    }

    /// The restart scenario's figures; None for every other scenario.
    pub fn restart(&self) -> Option<&RestartReport> {
        match self {
            OwnFigures::Restart(r) => Some(r.as_ref()),
            OwnFigures::Common => None,
        }
    }
}

/// A generator process's counts behind its scenario's own figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum OwnCounts {
    /// Nothing beyond what every scenario counts.
    #[default]
    Common,
    /// restart: closes, reconnect attempts and refusals.
    Restart(RestartCounts),
}

impl OwnCounts {
    /// The restart scenario's counts; None for every other scenario.
    pub fn restart(&self) -> Option<&RestartCounts> {
        match self {
            OwnCounts::Restart(c) => Some(c),
            OwnCounts::Common => None,
        }
    }
}

/// The keys as they are written: one per scenario that has figures of its own.
#[derive(Serialize)]
struct Written<'a, R> {
    #[serde(skip_serializing_if = "Option::is_none")]
    restart: Option<&'a R>,
}

/// The keys as they are read back (an absent key: the scenario's figures are not there).
#[derive(Deserialize)]
struct Read<R> {
    #[serde(default = "Option::default")]
    restart: Option<R>,
}

impl Serialize for OwnFigures {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Written {
            restart: self.restart(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for OwnFigures {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let read = Read::<RestartReport>::deserialize(d)?;
        Ok(OwnFigures::of_restart(read.restart))
    }
}

impl Serialize for OwnCounts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Written {
            restart: self.restart(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for OwnCounts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let read = Read::<RestartCounts>::deserialize(d)?;
        Ok(read.restart.map_or(OwnCounts::Common, OwnCounts::Restart))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Deserialize)]
    struct Holder {
        before: u8,
        #[serde(flatten)]
        own: OwnFigures,
        after: u8,
    }

    /// A scenario without figures of its own writes no key; restart writes its object under
    /// "restart", in the place the field had, and both read back as they were.
    #[test]
    fn own_figures_are_one_key_in_place_or_none() {
        let common = Holder {
            before: 1,
            own: OwnFigures::Common,
            after: 2,
        };
        let text = serde_json::to_string(&common).unwrap();
        assert_eq!(text, r#"{"before":1,"after":2}"#);
        let back: Holder = serde_json::from_str(&text).unwrap();
        assert!(matches!(back.own, OwnFigures::Common));

        let restart = Holder {
            own: OwnFigures::of_restart(Some(RestartReport::default())),
            ..common
        };
        let text = serde_json::to_string(&restart).unwrap();
        assert!(text.starts_with(r#"{"before":1,"restart":{"#), "{text}");
        assert!(text.ends_with(r#"},"after":2}"#), "{text}");
        let back: Holder = serde_json::from_str(&text).unwrap();
        assert!(back.own.restart().is_some());
    }
}
