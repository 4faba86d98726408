//! What a verdict covers, for the page and the Prometheus file: the load alone (`selftest`
//! against a server of its own) or the load and the host (`serve --self-test`), at how many
//! connections against the profile's. Read from the verdict's own fields, so a run that is no
//! proof for its profile can never be shown as a plain PASS by a writer that forgot to look.

use super::{count, Report};

/// Where the run stands, as a reader should see it first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Everything judged passed, at the profile's full connection count.
    Pass,
    /// The load passed, but at fewer connections than the profile's (`selftest --conns 500`):
    /// the exit code's pass, not a proof for the profile.
    PassBelowProfile,
    /// Could not be judged: the host was too noisy, or everything passed but below the
    /// profile's size where the host is part of the verdict.
    NotProven,
    Miss,
    /// The run stopped before its last scenario (exit 2): what ran is shown, nothing is proven.
    Stopped,
    /// Nothing ran: a scenario cannot work against the server found (exit 3).
    Refused,
}

/// The verdict's reach, computed once for every writer.
#[derive(Debug, Clone)]
pub struct Scope {
    pub standing: Standing,
    /// The host check is part of the verdict (`serve --self-test`).
    pub with_host: bool,
    /// The smallest connection count any scenario ran with: what the verdict can vouch for.
    pub conns: usize,
    pub profile: String,
    pub profile_conns: usize,
    pub full_size: bool,
    /// Where the figures came from when not from one generator: a shard of a run over several
    /// hosts, or the merge of such shards.
    pub shards: Option<String>,
}

impl Scope {
    /// `stopped`: the error that ended the run before its last scenario, if one did.
    pub fn of(r: &Report, stopped: Option<&str>) -> Scope {
        let v = &r.verdict;
        let undecided = v.undecided();
        let standing = if !r.refused.is_empty() {
            Standing::Refused
        } else if stopped.is_some() {
            Standing::Stopped
        } else if v.pass {
            if v.full_size {
                Standing::Pass
            } else {
                Standing::PassBelowProfile
            }
        } else if match v.host_pass {
            // As `combine` words it: with the host in the verdict, a clean host and a load
            // that passed below size (or could not be judged) is NOT PROVEN.
            Some(host_ok) => host_ok && (v.load_pass || undecided),
            None => undecided,
        } {
            Standing::NotProven
        } else {
            Standing::Miss
        };
        let conns = r.smallest_conns();
        Scope {
            standing,
            with_host: v.host_pass.is_some(),
            conns,
            profile: r.targets.profile.clone(),
            profile_conns: r.targets.connections,
            full_size: v.full_size,
            shards: match (&r.shard, &r.merged_from) {
                (Some(s), _) => Some(format!(
                    "Figures of {} alone, one slice of a run over {} hosts: `wstune report \
                     merge` judges the run.",
                    s.label(),
                    s.count
                )),
                (None, Some(m)) => Some(format!(
                    "Merged from {} of {} generator hosts' shards, started within {} ms.",
                    m.shards.len(),
                    m.count,
                    m.start_skew_ms
                )),
                (None, None) => None,
            },
        }
    }

    /// The headline word: never a bare PASS for a run below the profile's size.
    pub fn headline(&self) -> String {
        match self.standing {
            Standing::Pass => "PASS".into(),
            Standing::PassBelowProfile => format!("PASS at {} connections", count(self.conns)),
            Standing::NotProven => "NOT PROVEN".into(),
            Standing::Miss => "MISS".into(),
            Standing::Stopped => "MISS: the run stopped early".into(),
            Standing::Refused => "NOT RUN: the server cannot serve a scenario asked for".into(),
        }
    }

    /// What the verdict covers, in one sentence.
    pub fn sentence(&self) -> String {
        let what = if self.with_host {
            "the load and this host's settings (serve --self-test)"
        } else {
            "the load only (selftest against a running server; the host's settings were not \
             checked)"
        };
        let size = if self.full_size {
            format!(
                "at {} connections, profile {}'s full count",
                count(self.conns),
                self.profile
            )
        } else {
            format!(
                "at {} of profile {}'s {} connections: not a proof for profile {}",
                count(self.conns),
                self.profile,
                count(self.profile_conns),
                self.profile
            )
        };
        match &self.shards {
            Some(s) => format!("Covers {what}, {size}. {s}"),
            None => format!("Covers {what}, {size}."),
        }
    }

    /// The `verdict` label: the exit code's verdict (`full_size` says whether it is a proof).
    pub fn verdict_label(&self) -> &'static str {
        match self.standing {
            Standing::Pass | Standing::PassBelowProfile => "pass",
            Standing::NotProven => "not_proven",
            Standing::Miss | Standing::Stopped => "miss",
            Standing::Refused => "not_run",
        }
    }

    /// The `scope` label: `load` or `load_and_host`.
    pub fn scope_label(&self) -> &'static str {
        if self.with_host {
            "load_and_host"
        } else {
            "load"
        }
    }
}
