//! `wstune profiles list|show`.

use crate::cli::args::{ListFormat, ProfilesCommand, ShowFormat};
use crate::cli::exit;
use crate::output;
use crate::profile::{self, EMBEDDED};
use anyhow::Result;

pub fn run(cmd: ProfilesCommand) -> Result<u8> {
    match cmd {
        ProfilesCommand::List { format } => {
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
                ListFormat::Table => {
                    let mut t = output::new_table();
                    t.set_header(vec![
                        "Profile",
                        "Connections",
                        "nofile",
                        "somaxconn",
                        "deflate window",
                        "Description",
                    ]);
                    for p in &profiles {
                        t.add_row(vec![
                            p.name.clone(),
                            p.connections.to_string(),
                            p.linux.nofile.to_string(),
                            p.linux.somaxconn.to_string(),
                            p.server.deflate.window_bits.to_string(),
                            p.description.clone(),
                        ]);
                    }
                    format!("{t}\nShow one in full: wstune profiles show NAME\n")
                }
            };
            output::emit(None, &text)?;
        }
        ProfilesCommand::Show { name, format } => {
            let loaded = profile::load(&name)?;
            let text = match format {
                // The built-in text keeps its comments, which document every key.
                ShowFormat::Yaml => match EMBEDDED.iter().find(|(n, _)| *n == name) {
                    Some((_, text)) => text.to_string(),
                    None => std::fs::read_to_string(&name)?,
                },
                ShowFormat::Json => serde_json::to_string_pretty(&loaded.profile)? + "\n",
            };
            output::emit(None, &text)?;
        }
    }
    Ok(exit::OK)
}
