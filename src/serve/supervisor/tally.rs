//! What the supervisor's /metrics adds up besides the live processes: the counters of the
//! processes that are gone. A roll replaces every process and a crash restarts one; without
//! them the summed counters would fall back each time (the closes a drain sent, the messages
//! a process served), which Prometheus reads as a counter reset, so `increase()` over a roll
//! was wrong.
//!
//! Each process writes its final exposition to a file the supervisor names
//! (`WSTUNE_FINAL_METRICS`) as it exits, after its drain; the supervisor folds that file's
//! counters and histograms into the retired sum when it reaps the process. A process that
//! could not write it (killed) is folded from what the supervisor last fetched of it, so its
//! counts since that scrape are lost, and nothing else. Draining processes are still scraped,
//! so nothing they count while they drain is missing either. Every change to the set of
//! processes a scrape reads happens under the same lock as the scrape, so no scrape counts a
//! process twice (live and retired) or not at all.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;

/// The environment variable naming the file a supervised process writes its final metrics to.
pub const ENV_FINAL_METRICS: &str = "WSTUNE_FINAL_METRICS";

/// The largest final exposition read back: a process's is tens of KiB.
const FINAL_MAX: u64 = 16 << 20;

#[derive(Default)]
pub(super) struct Tally {
    /// The counters and histograms of the processes that are gone, summed.
    retired: String,
    /// Each live process's exposition as last fetched, by pid.
    last: HashMap<u32, String>,
    /// Processes a roll replaced, still draining: their pid and admin listener.
    draining: Vec<(u32, SocketAddr)>,
}

impl Tally {
    /// What the processes that are gone counted.
    pub(super) fn retired(&self) -> &str {
        &self.retired
    }

    /// The draining processes, scraped beside the slots' ones.
    pub(super) fn draining(&self) -> &[(u32, SocketAddr)] {
        &self.draining
    }

    /// A roll replaced `pid` (admin `admin`): it drains, and is scraped until it is gone.
    pub(super) fn drains(&mut self, pid: u32, admin: Option<SocketAddr>) {
        if let Some(a) = admin {
            self.draining.push((pid, a));
        }
    }

    /// What a scrape fetched of `pid`.
    pub(super) fn seen(&mut self, pid: u32, text: String) {
        self.last.insert(pid, text);
    }

    /// The counters `pid` showed at its last scrape (empty if none): what stands for it when
    /// it does not answer one.
    pub(super) fn last_counters(&self, pid: u32) -> String {
        self.last
            .get(&pid)
            .map(|t| super::metrics::counters_only(t))
            .unwrap_or_default()
    }

    /// `pid` was reaped: fold its final exposition (`final_file`, which is removed), or the
    /// one last fetched when it wrote none.
    pub(super) fn retire(&mut self, pid: u32, final_file: &Path) {
        self.draining.retain(|(p, _)| *p != pid);
        let last = self.last.remove(&pid);
        let text = read_final(final_file).or(last);
        crate::host::temp::remove(final_file);
        if let Some(t) = text {
            let kept = super::metrics::counters_only(&t);
            self.retired = super::metrics::sum(&[std::mem::take(&mut self.retired), kept]);
        }
    }
}

fn read_final(path: &Path) -> Option<String> {
    crate::host::input::read_bounded(path, FINAL_MAX, None)
        .ok()
        .filter(|s| !s.is_empty())
}

/// In a supervised process, as it exits: write `text` (its exposition) where the supervisor
/// asked, whole or not at all.
pub fn write_final(text: &str) {
    if let Some(path) = std::env::var_os(ENV_FINAL_METRICS) {
        let mode = crate::host::atomic::Mode::Exact(0o600);
        let _ = crate::host::atomic::write(Path::new(&path), text.as_bytes(), mode);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLOSES: &str = "# HELP ws_connections Open.\n# TYPE ws_connections gauge\nws_connections 3\n\
                          # HELP ws_closes_sent_total Closes.\n# TYPE ws_closes_sent_total counter\n\
                          ws_closes_sent_total{code=\"1012\"} 10\n";

    /// A process that wrote its final counts is folded from them; one killed before it could
    /// is folded from the last scrape; a draining one leaves the list when it is reaped.
    #[test]
    fn gone_processes_are_folded_from_their_final_file_else_the_last_scrape() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = Tally::default();
        let f1 = dir.path().join("1.prom");
        std::fs::write(&f1, CLOSES.replace("} 10", "} 254")).unwrap();
        t.seen(1, CLOSES.to_string());
        t.drains(1, Some("127.0.0.1:9".parse().unwrap()));
        t.retire(1, &f1);
        assert!(!f1.exists());
        assert!(t.draining().is_empty());
        assert!(t
            .retired()
            .contains("ws_closes_sent_total{code=\"1012\"} 254\n"));
        assert!(!t.retired().contains("ws_connections"));
        t.seen(2, CLOSES.to_string());
        t.retire(2, &dir.path().join("2.prom"));
        assert!(
            t.retired()
                .contains("ws_closes_sent_total{code=\"1012\"} 264\n"),
            "{}",
            t.retired()
        );
        // Reaped twice (it cannot be), or never scraped: nothing more is added.
        t.retire(2, &dir.path().join("2.prom"));
        assert!(t.retired().contains("} 264\n"));
    }
}
