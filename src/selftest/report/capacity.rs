//! The server's CPU per message as echo-rate measured it, against the profile's capacity
//! estimate.

use super::super::{Scenario, ScenarioReport};
use super::num;
use serde::{Deserialize, Serialize};

/// The profile's capacity estimate (`estimate.cores_for_rate`): its message rate at its cost
/// per message.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct CpuTarget {
    /// The profile's connections x `selftest.rate_per_client`.
    pub messages_per_sec: u64,
    /// `server.cpu_ns_per_message`.
    pub ns_per_message: u64,
    /// Cores that rate needs at that cost, each 70 % busy.
    pub cores: u64,
}

impl CpuTarget {
    pub fn of(p: &crate::profile::Profile) -> CpuTarget {
        let e = p.cpu_estimate();
        CpuTarget {
            messages_per_sec: e.messages_per_sec,
            ns_per_message: e.ns_per_message,
            cores: e.cores,
        }
    }
}

/// The server's CPU per message as echo-rate measured it, and the cores the profile's message
/// rate needs at that cost beside the profile's own estimate.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CapacityReport {
    /// The scenario measured (echo-rate, else deflate).
    pub scenario: String,
    pub measured_us_per_message: f64,
    /// The rate it was measured at (msgs/s offered in the scenario).
    pub measured_messages_per_sec: f64,
    pub profile_us_per_message: f64,
    pub messages_per_sec: u64,
    /// Cores the profile's rate needs at the measured cost (70 % busy each).
    pub cores_at_measured: u64,
    /// The profile's estimate (`estimate.cores_for_rate`).
    pub cores_at_profile: u64,
    pub host_cores: usize,
}

impl CapacityReport {
    /// From echo-rate (or deflate, when echo-rate did not run) if the server's CPU was read.
    pub fn of(scenarios: &[ScenarioReport], t: &CpuTarget, host_cores: usize) -> Option<Self> {
        let s = Scenario::ALL
            .iter()
            .filter(|k| k.open_loop())
            .find_map(|k| scenarios.iter().find(|s| s.scenario == *k))?;
        let us = s.server_cpu_us_per_msg?;
        Some(CapacityReport {
            scenario: s.scenario.name().to_string(),
            measured_us_per_message: us,
            measured_messages_per_sec: s.offered_rate.unwrap_or(s.achieved_rate),
            profile_us_per_message: t.ns_per_message as f64 / 1000.0,
            messages_per_sec: t.messages_per_sec,
            cores_at_measured: crate::profile::CpuEstimate::cores_at(
                t.messages_per_sec as f64,
                us * 1000.0,
            ),
            cores_at_profile: t.cores,
            host_cores,
        })
    }

    /// One line for people.
    pub fn line(&self) -> String {
        // A message that arrives alone pays its wake-up alone: measured far below the
        // profile's rate, the cost per message is an upper bound for the busy server.
        let low = self.measured_messages_per_sec * 2.0 < self.messages_per_sec as f64;
        format!(
            "capacity: the server spent {} us of CPU per message in {} at {} msgs/s (the profile \
             budgets {} us, server.cpu_ns_per_message): the profile's {} msgs/s need {} core(s) at \
             that cost, each 70% busy ({} at the profile's); this host has {}{}\n",
            num(self.measured_us_per_message),
            self.scenario,
            num(self.measured_messages_per_sec),
            num(self.profile_us_per_message),
            num(self.messages_per_sec as f64),
            self.cores_at_measured,
            self.cores_at_profile,
            self.host_cores,
            if low {
                format!(
                    ". Measured at {:.1}% of the profile's rate, where each message more often \
                     wakes the server on its own: an upper bound for the busier server",
                    100.0 * self.measured_messages_per_sec / self.messages_per_sec.max(1) as f64
                )
            } else {
                String::new()
            }
        )
    }
}
