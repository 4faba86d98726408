//! Test-only pause points, so an integration test can kill a real `wstune apply` at a known
//! step (between two changes) and prove that the journal recovers from it. Set
//! `WSTUNE_FAILPOINT=apply-pause-after=N`: after its Nth change, apply prints a line to stderr
//! and sleeps for up to 60 s.
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
