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
pub fn man(cmd: clap::Command, dir: &Path) -> Result<Outcome> {
    if !dir.is_dir() {
        bail!(
            "--out {}: no such directory; create it first (mkdir -p {})",
            dir.display(),
            dir.display()
        );
    }
    let mut cmd = pages_only(cmd);
    cmd.build();
    let mut written = Vec::new();
    page(&cmd, "wstune", dir, &mut written)?;
    println!("wrote {} man pages to {}", written.len(), dir.display());
    Ok(Outcome::Ok)
}

/// The command without clap's `help` subcommands, which have no page: a SUBCOMMANDS entry
/// `wstune-help(1)` would send the reader to a page that does not exist.
fn pages_only(cmd: clap::Command) -> clap::Command {
    cmd.disable_help_subcommand(true)
        .mut_subcommands(pages_only)
}

/// The roff of one page: clap_mangen's sections, then EXAMPLES (each example's description
/// and its command, as the command's `--help` ends) in place of clap_mangen's EXTRA (which
/// would repeat them as plain lines), EXIT STATUS on wstune(1), and SEE ALSO.
pub fn page_text(cmd: &clap::Command, name: &str) -> Result<String> {
    // The page's title and NAME section use the full name: `man wstune-check`.
    let path = name.replace('-', " ");
    let named = cmd.clone().name(name.to_string()).bin_name(&path);
    let man = clap_mangen::Man::new(named.clone());
    let mut buf = Vec::new();
    let context = || format!("rendering the man page of {name}");
    man.render_title(&mut buf).with_context(context)?;
    man.render_name_section(&mut buf).with_context(context)?;
    man.render_synopsis_section(&mut buf)
        .with_context(context)?;
    man.render_description_section(&mut buf)
        .with_context(context)?;
    if named.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut buf).with_context(context)?;
    }
    if named.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut buf)
            .with_context(context)?;
    }
    let mut text = String::from_utf8(buf).context("man page text")?;
    text.push_str(".SH EXAMPLES\n");
    for e in crate::cli::args::examples(&path) {
        text.push_str(&format!(
            ".PP\n{}\n.PP\n.RS 4\n.nf\n\\fB{}\\fR\n.fi\n.RE\n",
            roff(e.says),
            roff(e.line)
        ));
    }
    if name == "wstune" {
        text.push_str(".SH \"EXIT STATUS\"\n");
        for (code, what) in EXIT_STATUS {
            text.push_str(&format!(".TP\n\\fB{code}\\fR\n{}\n", roff(what)));
        }
    } else {
        let parent = name.rsplit_once('-').map_or("wstune", |(p, _)| p);
        text.push_str(&format!(".SH \"SEE ALSO\"\n{}\n", see_also(parent)));
    }
    if named.get_version().is_some() {
        let mut v = Vec::new();
        man.render_version_section(&mut v).with_context(context)?;
        text.push_str(&String::from_utf8(v).context("man page text")?);
    }
    Ok(text)
}

/// wstune(1)'s EXIT STATUS: the policy in `cli::exit`, as docs/reference/exit-codes.md says it.
const EXIT_STATUS: [(u8, &str); 5] = [
    (crate::cli::exit::OK, "Nothing failed."),
    (crate::cli::exit::WARN, "Only warnings, and --strict was given."),
    (crate::cli::exit::FAIL, "A check failed (or a self-test missed its targets)."),
    (crate::cli::exit::ERROR, "A usage or internal error: the report could not be made."),
    (
        crate::cli::exit::NOT_PROVEN,
        "A self-test that could not be judged (NOT PROVEN): the host too noisy, or a --threshold's figure not measured.",
    ),
];

/// `wstune(1)`, and the parent command's page when it is not wstune(1) itself.
fn see_also(parent: &str) -> String {
    let mut pages = vec!["\\fBwstune\\fR(1)".to_string()];
    if parent != "wstune" {
        pages.push(format!("\\fB{}\\fR(1)", roff(parent)));
    }
    pages.join(", ")
}

/// Text as roff reads it literally: backslashes escaped, hyphens as the ASCII hyphen-minus a
/// pasted command needs, and a line that would start with a control character kept as text.
fn roff(text: &str) -> String {
    let s = text.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with(['.', '\'']) {
        format!("\\&{s}")
    } else {
        s
    }
}

fn page(cmd: &clap::Command, name: &str, dir: &Path, written: &mut Vec<String>) -> Result<()> {
    let path = dir.join(format!("{name}.1"));
    output::write_atomic(&path, &page_text(cmd, name)?)?;
    written.push(name.to_string());
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        page(sub, &format!("{name}-{}", sub.get_name()), dir, written)?;
    }
    Ok(())
}
