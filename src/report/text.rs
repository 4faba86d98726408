//! Text laid out for a terminal of a given width: words wrapped at spaces (never inside a word,
//! so an id, a path or a URL stays whole), widths counted as the terminal shows them.

use unicode_width::UnicodeWidthStr;

/// How many columns `s` takes on a terminal.
pub fn columns(s: &str) -> usize {
    s.width()
}

/// `text` as lines of at most `width` columns: the first starts with `first`, the others with
/// `rest` (both counted). A word longer than a line is put on a line of its own, whole.
pub fn wrap(text: &str, width: usize, first: &str, rest: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = first.to_string();
    let mut empty = true;
    for word in text.split_whitespace() {
        if !empty && columns(&line) + 1 + columns(word) > width {
            lines.push(std::mem::replace(&mut line, rest.to_string()));
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    if !empty || lines.is_empty() {
        lines.push(line.trim_end().to_string());
    }
    lines
}

/// [`wrap`], joined with a newline after each line.
pub fn wrapped(text: &str, width: usize, first: &str, rest: &str) -> String {
    wrap(text, width, first, rest)
        .into_iter()
        .map(|l| l + "\n")
        .collect()
}

/// A byte count as people read it: `23.5 GiB`, `128 KiB`, `512 B`.
pub fn bytes(n: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut unit = 0;
    let mut scale = 1i64;
    while unit + 1 < UNITS.len() && n.unsigned_abs() >= (scale as u64) * 1024 {
        scale *= 1024;
        unit += 1;
    }
    if n % scale == 0 {
        format!("{} {}", n / scale, UNITS[unit])
    } else {
        format!("{:.1} {}", n as f64 / scale as f64, UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_wrap_at_spaces_and_a_long_word_stays_whole() {
        assert_eq!(
            wrap("one two three four", 9, "", "  "),
            ["one two", "  three", "  four"]
        );
        let url = "https://docs.kernel.org/networking/ip-sysctl.html";
        assert_eq!(
            wrap(&format!("see {url} now"), 20, "- ", "  "),
            ["- see".to_string(), format!("  {url}"), "  now".to_string()]
        );
        assert_eq!(wrap("", 10, "x: ", ""), ["x:"]);
    }

    #[test]
    fn bytes_read_in_binary_units() {
        assert_eq!(bytes(25_276_194_816), "23.5 GiB");
        assert_eq!(bytes(131_072), "128 KiB");
        assert_eq!(bytes(6_291_456), "6 MiB");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(0), "0 B");
    }
}
