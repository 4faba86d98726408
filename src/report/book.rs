//! Tests that keep the book and the top-level pages honest where no generator does: every
//! relative link points at a file that exists (and, with `#anchor`, at a heading or `<a id>`
//! there), and the environment-variable page names exactly the `WSTUNE_` variables the code
//! reads or sets. The generated pages have their own tests beside their generators
//! (checks_doc, profile_doc, schema_doc, metrics_doc, cli::reference).

#[cfg(test)]
pub(crate) use tests::assert_current;

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    /// A generated page (`page`, from the repository root) is what its generator writes now:
    /// under `UPDATE_SNAPSHOTS` it is rewritten; otherwise a difference fails, naming the page,
    /// what changes it (`changed`) and the test filter (`test`) that rewrites it.
    pub(crate) fn assert_current(page: &str, want: &str, changed: &str, test: &str) {
        let path = root().join(page);
        if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
            std::fs::write(&path, want).unwrap_or_else(|e| panic!("{page} is not writable: {e}"));
            return;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{page} is stale ({changed}): run `UPDATE_SNAPSHOTS=1 cargo test --lib {test}` and \
             commit the file"
        );
    }

    fn root() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
    }

    /// The pages whose links are checked: the top-level ones people open first, and the book.
    fn pages() -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            entries.sort();
            for p in entries {
                if p.is_dir() {
                    walk(&p, out);
                } else if p.extension().is_some_and(|x| x == "md") {
                    out.push(p);
                }
            }
        }
        let r = root();
        let mut out: Vec<PathBuf> = [
            "README.md",
            "CONTRIBUTING.md",
            "BENCHMARKS.md",
            "RELIABILITY.md",
        ]
        .iter()
        .map(|f| r.join(f))
        .filter(|p| p.exists())
        .collect();
        walk(&r.join("docs"), &mut out);
        out
    }

    /// A page's lines outside fenced code blocks, with their 1-based numbers.
    fn prose(text: &str) -> Vec<(usize, &str)> {
        let mut fence: Option<&str> = None;
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let t = line.trim_start();
            let marker = if t.starts_with("```") {
                Some("```")
            } else if t.starts_with("~~~") {
                Some("~~~")
            } else {
                None
            };
            match (fence, marker) {
                (None, Some(m)) => fence = Some(m),
                (Some(f), Some(m)) if f == m => fence = None,
                (None, None) => out.push((i + 1, line)),
                _ => {}
            }
        }
        out
    }

    /// A line without its inline code spans (a link inside backticks is no link).
    fn without_code(line: &str) -> String {
        line.split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, s)| s)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The targets of a line's inline links `[text](target)` and reference definitions
    /// `[name]: target`.
    fn links(line: &str) -> Vec<String> {
        let line = without_code(line);
        let mut out = Vec::new();
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            if let Some((_, rest)) = trimmed.split_once("]: ") {
                if let Some(t) = rest.split_whitespace().next() {
                    out.push(t.to_string());
                }
            }
        }
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let mut depth = 0;
            let end = after
                .char_indices()
                .find(|&(_, c)| match c {
                    '(' => {
                        depth += 1;
                        false
                    }
                    ')' if depth == 0 => true,
                    ')' => {
                        depth -= 1;
                        false
                    }
                    _ => false,
                })
                .map_or(after.len(), |(j, _)| j);
            let inside = &after[..end];
            let target = match inside.strip_prefix('<') {
                Some(bracketed) => bracketed.split('>').next().unwrap_or(""),
                None => inside.split_whitespace().next().unwrap_or(""),
            };
            out.push(target.to_string());
            rest = &after[end..];
        }
        out
    }

    /// A heading's anchor as GitHub and mdBook make it: markup dropped, lowercase, spaces to
    /// `-`, every character but letters, digits, `-` and `_` removed.
    fn slug(heading: &str) -> String {
        // A link in a heading keeps its text only.
        let mut text = String::new();
        let mut rest = heading;
        while let Some(i) = rest.find("](") {
            text.push_str(&rest[..i]);
            let after = &rest[i + 2..];
            rest = after.find(')').map_or("", |j| &after[j + 1..]);
        }
        text.push_str(rest);
        text.trim()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .flat_map(char::to_lowercase)
            .collect()
    }

    /// Every anchor a page offers: its headings' slugs (a repeated one as `slug-1`, `slug-2`)
    /// and its `<a id="...">` / `<a name="...">` anchors.
    fn anchors(text: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut seen: std::collections::HashMap<String, usize> = Default::default();
        for (_, line) in prose(text) {
            let t = line.trim_start();
            if t.starts_with('#') {
                let heading = t.trim_start_matches('#');
                if heading.starts_with(' ') {
                    let base = slug(heading);
                    let n = seen.entry(base.clone()).or_insert(0);
                    out.insert(if *n == 0 {
                        base.clone()
                    } else {
                        format!("{base}-{n}")
                    });
                    *n += 1;
                }
            }
            for attr in ["id=\"", "name=\""] {
                let mut rest = line;
                while let Some(i) = rest.find(attr) {
                    let after = &rest[i + attr.len()..];
                    if let Some(j) = after.find('"') {
                        out.insert(after[..j].to_string());
                    }
                    rest = after;
                }
            }
        }
        out
    }

    /// What is wrong with one link from `page`, if anything.
    fn broken(page: &Path, text: &str, target: &str) -> Option<String> {
        if target.is_empty()
            || target.contains("://")
            || target.starts_with("mailto:")
            || target.starts_with("{{")
        {
            return None;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target, None),
        };
        let file = if path.is_empty() {
            page.to_path_buf()
        } else {
            page.parent().unwrap().join(path)
        };
        if !file.exists() {
            return Some(format!("{target}: no such file"));
        }
        // The book's HTML holds only what is under docs/: a link from a book page to another
        // file of the repository would be dead there, so name such a file as code instead.
        let book = root().join("docs");
        let inside = |p: &Path| p.canonicalize().is_ok_and(|p| p.starts_with(&book));
        if inside(page) && !inside(&file) {
            return Some(format!(
                "{target}: leaves the book (dead in its HTML); name the file as `code` instead"
            ));
        }
        let anchor = anchor.filter(|a| !a.is_empty())?;
        let linked = if path.is_empty() {
            text.to_string()
        } else if file.extension().is_some_and(|x| x == "md") {
            std::fs::read_to_string(&file).unwrap_or_default()
        } else {
            return None;
        };
        if anchors(&linked).contains(anchor) {
            None
        } else {
            Some(format!("{target}: no heading or anchor `{anchor}` there"))
        }
    }

    /// Every relative link of README.md, CONTRIBUTING.md, BENCHMARKS.md, RELIABILITY.md and
    /// the book points at a file that exists, and every `#anchor` at a heading there.
    #[test]
    fn book_links_resolve() {
        let r = root();
        let mut bad = Vec::new();
        for page in pages() {
            let text = std::fs::read_to_string(&page).unwrap();
            for (n, line) in prose(&text) {
                for target in links(line) {
                    if let Some(why) = broken(&page, &text, &target) {
                        let shown = page.strip_prefix(&r).unwrap_or(&page).display().to_string();
                        bad.push(format!("{shown}:{n}: {why}"));
                    }
                }
            }
        }
        assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
    }

    #[test]
    fn book_link_reader_finds_links_slugs_and_anchors() {
        assert_eq!(
            links("see [a](x.md#b) and `[c](no.md)` and [d](<y z.md>) [e](f(1).md)"),
            ["x.md#b", "y z.md", "f(1).md"]
        );
        assert_eq!(links("[ref]: docs/x.md \"title\""), ["docs/x.md"]);
        assert_eq!(slug(" `wstune check` --strict"), "wstune-check---strict");
        assert_eq!(
            slug(" A verdict you can reproduce"),
            "a-verdict-you-can-reproduce"
        );
        let a = anchors("# Top\n## Top\n```\n# not\n```\n<a id=\"here\"></a>\n");
        assert_eq!(a.into_iter().collect::<Vec<_>>(), ["here", "top", "top-1"]);
        // A book page may link anything under docs/, and nothing outside it; README may.
        let page = root().join("docs/serve.md");
        assert_eq!(broken(&page, "", "check.md"), None);
        let out = broken(&page, "", "../BENCHMARKS.md").expect("outside the book");
        assert!(out.contains("leaves the book"), "{out}");
        assert_eq!(broken(&root().join("README.md"), "", "BENCHMARKS.md"), None);
    }

    /// The `WSTUNE_` variables the code reads or sets, from its sources.
    fn variables_in_code() -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut stack = vec![root().join("src"), root().join("embedded-server/src")];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                if p.extension().is_none_or(|x| x != "rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&p).unwrap();
                for (i, _) in text.match_indices("WSTUNE_") {
                    let name: String = text[i..]
                        .chars()
                        .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                        .collect();
                    out.insert(name.trim_end_matches('_').to_string());
                }
            }
        }
        // HAProxy's sticky-session cookie `wstune lb` names, not a variable.
        out.remove("WSTUNE_BACKEND");
        // `WSTUNE_*` in prose: the family, not a name.
        out.remove("WSTUNE");
        out
    }

    /// docs/reference/environment.md names every `WSTUNE_` variable of the code, and no other.
    #[test]
    fn book_environment_page_names_every_variable() {
        let page = std::fs::read_to_string(root().join("docs/reference/environment.md")).unwrap();
        let documented: BTreeSet<String> = page
            .lines()
            .filter_map(|l| l.strip_prefix("| `WSTUNE_"))
            .map(|l| format!("WSTUNE_{}", l.split('`').next().unwrap()))
            .collect();
        assert_eq!(documented, variables_in_code());
    }
}
