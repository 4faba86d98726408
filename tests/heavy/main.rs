//! Heavy tier, built only with `--features heavy-tests` (`.ci/run` turns it on): the churn
//! soak, network faults in namespaces, hostile clients beside a probe (`bench/hostile.py`'s
//! attacks: its latency, the server's RSS), the self-test at the profile's size, wstune.exe
//! under Wine and the Autobahn TestSuite. Up to minutes each; the fast tier (`cargo test`) leaves
//! them out. Each test holds its area (`common::area`): a soak's RSS or a self-test's verdict must
//! not carry another area's load.

// The helpers every test binary shares, beside the binaries' folders.
#[path = "../common/mod.rs"]
mod common;

mod autobahn;
mod faults;
mod hostile;
mod restart_recovery;
mod scale;
mod soak;
mod windows_wine;
