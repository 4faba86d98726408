//! `server.drain` with `--drain-over` and `--drain-delay` over it: the drain's window, the
//! rate that paces it, and the readiness delay.

use crate::cli::args::ServeArgs;
use crate::profile::DrainProfile;
use crate::report::Setting;
use std::time::Duration;

/// What `ServerConfig` takes.
pub(super) struct Drain {
    pub over: Duration,
    pub rate: u32,
    pub delay: Duration,
}

/// `--drain-over` is the window as typed (no rate shortens it). Without it the profile paces
/// the closes at `reconnect_rate` a second, in at most `max_over_secs`: the window is
/// `ceil(connections / reconnect_rate)` for the connections the server holds when it drains,
/// so the most it takes follows `max_connections` (the settings table shows that figure).
pub(super) fn resolve(p: &DrainProfile, a: &ServeArgs, table: &mut Vec<Setting>) -> Drain {
    let (over, rate, from) = match a.drain_over {
        Some(s) => (s, 0, "flag"),
        None if p.reconnect_rate == 0 => (0, 0, "profile"),
        None => (
            p.max_over_secs,
            u32::try_from(p.reconnect_rate).unwrap_or(u32::MAX),
            "profile",
        ),
    };
    let delay = a.drain_delay.unwrap_or(p.delay_secs);
    // The row's value follows max_connections: `ServeConfig::refresh_drain_row` writes it.
    table.push((crate::serve::config::DRAIN_ROW, String::new(), from));
    table.push((
        "drain: /readyz 503 before the first close s",
        delay.to_string(),
        if a.drain_delay.is_some() {
            "flag"
        } else {
            "profile"
        },
    ));
    Drain {
        over: Duration::from_secs(over),
        rate,
        delay: Duration::from_secs(delay),
    }
}
