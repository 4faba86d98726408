//! The command examples in README.md and the book (docs/**/*.md) run as tests, so the docs
//! cannot drift from the CLI (trycmd, as clap and cargo do for theirs).
//!
//! The convention, for whoever writes a page:
//! - A fence whose info string is `console` (or `trycmd`) is run: each `$ wstune ...` line is a
//!   command (the binary this test run built, run from the repository's root with
//!   `COLUMNS=100`), the lines after it are its standard output and error together, and a
//!   `? CODE` line right after the command states an exit status other than 0. A line `...`
//!   stands for any number of lines, `[..]` inside a line for any text. Leave one empty line
//!   before the closing fence: the output ends with a newline.
//! - Any other fence (`sh`, `yaml`, or none) is shown, never run: use one for commands that need
//!   root, a network, another program or a long time.
//! - trycmd runs no shell: no pipes, redirections or `&&`, and only `wstune` as the program
//!   (trycmd would skip another program without failing; this test refuses it instead).
//!
//! trycmd reads working copies of the pages under target/, their bare fences marked as not
//! run; a failure names the copy and the page's own line number. When an intended change alters
//! what an example prints, `TRYCMD=overwrite cargo test --test commands doc_examples` rewrites
//! the examples in the pages themselves: review the diff.

use std::path::{Path, PathBuf};

/// Every page the examples are collected from: README.md and every Markdown file under docs/.
fn pages(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut out = vec![root.join("README.md")];
    walk(&root.join("docs"), &mut out);
    out
}

/// Marks a fence that had no info string in a page's working copy: trycmd runs a bare fence as
/// a test, but the pages use bare fences for synopses and layouts, which are shown, not run.
const BARE: &str = "doc-examples-bare";

/// A page as trycmd reads it (fences open with 3+ backticks at the start of a line and close
/// with the same run): its working copy, bare fences marked [`BARE`] so only ```` ```console ````
/// and ```` ```trycmd ```` run, and the `$ ` lines of those run fences with their line numbers.
/// The copy keeps every line where it was, so a failure's line number is the page's.
fn working_copy(text: &str) -> (String, Vec<(usize, String)>) {
    let mut copy = String::with_capacity(text.len() + 64);
    let mut commands = Vec::new();
    let mut fence: Option<(String, bool)> = None; // (the backticks that close it, whether it runs)
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let ticks = line.len() - line.trim_start_matches('`').len();
        match &fence {
            None if ticks >= 3 => {
                let info = line[ticks..].trim();
                let mut parts = info.split(',');
                let lang = parts.next().unwrap_or("");
                let run = matches!(lang, "console" | "trycmd") && !parts.any(|p| p == "ignore");
                if info.is_empty() {
                    copy.push_str(&line[..ticks]);
                    copy.push_str(BARE);
                    copy.push('\n');
                } else {
                    copy.push_str(line);
                }
                fence = Some((line[..ticks].to_string(), run));
                continue;
            }
            None => {}
            Some((close, run)) => {
                if line.starts_with(close.as_str()) {
                    fence = None;
                } else if *run {
                    if let Some(cmd) = line.strip_prefix("$ ") {
                        commands.push((i + 1, cmd.trim_end().to_string()));
                    } else if line.starts_with("? skipped") {
                        commands.push((i + 1, "? skipped".to_string()));
                    }
                }
            }
        }
        copy.push_str(line);
    }
    (copy, commands)
}

/// The page again from a working copy trycmd rewrote (TRYCMD=overwrite).
fn page_from_copy(copy: &str) -> String {
    copy.split_inclusive('\n')
        .map(|line| {
            let ticks = line.len() - line.trim_start_matches('`').len();
            if ticks >= 3 && line[ticks..].trim_end() == BARE {
                format!("{}\n", &line[..ticks])
            } else {
                line.to_string()
            }
        })
        .collect()
}

/// Why trycmd could not run this command as written, if it could not.
fn unrunnable(cmd: &str) -> Option<&'static str> {
    if cmd == "? skipped" {
        return Some("`? skipped` hides an example instead of running it");
    }
    let words: Vec<&str> = cmd.split_whitespace().collect();
    // trycmd accepts `KEY=VALUE` assignments before the program.
    let program = words.iter().find(|w| !w.contains('='));
    if program != Some(&"wstune") {
        return Some("only `wstune` runs here (trycmd skips any other program without failing)");
    }
    if words
        .iter()
        .any(|w| matches!(*w, "|" | "||" | "&&" | ";" | ">" | ">>" | "<" | "2>&1"))
    {
        return Some("trycmd runs no shell: no pipes, redirections or `&&`");
    }
    None
}

#[test]
fn readme_and_book_examples_print_what_the_pages_say() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("doc-examples");
    let mut refused = Vec::new();
    let mut in_readme = 0;
    let mut copies = Vec::new();
    for page in pages(root) {
        let rel = page.strip_prefix(root).unwrap().to_path_buf();
        let (copy, commands) = working_copy(&std::fs::read_to_string(&page).unwrap());
        for (line, cmd) in commands {
            match unrunnable(&cmd) {
                Some(why) => refused.push(format!("{}:{line}: `{cmd}`: {why}", rel.display())),
                None if rel == Path::new("README.md") => in_readme += 1,
                None => {}
            }
        }
        let at = work.join(&rel);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(&at, copy).unwrap();
        copies.push((page, at));
    }
    assert!(
        refused.is_empty(),
        "these ```console examples cannot run as written; make them runnable or show them in a \
         ```sh fence instead:\n{}",
        refused.join("\n")
    );
    // A README without one runnable example means the fences were renamed, not that there is
    // nothing to check.
    assert!(
        in_readme > 0,
        "README.md has no ```console example with a `$ wstune` line"
    );

    {
        let cases = trycmd::TestCases::new();
        cases
            .register_bin("wstune", PathBuf::from(env!("CARGO_BIN_EXE_wstune")))
            // Tables are as wide as $COLUMNS when not on a terminal; colour only on a terminal.
            .env("COLUMNS", "100")
            .env("NO_COLOR", "1");
        for (_, copy) in &copies {
            cases.case(copy);
        }
        // The cases run here, as `cases` is dropped: an example whose output differs fails
        // with a diff naming the working copy (under target/) and the page's own line number.
    }
    if std::env::var("TRYCMD").as_deref() == Ok("overwrite") {
        for (page, copy) in &copies {
            let text = page_from_copy(&std::fs::read_to_string(copy).unwrap());
            if text != std::fs::read_to_string(page).unwrap() {
                std::fs::write(page, text).unwrap();
            }
        }
    }
}

#[test]
fn only_console_fences_run_and_a_page_comes_back_from_its_copy_unchanged() {
    let page = "```\nwstune check [--profile P]\n```\n\n```sh\n$ sudo wstune apply\n```\n\n\
                ```console\n$ wstune --version\nwstune [..]\n\n```\n\n````console,ignore\n$ jq\n````\n";
    let (copy, commands) = working_copy(page);
    assert_eq!(commands, vec![(10, "wstune --version".to_string())]);
    assert!(copy.starts_with(&format!("```{BARE}\n")), "{copy}");
    assert_eq!(page_from_copy(&copy), page);
    assert_eq!(unrunnable("wstune check -f json"), None);
    assert_eq!(unrunnable("COLUMNS=80 wstune check"), None);
    assert!(unrunnable("jq -e .summary").is_some());
    assert!(unrunnable("wstune check -f json | jq .").is_some());
    assert!(unrunnable("? skipped").is_some());
}
