//! A self-test spread over several generator hosts, in the form of the engines operators
//! already run: a Kubernetes Indexed Job (one pod per shard) and an Ansible play (one
//! inventory host per shard). Each runs `wstune selftest --shard I/N --start-at T` with the
//! same flags, collects the JSON reports, and `wstune report merge` makes one verdict of them.
//! wstune brings no coordinator of its own: the shards agree on the start by the wall clock.

use super::{kube_class, yq, Export, Kube, Scope};

/// The port range a generator pod sets: every port above the privileged ones, since a
/// generator listens on none of them. One pod holds `--src-ips` addresses' worth of
/// connections to one server address at 80 % of 64,512 ports each.
const GENERATOR_PORTS: &str = "1024 65535";

/// What the shards run: the count, the image (Kubernetes), the `selftest` flags every shard
/// shares, and the start time every shard waits for.
#[derive(Debug, Clone)]
pub struct ShardRun {
    pub count: usize,
    pub image: String,
    /// The `selftest` flags, checked by the caller (no --shard, --start-at or --format).
    pub args: Vec<String>,
    /// Kubernetes: the start rendered as an absolute time (Unix seconds), `start_in` after
    /// the export was written. Ansible computes its own when the play runs.
    pub start_at: u64,
    pub start_in: u64,
}

/// A `batch/v1` Job in Indexed completion mode: pod `I` runs shard `I/N`, every pod the same
/// absolute `--start-at`, the report on standard output (the pod's log).
pub fn job(e: &Export, r: &ShardRun) -> String {
    let mut s = header(e, "selftest-job", r);
    s.push_str(&format!(
        "# The pods wait for --start-at {start} (Unix time, {start_in} s after this file was written):\n\
         # apply it well before then, or write it again. Every pod connects first, then starts its load\n\
         # at that instant; the nodes' clocks must agree (NTP, chrony).\n\
         # Collect the reports when the Job completes, then merge them into one verdict:\n\
         #   for i in $(seq 0 {last}); do\n\
         #     kubectl logs -l job-name=wstune-selftest,batch.kubernetes.io/job-completion-index=$i > shard-$i.json\n\
         #   done\n\
         #   wstune report merge shard-*.json --report run.html\n\
         # (report merge reads a pod log: lines before the report's first line are skipped.)\n\
         # A server with per-address abuse limits counts every generator pod's address: exempt the\n\
         # generators' range on it (wstune serve --limit-exempt CIDR).\n",
        start = r.start_at,
        start_in = r.start_in,
        last = r.count - 1,
    ));
    s.push_str(&format!(
        "apiVersion: batch/v1
kind: Job
metadata:
  name: wstune-selftest
  labels:
    app.kubernetes.io/name: wstune-selftest
  annotations:
    wstune.dev/profile: {profile}
spec:
  completionMode: Indexed
  completions: {n}
  parallelism: {n}
  # A shard run again alone would load the server without the others: never retried.
  backoffLimit: 0
  template:
    metadata:
      labels:
        app.kubernetes.io/name: wstune-selftest
    spec:
      restartPolicy: Never
",
        profile = yq(&e.profile),
        n = r.count,
    ));
    // A pod's network namespace starts at the kernel's default port range (32768-60999,
    // 28,232 ports): a generator needs the widest, and the key is on the kubelet's safe list.
    s.push_str(&format!(
        "      securityContext:
        sysctls:
          - name: net.ipv4.ip_local_port_range  # {}
            value: \"{GENERATOR_PORTS}\"
",
        match kube_class("net.ipv4.ip_local_port_range", Scope::Netns) {
            Kube::Safe => "safe",
            _ => "unsafe: needs --allowed-unsafe-sysctls",
        }
    ));
    s.push_str(&format!(
        "      containers:
        - name: shard
          image: {image}
          env:
            - name: SHARD_INDEX
              valueFrom:
                fieldRef:
                  fieldPath: metadata.annotations['batch.kubernetes.io/job-completion-index']
          command:
            - wstune
          args:
",
        image = yq(&r.image)
    ));
    let mut args: Vec<String> = vec!["selftest".into()];
    args.extend(r.args.iter().cloned());
    args.extend([
        "--shard".into(),
        format!("$(SHARD_INDEX)/{}", r.count),
        "--start-at".into(),
        r.start_at.to_string(),
        "--format".into(),
        "json".into(),
    ]);
    for a in &args {
        s.push_str(&format!("            - {}\n", yq(a)));
    }
    s
}

/// A play over the `wstune_generators` group (one host per shard, in inventory order): the
/// controller picks one start time, every host runs its shard, the reports come back to the
/// controller, which merges them.
pub fn play(e: &Export, r: &ShardRun) -> String {
    let mut s = header(e, "selftest-ansible", r);
    s.push_str(
        "# Run with forks at least the number of generators, so every shard starts its connections\n\
         # at once (each waits for the same --start-at, so a late host only shortens its own wait):\n\
         #   ansible-playbook -i inventory -f 64 wstune-selftest.yml\n\
         # The generators' clocks must agree (NTP, chrony). wstune must be on each host's PATH (or\n\
         # set wstune_bin), and on the controller for the merge. The merged report is\n\
         # wstune-reports/merged.json (and merged.html) beside this play.\n",
    );
    let mut args = String::new();
    for a in &r.args {
        args.push_str(&format!("      - {}\n", yq(a)));
    }
    s.push_str(&format!(
        "- name: wstune self-test, one shard per generator host
  hosts: \"{{{{ wstune_hosts | default('wstune_generators') }}}}\"
  gather_facts: false
  vars:
    wstune_bin: wstune
    # Seconds between the controller choosing the start and the load starting: room for every
    # host to connect its share.
    wstune_start_in: {start_in}
    wstune_reports: \"{{{{ playbook_dir }}}}/wstune-reports\"
    wstune_index: \"{{{{ ansible_play_hosts_all.index(inventory_hostname) }}}}\"
    wstune_shard_file: \"/tmp/wstune-shard-{{{{ wstune_index }}}}.json\"
    wstune_selftest_args:
{args}  tasks:
    - name: Agree on one start time (the controller's clock)
      ansible.builtin.set_fact:
        wstune_start_at: \"{{{{ (lookup('ansible.builtin.pipe', 'date +%s') | int) + (wstune_start_in | int) }}}}\"
      run_once: true

    - name: An empty report directory on the controller (no shard of an earlier run merged in)
      ansible.builtin.file:
        path: \"{{{{ wstune_reports }}}}\"
        state: \"{{{{ item }}}}\"
        mode: \"0755\"
      loop: [absent, directory]
      delegate_to: localhost
      run_once: true

    - name: Run this host's shard of the load (its JSON report into a file)
      ansible.builtin.shell:
        cmd: >-
          {{{{ ([wstune_bin, 'selftest'] + wstune_selftest_args
          + ['--shard', wstune_index ~ '/' ~ (ansible_play_hosts_all | length),
          '--start-at', wstune_start_at | string, '--format', 'json'])
          | map('quote') | join(' ') }}}} > {{{{ wstune_shard_file | quote }}}}
      changed_when: false

    - name: Bring the reports to the controller
      ansible.builtin.fetch:
        src: \"{{{{ wstune_shard_file }}}}\"
        dest: \"{{{{ wstune_reports }}}}/shard-{{{{ wstune_index }}}}.json\"
        flat: true

    - name: Merge the shards into one report and verdict
      ansible.builtin.shell:
        cmd: >-
          {{{{ wstune_bin | quote }}}} report merge --format json
          --report {{{{ (wstune_reports ~ '/merged.html') | quote }}}}
          {{{{ wstune_reports | quote }}}}/shard-*.json > {{{{ (wstune_reports ~ '/merged.json') | quote }}}}
      register: wstune_merged
      delegate_to: localhost
      run_once: true
      changed_when: false
      # 2 (a check missed) and 4 (not proven) are verdicts, shown below; 3 is an error.
      failed_when: wstune_merged.rc not in [0, 2, 4]

    - name: The verdict
      ansible.builtin.debug:
        msg: \"{{{{ (lookup('ansible.builtin.file', wstune_reports ~ '/merged.json') | from_json).verdict.summary }}}}\"
      run_once: true
",
        start_in = r.start_in,
    ));
    s
}

fn header(e: &Export, format: &str, r: &ShardRun) -> String {
    let s = format!(
        "# Generated by `wstune export --profile {} --to {format} --shards {}`: a self-test of one\n\
         # server from {} generator hosts, merged into one verdict (wstune report merge).\n\
         # selftest flags: {}\n",
        e.profile,
        r.count,
        r.count,
        r.args.join(" ")
    );
    s
}
