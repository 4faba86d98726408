//! Find the line of a key in a block-style YAML document.
//!
//! serde gives line numbers only for errors it raises itself (syntax, unknown keys, wrong types).
//! Range checks run after deserialization, so this maps a dotted key path back to its line to let
//! every validation error name `file:line`. Flow-style mappings are not indexed; the caller then
//! reports the key path alone, which still names the problem.

/// 1-based line of `path` (e.g. `server.deflate.window_bits`) in `text`, if it can be found.
pub fn line_of(text: &str, path: &str) -> Option<usize> {
    let wanted: Vec<&str> = path.split('.').collect();
    // Stack of (indent, key) for the mapping keys that enclose the current line.
    let mut stack: Vec<(usize, String)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('-') {
            continue;
        }
        // As YAML reads a plain key: up to the first colon followed by a space or the line's
        // end (`a:b: 1` is the key `a:b`; `a:b` alone is no key at all).
        let Some(colon) = trimmed
            .char_indices()
            .find(|&(i, c)| {
                c == ':'
                    && trimmed[i + 1..]
                        .chars()
                        .next()
                        .is_none_or(char::is_whitespace)
            })
            .map(|(i, _)| i)
        else {
            continue;
        };
        let key = trimmed[..colon]
            .trim()
            .trim_matches(|c| c == '"' || c == '\'');
        let indent = raw.len() - trimmed.len();
        while stack.last().is_some_and(|(d, _)| *d >= indent) {
            stack.pop();
        }
        stack.push((indent, key.to_string()));
        if stack.len() == wanted.len() && stack.iter().zip(&wanted).all(|((_, k), w)| k == w) {
            return Some(i + 1);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::line_of;

    const DOC: &str = "name: x\n# c\nserver:\n  deflate:\n    enabled: true\n    window_bits: 8\n  heartbeat:\n    interval_secs: 3\nlinux:\n  nofile: 1\n";

    #[test]
    fn finds_nested_keys() {
        assert_eq!(line_of(DOC, "name"), Some(1));
        assert_eq!(line_of(DOC, "server.deflate.window_bits"), Some(6));
        assert_eq!(line_of(DOC, "server.heartbeat.interval_secs"), Some(8));
        assert_eq!(line_of(DOC, "linux.nofile"), Some(10));
    }

    #[test]
    fn a_key_ends_at_a_colon_before_a_space_or_the_end() {
        let doc = "a:b: 1\nurl: http://x:80/\nroot:$6$s$h:1:::\nplain:scalar\n";
        assert_eq!(line_of(doc, "a:b"), Some(1));
        assert_eq!(line_of(doc, "url"), Some(2));
        assert_eq!(line_of(doc, "root:$6$s$h:1::"), Some(3));
        assert_eq!(line_of(doc, "plain"), None);
    }

    #[test]
    fn missing_key_is_none() {
        assert_eq!(line_of(DOC, "server.window_bits"), None);
        assert_eq!(line_of(DOC, "nope"), None);
    }
}
