use super::*;
use crate::value::Value;

/// The built-in profile `EMBEDDED[i]` as one whole file: every key on its own line, for tests
/// that change one value of a profile.
fn full(i: usize) -> String {
    written_out(EMBEDDED[i].0).expect("a built-in profile")
}

#[test]
fn every_embedded_profile_is_valid_and_named_after_its_file() {
    for (name, text) in EMBEDDED {
        let p = parse(text, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(&p.name, name);
        assert!(
            p.linux.nofile >= 2 * p.connections,
            "{name}: the guide's nofile rule"
        );
        assert!(p.linux.somaxconn >= 4096, "{name}");
    }
}

#[test]
fn profiles_grow_with_connections() {
    let ps: Vec<Profile> = EMBEDDED.iter().map(|(n, t)| parse(t, n).unwrap()).collect();
    for w in ps.windows(2) {
        assert!(w[0].connections < w[1].connections);
        assert!(w[0].linux.somaxconn <= w[1].linux.somaxconn);
        assert!(
            w[0].server.deflate.window_bits >= w[1].server.deflate.window_bits,
            "bigger profiles save deflate memory"
        );
    }
}

#[test]
fn the_channels_block_is_optional_and_partial_and_checks_its_keys() {
    let base = &full(0);
    assert!(parse(base, "p.yaml").unwrap().server.channels.is_default());
    let with = |block: &str| {
        base.replace(
            "  send_queue_bytes:",
            &format!("  channels:\n{block}\n  send_queue_bytes:"),
        )
    };
    let p = parse(
        &with("    auth:\n      secret_file: /etc/wstune/jwt\n    max_subscriptions: 8"),
        "p.yaml",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.server.channels.auth.secret_file, "/etc/wstune/jwt");
    assert_eq!(p.server.channels.max_subscriptions, 8);
    assert_eq!(p.server.channels.api_key_file, "", "absent keys default");
    let err = parse(&with("    api_key: hunter2"), "p.yaml").unwrap_err();
    assert!(err.to_string().contains("api_key"), "{err}");
    let p = parse(
        &with("    history:\n      size: 50\n      ttl_secs: 60"),
        "p.yaml",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let h = &p.server.channels.history;
    assert_eq!((h.size, h.ttl_secs, h.max_bytes), (50, 60, 0));
    let err = parse(&with("    history:\n      sise: 50"), "p.yaml").unwrap_err();
    assert!(err.to_string().contains("sise"), "{err}");
}

#[test]
fn the_limits_block_is_optional_and_its_bad_values_have_lines() {
    let base = &full(0);
    assert!(parse(base, "p.yaml").unwrap().server.limits.is_default());
    let with = |block: &str| {
        base.replace(
            "  send_queue_bytes:",
            &format!("  limits:\n{block}\n  send_queue_bytes:"),
        )
    };
    let p = parse(
        &with("    max_connections_per_ip: 100\n    message_rate: 50\n    exempt: [10.0.0.0/8]"),
        "p.yaml",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.server.limits.max_connections_per_ip, 100);
    assert_eq!(
        p.server.limits.message_rate_close, 1008,
        "default close code"
    );
    let text = with("    message_rate_close: 1000\n    trusted_proxies: [10.0.0.0/33]");
    let err = parse(&text, "p.yaml").unwrap_err();
    let ProfileError::Invalid(problems) = &err else {
        panic!("{err}")
    };
    let msgs: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    let line = |k| yaml_lines::line_of(&text, k).unwrap();
    assert!(
        msgs.iter().any(|m| m.starts_with(&format!(
            "p.yaml:{}: server.limits.message_rate_close: 1000 is not allowed; use 1008",
            line("server.limits.message_rate_close")
        ))),
        "{msgs:?}"
    );
    assert!(
        msgs.iter().any(|m| m.contains(&format!(
            "p.yaml:{}: server.limits.trusted_proxies: '10.0.0.0/33' is not an address",
            line("server.limits.trusted_proxies")
        ))),
        "{msgs:?}"
    );
    let typo = parse(&with("    max_conns_per_ip: 1"), "p.yaml")
        .unwrap_err()
        .to_string();
    assert!(typo.contains("max_conns_per_ip"), "{typo}");
}

#[test]
fn optional_keys_are_accepted_and_type_checked() {
    let with = |v: &str| {
        full(0).replace(
            "    context_takeover: true",
            &format!("    context_takeover: true\n    inflate_budget_bytes: {v}"),
        )
    };
    let p = parse(&with("134217728"), "p.yaml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.server.deflate.inflate_budget_bytes, Some(134217728));
    let err = parse(&with("lots"), "p.yaml").unwrap_err().to_string();
    assert!(
        err.contains("server.deflate.inflate_budget_bytes: expected a whole number"),
        "{err}"
    );
}

/// A built-in profile as an older file wrote it: the Windows-only RSS key, no `nic` block.
fn with_old_rss_key(windows_name: &str) -> String {
    let text = &full(0);
    let text = &text[..=text
        .find("\nnic:\n")
        .expect("the built-in profiles say nic.rss")];
    text.replace(
        "windows:\n",
        &format!("windows:\n  rss_profile: {windows_name}\n"),
    )
}

#[test]
fn the_older_windows_rss_key_alone_is_read_into_the_one_word() {
    let p = parse(&with_old_rss_key("ClosestProcessorStatic"), "old.yaml")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.nic.rss, RssProfile::ClosestStatic);
    // Resolved, the profile says the one word, and the Windows check's target follows it.
    let shown = serde_yaml_ng::to_string(&p).unwrap();
    assert!(!shown.contains("rss_profile"), "{shown}");
    assert!(shown.contains("rss: closest_static"), "{shown}");
    assert_eq!(
        p.variables().get("nic.rss.windows"),
        Some(&Value::Text("ClosestProcessorStatic".into()))
    );
    // A profile extending a built-in one overrides the inherited word with the old key.
    let child = "extends: 100k\nname: mine\nwindows:\n  rss_profile: ConservativeScaling\n";
    let p = parse(child, "child.yaml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.nic.rss, RssProfile::Conservative);
}

#[test]
fn both_rss_keys_must_agree_and_the_error_names_both_with_the_line() {
    let agree = with_old_rss_key("NUMAScaling") + "nic:\n  rss: numa_scaling\n";
    let p = parse(&agree, "p.yaml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.nic.rss, RssProfile::NumaScaling);
    let text = with_old_rss_key("NUMAScalingStatic") + "nic:\n  rss: closest\n";
    let old_line = yaml_lines::line_of(&text, "windows.rss_profile").unwrap();
    let nic_line = yaml_lines::line_of(&text, "nic.rss").unwrap();
    let err = parse(&text, "p.yaml").unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("p.yaml:{old_line}: windows.rss_profile: NUMAScalingStatic disagrees with nic.rss: closest (line {nic_line}")),
        "{err}"
    );
    assert!(
        err.contains("remove windows.rss_profile") && err.contains("`numa_scaling_static`"),
        "{err}"
    );
    // A name Windows does not have says which ones it does, and where the word belongs.
    let err = parse(&with_old_rss_key("Balanced"), "p.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "p.yaml:{old_line}: windows.rss_profile: 'Balanced' is not an RSS profile"
        )) && err.contains("NUMAScaling (`nic: rss: numa_scaling`)"),
        "{err}"
    );
}

#[test]
fn every_rss_word_is_one_windows_name_and_back() {
    for r in RssProfile::ALL {
        assert_eq!(RssProfile::from_windows_name(r.windows_name()), Some(r));
        let yaml: RssProfile = serde_yaml_ng::from_str(r.as_str()).unwrap();
        assert_eq!(yaml, r);
    }
}

#[test]
fn unknown_key_names_the_line_and_the_allowed_keys() {
    let text = full(0).replace("  somaxconn: 4096", "  somaxconn: 4096\n  somaxcon: 1");
    let err = parse(&text, "p.yaml").unwrap_err().to_string();
    assert!(err.starts_with("p.yaml:"), "{err}");
    assert!(
        err.contains("unknown field `somaxcon`") && err.contains("somaxconn"),
        "{err}"
    );
}

#[test]
fn bad_values_are_all_reported_with_lines() {
    let text = full(0)
        .replace("window_bits: 15", "window_bits: 8")
        .replace("timeout_secs: 90", "timeout_secs: 10");
    let err = parse(&text, "p.yaml").unwrap_err();
    let ProfileError::Invalid(problems) = err else {
        panic!()
    };
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0]
        .message
        .contains("server.deflate.window_bits: 8 is out of range; allowed 9..=15"));
    assert_eq!(
        problems[0].line,
        yaml_lines::line_of(&text, "server.deflate.window_bits")
    );
    assert!(problems[0].line.is_some());
    assert!(problems[1].message.contains("longer than interval_secs"));
}

#[test]
fn processes_is_optional_a_number_auto_or_cores() {
    let base = &full(0);
    assert_eq!(
        parse(base, "p.yaml").unwrap().server.processes,
        Processes::Count(1)
    );
    let with = |v: &str| {
        let t = base.replace(
            "  send_queue_bytes:",
            &format!("  processes: {v}\n  send_queue_bytes:"),
        );
        assert_ne!(t, *base);
        parse(&t, "p.yaml")
    };
    assert_eq!(with("auto").unwrap().server.processes, Processes::Auto);
    assert_eq!(with("cores").unwrap().server.processes, Processes::Cores);
    assert_eq!(with("4").unwrap().server.processes, Processes::Count(4));
    let err = with("0").unwrap_err().to_string();
    assert!(err.contains("server.processes: 0 is out of range"), "{err}");
    let err = with("lots").unwrap_err().to_string();
    assert!(err.contains("'lots' is not a process count"), "{err}");
}

#[test]
fn a_profile_extends_another_and_changes_only_what_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let child = dir.path().join("edge.yaml");
    std::fs::write(
        &child,
        "extends: 100k\nname: edge\nlinux:\n  somaxconn: 32768\n  ip_local_port_range: [20000, 60999]\nserver:\n  deflate:\n    enabled: false\n",
    )
    .unwrap();
    let p = load(child.to_str().unwrap()).unwrap().profile;
    let base = load("100k").unwrap().profile;
    assert_eq!(p.name, "edge");
    assert_eq!(p.linux.somaxconn, 32768);
    // A list replaces the base's; a mapping merges key by key.
    assert_eq!(p.linux.ip_local_port_range, [20000, 60999]);
    assert!(!p.server.deflate.enabled);
    assert_eq!(
        p.server.deflate.window_bits,
        base.server.deflate.window_bits
    );
    assert_eq!(p.connections, base.connections);
    assert_eq!(p.windows, base.windows);

    // A grandchild, by a path relative to its own file.
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let grand = sub.join("edge-eu.yaml");
    std::fs::write(
        &grand,
        "extends: ../edge.yaml\nname: edge-eu\nconnections: 50000\n",
    )
    .unwrap();
    let g = load(grand.to_str().unwrap()).unwrap().profile;
    assert_eq!((g.connections, g.linux.somaxconn), (50000, 32768));
}

#[test]
fn an_extending_profile_is_validated_with_its_own_lines_and_names_inherited_values() {
    let dir = tempfile::tempdir().unwrap();
    let child = dir.path().join("bad.yaml");
    let path = child.to_str().unwrap().to_string();
    let text = "extends: 100k\nname: bad\nserver:\n  deflate:\n    window_bits: 8\n    window_bitz: 9\n  heartbeat:\n    interval_secs: 120\n";
    std::fs::write(&child, text).unwrap();
    let ProfileError::Invalid(problems) = load(&path).unwrap_err() else {
        panic!()
    };
    let find = |needle: &str| {
        problems
            .iter()
            .find(|p| p.message.contains(needle))
            .unwrap_or_else(|| panic!("no `{needle}` in {problems:?}"))
    };
    assert_eq!(find("unknown field `window_bitz`").line, Some(6));
    assert_eq!(find("window_bits: 8 is out of range").line, Some(5));
    // The interval this file sets meets the timeout it inherits (90 s).
    let hb = find("longer than interval_secs");
    assert!(
        hb.message.contains("(inherited from builtin:100k)"),
        "{hb:?}"
    );
    assert!(problems.iter().all(|p| p.file == path), "{problems:?}");
}

#[test]
fn extends_refuses_cycles_unknown_bases_and_a_missing_name() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.yaml");
    let b = dir.path().join("b.yaml");
    std::fs::write(&a, "extends: b.yaml\nname: a\n").unwrap();
    std::fs::write(&b, "extends: a.yaml\nname: b\n").unwrap();
    let err = load(a.to_str().unwrap()).unwrap_err().to_string();
    assert!(err.contains("cannot extend itself"), "{err}");
    assert!(err.contains("a.yaml:1:"), "{err}");

    std::fs::write(&a, "name: a\nextends: 200k\n").unwrap();
    let err = load(a.to_str().unwrap()).unwrap_err().to_string();
    assert!(
        err.contains("a.yaml:2: extends: unknown profile '200k'"),
        "{err}"
    );

    std::fs::write(&a, "extends: 10k\nconnections: 5000\n").unwrap();
    let err = load(a.to_str().unwrap()).unwrap_err().to_string();
    assert!(err.contains("needs a `name` of its own"), "{err}");

    std::fs::write(&a, "extends: [10k]\nname: a\n").unwrap();
    let err = load(a.to_str().unwrap()).unwrap_err().to_string();
    assert!(
        err.contains("extends: expected the name of a built-in profile"),
        "{err}"
    );

    // A base with problems of its own: named with its file and line, below the child's.
    std::fs::write(&b, "extends: 10k\nname: b\nlinux:\n  somaxconn: lots\n").unwrap();
    std::fs::write(&a, "extends: b.yaml\nname: a\n").unwrap();
    let err = load(a.to_str().unwrap()).unwrap_err().to_string();
    assert!(err.contains("has problems of its own"), "{err}");
    assert!(
        err.contains("b.yaml:4: linux.somaxconn: expected a whole number"),
        "{err}"
    );
}

#[test]
fn unknown_name_lists_the_builtins() {
    let err = load("200k").unwrap_err().to_string();
    assert!(
        err.contains("unknown profile '200k'") && err.contains("10k, 50k, 100k, 250k, 1m"),
        "{err}"
    );
}

#[test]
fn variables_cover_nested_keys_and_estimates() {
    let p = load("100k").unwrap().profile;
    let v = p.variables();
    assert_eq!(v["connections"], Value::Num(100_000));
    assert_eq!(
        v["linux.ip_local_port_range"],
        Value::List(vec![10000, 65535])
    );
    assert_eq!(v["server.deflate.window_bits"], Value::Num(11));
    let e = p.estimate();
    assert_eq!(
        v["estimate.total_bytes"],
        Value::Num(e.total_bytes() as i64)
    );
    // window 11, memLevel 4: 8 KiB + 8 KiB + 11 KiB to compress, 2 KiB + 17 KiB to inflate.
    assert_eq!(e.deflate_bytes_per_conn, 46 * 1024);
}

#[test]
fn the_cores_for_the_rate_follow_the_cost_per_message() {
    let mut p = load("100k").unwrap().profile;
    // 100,000 clients x 10/s = 1,000,000 msgs/s; at 14 us each and 70 % busy: 20 cores.
    let v = p.variables();
    assert_eq!(v["estimate.messages_per_sec"], Value::Num(1_000_000));
    assert_eq!(v["estimate.cores_for_rate"], Value::Num(20));
    // The guide's own host: ~11 us per message (71 % of 16 cores), 16 cores.
    p.server.cpu_ns_per_message = 11_000;
    assert_eq!(p.cpu_estimate().cores, 16);
    // A slow handler ten times dearer needs ten times the cores.
    p.server.cpu_ns_per_message = 140_000;
    assert_eq!(p.cpu_estimate().cores, 200);
    // A trickle still needs a core.
    assert_eq!(CpuEstimate::cores_at(10.0, 14_000.0), 1);
}

#[test]
fn a_stop_timeout_holds_the_drain_delay_its_window_and_the_grace() {
    let d = DrainProfile::default();
    // 100k at 2,000 a second: 5 s delay + 50 s + 5 s grace + 15 s to exit.
    assert_eq!(d.stop_secs(100_000), 75);
    // The window is capped; a small server keeps the old 45 s floor.
    assert_eq!(d.stop_secs(1_000_000), 5 + 300 + 20);
    assert_eq!(d.stop_secs(10_000), 45);
    let at_once = DrainProfile {
        reconnect_rate: 0,
        ..d
    };
    assert_eq!(at_once.stop_secs(1_000_000), 45);
}

/// The deprecation path: a renamed key is read into its new name with a warning naming it, the
/// two names must agree when a file writes both, and a removed key is refused with its fix.
#[test]
fn a_renamed_key_is_read_with_a_warning_and_a_removed_one_names_its_fix() {
    let table = [
        ("linux.accept_queue", Retired::Renamed("linux.somaxconn")),
        (
            "server.old_knob",
            Retired::Removed("remove it: the server sizes it itself"),
        ),
    ];
    let text = full(2).replace("  somaxconn: 65535", "  accept_queue: 32768");
    let line = yaml_lines::line_of(&text, "linux.accept_queue");
    assert!(line.is_some());
    let mut doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    let (changed, problems, warnings) = fold_retired(&mut doc, &text, &table);
    assert!(changed && problems.is_empty(), "{problems:?}");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].0, line);
    assert!(
        warnings[0]
            .1
            .starts_with("linux.accept_queue is the older name of linux.somaxconn: rename it"),
        "{warnings:?}"
    );
    let p: Profile = serde_yaml_ng::from_value(doc).unwrap();
    assert_eq!(p.linux.somaxconn, 32768);

    // Both names, different values: refused, naming the one to keep.
    let both = text.replace(
        "  accept_queue: 32768",
        "  accept_queue: 32768\n  somaxconn: 4096",
    );
    let mut doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&both).unwrap();
    let (_, problems, _) = fold_retired(&mut doc, &both, &table);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0]
            .1
            .contains("keep linux.somaxconn and remove linux.accept_queue"),
        "{problems:?}"
    );

    // Removed: an error with the fix, at its line.
    let gone = full(2).replace("  send_queue_bytes:", "  old_knob: 3\n  send_queue_bytes:");
    let mut doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&gone).unwrap();
    let (_, problems, warnings) = fold_retired(&mut doc, &gone, &table);
    assert!(warnings.is_empty());
    assert_eq!(
        problems,
        [(
            yaml_lines::line_of(&gone, "server.old_knob"),
            "server.old_knob is no longer read: remove it: the server sizes it itself".to_string()
        )]
    );
}

/// A file under `windows.rss_profile`, the older name of `nic.rss`, loads with a warning that
/// names the new key and the word to write there; a current file has none.
#[test]
fn the_older_rss_key_warns_with_the_key_to_write() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.yaml");
    std::fs::write(&old, with_old_rss_key("NUMAScaling")).unwrap();
    let loaded = load(old.to_str().unwrap()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.profile.nic.rss, RssProfile::NumaScaling);
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    let w = loaded.warnings[0].to_string();
    assert!(
        w.starts_with(&format!("{}:", old.display()))
            && w.contains("windows.rss_profile is the older name of nic.rss")
            && w.contains("`nic: rss: numa_scaling`"),
        "{w}"
    );
    let current = dir.path().join("current.yaml");
    std::fs::write(&current, full(2)).unwrap();
    assert!(load(current.to_str().unwrap()).unwrap().warnings.is_empty());
}

/// Which keys a file may leave out is the model's answer: every key the model defaults is
/// optional (the blocks newer than the oldest profiles in use among them), the rest required.
#[test]
fn keys_with_a_default_may_be_left_out_and_the_others_are_required() {
    let shape = profile_shape();
    for key in [
        "nic",
        "role",
        "server.coalesce_us",
        "server.cpu_ns_per_message",
        "server.notsent_lowat_bytes",
        "server.processes",
        "server.limits",
        "server.drain.delay_secs",
        "server.deflate.inflate_budget_bytes",
        "selftest.restart",
    ] {
        assert!(shape.is_defaulted(key), "{key} has a default");
    }
    for key in [
        "name",
        "connections",
        "linux",
        "linux.somaxconn",
        "server.deflate.level",
    ] {
        assert!(!shape.is_defaulted(key), "{key} is required");
    }
    // Left out, each takes the model's default.
    let text = &full(2);
    let cut = &text[..text.find("\nnic:\n").unwrap() + 1];
    let cut = cut
        .lines()
        .filter(|l| !l.starts_with("  coalesce_us:") && !l.starts_with("  cpu_ns_per_message:"))
        .collect::<Vec<_>>()
        .join("\n");
    let p = parse(&cut, "p.yaml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.nic, NicProfile::default());
    assert_eq!(p.server.cpu_ns_per_message, DEFAULT_CPU_NS_PER_MESSAGE);
    assert_eq!(
        p.server.coalesce_us,
        embedded_server::coalesce::DEFAULT_WINDOW.as_micros() as u64
    );
    // A required key left out is still named, with its block.
    let err = parse(&cut.replace("  somaxconn: 65535\n", ""), "p.yaml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("linux: missing field `somaxconn`"), "{err}");
}

/// The kernel keeps nf_conntrack_max and tcp_max_tw_buckets in an int, as it does somaxconn
/// and the backlogs: a value past 2147483647 is refused at load (with the reason), not by the
/// kernel with EINVAL halfway through an apply.
#[test]
fn sysctls_the_kernel_keeps_in_an_int_are_bounded_by_it() {
    let base = &full(2);
    for (key, line) in [
        ("nf_conntrack_max", "  nf_conntrack_max: 262144"),
        ("tcp_max_tw_buckets", "  tcp_max_tw_buckets: 262144"),
        ("somaxconn", "  somaxconn: 65535"),
        ("tcp_max_syn_backlog", "  tcp_max_syn_backlog: 65535"),
        ("netdev_max_backlog", "  netdev_max_backlog: 16384"),
    ] {
        assert!(base.contains(line), "{line}");
        let at_max = base.replace(line, &format!("  {key}: 2147483647"));
        parse(&at_max, "p.yaml").unwrap_or_else(|e| panic!("{key} at the int's maximum: {e}"));
        let past = base.replace(line, &format!("  {key}: 2147483648"));
        let err = parse(&past, "p.yaml").unwrap_err().to_string();
        let at = yaml_lines::line_of(&past, &format!("linux.{key}")).unwrap();
        assert!(
            err.contains(&format!(
                "p.yaml:{at}: linux.{key}: 2147483648 is out of range; allowed"
            )) && err.contains("=2147483647 (the kernel's maximum is 2147483647, an int)"),
            "{key}: {err}"
        );
    }
}

/// A key that is not a plain name (some other file's line, read as a key) is placed by its
/// line but not quoted; a typo is quoted with the key it was meant for.
#[test]
fn only_plain_unknown_keys_are_quoted() {
    let text = format!("{}root:$6$salt$hash:19700:0:99999:7:::\n", full(2));
    let err = parse(&text, "p.yaml").unwrap_err().to_string();
    let line = text.lines().count();
    assert!(
        err.contains(&format!(
            "p.yaml:{line}: unknown field (a key that is not a plain name, not shown)"
        )),
        "{err}"
    );
    assert!(!err.contains("salt") && !err.contains("root"), "{err}");
}

/// A command that loads its profile twice (`serve`: its server, then its host checks) printed
/// each warning twice. The hook is told of each (file, line, message) once per process.
#[test]
fn a_warning_is_handed_on_once_per_file_line_and_message() {
    let w = |file: &str, message: &str| Problem {
        file: file.into(),
        line: Some(3),
        message: message.into(),
    };
    let renamed = "windows.rss_profile is the older name of nic.rss (a test of the dedup)";
    assert!(first_time(&w("/tmp/a-first-time.yaml", renamed)));
    assert!(!first_time(&w("/tmp/a-first-time.yaml", renamed)));
    // Another file, or another message, is told.
    assert!(first_time(&w("/tmp/b-first-time.yaml", renamed)));
    assert!(first_time(&w("/tmp/a-first-time.yaml", "another warning")));
}

/// TcpTimedWaitDelay's range is the Windows Server 2003 reference's, 0..300 seconds (0x0-0x12C,
/// 120 when absent); 30..300 was Windows 2000's and shut out values that reference allows.
#[test]
fn tcp_timed_wait_delay_takes_the_references_0_to_300_seconds() {
    let base = &full(0);
    let with = |v: &str| {
        let t = base.replace(
            "tcp_timed_wait_delay: 30",
            &format!("tcp_timed_wait_delay: {v}"),
        );
        assert!(t != *base || v == "30");
        parse(&t, "p.yaml")
    };
    for ok in ["0", "15", "30", "300"] {
        assert_eq!(
            with(ok).unwrap().windows.tcp_timed_wait_delay,
            ok.parse::<u64>().unwrap()
        );
    }
    let err = with("301").unwrap_err().to_string();
    assert!(
        err.contains("windows.tcp_timed_wait_delay: 301 is out of range; allowed 0..=300 (seconds, REG_DWORD 0x0-0x12C as Microsoft's Windows Server 2003 TCP/IP reference gives it; 120 when absent)"),
        "{err}"
    );
}
