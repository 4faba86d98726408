//! `export`, resolved: the host's settings computed as for apply, in the form asked for, and a
//! sharded self-test's flags checked here rather than on every generator host.

use super::*;

pub fn export(a: &ExportArgs) -> Result<cmd::export::Request> {
    let backend = backend(a.root.as_deref(), None)?;
    let t = Target {
        profile: a.profile.clone(),
        catalog: a.catalog.clone(),
        role: a.role,
        ..Target::default()
    };
    let inputs = check::inputs(&t, backend.as_ref())?;
    if inputs.catalog.platform != crate::host::Platform::Linux {
        bail!(
            "export writes Linux settings; {} is not a Linux host (use `wstune apply` on Windows)",
            backend.describe().source
        );
    }
    if a.unit.is_empty() || a.unit.contains('/') {
        bail!(
            "--unit '{}': not a systemd unit name; pass e.g. --unit myserver.service",
            a.unit
        );
    }
    if !a.nics.is_empty() && !matches!(a.to, ExportFormat::Nic | ExportFormat::Ansible) {
        bail!("--nic renders a NIC's boot files, which only --to nic and --to ansible carry: drop --nic, or pass --to nic");
    }
    Ok(cmd::export::Request {
        host: HostInputs { inputs, backend },
        to: a.to,
        nics: a.nics.clone(),
        unit: a.unit.clone(),
        output: a.output.clone(),
        shards: shard_run(a)?,
        image: a.image.clone(),
    })
}

/// The shards' run of `--to selftest-job|selftest-ansible`: the selftest flags parsed as
/// `wstune selftest` would, so a typo fails here and not in fifty pods.
fn shard_run(a: &ExportArgs) -> Result<Option<crate::export::shards::ShardRun>> {
    let wants = matches!(
        a.to,
        ExportFormat::SelftestJob | ExportFormat::SelftestAnsible
    );
    if !wants {
        if a.shards.is_some() || !a.selftest_args.is_empty() {
            bail!("--shards and selftest flags after -- belong to --to selftest-job or selftest-ansible");
        }
        return Ok(None);
    }
    let count = match a.shards {
        Some(n) if (1..=1024).contains(&n) => n,
        Some(n) => bail!("--shards {n}: give 1..=1024 generator hosts"),
        None => bail!(
            "--to {}: give --shards N, the number of generator hosts",
            if a.to == ExportFormat::SelftestJob {
                "selftest-job"
            } else {
                "selftest-ansible"
            }
        ),
    };
    if let Some(f) = a.selftest_args.iter().find(|f| {
        ["--shard", "--start-at", "--format", "-f"]
            .iter()
            .any(|n| *f == *n || f.starts_with(&format!("{n}=")))
    }) {
        bail!("{f}: the export sets --shard, --start-at and --format json for each shard; leave it out of the selftest flags");
    }
    let argv = ["wstune", "selftest"]
        .into_iter()
        .map(String::from)
        .chain(a.selftest_args.iter().cloned());
    use clap::Parser as _;
    match args::Cli::try_parse_from(argv) {
        Ok(cli) => {
            if let args::Command::Selftest(s) = cli.command {
                if !s.pid.is_empty() {
                    bail!("--pid names a process of this host, not of the generator hosts: leave it out of the shards' flags");
                }
                if s.load.conns.is_some_and(|c| c < count) {
                    bail!("--conns {} over --shards {count} leaves a shard without a connection; give at least one per shard", s.load.conns.unwrap_or(0));
                }
                // Resolved too (profile, URLs, thresholds), as each shard will.
                selftest(&s)?;
            }
        }
        Err(e) => bail!(
            "the selftest flags after -- are not valid: {}",
            e.to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: ")
        ),
    }
    if !(10..=86_400).contains(&a.start_in) {
        bail!("--start-in {}: give 10..=86400 seconds", a.start_in);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Ok(Some(crate::export::shards::ShardRun {
        count,
        image: a.image.clone(),
        args: a.selftest_args.clone(),
        start_at: now + a.start_in,
        start_in: a.start_in,
    }))
}
