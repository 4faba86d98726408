//! What turns the parsed definitions into help a person reads: each command's examples, at the
//! end of `-h` (with how many options `--help` has) and of `--help`, and in the man pages'
//! EXAMPLES section (cli/docs.rs). Kept beside the flags so an example that stops parsing fails
//! a unit test below, not a newcomer.

use clap::builder::styling::Styles;
use clap::{Command, CommandFactory};

/// One example: the command line as typed, and what it does.
pub struct Example {
    pub line: &'static str,
    pub says: &'static str,
}

/// An [`Example`] as a literal (so the tables below are `'static`).
macro_rules! ex {
    ($line:expr, $says:expr $(,)?) => {
        Example {
            line: $line,
            says: $says,
        }
    };
}

/// The examples of the command at `path` ("wstune", "wstune check", "wstune bench deflate").
/// Every visible command has some (a unit test keeps it so).
pub fn examples(path: &str) -> &'static [Example] {
    match path {
        "wstune" => &[
            ex!("wstune check", "How far this host is from 100k connections, and the fix for each gap"),
            ex!("sudo wstune apply --dry-run", "What apply would change, changing nothing"),
            ex!("wstune serve --self-test", "Serve with the profile's settings, load-test it, one verdict"),
        ],
        "wstune check" => &[
            ex!("wstune check", "This host against the default profile (100k connections)"),
            ex!("wstune check -p 1m --show all", "Every row, against the 1M-connection profile"),
            ex!("wstune check -f json -o check.json", "The JSON report for CI (exit 2 when a check fails)"),
        ],
        "wstune explain" => &[
            ex!("wstune explain linux.net.core.somaxconn", "Why it matters, the fix, its sources, every profile's target"),
            ex!("wstune explain 'linux.net.ipv4.tcp_*'", "The ids a glob matches"),
            ex!("wstune explain linux.net.core.somaxconn -f json", "The same as JSON"),
        ],
        "wstune apply" => &[
            ex!("sudo wstune apply --dry-run", "The plan: every value apply would change, nothing touched"),
            ex!("sudo wstune apply -p 250k", "Tune for 250k connections (asks first; old values journaled)"),
            ex!("sudo wstune rollback", "Put back what the last apply changed"),
        ],
        "wstune rollback" => &[
            ex!("sudo wstune rollback --list", "The journal entries, newest first; nothing changed"),
            ex!("sudo wstune rollback", "Undo the last apply exactly"),
            ex!("sudo wstune rollback --keep net.core.somaxconn", "Undo all but this value"),
        ],
        "wstune bench" | "wstune bench deflate" => &[
            ex!("wstune bench deflate", "Compression round trips at 1k, 4k, 16k and 64k"),
            ex!("wstune bench deflate --sizes 4k --level 6", "One size at zlib's default level"),
            ex!("wstune bench deflate --contexts 10000", "What 10,000 connections' compression contexts cost"),
        ],
        "wstune serve" => &[
            ex!("wstune serve", "An echo server on 127.0.0.1:9001 (/metrics on 127.0.0.1:9002)"),
            ex!("wstune serve --app broadcast --bind 0.0.0.0", "Every message to every client, on every interface"),
            ex!("wstune serve --self-test", "Check this host, serve tuned, load-test it, one verdict"),
        ],
        "wstune selftest" => &[
            ex!("wstune selftest --url ws://127.0.0.1:9001/", "The default scenarios against `wstune serve`"),
            ex!(
                "wstune selftest --url ws://127.0.0.1:9001/ --scenario echo-rate --conns 10000 --report run.html",
                "10,000 connections' echo latency, with an HTML page of charts",
            ),
            ex!(
                "wstune selftest --url ws://127.0.0.1:9001/ --scenario broadcast",
                "Fan-out, against a broadcasting server (`wstune serve --app broadcast`)",
            ),
        ],
        "wstune pool" => &[
            ex!("wstune pool --blocking-ms 20 --cpu-ms 2", "The pool size for 20 ms waiting and 2 ms CPU per message"),
            ex!("wstune pool --measure --handler block:20+cpu:1000us", "Measure those times on a local server under load"),
            ex!(
                "wstune pool --sweep --handler block:20 --write-profile pool.yaml",
                "Try each size, find the knee, write a profile with it",
            ),
        ],
        "wstune lb" => &[
            ex!(
                "wstune lb haproxy --backends 10.0.0.5:9001,10.0.0.6:9001 -o haproxy.cfg",
                "HAProxy in front of two servers",
            ),
            ex!(
                "wstune lb nginx --backends 10.0.0.5:9001 --tls-cert ws.crt --tls-key ws.key",
                "nginx terminating TLS",
            ),
        ],
        "wstune report" => &[
            ex!("wstune report merge shard-0.json shard-1.json", "One verdict from two generator hosts' reports"),
            ex!("wstune report watch watch.jsonl -o watch.html", "A page of charts from `watch --record`"),
        ],
        "wstune report merge" => &[
            ex!("wstune report merge shard-0.json shard-1.json", "One verdict from two generator hosts' reports"),
            ex!(
                "wstune report merge shard-*.json --report run.html -f json",
                "The merged JSON report, and its HTML page",
            ),
        ],
        "wstune report watch" => &[
            ex!("wstune watch --count 60 --record watch.jsonl", "Record a minute"),
            ex!("wstune report watch watch.jsonl -o watch.html", "Then chart it on one page"),
        ],
        "wstune watch" => &[
            ex!("wstune watch", "The full-screen view of every listener and counter (q quits)"),
            ex!("wstune watch --port 9001 --admin 127.0.0.1:9002", "One server's listener, with its own figures"),
            ex!("wstune watch --plain --count 10", "Ten lines, one per second, for a log or a script"),
        ],
        "wstune token" => &[
            ex!(
                "wstune token --secret-file secret.key --channels 'news.*' --ttl 15m",
                "A token for the news.* channels, valid 15 minutes",
            ),
            ex!(
                "wstune token --secret-file secret.key --channels chat --publish chat --sub alice",
                "Subscribe and publish to chat, as alice",
            ),
        ],
        "wstune snapshot" => &[
            ex!("wstune snapshot host-a", "Capture what check reads into ./host-a"),
            ex!("wstune check --root host-a", "Check the capture, on any machine"),
        ],
        "wstune profiles" | "wstune profiles list" => &[
            ex!("wstune profiles list", "The built-in profiles, one line each"),
            ex!("wstune profiles show 1m --resolved", "Every value the 1m profile sets"),
        ],
        "wstune profiles show" => &[
            ex!("wstune profiles show 100k", "The default profile's file, with its comments"),
            ex!("wstune profiles show 1m --resolved", "Every value in effect, inherited ones too"),
            ex!("wstune profiles show ./mine.yaml -f json", "Your own profile, checked, as JSON"),
        ],
        "wstune export" => &[
            ex!("wstune export --to sysctl -o 60-wstune.conf", "The sysctl.d file apply would write"),
            ex!("wstune export --to kubernetes -p 250k", "A Deployment and a DaemonSet with the sysctls"),
            ex!("wstune export --to systemd-unit -o units/", "Units for serve and a daily check"),
        ],
        "wstune completions" => &[
            ex!(
                "wstune completions bash > ~/.local/share/bash-completion/completions/wstune",
                "Completion for bash (new shells)",
            ),
            ex!("wstune completions zsh > ~/.zfunc/_wstune", "For zsh (~/.zfunc on $fpath)"),
        ],
        "wstune man" => &[ex!(
            "sudo wstune man --out /usr/local/share/man/man1",
            "Install the pages; then `man wstune-check`",
        )],
        _ => &[],
    }
}

/// The parser's command with the help people read added: every command's examples after its
/// `-h` and `--help`, and under `-h` how many options `--help` lists (counted, so it stays
/// true). Parse with this, not `Cli::command()`, wherever help can be printed.
pub fn command() -> Command {
    let mut built = super::Cli::command();
    built.build();
    with_examples(super::Cli::command(), &built, "wstune")
}

fn with_examples(cmd: Command, built: &Command, path: &str) -> Command {
    let mut cmd = cmd.after_help(short_end(built, path));
    let long = examples_text(path);
    cmd = if path == "wstune" {
        cmd.after_long_help(format!("{long}\n\n{}", super::AFTER_HELP))
    } else {
        cmd.after_long_help(long)
    };
    for sub in built.get_subcommands() {
        let name = sub.get_name().to_string();
        if sub.is_hide_set() || name == "help" {
            continue;
        }
        let sub_path = format!("{path} {name}");
        cmd = cmd.mut_subcommand(&name, |s| with_examples(s, sub, &sub_path));
    }
    cmd
}

/// The options `--help` lists for a built command, `-h, --help` included.
pub fn option_count(built: &Command) -> usize {
    built
        .get_arguments()
        .filter(|a| !a.is_positional() && !a.is_hide_set())
        .count()
}

/// "Examples:" and each example, its description as a comment above it (pastes harmlessly).
fn examples_text(path: &str) -> String {
    let h = Styles::styled().get_header().to_owned();
    let mut s = format!("{h}Examples:{h:#}");
    for e in examples(path) {
        s.push_str(&format!("\n  # {}\n  {}", e.says, e.line));
    }
    s
}

/// The end of `-h`: the examples, then where the rest is.
fn short_end(built: &Command, path: &str) -> String {
    let page = path.replace(' ', "-");
    let more = if path == "wstune" {
        "Run `wstune COMMAND -h` for a command's essentials and examples, `--help` for all its\n\
         options; `man wstune-COMMAND` for its manual."
            .to_string()
    } else if built.has_subcommands() {
        format!("Run `{path} COMMAND --help` for a command's options; `man {page}-COMMAND`.")
    } else {
        format!(
            "Run `{path} --help` for all {} options; `man {page}` for the manual.",
            option_count(built)
        )
    };
    format!("{}\n\n{more}", examples_text(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every visible command, as "wstune check", with its built definition.
    fn every_command() -> Vec<(String, Command)> {
        fn walk(c: &Command, path: &str, out: &mut Vec<(String, Command)>) {
            out.push((path.to_string(), c.clone()));
            for s in c.get_subcommands() {
                if !s.is_hide_set() && s.get_name() != "help" {
                    walk(s, &format!("{path} {}", s.get_name()), out);
                }
            }
        }
        let mut c = command();
        c.build();
        let mut out = Vec::new();
        walk(&c, "wstune", &mut out);
        out
    }

    /// An example's argv as wstune gets it: `sudo` dropped, the shell's quoting undone, and
    /// nothing from a redirection on.
    pub(crate) fn argv(line: &str) -> Vec<String> {
        let words = shlex::split(line).expect("an example is valid shell");
        words
            .into_iter()
            .skip_while(|w| w == "sudo")
            .take_while(|w| !w.starts_with('>') && w != "|")
            .collect()
    }

    #[test]
    fn every_command_has_examples() {
        for (path, _) in every_command() {
            assert!(!examples(&path).is_empty(), "{path}: no examples");
        }
    }

    /// Each example is a command wstune accepts: it parses, and runs wstune.
    #[test]
    fn every_example_parses() {
        for (path, _) in every_command() {
            for e in examples(&path) {
                let argv = argv(e.line);
                assert_eq!(
                    argv.first().map(String::as_str),
                    Some("wstune"),
                    "{}",
                    e.line
                );
                if let Err(err) = command().try_get_matches_from(&argv) {
                    panic!("{path}: example `{}` does not parse:\n{err}", e.line);
                }
            }
        }
    }

    /// The count `-h` quotes is what `--help` lists.
    #[test]
    fn the_option_count_under_short_help_is_what_long_help_lists() {
        for (path, c) in every_command() {
            if c.has_subcommands() {
                continue;
            }
            let long = c.clone().render_long_help().to_string();
            // clap's flag lines: `  -p, --profile` or `      --pid`.
            let listed = long
                .lines()
                .filter(|l| {
                    l.starts_with("      --") || (l.starts_with("  -") && l.get(4..5) == Some(","))
                })
                .count();
            assert_eq!(listed, option_count(&c), "{path}:\n{long}");
            let short = c.clone().render_help().to_string();
            assert!(
                short.contains(&format!("for all {} options", option_count(&c))),
                "{path}:\n{short}"
            );
        }
    }
}
