//! `wstune selftest`: measure a running server with the self-test pipeline
//! (`engine::selftest`): a plan sized to this host, the scenarios, the report and its verdict.

use crate::engine::selftest::{execute, finish, plan, Defaults, Load};
use crate::outcome::Outcome;
use crate::profile::Profile;
use crate::selftest::client::Target;
use crate::selftest::{report, Scenario};
use anyhow::Result;

/// `selftest`, resolved: the profile loaded, every URL parsed, `--pid` found.
pub struct Request {
    pub profile: Profile,
    pub target: Target,
    /// Where `broadcast` subscribes and publishes (`--broadcast-url`, else the target).
    pub broadcast: Target,
    /// `--subscribe-url`: the subscribers spread over these servers.
    pub subscribe: Vec<Target>,
    /// The server's processes, for their CPU and memory (summed).
    pub pids: Vec<u32>,
    /// Negotiate permessage-deflate on every connection.
    pub deflate: bool,
    /// Look at the server before the load (`--no-probe`: not), to refuse a scenario it
    /// cannot serve.
    pub probe: bool,
    pub load: Load,
}

pub fn run(r: Request) -> Result<Outcome> {
    let plan = plan(
        &r.load,
        r.target,
        r.broadcast,
        &r.profile,
        Defaults {
            machine: crate::host::Machine::live(),
            subscribe_targets: r.subscribe,
            deflate: r.deflate,
            conns: 1000,
            scenarios: vec![Scenario::EchoRate],
            secs: 10.0,
            rate: None,
            rate_note: None,
            server_processes: None,
            server_tree: false,
            deflate_conns: None,
            broadcast_server_pid: None,
            budget_cores: None,
        },
        r.pids.first().copied(),
        Vec::new(),
    )?;
    let mut plan = plan;
    plan.probe = r.probe;
    plan.opts.more_server_pids = r.pids.iter().skip(1).copied().collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (mut report, error) = rt.block_on(execute(&plan));
    report::combine(&mut report, false);
    if let Some(s) = report.shard {
        // A shard's figures are a slice: its line says so, and it exits 0 whenever it wrote its
        // report, so the engine running the shards (a Job, a play) does not retry a "failed"
        // slice alone against a server the others no longer load. `report merge` judges.
        report.verdict.summary = format!(
            "{} of a run over {} hosts, judged by wstune report merge (this slice alone: {})",
            s.label(),
            s.count,
            report.verdict.summary
        );
        return finish(&report, error, &r.load).map(|o| match o {
            Outcome::Failed | Outcome::Inconclusive | Outcome::Warnings => Outcome::Ok,
            o => o,
        });
    }
    finish(&report, error, &r.load)
}
