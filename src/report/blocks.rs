//! The check report as one block per finding, for a terminal too narrow for the table, a pipe
//! or a log: the status and the id (never broken) with current -> target, the title, the note,
//! each fix command whole on a line of its own (copied as it is), and the why when asked.
//!
//! ```text
//! FAIL  linux.net.core.somaxconn  4096 -> >= 65535
//!   Accept queue cap (somaxconn) [per netns]
//!   now:
//!     sudo sysctl -w net.core.somaxconn=65535
//!     # the server must listen() again to use it
//!   persist:
//!     echo 'net.core.somaxconn = 65535' | sudo tee -a /etc/sysctl.d/60-wstune.conf >/dev/null
//!   Kubernetes: net.core.somaxconn is namespaced but unsafe: a pod may set it only where the
//!       kubelet allows it (--allowed-unsafe-sysctls)
//! ```
//!
//! An info check's commands are advice: shown only with `--why`, labelled optional
//! ([`super::shown::fix_shown`]).

use super::shown::{current_shown, fix_shown, is_command, target_shown, Human};
use super::text::{columns, wrapped};
use crate::catalog::eval::{Finding, Status};
use crate::catalog::Scope;

/// Where everything under the status line starts.
const INDENT: &str = "  ";
/// Where a fix's commands start, under its label: deep enough to set them apart from the
/// words, shallow enough that a `sudo sysctl -w ...` line fits an 80-column terminal.
const COMMAND: &str = "    ";

/// One finding's block, each line at most `width` columns but a fix command, which is never
/// wrapped (a command broken over lines cannot be pasted).
pub fn block(f: &Finding, h: &Human, width: usize) -> String {
    let word = f.status.as_str().to_uppercase();
    let status = if h.colour {
        let code = match f.status {
            Status::Pass => "32",
            Status::Warn => "33",
            Status::Fail => "31",
            Status::Skip | Status::Info => "90",
        };
        format!("\x1b[{code}m{word}\x1b[0m")
    } else {
        word.clone()
    };
    let target = target_shown(f);
    let values = match (&f.current, target.as_str()) {
        (None, "-") => None,
        (Some(_), "-") => Some(current_shown(f)),
        _ => Some(format!("{} -> {target}", current_shown(f))),
    };
    let mut out = format!("{status}  {}", f.id);
    let head = columns(&word) + 2 + columns(&f.id);
    match &values {
        Some(v) if head + 2 + columns(v) <= width => out.push_str(&format!("  {v}\n")),
        Some(v) => out.push_str(&format!("\n{INDENT}{v}\n")),
        None => out.push('\n'),
    }
    let title = if f.scope == Scope::Netns {
        format!("{} [per netns]", f.title)
    } else {
        f.title.clone()
    };
    out.push_str(&wrapped(&title, width, INDENT, INDENT));
    if let Some(n) = &f.note {
        out.push_str(&wrapped(n, width, INDENT, INDENT));
    }
    let shown = fix_shown(f, h.why);
    if let Some(head) = &shown.head {
        out.push_str(&wrapped(head, width, INDENT, INDENT));
    }
    for (label, text) in &shown.texts {
        out.push_str(&fix_lines(label, text, width));
    }
    for r in &shown.remarks {
        out.push_str(&wrapped(r, width, INDENT, "      "));
    }
    if h.why && !f.why.trim().is_empty() {
        out.push_str(&wrapped(
            &format!("why: {}", f.why.trim()),
            width,
            INDENT,
            "       ",
        ));
    }
    out
}

/// A fix under its label: each command whole on its own line; the words around it (a
/// remark in parentheses, advice that is not a command) wrapped below it.
fn fix_lines(label: &str, text: &str, width: usize) -> String {
    fix_lines_at(label, text, width, INDENT, COMMAND)
}

/// [`fix_lines`] with the label at `indent` and the commands at `command`.
pub(super) fn fix_lines_at(
    label: &str,
    text: &str,
    width: usize,
    indent: &str,
    command: &str,
) -> String {
    let (main, remark) = split_remark(text);
    let parts = split_top(main, "; ");
    if parts.len() == 1 && !is_command(parts[0]) {
        // Advice in words ("add memory, ..."): one wrapped paragraph after its label.
        return wrapped(text, width, &format!("{indent}{label}: "), command);
    }
    let mut out = format!("{indent}{label}:\n");
    for part in parts {
        let (or, cmd) = match part.strip_prefix("or ") {
            Some(rest) if is_command(rest) => (true, rest),
            _ => (false, part),
        };
        if or {
            out.push_str(&format!("{command}or\n"));
        }
        if is_command(cmd) {
            out.push_str(&format!("{command}{cmd}\n"));
        } else {
            out.push_str(&wrapped(cmd, width, command, command));
        }
    }
    match remark {
        // A comment wraps as comment lines, each still safe to paste.
        Some(r) if r.starts_with("# ") => {
            let hash = format!("{command}# ");
            out.push_str(&wrapped(&r[2..], width, &hash, &hash));
        }
        Some(r) => out.push_str(&wrapped(r, width, command, command)),
        None => {}
    }
    out
}

/// `sysctl -w x=1  (the server must listen() again)` or `sysctl -w x=1  # the server must
/// listen() again` -> the command and its remark (a shell comment stays one, so the line below
/// the command can be pasted with it).
fn split_remark(text: &str) -> (&str, Option<&str>) {
    if let Some(i) = find_top(text, " # ") {
        return (text[..i].trim_end(), Some(text[i..].trim()));
    }
    match text.find("  (") {
        Some(i) if text.ends_with(')') => (text[..i].trim_end(), Some(text[i..].trim())),
        _ => (text, None),
    }
}

/// Where `pat` first occurs in `text` outside quotes.
fn find_top(text: &str, pat: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, _) if text[i..].starts_with(pat) => return Some(i),
            _ => {}
        }
    }
    None
}

/// `text` split at `sep` where it is outside quotes (a `;` inside `'...'` belongs to the
/// command).
fn split_top<'a>(text: &'a str, sep: &str) -> Vec<&'a str> {
    let mut parts = Vec::new();
    let (mut start, mut quote) = (0, None);
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, _) if text[i..].starts_with(sep) => {
                parts.push(text[start..i].trim());
                start = i + sep.len();
            }
            _ => {}
        }
    }
    parts.push(text[start..].trim());
    parts.retain(|p| !p.is_empty());
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_stays_whole_and_its_remark_goes_below() {
        let out = fix_lines(
            "now",
            "sysctl -w net.core.somaxconn=65535  (the server must listen() again to use it)",
            40,
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "  now:");
        assert_eq!(lines[1], "    sysctl -w net.core.somaxconn=65535");
        assert!(lines[2..].iter().all(|l| columns(l) <= 40), "{out}");
        assert!(out.contains("(the server must"), "{out}");
        // A shell comment goes below as a comment, its `;` not a command separator.
        let out = fix_lines(
            "persist",
            "echo '* - nofile 200000' | sudo tee /etc/security/limits.d/60-wstune.conf >/dev/null  # PAM logins; log in again",
            60,
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[1],
            "    echo '* - nofile 200000' | sudo tee /etc/security/limits.d/60-wstune.conf >/dev/null"
        );
        assert!(lines[2].starts_with("    # PAM logins; log in"), "{out}");
        assert_eq!(lines.len(), 3, "{out}");
        assert_eq!(find_top("echo 'a # b' # c", " # "), Some(12));
    }

    #[test]
    fn words_wrap_and_commands_after_a_semicolon_get_their_own_line() {
        let out = fix_lines(
            "now",
            "sysctl -w net.netfilter.nf_conntrack_max=<double>; or nft add rule inet raw prerouting tcp dport <port> notrack",
            60,
        );
        assert!(out.contains("\n    sysctl -w net.netfilter.nf_conntrack_max=<double>\n"));
        assert!(out
            .contains("\n    or\n    nft add rule inet raw prerouting tcp dport <port> notrack\n"));
        let words = fix_lines(
            "persist",
            "add memory, lower server.deflate.window_bits/mem_level in the profile, or hold fewer connections per host",
            60,
        );
        assert!(words.starts_with("  persist: add memory,"), "{words}");
        assert!(words.lines().all(|l| columns(l) <= 60), "{words}");
        assert_eq!(
            split_top("echo 'a; b' > f; sysctl -p", "; "),
            ["echo 'a; b' > f", "sysctl -p"]
        );
    }
}
