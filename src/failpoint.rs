//! Test-only pause points, so an integration test can kill a real `wstune apply` at a known
//! step (between two changes) and prove that the journal recovers from it. Set
//! `WSTUNE_FAILPOINT=apply-pause-after=N`: at step N apply prints a line to stderr and sleeps
//! for up to 60 s. Step 0 is after the journal entry is saved and before the first change;
//! steps 1..=A follow each of the A actions (sysctls, limits), A+1..=A+F each of the F files
//! written, and A+F+1 the journal commit (tests/apply_killed.rs kills apply at every one).
//!
//! Compiled in only with the `failpoints` feature, which only the test build enables (a
//! dev-dependency of the crate on itself): a release binary ignores the variable entirely, so a
//! stray environment cannot pause a production apply.

/// Pause here if the failpoint names this step.
#[cfg(feature = "failpoints")]
pub fn pause_after_action(done: usize) {
    let Ok(spec) = std::env::var("WSTUNE_FAILPOINT") else {
        return;
    };
    let Some(n) = spec
        .strip_prefix("apply-pause-after=")
        .and_then(|n| n.parse::<usize>().ok())
    else {
        return;
    };
    if n == done {
        eprintln!("wstune: failpoint: paused after action {done}");
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
}

/// Without the feature: nothing, not even the environment lookup.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn pause_after_action(_done: usize) {}
