//! Naming the line of a problem in a script, within a bounded amount of reading.

/// The script's lines, to name the line of a problem. Each lookup searches only the part of
/// the file it concerns (a population's lines, a list's items), and all of them together scan
/// at most a few times the file's lines ([`Lines::budget`]): naming every step's line of a
/// file of 55,000 steps took 34 s when each step's lookup read the file from its start. Past
/// the budget a lookup answers the nearest line it knows.
pub(super) struct Lines<'a> {
    lines: Vec<&'a str>,
    /// Lines lookups may still read.
    budget: std::cell::Cell<usize>,
}

impl<'a> Lines<'a> {
    pub(super) fn new(text: &'a str) -> Lines<'a> {
        let lines: Vec<&str> = text.lines().collect();
        let budget = 4 * lines.len() + 10_000;
        Lines {
            lines,
            budget: std::cell::Cell::new(budget),
        }
    }

    /// The lines after the file's last (for a search's end).
    pub(super) fn end(&self) -> usize {
        self.lines.len() + 1
    }

    /// Take one line's reading from the budget; false once it is spent.
    pub(super) fn spend(&self) -> bool {
        let left = self.budget.get();
        self.budget.set(left.saturating_sub(1));
        left > 0
    }

    /// The first line in `from..to` (1-based) that contains `needle`; `from` when none.
    pub(super) fn find(&self, needle: &str, from: usize, to: usize) -> usize {
        let from = from.max(1);
        for n in from..to.min(self.end()) {
            if !self.spend() {
                break;
            }
            if self.lines[n - 1].contains(needle) {
                return n;
            }
        }
        from
    }

    /// The lines (1-based) of the items of the list that starts after line `after`: the
    /// lines beginning with `- ` at the first item's indentation, up to the first line less
    /// indented. Empty when the list is not written one item a line (`[a, b]`).
    pub(super) fn items(&self, after: usize) -> Vec<usize> {
        let mut indent = None;
        let mut out = Vec::new();
        for (n, l) in self.lines.iter().enumerate().skip(after) {
            if !self.spend() {
                break;
            }
            let trimmed = l.trim_start();
            let here = l.len() - trimmed.len();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            match indent {
                None if trimmed.starts_with("- ") => indent = Some(here),
                None => break,
                Some(ind) if here < ind => break,
                _ => {}
            }
            if Some(here) == indent && trimmed.starts_with("- ") {
                out.push(n + 1);
            }
        }
        out
    }
}
