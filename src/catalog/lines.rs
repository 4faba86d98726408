//! Where a check entry is written in its catalog file: the line ranges of the `checks:`
//! entries and a key's or a value's line inside one, so each problem serde or validation
//! finds names `file:line` (serde's own locations stop at the whole-file frame).

/// The 0-based line ranges of the entries of the top-level `checks:` sequence, in order (block
/// style; a flow-style list yields none and lines fall back to a search by id).
pub(super) fn item_blocks(text: &str) -> Vec<std::ops::Range<usize>> {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let Some(start) = lines.iter().position(|l| l.trim_end() == "checks:") else {
        return Vec::new();
    };
    let mut starts = Vec::new();
    let mut item_indent = None;
    let mut end = lines.len();
    for (i, l) in lines.iter().enumerate().skip(start + 1) {
        let t = l.trim_start();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let at = indent(l);
        let is_item = t == "-" || t.starts_with("- ");
        match item_indent {
            None if is_item => {
                item_indent = Some(at);
                starts.push(i);
            }
            None => return Vec::new(),
            Some(d) if at == d && is_item => starts.push(i),
            Some(d) if at < d || (at == d && !is_item) => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (n, s) in starts.iter().enumerate() {
        out.push(*s..starts.get(n + 1).copied().unwrap_or(end));
    }
    out
}

/// The 1-based line, within one entry's lines, where `key:` is written.
pub(super) fn line_in_block(
    text: &str,
    block: &std::ops::Range<usize>,
    key: &str,
) -> Option<usize> {
    text.lines()
        .enumerate()
        .skip(block.start)
        .take(block.len())
        .find(|(_, l)| {
            let t = l.trim_start().trim_start_matches("- ").trim_start();
            t.strip_prefix(key).is_some_and(|r| r.starts_with(':'))
        })
        .map(|(i, _)| i + 1)
}

/// The 1-based line, within one entry's lines, whose value is `value` (`key: value`, quoted
/// or not, or `{key: value}`).
pub(super) fn line_with_value(
    text: &str,
    block: &std::ops::Range<usize>,
    value: &str,
) -> Option<usize> {
    text.lines()
        .enumerate()
        .skip(block.start)
        .take(block.len())
        .find(|(_, l)| {
            l.split(':').skip(1).any(|v| {
                v.trim()
                    .trim_end_matches('}')
                    .trim()
                    .trim_matches(|c| c == '"' || c == '\'')
                    == value
            })
        })
        .map(|(i, _)| i + 1)
}

pub(super) fn line_of_id(text: &str, id: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let t = l.trim_start().trim_start_matches("- ").trim();
            t.strip_prefix("id:")
                .is_some_and(|v| v.trim().trim_matches('"') == id)
        })
        .map(|i| i + 1)
}
