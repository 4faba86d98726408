//! The receive softirq's budget in the NIC sysctl file.

use crate::apply::nic::tests::*;
use crate::apply::nic::*;

/// time_squeeze that grew doubles both budgets (never lowering a higher one), now and in
/// the NIC sysctl file beside RFS's line; without it nothing is planned.
#[test]
fn the_receive_budget_is_doubled_only_when_time_squeeze_grew() {
    let profile = NicProfile::default();
    let nics = [veth(1, 1, 4)];
    let quiet = measured("softnet drops +9 in 4 s");
    let p = plan(&inputs(&profile, &nics, false, &quiet));
    assert!(
        !p.actions
            .iter()
            .any(|a| a.setting.starts_with("net.core.netdev_budget")),
        "{p:?}"
    );
    let mut e = measured("softnet time_squeeze +40 in 4 s");
    e.squeezed = Some("softnet time_squeeze +40 in 4 s".into());
    let mut i = inputs(&profile, &nics, false, &e);
    i.nic_sysctl_now =
        "# mine\nnet.core.rps_sock_flow_entries = 32768\nnet.core.netdev_budget = 400\n";
    i.budget = (Some(300), Some(8000));
    let p = plan(&i);
    let runtime: Vec<(&str, &str)> = p
        .actions
        .iter()
        .filter_map(|a| match &a.op {
            Op::Sysctl { key, value } if key.contains("netdev_budget") => {
                Some((key.as_str(), value.as_str()))
            }
            _ => None,
        })
        .collect();
    // usecs is already above twice its default: left as it is.
    assert_eq!(runtime, [("net.core.netdev_budget", "600")]);
    let file = &p
        .files
        .iter()
        .find(|(f, _)| f == NIC_SYSCTL_FILE)
        .unwrap()
        .1;
    assert!(file.starts_with(NIC_SYSCTL_HEAD), "{file}");
    assert_eq!(
        file.strip_prefix(NIC_SYSCTL_HEAD),
        // Each key's line replaced where it is, every other line kept in its place.
        Some("# mine\nnet.core.rps_sock_flow_entries = 32768\nnet.core.netdev_budget = 600\n"),
        "{file}"
    );
    assert_eq!(file.matches("netdev_budget =").count(), 1, "{file}");
    assert!(
        p.notes.iter().any(|n| n.contains("time_squeeze +40")),
        "{:?}",
        p.notes
    );
}

/// sysctl.d's `-key = value` form (a key that may be missing) is the same key: the operator's
/// `-net.core.netdev_budget = 400` got a second line for the key appended after it. Its line is
/// replaced in place now, keeping the `-`.
#[test]
fn a_budget_line_with_sysctl_d_optional_prefix_is_replaced_not_doubled() {
    let profile = NicProfile::default();
    let nics = [veth(1, 1, 4)];
    let mut e = measured("softnet time_squeeze +40 in 4 s");
    e.squeezed = Some("softnet time_squeeze +40 in 4 s".into());
    let mut i = inputs(&profile, &nics, false, &e);
    i.nic_sysctl_now =
        "# mine\n-net.core.netdev_budget = 400\n -net.core.netdev_budget_usecs=2000\n";
    i.budget = (Some(300), Some(2000));
    let p = plan(&i);
    let file = &p
        .files
        .iter()
        .find(|(f, _)| f == NIC_SYSCTL_FILE)
        .unwrap()
        .1;
    let body = file.strip_prefix(NIC_SYSCTL_HEAD).unwrap();
    assert!(
        body.starts_with(
            "# mine\n-net.core.netdev_budget = 600\n-net.core.netdev_budget_usecs = 4000\n"
        ),
        "{file}"
    );
    assert_eq!(file.matches("netdev_budget =").count(), 1, "{file}");
    assert_eq!(file.matches("netdev_budget_usecs").count(), 1, "{file}");
}
