//! docs/reference/commands.md: every command's flags, generated from the same clap definitions
//! the parser, the man pages and the completions use (cli/docs.rs), so the book cannot drift
//! from the CLI. It lives in cli/ because only cli knows clap. A unit test below fails when the
//! committed page is stale; `UPDATE_SNAPSHOTS=1 cargo test --lib commands_doc` rewrites it.

use clap::{Arg, ArgAction, Command};
use std::fmt::Write;

/// The whole of docs/reference/commands.md, from the built `wstune` command.
pub fn commands_markdown(mut cmd: Command) -> String {
    cmd.build();
    let mut out = String::from(
        "# Commands\n\n\
         Every `wstune` command and flag, as `wstune COMMAND --help` prints it. Generated from \
         the command-line definitions (`src/cli/args.rs`, by `src/cli/reference.rs`); a unit \
         test fails when this page is stale, and `UPDATE_SNAPSHOTS=1 cargo test --lib \
         commands_doc` rewrites it. The exit codes are on [their own page](exit-codes.md).\n",
    );
    section(&cmd, "wstune", &mut out);
    out
}

/// One command's section, then its visible subcommands' (clap's `help` is no command of its own).
fn section(cmd: &Command, name: &str, out: &mut String) {
    let _ = write!(out, "\n## `{name}`\n\n");
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{}\n", one_paragraph(&about.to_string()));
    }
    let usage = cmd
        .clone()
        .bin_name(name)
        .render_usage()
        .to_string()
        .replace("Usage: ", "");
    let _ = write!(out, "```text\n{usage}\n```\n");
    let examples = crate::cli::args::examples(name);
    if !examples.is_empty() {
        out.push_str("\nExamples:\n\n```text\n");
        for e in examples {
            let _ = writeln!(out, "# {}\n{}", e.says, e.line);
        }
        out.push_str("```\n");
    }

    let subs: Vec<&Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .collect();
    if !subs.is_empty() {
        out.push_str("\nCommands:\n\n");
        for s in &subs {
            let about = s.get_about().map(|a| a.to_string()).unwrap_or_default();
            let _ = writeln!(
                out,
                "- [`{}`](#{}): {}",
                s.get_name(),
                slug(&format!("{name} {}", s.get_name())),
                one_paragraph(&about)
            );
        }
    }

    // The flags in clap's own order, grouped under the headings `--help` prints; a global flag
    // (`--color`) once, in wstune's own section.
    let args: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && a.get_id() != "help" && a.get_id() != "version")
        .filter(|a| name == "wstune" || !a.is_global_set())
        .collect();
    let mut heading: Option<Option<&str>> = None;
    for arg in &args {
        let h = if arg.is_positional() {
            Some("Arguments")
        } else {
            arg.get_help_heading()
        };
        if heading != Some(h) {
            let _ = write!(out, "\n{}:\n\n", h.unwrap_or("Options"));
            heading = Some(h);
        }
        let _ = writeln!(out, "- {}", describe(arg));
    }
    for s in subs {
        section(s, &format!("{name} {}", s.get_name()), out);
    }
}

/// `` `-p, --profile <NAME|PATH>`: help. Default: `100k`. Values: ... ``
fn describe(arg: &Arg) -> String {
    let mut form = String::new();
    if let Some(short) = arg.get_short() {
        let _ = write!(form, "-{short}, ");
    }
    if let Some(long) = arg.get_long() {
        let _ = write!(form, "--{long}");
    }
    let takes_value = matches!(arg.get_action(), ArgAction::Set | ArgAction::Append);
    if takes_value {
        let names: Vec<String> = arg
            .get_value_names()
            .map(|v| v.iter().map(|n| n.to_string()).collect())
            .unwrap_or_else(|| vec![arg.get_id().as_str().to_uppercase()]);
        let value = names
            .iter()
            .map(|n| format!("<{n}>"))
            .collect::<Vec<_>>()
            .join(" ");
        if form.is_empty() {
            form = value;
        } else {
            let _ = write!(form, " {value}");
        }
        if matches!(arg.get_action(), ArgAction::Append) {
            form.push_str("...");
        }
    }
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| one_paragraph(&h.to_string()))
        .unwrap_or_default();
    let mut line = format!("`{form}`");
    if !help.is_empty() {
        let _ = write!(line, ": {help}");
    }
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if takes_value && !defaults.is_empty() {
        let _ = write!(line, " Default: `{}`.", defaults.join(","));
    }
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if takes_value && !values.is_empty() {
        let _ = write!(line, " Values: {}.", values.join(", "));
    }
    if arg.is_required_set() {
        line.push_str(" Required.");
    }
    line
}

/// Help text on one line: clap's wrapped lines joined, ended with a full stop, and what Markdown
/// would read as emphasis or HTML (`a_b / _c`, `<N>`) escaped outside code spans.
fn one_paragraph(text: &str) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut s = String::with_capacity(joined.len());
    for (i, part) in joined.trim().split('`').enumerate() {
        if i > 0 {
            s.push('`');
        }
        if i % 2 == 1 {
            s.push_str(part);
            continue;
        }
        for c in part.chars() {
            if matches!(c, '\\' | '*' | '_' | '<' | '>' | '[' | ']') {
                s.push('\\');
            }
            s.push(c);
        }
    }
    if !s.is_empty() && !s.ends_with(['.', ':', '?', '!']) {
        s.push('.');
    }
    s
}

/// The anchor mdBook and GitHub give a heading: lowercase, spaces to `-`, punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    fn page() -> String {
        commands_markdown(crate::cli::args::command())
    }

    /// The book's command reference is what the parser accepts, as it is now.
    #[test]
    fn commands_doc_is_current() {
        crate::report::book::assert_current(
            "docs/reference/commands.md",
            &page(),
            "a flag was added, removed or reworded",
            "commands_doc",
        );
    }

    /// Nested commands have their own sections, hidden ones none.
    #[test]
    fn commands_doc_holds_nested_commands_and_hides_the_worker() {
        let md = page();
        assert!(md.contains("\n## `wstune bench deflate`\n"));
        assert!(md.contains("\n## `wstune profiles show`\n"));
        assert!(md.contains("- `-p, --profile <NAME|PATH>`: "), "{md}");
        assert!(!md.contains("selftest-worker"));
        assert_eq!(slug("wstune bench deflate"), "wstune-bench-deflate");
    }

    /// docs/reference/exit-codes.md's table is the policy in `cli::exit`, code for code.
    #[test]
    fn commands_doc_exit_code_table_matches_the_policy() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/exit-codes.md");
        let page = std::fs::read_to_string(path).expect("docs/reference/exit-codes.md");
        let codes: Vec<u8> = page
            .lines()
            .filter_map(|l| l.strip_prefix("| ")?.split(" |").next())
            .flat_map(|c| c.split(", ").filter_map(|n| n.parse().ok()))
            .collect();
        use crate::cli::exit;
        assert_eq!(
            codes,
            [
                exit::OK,
                exit::WARN,
                exit::FAIL,
                exit::ERROR,
                exit::NOT_PROVEN,
                exit::SIGNALLED + 2,
                exit::SIGNALLED + 15,
            ]
        );
    }
}
