//! The permessage-deflate offer and answer (RFC 7692 section 7.1): what the server is willing
//! to do ([`DeflateSettings`]) against what the client offers, and what both agreed on for a
//! connection ([`Agreed`]).

/// What the server is willing to do (from the profile and flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct DeflateSettings {
    /// Negotiate permessage-deflate at all.
    pub enabled: bool,
    /// The largest window the server compresses with (9..=15; zlib turns 8 into 9).
    pub window_bits: u8,
    /// zlib's memory level (1-9).
    pub mem_level: u8,
    /// zlib's compression level (0-9).
    pub level: u8,
    /// Messages smaller than this go uncompressed (RSV1 clear).
    pub threshold: usize,
    /// Keep contexts between messages (better ratio, memory held per connection).
    pub context_takeover: bool,
}

impl Default for DeflateSettings {
    fn default() -> Self {
        DeflateSettings {
            enabled: false,
            window_bits: 15,
            mem_level: 8,
            level: 1,
            threshold: 256,
            context_takeover: true,
        }
    }
}

/// The parameters both sides agreed on for one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agreed {
    /// The server resets its compressor after each message.
    pub server_no_context_takeover: bool,
    /// The client resets its compressor after each message (so ours can reset too).
    pub client_no_context_takeover: bool,
    /// The server's (our) window bits, as agreed.
    pub server_window_bits: u8,
    /// The client's window bits, as agreed.
    pub client_window_bits: u8,
    /// The Sec-WebSocket-Extensions response value.
    pub response: String,
}

/// Pick the first offer the server can accept. An offer with unknown or malformed parameters
/// is declined (the next one is tried); None means the connection proceeds uncompressed. The
/// response never claims what the client did not offer.
pub fn negotiate(offers: &[String], s: &DeflateSettings) -> Option<Agreed> {
    if !s.enabled {
        return None;
    }
    // Offers may arrive as one header with several comma-separated extensions (already split by
    // the handshake) whose parameters follow ';'.
    'offer: for offer in offers {
        let mut parts = offer.split(';').map(str::trim);
        if parts.next() != Some("permessage-deflate") {
            continue;
        }
        let (mut snct, mut cnct) = (false, false);
        let mut smwb: Option<u8> = None;
        let mut cmwb: Option<Option<u8>> = None;
        let mut seen = std::collections::HashSet::new();
        for p in parts {
            let (name, value) = match p.split_once('=') {
                Some((n, v)) => (n.trim(), Some(v.trim().trim_matches('"'))),
                None => (p, None),
            };
            if !seen.insert(name.to_string()) {
                continue 'offer; // a parameter twice: malformed
            }
            let bits = |v: Option<&str>| {
                v.and_then(|v| v.parse::<u8>().ok())
                    .filter(|b| (8..=15).contains(b))
            };
            match name {
                "server_no_context_takeover" if value.is_none() => snct = true,
                "client_no_context_takeover" if value.is_none() => cnct = true,
                "server_max_window_bits" => match bits(value) {
                    Some(b) => smwb = Some(b),
                    None => continue 'offer,
                },
                "client_max_window_bits" => match value {
                    None => cmwb = Some(None),
                    Some(_) => match bits(value) {
                        Some(b) => cmwb = Some(Some(b)),
                        None => continue 'offer,
                    },
                },
                _ => continue 'offer,
            }
        }
        // Our window: the client's cap if any, else our setting; never below 9 (zlib's raw
        // deflate cannot do 8).
        let server_bits = smwb.unwrap_or(s.window_bits).min(s.window_bits);
        if server_bits < 9 {
            continue;
        }
        let server_nct = snct || !s.context_takeover;
        let mut response = String::from("permessage-deflate");
        if server_nct {
            response.push_str("; server_no_context_takeover");
        }
        if cnct {
            response.push_str("; client_no_context_takeover");
        }
        // RFC 7692 7.1.2.1: the server may announce a smaller window even if not offered.
        if smwb.is_some() || server_bits < 15 {
            response.push_str(&format!("; server_max_window_bits={server_bits}"));
        }
        // client_max_window_bits may only be answered if offered (RFC 7692 7.1.2.2), with at
        // most the offered value. When offered, the client gets our window too: its stream
        // then fits a `2^window_bits` inflate window, the same memory lever in both
        // directions. Not offered, the client may use 15 and our decompressor keeps 32 KiB.
        let client_bits = match cmwb {
            Some(offered) => {
                let b = offered.unwrap_or(15).min(s.window_bits);
                if offered.is_some() || b < 15 {
                    response.push_str(&format!("; client_max_window_bits={b}"));
                }
                b
            }
            None => 15,
        };
        return Some(Agreed {
            server_no_context_takeover: server_nct,
            client_no_context_takeover: cnct,
            server_window_bits: server_bits,
            client_window_bits: client_bits,
            response,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on() -> DeflateSettings {
        DeflateSettings {
            enabled: true,
            ..DeflateSettings::default()
        }
    }

    fn offers(s: &str) -> Vec<String> {
        s.split(',').map(|x| x.trim().to_string()).collect()
    }

    #[test]
    fn negotiation() {
        let a = negotiate(&offers("permessage-deflate; client_max_window_bits"), &on()).unwrap();
        assert_eq!(a.response, "permessage-deflate");
        assert_eq!((a.server_window_bits, a.client_window_bits), (15, 15));
        // A smaller window of ours caps the client's when it offered the parameter (so our
        // decompressor needs only that window), and only then.
        let small = DeflateSettings {
            window_bits: 11,
            ..on()
        };
        let a = negotiate(
            &offers("permessage-deflate; client_max_window_bits"),
            &small,
        )
        .unwrap();
        assert_eq!(
            a.response,
            "permessage-deflate; server_max_window_bits=11; client_max_window_bits=11"
        );
        assert_eq!((a.server_window_bits, a.client_window_bits), (11, 11));
        let a = negotiate(
            &offers("permessage-deflate; client_max_window_bits=10"),
            &small,
        )
        .unwrap();
        assert_eq!(a.client_window_bits, 10);
        let a = negotiate(&offers("permessage-deflate"), &small).unwrap();
        assert_eq!(a.response, "permessage-deflate; server_max_window_bits=11");
        assert_eq!(a.client_window_bits, 15);
        let a = negotiate(&offers("permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10; client_max_window_bits=12"), &on()).unwrap();
        assert_eq!(a.response, "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10; client_max_window_bits=12");
        assert!(a.server_no_context_takeover && a.client_no_context_takeover);
        // A malformed first offer is declined, the second accepted.
        let a = negotiate(
            &offers("permessage-deflate; server_max_window_bits=20, permessage-deflate"),
            &on(),
        )
        .unwrap();
        assert_eq!(a.response, "permessage-deflate");
        assert!(negotiate(&offers("permessage-deflate; foo=1"), &on()).is_none());
        assert!(negotiate(
            &offers("permessage-deflate; client_no_context_takeover; client_no_context_takeover"),
            &on()
        )
        .is_none());
        assert!(negotiate(&offers("x-webkit-deflate-frame"), &on()).is_none());
        assert!(
            negotiate(&offers("permessage-deflate"), &DeflateSettings::default()).is_none(),
            "disabled"
        );
        // 8 is not something zlib can do raw: declined.
        assert!(negotiate(
            &offers("permessage-deflate; server_max_window_bits=8"),
            &on()
        )
        .is_none());
        // The server's own smaller window is announced.
        let small = DeflateSettings {
            window_bits: 11,
            context_takeover: false,
            ..on()
        };
        let a = negotiate(&offers("permessage-deflate"), &small).unwrap();
        assert_eq!(
            a.response,
            "permessage-deflate; server_no_context_takeover; server_max_window_bits=11"
        );
    }
}
