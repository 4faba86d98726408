//! Heavy tier, built only with `--features heavy-tests` (`.ci/run` turns it on): the churn
//! soak, network faults in namespaces, the self-test at the profile's size, wstune.exe under
//! Wine and the Autobahn TestSuite. Minutes each; the fast tier (`cargo test`) leaves them out.
//! Each test holds its area (`common::area`): a soak's RSS or a self-test's verdict must not
//! carry another area's load.

mod common;

mod autobahn;
mod faults;
mod scale;
mod soak;
mod windows_wine;
