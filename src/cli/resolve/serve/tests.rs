use super::*;
use clap::Parser;

/// `wstune serve FLAGS`, resolved as `serve` resolves it.
fn resolved(flags: &[&str]) -> ServeConfig {
    let argv = ["wstune", "serve"].iter().chain(flags);
    let args::Command::Serve(a) = args::Cli::try_parse_from(argv).unwrap().command else {
        unreachable!("parsed as serve")
    };
    let profile = crate::profile::load(&a.profile).unwrap().profile;
    config(&profile, &a).unwrap()
}

/// What a child reads back: the JSON of its environment, with the secrets beside it.
fn handed_over(c: &ServeConfig) -> ServeConfig {
    ServeConfig::from_json(&c.to_json(), c.secrets.clone()).unwrap()
}

const FLAGS: &[&str] = &[
    "--profile",
    "10k",
    "--coalesce-us",
    "300",
    "--max-message",
    "8388608",
    "--deflate",
    "--deflate-window-bits",
    "10",
    "--heartbeat-interval",
    "7",
    "--message-rate",
    "50:100",
    "--trusted-proxy",
    "192.0.2.1",
    "--origin",
    "https://app.example",
    "--backpressure-close",
    "1013",
    "--log-format",
    "json",
    "--handler",
    "cpu:100",
];

/// Resolve -> JSON -> the child's configuration: the same in every field, the settings table
/// included.
#[test]
fn the_configuration_a_child_reads_is_the_one_resolved() {
    let c = resolved(FLAGS);
    let back = handed_over(&c);
    assert_eq!(back.to_json(), c.to_json());
    assert_eq!(format!("{:?}", back.server), format!("{:?}", c.server));
    assert_eq!(back.settings, c.settings);
    assert_eq!(c.coalesce, Duration::from_micros(300));
    assert!(c.settings.contains(&(
        "wake-up coalescing us (0 = off)".into(),
        "300".into(),
        "flag".into()
    )));
}

/// A `--processes` child's configuration is what a server started directly with the flags the
/// supervisor used to pass (its port, SO_REUSEPORT, a free admin port, its share of the
/// connections, threads and memory budget) resolves to: the same settings table and server.
#[test]
fn a_supervised_process_runs_what_the_same_flags_would_resolve_to() {
    let mut parent = FLAGS.to_vec();
    parent.extend(["--processes", "3"]);
    let child = handed_over(&resolved(&parent).for_supervised_process(4000, 40, 1, 1 << 30));
    let mut direct = parent.clone();
    direct.extend([
        "--port",
        "4000",
        "--reuseport",
        "--admin",
        "127.0.0.1:0",
        "--max-connections",
        "40",
        "--workers",
        "1",
        "--memory-budget",
        "1073741824",
    ]);
    // Each process paces its share of the server's reconnect rate (40 of 10,000 connections:
    // 8 of 2,000 closes a second) and, replaced by a rolling restart, drains at the whole
    // rate; no flag of a lone server says either. The rest is the same.
    assert_eq!(child.server.drain_rate, 8);
    assert_eq!(child.replaced_drain_rate, 2000);
    let mut direct = resolved(&direct);
    direct.server.drain_rate = 8;
    direct.replaced_drain_rate = 2000;
    direct.refresh_drain_row();
    assert_eq!(child.to_json(), direct.to_json());
}

/// The self-test's child server: its app on a free loopback port as N processes, the loopback
/// sources exempt, a derived memory budget derived again for its count.
#[test]
fn a_self_test_child_runs_what_the_same_flags_would_resolve_to() {
    let child =
        handed_over(&resolved(FLAGS).for_self_test_child(embedded_server::App::Broadcast, 3, 5000));
    let mut direct: Vec<&str> = FLAGS.to_vec();
    // The parent's log flags are not the child's (its lines are read by the self-test), and
    // the simulated work is echo's.
    direct.retain(|f| !["--log-format", "json", "--handler", "cpu:100"].contains(f));
    direct.extend([
        "--bind",
        "127.0.0.1",
        "--port",
        "0",
        "--admin",
        "127.0.0.1:0",
        "--app",
        "broadcast",
        "--processes",
        "3",
        "--max-connections",
        "5000",
        "--limit-exempt",
        "127.0.0.0/8",
        "--limit-exempt",
        "::1",
    ]);
    assert_eq!(child.to_json(), resolved(&direct).to_json());
}

/// `pool --command`'s configuration is `serve --profile P` with nothing else typed.
#[test]
fn the_profiles_own_server_is_serve_with_no_flag() {
    let from_pool = profile_server_config("10k").unwrap();
    let direct = resolved(&["--profile", "10k"]).server;
    assert_eq!(format!("{from_pool:?}"), format!("{direct:?}"));
}

#[test]
fn no_secret_in_a_default_child() {
    let c = resolved(&[]);
    assert!(c.child_env().iter().all(|(k, _)| *k == ENV_CONFIG));
}
