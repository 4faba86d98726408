//! `wstune report merge`: the JSON reports of a run's shards (`selftest --shard I/N` on
//! several hosts) combined into one report and judged as one run, with the same outputs
//! (table or JSON, `--report` HTML) and exit codes as `selftest`. `wstune report watch`: a
//! recording of `watch --record` as one HTML page.

use crate::engine::selftest::{finish, Load};
use crate::outcome::Outcome;
use crate::selftest::report::{self, Judging, Report, ShardReport};
use anyhow::{bail, Result};
use std::path::PathBuf;

/// A report of a million-connection run is a few hundred KB; 64 MiB is far past any real one
/// and keeps a wrong file (a disk image) from being read into memory.
const MAX_REPORT_BYTES: u64 = 64 << 20;

pub struct MergeRequest {
    pub files: Vec<PathBuf>,
    /// Merge what there is when shards are missing (the verdict is then NOT PROVEN).
    pub partial: bool,
    /// How the merged run is judged, and where it is written (`format`, `report`).
    pub load: Load,
}

pub fn merge(r: MergeRequest) -> Result<Outcome> {
    let mut inputs = Vec::new();
    for f in &r.files {
        let text = crate::host::input::read_bounded(f, MAX_REPORT_BYTES, None)
            .map_err(|e| anyhow::anyhow!("{}: {}", f.display(), e.words()))?;
        let report: Report = report::parse(&text).map_err(|e| {
            anyhow::anyhow!(
                "{}: not a self-test JSON report ({e}); give the output of `wstune selftest \
                 --shard I/N --format json`",
                f.display()
            )
        })?;
        inputs.push(ShardReport {
            name: f.display().to_string(),
            report,
        });
    }
    if inputs.is_empty() {
        bail!("give the shards' JSON reports to merge");
    }
    let mut merged = report::merge_shards(inputs, r.partial).map_err(anyhow::Error::msg)?;
    let judging = Judging {
        accept_noise: r.load.accept_noise,
        thresholds: r.load.thresholds.clone(),
        no_default_checks: r.load.no_default_checks,
    };
    merged.verdict = report::verdict(&merged.scenarios, &merged.targets, &judging);
    report::combine(&mut merged, false);
    let from = merged.merged_from.clone().expect("a merged report");
    let missing = from.count - from.shards.len();
    let v = &mut merged.verdict;
    if missing > 0 {
        // A run with shards missing was not run at its size: never a PASS.
        let miss = v.checks.iter().any(|c| c.judged && !c.ok);
        v.pass = false;
        v.load_pass = false;
        v.inconclusive = !miss;
        if !miss {
            // What could not be judged, where every writer (the page, Prometheus) looks.
            v.unmeasured.push(format!(
                "{missing} of {} shards' reports missing (merged with --partial)",
                from.count
            ));
        }
        v.summary = format!(
            "{}: {missing} of {} shards missing (merged with --partial); {}",
            if miss { "MISS" } else { "NOT PROVEN" },
            from.count,
            v.summary
        );
    }
    v.summary = format!(
        "{} (merged from {} of {} shards, started within {} ms)",
        v.summary,
        from.shards.len(),
        from.count,
        from.start_skew_ms
    );
    finish(&merged, None, &r.load)
}

/// A recording holds a frame per interval (a day at one second is some 100 MB); 512 MiB is
/// past any real one and keeps a wrong file (a disk image) from being read into memory.
const MAX_RECORDING_BYTES: u64 = 512 << 20;

pub struct WatchRequest {
    pub file: PathBuf,
    /// None: standard output.
    pub output: Option<PathBuf>,
}

pub fn watch(r: WatchRequest) -> Result<Outcome> {
    let f = r.file.display();
    let text =
        crate::host::input::read_bounded(&r.file, MAX_RECORDING_BYTES, None).map_err(|e| {
            anyhow::anyhow!(
                "{f}: {}; give a file that `wstune watch --record FILE` wrote",
                e.words()
            )
        })?;
    let rec = crate::watch::record::parse(&text).map_err(|e| anyhow::anyhow!("{f}: {e}"))?;
    if rec.frames.is_empty() {
        bail!(
            "{f}: the recording has no whole frame{} (the watch stopped before its first \
             interval ended); record at least one interval, e.g. `wstune watch --plain --count 5 \
             --record FILE`",
            if rec.truncated {
                ", only a line cut short"
            } else {
                ""
            }
        );
    }
    let page = crate::report::watch::watch_page(&rec, &f.to_string());
    crate::output::emit(r.output.as_deref(), &page)?;
    if let Some(out) = &r.output {
        let fired = crate::watch::timeline::Timeline::of(&rec.frames)
            .advice
            .len();
        eprintln!(
            "wrote {}: {} frames, {} piece{} of advice{}",
            out.display(),
            rec.frames.len(),
            fired,
            if fired == 1 { "" } else { "s" },
            if rec.truncated {
                "; the recording's last line was cut short and is left out"
            } else {
                ""
            }
        );
    }
    Ok(Outcome::Ok)
}
