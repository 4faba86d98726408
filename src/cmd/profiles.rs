//! `wstune profiles list|show`.

use crate::outcome::Outcome;
use crate::output;
use crate::profile::{self, EMBEDDED};
use crate::report::ListFormat;
use anyhow::Result;

/// `profiles list|show`.
pub enum Request {
    /// One line per built-in profile.
    List { format: ListFormat },
    /// One profile in full: a built-in name or a file; `resolved`: every value in effect
    /// (what it extends merged in), not the file's own text.
    Show {
        name: String,
        json: bool,
        resolved: bool,
    },
}

pub fn run(r: Request) -> Result<Outcome> {
    match r {
        Request::List { format } => {
            let profiles: Vec<profile::Profile> = EMBEDDED
                .iter()
                .map(|(name, _)| profile::load(name).map(|l| l.profile))
                .collect::<Result<_, _>>()?;
            let text = match format {
                ListFormat::Json => {
                    let rows: Vec<_> = profiles
                        .iter()
                        .map(|p| serde_json::json!({"name": p.name, "connections": p.connections, "description": p.description}))
                        .collect();
                    serde_json::to_string_pretty(&rows)? + "\n"
                }
                ListFormat::Table => crate::report::profile_list(&profiles),
            };
            output::emit(None, &text)?;
        }
        Request::Show {
            name,
            json,
            resolved,
        } => {
            let loaded = profile::load(&name)?;
            let text = if json {
                serde_json::to_string_pretty(&loaded.profile)? + "\n"
            } else if resolved {
                format!(
                    "# wstune profile {}: every value in effect, resolved from {}\n{}",
                    loaded.profile.name,
                    loaded.source,
                    serde_yaml_ng::to_string(&loaded.profile)?
                )
            } else {
                // The built-in text keeps its comments: the base's document every key, a
                // size's say why it differs from the base.
                match profile::builtin_text(&name) {
                    Some(text) => text.to_string(),
                    None => profile::read_config_file(std::path::Path::new(&name))
                        .map_err(|e| anyhow::anyhow!("{name}: {e}"))?,
                }
            };
            output::emit(None, &text)?;
        }
    }
    Ok(Outcome::Ok)
}
