//! Test-only pause points, so an integration test can kill a real `wstune apply` at a known
//! step and prove that the journal recovers from it. `WSTUNE_FAILPOINT` names one:
//!
//! - `apply-pause-after=N`: at step N apply prints a line to stderr and sleeps for up to 60 s.
//!   Step 0 is after the journal entry is saved and before the first change; steps 1..=A
//!   follow each of the A actions (sysctls, limits), A+1..=A+F each of the F files written,
//!   and A+F+1 the journal commit (tests/commands/apply_killed.rs kills apply at every one).
//! - `write-pause-at=N`: inside the Nth file write of the process (counted from 1: journal
//!   entries, wstune's own files, a captured tree's values), after its new bytes are written
//!   and before they take the old ones' place (the atomic writer: the temporary file synced,
//!   not yet renamed), so a kill there is a kill in the middle of a write.
//!
//! Compiled in only with the `failpoints` feature, which only the test build enables (a
//! dev-dependency of the crate on itself): a release binary ignores the variable entirely, so a
//! stray environment cannot pause a production apply.

/// The number `WSTUNE_FAILPOINT=NAME=N` gives, when it names `name`.
#[cfg(feature = "failpoints")]
fn wanted(name: &str) -> Option<usize> {
    let spec = std::env::var("WSTUNE_FAILPOINT").ok()?;
    spec.strip_prefix(name)?.strip_prefix('=')?.parse().ok()
}

#[cfg(feature = "failpoints")]
fn pause(what: String) {
    eprintln!("wstune: failpoint: paused {what}");
    std::thread::sleep(std::time::Duration::from_secs(60));
}

/// Pause here if the failpoint names this step.
#[cfg(feature = "failpoints")]
pub fn pause_after_action(done: usize) {
    if wanted("apply-pause-after") == Some(done) {
        pause(format!("after action {done}"));
    }
}

/// Pause if the failpoint names this write (the count of calls so far, this one included).
#[cfg(feature = "failpoints")]
pub fn pause_in_write() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static WRITES: AtomicUsize = AtomicUsize::new(0);
    let n = WRITES.fetch_add(1, Ordering::SeqCst) + 1;
    if wanted("write-pause-at") == Some(n) {
        pause(format!("in write {n}"));
    }
}

/// Without the feature: nothing, not even the environment lookup.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn pause_after_action(_done: usize) {}

/// Without the feature: nothing.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn pause_in_write() {}
