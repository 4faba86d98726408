//! `wstune completions SHELL` and `wstune man --out DIR`: shell completion scripts
//! (clap_complete) and man pages (clap_mangen) generated from the same clap definitions the
//! parser uses, so they cannot drift from the flags. They live in cli/ because they are clap's
//! own output. The Debian package ships both.

use crate::outcome::Outcome;
use crate::output;
use anyhow::{bail, Context, Result};
use clap_complete::Shell;
use std::path::Path;

pub fn completions(mut cmd: clap::Command, shell: Shell) -> Result<Outcome> {
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "wstune", &mut buf);
    output::emit(None, &String::from_utf8(buf).context("completion script")?)?;
    Ok(Outcome::Ok)
}

/// wstune.1 and one page per (visible) subcommand, `wstune-check.1`,
/// `wstune-bench-deflate.1`...; each written atomically.
pub fn man(mut cmd: clap::Command, dir: &Path) -> Result<Outcome> {
    if !dir.is_dir() {
        bail!(
            "--out {}: no such directory; create it first (mkdir -p {})",
            dir.display(),
            dir.display()
        );
    }
    cmd.build();
    let mut written = Vec::new();
    page(&cmd, "wstune", dir, &mut written)?;
    println!("wrote {} man pages to {}", written.len(), dir.display());
    Ok(Outcome::Ok)
}

fn page(cmd: &clap::Command, name: &str, dir: &Path, written: &mut Vec<String>) -> Result<()> {
    // The page's title and NAME section use the full name: `man wstune-check`.
    let named = cmd
        .clone()
        .name(name.to_string())
        .bin_name(name.replace('-', " "));
    let mut buf = Vec::new();
    clap_mangen::Man::new(named)
        .render(&mut buf)
        .with_context(|| format!("rendering the man page of {name}"))?;
    let path = dir.join(format!("{name}.1"));
    output::write_atomic(&path, &String::from_utf8(buf).context("man page text")?)?;
    written.push(name.to_string());
    // clap's generated `help` subcommands are no pages of their own.
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        page(sub, &format!("{name}-{}", sub.get_name()), dir, written)?;
    }
    Ok(())
}
