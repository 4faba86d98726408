//! One function per fuzz target: feed `data` to a parser the way wstune does, and panic on
//! anything that is a bug (a panic inside the parser, a broken invariant, a differential
//! mismatch). Bad input itself is never a bug: every parser must turn it into an error.
//!
//! Plain Rust on purpose: `fuzz/fuzz_targets/*.rs` call these under libFuzzer (nightly
//! flags, `bench/fuzz.sh`), and `tests/serving/fuzz_corpus.rs` replays every committed corpus and
//! regression input through the same functions on stable, so CI catches a regression
//! without a nightly toolchain. Structure-aware targets read their structure with
//! `arbitrary::Unstructured` from the raw bytes, so a corpus file means the same in both.
//!
//! The targets live by idea in `protocol`, `decompress` and `host`; this file names them. It is
//! a mod.rs on purpose: fuzz/src/lib.rs declares it and tests/serving/fuzz_corpus.rs includes it with
//! `#[path]`, and both resolve its submodules to this folder only because it is a mod.rs.

mod decompress;
mod host;
mod protocol;

pub use decompress::{inflate, inflate_isal};
pub use host::{
    catalog_yaml, cgroup_sys, proc_interrupts, proc_limits, proc_net, profile_yaml, registry_yaml,
};
pub use protocol::{deflate_offer, frame_client, frame_server, handshake, proxy_protocol, utf8};

/// One target's body: feed it bytes; it panics only on a bug.
pub type Harness = fn(&[u8]);

/// Every target, by the name its corpus directory has (fuzz/corpus/NAME).
pub const TARGETS: &[(&str, Harness)] = &[
    ("frame_server", frame_server),
    ("frame_client", frame_client),
    ("handshake", handshake),
    ("deflate_offer", deflate_offer),
    ("inflate", inflate),
    ("inflate_isal", inflate_isal),
    ("utf8", utf8),
    ("profile_yaml", profile_yaml),
    ("catalog_yaml", catalog_yaml),
    ("registry_yaml", registry_yaml),
    ("proc_limits", proc_limits),
    ("proc_net", proc_net),
    ("proc_interrupts", proc_interrupts),
    ("cgroup_sys", cgroup_sys),
    ("proxy_protocol", proxy_protocol),
];
