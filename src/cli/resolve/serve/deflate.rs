//! permessage-deflate: `server.deflate` with the `--deflate*` flags over it, and the inflate
//! budget that bounds what a compressed message may grow to.

use crate::cli::args::ServeArgs;
use crate::profile::DeflateProfile;
use crate::report::Setting;
use embedded_server::DeflateSettings;

/// What `ServerConfig` takes, and where the inflate budget came from (a bound it breaks is
/// reported against that).
pub(super) struct Deflate {
    pub settings: DeflateSettings,
    pub inflate_budget: usize,
    pub budget_from: &'static str,
}

/// Each flag given, else the profile's; the rows go in the table only when deflate is on.
pub(super) fn resolve(
    pd: &DeflateProfile,
    a: &ServeArgs,
    max_message_bytes: usize,
    table: &mut Vec<Setting>,
) -> Deflate {
    let from_profile = DeflateSettings::from(pd);
    let deflate = DeflateSettings {
        enabled: (from_profile.enabled || a.deflate) && !a.no_deflate,
        window_bits: a.deflate_window_bits.unwrap_or(from_profile.window_bits),
        mem_level: a.deflate_mem_level.unwrap_or(from_profile.mem_level),
        level: a.deflate_level.unwrap_or(from_profile.level),
        threshold: a.deflate_threshold.unwrap_or(from_profile.threshold),
        context_takeover: from_profile.context_takeover && !a.deflate_no_context_takeover,
    };
    let from = |flag: bool| if flag { "flag" } else { "profile" };
    table.push((
        "permessage-deflate",
        if deflate.enabled {
            "on".into()
        } else {
            "off".into()
        },
        from(a.deflate || a.no_deflate),
    ));
    if deflate.enabled {
        table.push((
            "deflate window bits / memLevel / level",
            format!(
                "{} / {} / {}",
                deflate.window_bits, deflate.mem_level, deflate.level
            ),
            from(
                a.deflate_window_bits.is_some()
                    || a.deflate_mem_level.is_some()
                    || a.deflate_level.is_some(),
            ),
        ));
        table.push((
            "deflate threshold bytes",
            deflate.threshold.to_string(),
            from(a.deflate_threshold.is_some()),
        ));
        table.push((
            "deflate context takeover",
            deflate.context_takeover.to_string(),
            from(a.deflate_no_context_takeover),
        ));
    }
    let (inflate_budget, budget_from) = match (a.inflate_budget, pd.inflate_budget_bytes) {
        (Some(b), _) => (b, "flag"),
        (None, Some(b)) => (b as usize, "profile"),
        (None, None) => (
            embedded_server::config::default_inflate_budget(max_message_bytes),
            "default",
        ),
    };
    if deflate.enabled {
        table.push((
            "inflate budget bytes",
            inflate_budget.to_string(),
            budget_from,
        ));
    }
    Deflate {
        settings: deflate,
        inflate_budget,
        budget_from,
    }
}
