//! The self-test's shard runners: the Kubernetes Indexed Job passes kubernetes-validate and
//! gives every pod its index and one absolute start; the Ansible play passes ansible-playbook's
//! syntax check (it is run for real, against a server, in the load tests).

use crate::common;

use super::{export, syntax_check};
use common::{code, fixture, have, stderr, stdout};
use std::process::Command;

#[test]
fn the_shard_job_validates_and_every_pod_runs_its_slice_at_one_start() {
    if !have("kubernetes-validate") {
        return common::skip(
            "kubernetes-validate",
            "kubernetes-validate is not installed (pip install kubernetes-validate)",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("job.yaml");
    let root = fixture("default");
    export(&[
        "--to",
        "selftest-job",
        "--root",
        root.to_str().unwrap(),
        "--shards",
        "4",
        "--image",
        "registry.example.com/wstune:1",
        "-o",
        file.to_str().unwrap(),
        "--",
        "--url",
        "ws://10.0.0.5:9000/",
        "--conns",
        "200000",
        "--threshold",
        "echo-rate.p99 < 20ms",
    ]);
    let o = Command::new("kubernetes-validate")
        .args(["--strict", "-k", "1.37.0"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let job: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    assert_eq!(
        (spec["completions"].as_u64(), spec["parallelism"].as_u64()),
        (Some(4), Some(4))
    );
    assert_eq!(spec["backoffLimit"].as_u64(), Some(0));
    let pod = &spec["template"]["spec"];
    assert_eq!(
        pod["securityContext"]["sysctls"][0]["name"],
        "net.ipv4.ip_local_port_range"
    );
    let c = &pod["containers"][0];
    assert_eq!(c["image"], "registry.example.com/wstune:1");
    assert_eq!(
        c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    );
    let args: Vec<&str> = c["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let at = |flag: &str| args[args.iter().position(|a| *a == flag).unwrap() + 1];
    assert_eq!(at("--shard"), "$(SHARD_INDEX)/4");
    assert_eq!(at("--format"), "json");
    assert_eq!(at("--threshold"), "echo-rate.p99 < 20ms");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let start: u64 = at("--start-at").parse().unwrap();
    assert!(
        (now + 290..=now + 310).contains(&start),
        "--start-in defaults to 300 s: {start}"
    );

    let play = dir.path().join("play.yml");
    export(&[
        "--to",
        "selftest-ansible",
        "--root",
        root.to_str().unwrap(),
        "--shards",
        "3",
        "-o",
        play.to_str().unwrap(),
        "--",
        "--url",
        "ws://10.0.0.5:9000/",
    ]);
    if have("ansible-playbook") {
        syntax_check(&play);
    } else {
        common::skip(
            "ansible-playbook",
            "ansible is not installed (pip install ansible)",
        );
    }
}

#[test]
fn bad_shard_exports_are_refused_before_anything_is_written() {
    let root = fixture("default");
    let root = root.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--to", "selftest-job", "--", "--url", "ws://h:1/"],
            "give --shards N",
        ),
        (
            &[
                "--to",
                "selftest-job",
                "--shards",
                "2",
                "--",
                "--url",
                "ws://h:1/",
                "--conns",
                "x",
            ],
            "the selftest flags after -- are not valid: invalid value 'x'",
        ),
        (
            &[
                "--to",
                "selftest-ansible",
                "--shards",
                "2",
                "--",
                "--url",
                "ws://h:1/",
                "--shard",
                "0/2",
            ],
            "--shard: the export sets --shard, --start-at and --format json",
        ),
        (
            &[
                "--to",
                "selftest-job",
                "--shards",
                "4",
                "--",
                "--url",
                "ws://h:1/",
                "--conns",
                "3",
            ],
            "--conns 3 over --shards 4 leaves a shard without a connection",
        ),
        (
            &[
                "--to",
                "selftest-job",
                "--shards",
                "2",
                "--",
                "--url",
                "ws://h:1/",
                "--pid",
                "1",
            ],
            "--pid names a process of this host",
        ),
        (
            &["--to", "sysctl", "--shards", "2"],
            "belong to --to selftest-job",
        ),
        (
            &[
                "--to",
                "selftest-job",
                "--shards",
                "2",
                "--",
                "--url",
                "http://h:1/",
            ],
            "not a ws:// or wss:// URL",
        ),
    ];
    for (args, want) in cases {
        let o = common::run(&[&["export", "--root", root], *args].concat());
        assert_eq!(code(&o), 3, "{args:?}");
        assert!(
            stderr(&o).contains(want),
            "{args:?}: want '{want}' in {}",
            stderr(&o)
        );
        assert!(stdout(&o).is_empty());
    }
}
