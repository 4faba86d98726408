//! What a command concluded, before anyone turns it into an exit code.
//!
//! Commands return an [`Outcome`] (or an error: bad input, a refusal, something that could not
//! be done); only `cli` maps it to the process's exit code (`cli::exit`), so the policy sits in
//! one place and nothing in the library decides how the process ends.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done, and nothing failed (warnings allowed when they do not count).
    Ok,
    /// Done, with warnings that count: `check --strict` with warnings and no failure, or a
    /// `serve --processes` supervisor that had to kill a process that would not drain.
    Warnings,
    /// At least one check failed, or a load test missed its targets or stopped partway.
    Failed,
    /// A load test that could not be judged: the host was too noisy to stand behind a pass or
    /// a miss (and nothing else failed).
    Inconclusive,
    /// Stopped at once by a second SIGINT or SIGTERM (`signal`, its number) while the first
    /// one's graceful stop was still running: what it would have finished was cut short.
    Interrupted { signal: i32 },
}

impl Outcome {
    /// A check's outcome from its failed and warning counts: any failure fails; warnings
    /// count only when `strict`. (Counts, not the catalog's summary: this module is a leaf
    /// every command may use.)
    pub fn of_checks(failed: usize, warnings: usize, strict: bool) -> Outcome {
        if failed > 0 {
            Outcome::Failed
        } else if strict && warnings > 0 {
            Outcome::Warnings
        } else {
            Outcome::Ok
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_fails_on_failures_and_warns_only_when_strict() {
        assert_eq!(Outcome::of_checks(0, 0, true), Outcome::Ok);
        assert_eq!(Outcome::of_checks(0, 3, false), Outcome::Ok);
        assert_eq!(Outcome::of_checks(0, 3, true), Outcome::Warnings);
        assert_eq!(Outcome::of_checks(1, 3, true), Outcome::Failed);
        assert_eq!(Outcome::of_checks(1, 0, false), Outcome::Failed);
    }
}
