//! `serve`'s abuse-limit flags and the profile's `server.limits`, resolved into the server's
//! `LimitSettings` (what each limit does and how it is answered: `embedded_server::abuse`).

use crate::cli::args::abuse::LimitArgs;
use crate::profile::LimitsProfile;
use crate::report::Setting;
use embedded_server::abuse::{Cidr, LimitSettings, Rate};

/// The limits in force: each flag given, else the profile's key. Rows for the settings table
/// are appended (only for limits that are on, so a default run's table does not grow).
pub fn resolve(
    p: &LimitsProfile,
    a: &LimitArgs,
    table: &mut Vec<Setting>,
) -> anyhow::Result<LimitSettings> {
    let from = |flag: bool| if flag { "flag" } else { "profile" };
    let rate = |flag: &Option<String>,
                name: &str,
                per_sec: u64,
                burst: u64|
     -> anyhow::Result<(Option<Rate>, bool)> {
        match flag {
            Some(s) => Ok((
                Rate::parse(s).map_err(|e| anyhow::anyhow!("--{name}: {e}"))?,
                true,
            )),
            // Validated at load to fit (rates up to 1e9, bursts up to u32::MAX).
            None => Ok((
                Rate::new(
                    u32::try_from(per_sec).unwrap_or(u32::MAX),
                    u32::try_from(burst).unwrap_or(u32::MAX),
                ),
                false,
            )),
        }
    };
    let cidrs =
        |flag: &[String], name: &str, prof: &[String]| -> anyhow::Result<(Vec<Cidr>, bool)> {
            let (list, given) = if flag.is_empty() {
                (prof, false)
            } else {
                (flag, true)
            };
            let parsed = list
                .iter()
                .map(|s| Cidr::parse(s).map_err(|e| anyhow::anyhow!("--{name}: {e}")))
                .collect::<anyhow::Result<Vec<_>>>()?;
            Ok((parsed, given))
        };
    let (max_per_ip, cap_flag) = match a.max_conns_per_ip {
        Some(n) => (n, true),
        None => (p.max_connections_per_ip, false),
    };
    let max_connections_per_ip = usize::try_from(max_per_ip).unwrap_or(usize::MAX);
    let (connection_rate_per_ip, r1) = rate(
        &a.conn_rate_per_ip,
        "conn-rate-per-ip",
        p.connection_rate_per_ip,
        p.connection_burst_per_ip,
    )?;
    let (connection_rate, r2) = rate(
        &a.conn_rate,
        "conn-rate",
        p.connection_rate,
        p.connection_burst,
    )?;
    let (message_rate, r3) = rate(
        &a.message_rate,
        "message-rate",
        p.message_rate,
        p.message_burst,
    )?;
    let message_rate_close = a
        .message_rate_close
        .unwrap_or(u16::try_from(p.message_rate_close).unwrap_or(0));
    let (exempt, e_flag) = cidrs(&a.exempt, "limit-exempt", &p.exempt)?;
    let (trusted_proxies, t_flag) = cidrs(&a.trusted_proxies, "trusted-proxy", &p.trusted_proxies)?;
    if max_connections_per_ip > 0 {
        table.push((
            "max connections per ip",
            max_connections_per_ip.to_string(),
            from(cap_flag),
        ));
    }
    for (name, r, flag) in [
        ("new connections per ip", connection_rate_per_ip, r1),
        ("new connections (server)", connection_rate, r2),
        ("messages per connection", message_rate, r3),
    ] {
        if let Some(r) = r {
            table.push((name, r.to_string(), from(flag)));
        }
    }
    if message_rate.is_some() {
        table.push((
            "message rate close code",
            message_rate_close.to_string(),
            from(a.message_rate_close.is_some()),
        ));
    }
    let list = |l: &[Cidr]| {
        l.iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !exempt.is_empty() {
        table.push(("limits exempt", list(&exempt), from(e_flag)));
    }
    if !trusted_proxies.is_empty() {
        table.push(("trusted proxies", list(&trusted_proxies), from(t_flag)));
    }
    if let Some(n) = a.max_pending_handshakes.filter(|n| *n > 0) {
        table.push(("max pending handshakes", n.to_string(), "flag"));
    }
    if let Some(n) = a.fd_reserve {
        table.push(("descriptor reserve", n.to_string(), "flag"));
    }
    Ok(LimitSettings {
        max_pending_handshakes: a.max_pending_handshakes.unwrap_or(0),
        fd_reserve: a.fd_reserve,
        max_connections_per_ip,
        connection_rate_per_ip,
        connection_rate,
        message_rate,
        message_rate_close,
        exempt,
        trusted_proxies,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_profile_and_rows_name_the_source() {
        let p = LimitsProfile {
            max_connections_per_ip: 10,
            message_rate: 50,
            exempt: vec!["10.0.0.0/8".into()],
            ..LimitsProfile::default()
        };
        let a = LimitArgs {
            message_rate: Some("5:20".into()),
            trusted_proxies: vec!["192.0.2.1".into()],
            ..LimitArgs::default()
        };
        let mut t = Vec::new();
        let s = resolve(&p, &a, &mut t).unwrap();
        assert_eq!(s.max_connections_per_ip, 10);
        assert_eq!(s.message_rate, Rate::new(5, 20));
        assert_eq!(s.exempt, vec![Cidr::parse("10.0.0.0/8").unwrap()]);
        assert_eq!(s.trusted_proxies, vec![Cidr::parse("192.0.2.1").unwrap()]);
        assert!(t.contains(&("max connections per ip", "10".into(), "profile")));
        assert!(t.contains(&("messages per connection", "5/s burst 20".into(), "flag")));
        // Off: nothing in the table.
        let mut t = Vec::new();
        let off = resolve(&LimitsProfile::default(), &LimitArgs::default(), &mut t).unwrap();
        assert_eq!(off, LimitSettings::default());
        assert!(t.is_empty());
    }

    #[test]
    fn bad_flags_name_the_flag() {
        let bad = |a: LimitArgs| {
            resolve(&LimitsProfile::default(), &a, &mut Vec::new())
                .unwrap_err()
                .to_string()
        };
        assert!(bad(LimitArgs {
            conn_rate: Some("fast".into()),
            ..LimitArgs::default()
        })
        .starts_with("--conn-rate: 'fast' is not a rate"));
        assert!(bad(LimitArgs {
            trusted_proxies: vec!["10.0.0.0/40".into()],
            ..LimitArgs::default()
        })
        .starts_with("--trusted-proxy: '10.0.0.0/40' is not an address"));
    }
}
