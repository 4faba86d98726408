//! Replays every committed fuzz corpus and regression input (fuzz/corpus/TARGET,
//! fuzz/regressions/TARGET) through the same harness functions the libFuzzer targets call, on
//! the stable toolchain: a parser change that reintroduces a crash fails `cargo test`, without
//! nightly. `bench/fuzz.sh TARGET MINUTES` fuzzes one target further.

#[path = "../../fuzz/src/harness/mod.rs"]
#[allow(dead_code)]
mod harness;

use std::path::Path;

fn inputs(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Replay one target's corpus and regression inputs; every failing input is named.
fn replay(name: &str) {
    let run = harness::TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no harness function {name}"))
        .1;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let corpus = inputs(&root.join("corpus").join(name));
    assert!(
        !corpus.is_empty(),
        "fuzz/corpus/{name} is empty: every target keeps a minimised corpus (bench/fuzz.sh {name} 10)"
    );
    let regressions = inputs(&root.join("regressions").join(name));
    let mut failures = Vec::new();
    for file in corpus.iter().chain(&regressions) {
        // A running fuzzer may replace corpus files while this reads them.
        let Ok(data) = std::fs::read(file) else {
            continue;
        };
        if std::panic::catch_unwind(move || run(&data)).is_err() {
            failures.push(file.display().to_string());
        }
    }
    assert!(
        failures.is_empty(),
        "inputs that fail their harness:\n{}",
        failures.join("\n")
    );
}

// One test per target, so they replay in parallel and a failure names its target.
macro_rules! targets {
    ($($name:ident),* $(,)?) => {
        $(#[test] fn $name() { replay(stringify!($name)); })*

        #[test]
        fn every_harness_target_has_a_replay_test() {
            let listed = [$(stringify!($name)),*];
            for (name, _) in harness::TARGETS {
                assert!(listed.contains(name), "add {name} to targets! in tests/serving/fuzz_corpus.rs");
            }
        }
    };
}

targets!(
    frame_server,
    frame_client,
    handshake,
    deflate_offer,
    inflate,
    inflate_isal,
    utf8,
    profile_yaml,
    catalog_yaml,
    registry_yaml,
    proc_limits,
    proc_net,
    proc_interrupts,
    cgroup_sys,
    proxy_protocol,
);
