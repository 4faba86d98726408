//! Test-only pause points, so an integration test can kill a real `wstune apply` at a known
//! step (between two changes) and prove that `rollback` recovers from the journal. Set
//! `WSTUNE_FAILPOINT=apply-pause-after=N`: after its Nth change, apply prints a line to stderr
//! and sleeps for up to 60 s. Unset (always, outside tests), it costs one environment lookup.

/// Pause here if the failpoint names this step.
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
