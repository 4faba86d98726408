//! The script file as written: what `selftest --script` reads, field by field.

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
