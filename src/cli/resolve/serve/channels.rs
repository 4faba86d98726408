//! `serve`'s channels flags and the profile's `server.channels`: the HTTP API's key, the JWT
//! secret for upgrades and the per-connection subscription cap, resolved into the server's
//! `ChannelsSettings` and the admin listener's key. No secret is ever printed: the settings
//! table says only where each came from.

use crate::cli::args::channels::ChannelArgs;
use crate::profile::{ChannelsHistoryProfile, ChannelsProfile};
use crate::serve::config::{TokenAuth, ENV_API_KEY, ENV_AUTH_SECRET};
use embedded_server::channels::{
    ApiKey, ChannelsSettings, HistorySettings, Verifier, DEFAULT_MAX_SUBSCRIPTIONS,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the flags, the environment and the profile resolve to. The secrets are kept as read:
/// child servers get them in their environment (`ServeConfig::child_env`), so the supervisor
/// and a restarted process present and expect the same key even if a file changed since.
pub struct ChannelsConfig {
    pub settings: ChannelsSettings,
    pub api_key: Option<ApiKey>,
    /// The JWT secret, and the limits its verifier (in `settings.auth`) checks.
    pub auth_secret: Option<String>,
    pub token_auth: Option<TokenAuth>,
}

/// Where a secret comes from: the flag's file, else the environment, else the profile's file.
fn secret(
    flag: &Option<PathBuf>,
    flag_name: &str,
    env: &str,
    profile: &str,
    profile_key: &str,
) -> anyhow::Result<Option<(String, String)>> {
    let read = |p: &Path, what: &str| -> anyhow::Result<Option<(String, String)>> {
        let text = crate::host::read_secret_file(p).map_err(|e| {
            anyhow::anyhow!(
                "{what} {}: cannot read it ({e}); write the secret alone in that file",
                p.display()
            )
        })?;
        warn_if_shared(p, what);
        Ok(Some((text, format!("{what} {}", p.display()))))
    };
    if let Some(p) = flag {
        return read(p, flag_name);
    }
    // Read once, then out of this process's environment (`host::take_env`); child servers
    // get their copy explicitly (`ServeConfig::child_env`).
    if let Some(v) = crate::host::take_env(env).map_err(anyhow::Error::msg)? {
        return Ok(Some((v, format!("${env}"))));
    }
    if !profile.is_empty() {
        return read(Path::new(profile), profile_key);
    }
    Ok(None)
}

/// Resolve the channels settings; rows for the settings table are appended (never a secret).
pub fn resolve(
    p: &ChannelsProfile,
    a: &ChannelArgs,
    app_is_channels: bool,
    table: &mut Vec<crate::report::Setting>,
) -> anyhow::Result<ChannelsConfig> {
    let api_key = match secret(
        &a.api_key_file,
        "--api-key-file",
        ENV_API_KEY,
        &p.api_key_file,
        "server.channels.api_key_file",
    )? {
        Some((text, from)) => {
            let k = ApiKey::new(&text).map_err(|e| anyhow::anyhow!("{from}: {e}"))?;
            table.push(("api key", "set".into(), source(&from)));
            Some(k)
        }
        None => None,
    };
    let auth = match secret(
        &a.auth_secret_file,
        "--auth-secret-file",
        ENV_AUTH_SECRET,
        &p.auth.secret_file,
        "server.channels.auth.secret_file",
    )? {
        Some((text, from)) => {
            if !app_is_channels {
                anyhow::bail!(
                    "{from}: token auth is the channels app's; add --app channels (or drop the \
                     secret)"
                );
            }
            // Checked now, so a short secret is named with where it came from.
            Verifier::new(text.trim_end_matches(['\n', '\r']).as_bytes())
                .map_err(|e| anyhow::anyhow!("{from}: {e}"))?;
            table.push(("token auth", "HS256 JWT".into(), source(&from)));
            let lifetime = a.auth_max_lifetime.or(match p.auth.max_lifetime_secs {
                0 => None,
                n => Some(n),
            });
            if lifetime == Some(0) {
                anyhow::bail!("--auth-max-lifetime 0 refuses every token; give seconds, e.g. 3600");
            }
            let audience = a
                .auth_audience
                .clone()
                .or_else(|| Some(p.auth.audience.clone()).filter(|s| !s.is_empty()));
            let from_flag = |flag: bool| if flag { "flag" } else { "profile" };
            if let Some(l) = lifetime {
                let f = from_flag(a.auth_max_lifetime.is_some());
                table.push(("token max lifetime", format!("{l} s"), f));
            }
            if let Some(aud) = &audience {
                let f = from_flag(a.auth_audience.is_some());
                table.push(("token audience", aud.clone(), f));
            }
            let t = TokenAuth {
                max_lifetime: lifetime,
                audience,
            };
            let v = t
                .verifier(&text)
                .map_err(|e| anyhow::anyhow!("{from}: {e}"))?;
            Some((Arc::new(v), text, t))
        }
        None if a.auth_max_lifetime.is_some() || a.auth_audience.is_some() => {
            anyhow::bail!(
                "--auth-max-lifetime and --auth-audience check tokens: give the secret too \
                 (--auth-secret-file FILE or $WSTUNE_AUTH_SECRET)"
            )
        }
        None => None,
    };
    let (max_subscriptions, from) = match (a.max_subscriptions, p.max_subscriptions) {
        (Some(n), _) => (n, "flag"),
        (None, 0) => (DEFAULT_MAX_SUBSCRIPTIONS, "default"),
        (None, n) => (usize::try_from(n).unwrap_or(usize::MAX), "profile"),
    };
    if max_subscriptions == 0 {
        anyhow::bail!(
            "--max-subscriptions 0: a connection could subscribe to nothing; use 1 or more \
             (default {DEFAULT_MAX_SUBSCRIPTIONS})"
        );
    }
    if app_is_channels {
        table.push(("max subscriptions", max_subscriptions.to_string(), from));
    }
    let (auth, auth_secret, token_auth) = match auth {
        Some((v, secret, t)) => (Some(v), Some(secret), Some(t)),
        None => (None, None, None),
    };
    let history = history(&p.history, a, app_is_channels, table)?;
    Ok(ChannelsConfig {
        settings: ChannelsSettings {
            auth,
            max_subscriptions,
            history,
            ..ChannelsSettings::default()
        },
        api_key,
        auth_secret,
        token_auth,
    })
}

/// `--history-size` and its bounds (each flag over its `server.channels.history` key, 0 in the
/// profile meaning the default).
fn history(
    p: &ChannelsHistoryProfile,
    a: &ChannelArgs,
    app_is_channels: bool,
    table: &mut Vec<crate::report::Setting>,
) -> anyhow::Result<HistorySettings> {
    let pick = |flag: Option<u64>, key: u64, default: u64| match (flag, key) {
        (Some(n), _) => (n, "flag"),
        (None, 0) => (default, "default"),
        (None, n) => (n, "profile"),
    };
    let d = HistorySettings::default();
    let size = pick(a.history_size.map(|n| n as u64), p.size, 0);
    let ttl = pick(a.history_ttl, p.ttl_secs, d.ttl_secs);
    let max_bytes = pick(
        a.history_max_bytes.map(|n| n as u64),
        p.max_bytes,
        d.max_bytes as u64,
    );
    let recover_max = pick(
        a.recover_max.map(|n| n as u64),
        p.recover_max,
        d.recover_max as u64,
    );
    let bounds_given =
        a.history_ttl.is_some() || a.history_max_bytes.is_some() || a.recover_max.is_some();
    if size.0 == 0 {
        if bounds_given {
            anyhow::bail!(
                "--history-ttl, --history-max-bytes and --recover-max bound channel history, which is off: give --history-size N too (publications kept per channel)"
            );
        }
        return Ok(HistorySettings::default());
    }
    if !app_is_channels {
        anyhow::bail!(
            "--history-size keeps channel publications for recovery: it is the channels app's; \
             add --app channels (or drop it)"
        );
    }
    for (value, flag) in [
        (ttl.0, "--history-ttl"),
        (max_bytes.0, "--history-max-bytes"),
        (recover_max.0, "--recover-max"),
    ] {
        if value == 0 {
            anyhow::bail!(
                "{flag} 0 would keep nothing to recover from; give a positive value or leave \
                 it out for the default"
            );
        }
    }
    let h = HistorySettings {
        size: usize::try_from(size.0).unwrap_or(usize::MAX),
        ttl_secs: ttl.0,
        max_bytes: usize::try_from(max_bytes.0).unwrap_or(usize::MAX),
        recover_max: usize::try_from(recover_max.0).unwrap_or(usize::MAX),
    };
    table.push(("history per channel", h.size.to_string(), size.1));
    table.push(("history ttl", format!("{} s", h.ttl_secs), ttl.1));
    table.push(("history max bytes", h.max_bytes.to_string(), max_bytes.1));
    table.push(("recover max", h.recover_max.to_string(), recover_max.1));
    Ok(h)
}

fn source(from: &str) -> &'static str {
    if from.starts_with("--") {
        "flag"
    } else if from.starts_with('$') {
        "env"
    } else {
        "profile"
    }
}

/// A secret file every local user can read is no secret: say so (ssh refuses such keys; a
/// warning is enough here, since the operator may rely on the directory's mode).
fn warn_if_shared(p: &Path, what: &str) {
    if crate::host::readable_by_everyone(p) {
        eprintln!(
            "wstune: warning: {what} {}: every local user can read this secret; \
             chmod 600 it (or 640 with a group for the service)",
            p.display()
        );
    }
}
