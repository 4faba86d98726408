//! The load generator behind `wstune selftest` and `wstune serve --self-test`.
//!
//! The orchestrator (`run`) sizes the run to the host's limits ([`sizing`]), starts one
//! generator process per share of the connections (`wstune selftest-worker`, [`worker`]), starts
//! them together, follows their progress, merges their HDR histograms and counters, samples the
//! server's CPU and memory from /proc, and hands a [`ScenarioReport`] per scenario to
//! [`report`] for the table, JSON, HTML and the verdict.
//!
//! Beside this file: the workloads (`scenario`), what the orchestrator and its generator
//! processes say to each other (`protocol`), the figures a scenario produces (`results`), the
//! kernel and process figures read from /proc (`sampling`), the run itself (`run`) and the
//! workers' results added up (`merge`).

pub mod arrivals;
pub mod budget;
pub mod client;
pub mod command;
pub mod host_watch;
pub mod noise;
pub mod probe;
pub mod report;
pub mod restart;
pub mod script;
pub mod server;
pub mod shard;
pub mod sizing;
pub mod slot;
pub mod threshold;
pub mod tls;
pub mod worker;

mod figures;
pub(crate) mod histo;
mod merge;
mod own;
mod plan;
mod protocol;
mod publisher;
mod refusal;
mod results;
mod run;
mod sampling;
mod scenario;

pub use own::{OwnCounts, OwnFigures};
pub use plan::RunPlan;
pub use protocol::{Event, StepResult, TlsCounts, WorkerResult, WorkerSpec};
pub use refusal::Refusal;
pub use results::{
    Attempt, Histograms, Latency, ProcFigures, ScenarioReport, StepReport, TimelinePoint, TlsReport,
};
pub use run::{run_scenario, target_url};
pub use sampling::{
    kernel_sample, peak_rss, quiesce, sample, KernelDrops, KernelMemory, KernelSample,
};
pub use scenario::{storm_budget_secs, Scenario, STORM_BUDGET_PER_SEC, STORM_BUDGET_SECS};
