//! The server library's configuration errors in `wstune serve`'s words. The library names
//! `ServerConfig`'s fields (`max_frame_bytes`), which is right for a program that builds the
//! configuration in code; a `wstune` user typed flags and profile keys, so the message they see
//! names those (`--max-frame`). The variants carry the values, so only the wording lives here:
//! a bound itself is checked once, by `ServerConfig::validate`.

use embedded_server::{ConfigError, LimitsError};

/// `e` as an error naming the flags (and the profile key) the values came from.
pub fn in_flags(e: ConfigError) -> anyhow::Error {
    anyhow::Error::msg(wording(&e))
}

fn wording(e: &ConfigError) -> String {
    match e {
        ConfigError::FrameAboveMessage { max_frame, max_message } => format!(
            "--max-frame {max_frame} is above the message cap {max_message}: a frame is part of a message; raise --max-message too"
        ),
        ConfigError::Sizes => {
            "--fragment and --max-frame must be positive and --send-queue at least 1024 bytes"
                .to_string()
        }
        ConfigError::HandlerNeedsEcho { handler, .. } => format!(
            "--handler {handler} works with --app echo only (the built-in handler simulates work before the echo)"
        ),
        ConfigError::InflateBudgetBelowMessage { budget, max_message, origin } => {
            let origin = origin.map(|o| format!(" ({o})")).unwrap_or_default();
            format!(
                "inflate budget {budget}{origin} is below the message cap {max_message}: no message near the cap could ever be inflated; set --inflate-budget (profile: server.deflate.inflate_budget_bytes) to at least the message cap, or leave it unset for max(64 MiB, 4 x the message cap)"
            )
        }
        ConfigError::NotsentLowat(_) => format!("server.{e}"),
        ConfigError::Limits(LimitsError::MessageRateClose(c)) => format!(
            "--message-rate-close {c} is not allowed: use 1008 (policy violation) or 1013 (try again later)"
        ),
        ConfigError::Limits(LimitsError::RateTooHigh { what, per_sec }) => {
            let flag = match *what {
                "connection_rate_per_ip" => "--conn-rate-per-ip",
                "connection_rate" => "--conn-rate",
                "message_rate" => "--message-rate",
                other => other,
            };
            format!("{flag} {per_sec}/s is above 1,000,000,000/s; use 0 to turn it off")
        }
        // Worded without a field name: the same for a flag and a field.
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use embedded_server::{LimitSettings, Rate, ServerConfig};

    fn flags(f: impl FnOnce(&mut ServerConfig)) -> String {
        let mut c = ServerConfig::default();
        f(&mut c);
        in_flags(c.validate().unwrap_err()).to_string()
    }

    #[test]
    fn every_field_the_library_names_comes_back_as_its_flag() {
        assert_eq!(
            flags(|c| c.max_frame_bytes = c.max_message_bytes + 1),
            "--max-frame 16777217 is above the message cap 16777216: a frame is part of a message; raise --max-message too"
        );
        assert_eq!(
            flags(|c| c.send_queue_bytes = 1023),
            "--fragment and --max-frame must be positive and --send-queue at least 1024 bytes"
        );
        assert!(flags(|c| c.inflate_budget = Some(1000)).contains(
            "is below the message cap 16777216: no message near the cap could ever be inflated; set --inflate-budget (profile: server.deflate.inflate_budget_bytes)"
        ));
        assert_eq!(
            in_flags(
                ConfigError::InflateBudgetBelowMessage {
                    budget: 1000,
                    max_message: 1048576,
                    origin: None,
                }
                .with_origin("flag")
            )
            .to_string()
            .split(':')
            .next(),
            Some("inflate budget 1000 (flag) is below the message cap 1048576")
        );
        assert!(flags(|c| c.notsent_lowat_bytes = 1000)
            .starts_with("server.notsent_lowat_bytes 1000 must be 0"));
        assert_eq!(
            flags(|c| c.limits.message_rate_close = 1000),
            "--message-rate-close 1000 is not allowed: use 1008 (policy violation) or 1013 (try again later)"
        );
        let fast = Some(Rate {
            per_sec: 2_000_000_000,
            burst: 1,
        });
        for (f, flag) in [
            (
                (|l: &mut LimitSettings, r| l.connection_rate_per_ip = r)
                    as fn(&mut LimitSettings, Option<Rate>),
                "--conn-rate-per-ip",
            ),
            (|l, r| l.connection_rate = r, "--conn-rate"),
            (|l, r| l.message_rate = r, "--message-rate"),
        ] {
            assert_eq!(
                flags(|c| f(&mut c.limits, fast)),
                format!("{flag} 2000000000/s is above 1,000,000,000/s; use 0 to turn it off")
            );
        }
        let needs_echo = embedded_server::BuiltinConfig {
            app: embedded_server::App::Broadcast,
            handler: embedded_server::SimulatedWork::Cpu(5),
            ..Default::default()
        };
        assert_eq!(
            in_flags(needs_echo.validate().unwrap_err()).to_string(),
            "--handler cpu:5 works with --app echo only (the built-in handler simulates work before the echo)"
        );
        // Worded without a field name: passed through.
        assert!(flags(|c| c.handshake_timeout = std::time::Duration::ZERO)
            .starts_with("the handshake timeout"));
    }
}
