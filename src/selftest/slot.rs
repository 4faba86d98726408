//! When each scenario of a sharded run starts: the slot every shard computes alike from the
//! plan, and the wait for it. Beside `shard` (the slice itself) rather than in it, because the
//! slot reads the plan and the plan holds the shard.

use super::plan::{RunPlan, CLOSE_GRACE};
use super::scenario::CLOSES_PER_SEC;
use super::shard::{unix_ms, Shard};
use super::{storm_budget_secs, Scenario};
use std::time::Duration;

/// A shard's connections are open: wait for its scenario's wall-clock start, so every shard's
/// load runs at once. A shard that is ready only after it is marked incomplete (its load
/// overlapped the others' only in part), never silently out of step.
pub(super) async fn wait_for_slot(sh: &Shard, o: &RunPlan, scenario: Scenario) -> Option<String> {
    let k = o.scenarios.iter().position(|s| *s == scenario).unwrap_or(0);
    let at = sh.start_of(k);
    let now = unix_ms();
    if now > at + 1000 {
        return Some(format!(
            "{} was ready {:.1} s after its start time (its connections took longer than the \
             others' load): give --start-at later, or fewer connections per shard",
            sh.label(),
            (now - at) as f64 / 1000.0
        ));
    }
    tokio::time::sleep(Duration::from_millis(at.saturating_sub(now))).await;
    None
}

/// Seconds between two scenarios' starts in a sharded run: the longest any scenario of the
/// plan can take to connect, warm up, run, close and settle, computed from what every shard
/// is given alike (the run's total connections, not this shard's share), so all shards agree.
pub fn slot_secs(o: &RunPlan, total_conns: usize) -> f64 {
    let connect = 30.0
        + (total_conns / 2000) as f64
        + if o.ramp_per_sec > 0.0 {
            total_conns as f64 / o.ramp_per_sec
        } else {
            0.0
        };
    let run = o
        .scenarios
        .iter()
        .map(|&s| {
            let body = if s.lasts_until_done() {
                storm_budget_secs(total_conns, o.secs)
            } else {
                o.secs + o.warmup_for(s) + o.secs / (o.rounds as f64 + 1.0)
            };
            body + total_conns as f64 / CLOSES_PER_SEC
        })
        .fold(0.0, f64::max);
    // The quiesce before the window (at most 10 s), the close grace, and the next scenario's
    // settling (at most 20 s), rounded up to whole seconds.
    (connect + 10.0 + run + CLOSE_GRACE.as_secs_f64() + 20.0).ceil()
}
