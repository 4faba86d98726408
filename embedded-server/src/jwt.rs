//! Who may subscribe to what: an HMAC-SHA256 JWT (RFC 7519) presented on upgrade, for the
//! channels app (re-exported as `channels::auth`). Below the hub and the handler API: the
//! channels settings the server's configuration carries hold a [`Verifier`].
//!
//! The token comes from `Authorization: Bearer TOKEN` or, for browsers (which cannot set
//! headers on a WebSocket), the `token` query parameter. Its claims:
//!
//! ```json
//! {"exp": 1767225600, "channels": ["a", "news.*"], "publish": ["chat.*"]}
//! ```
//!
//! - `exp` (required): seconds since the epoch; accepted up to [`LEEWAY_SECS`] past it (clock
//!   skew between the backend that mints tokens and this server). `nbf`, when present, is
//!   checked the same way. `aud` is checked when the verifier has an audience
//!   ([`Verifier::with_limits`]; the token must then carry it); `iat`, when present, counts
//!   towards the lifetime cap. `iss` is not checked.
//! - `channels` (required, may be empty): what the connection may subscribe to.
//! - `publish` (optional, default none): what it may publish to over the WebSocket. Backends
//!   publish through the HTTP API, so a browser client publishes nothing unless its token says.
//!
//! A pattern is an exact channel name, `PREFIX.*` (every channel whose name starts with
//! `PREFIX.` and goes on: `news.*` allows `news.eu` and `news.eu.fr`, not `news`), or `*`
//! (every channel). A `*` anywhere else makes the token invalid, so a typo cannot widen it.
//!
//! Only HS256 is accepted (the algorithm in the token's header must be it: no `none`, no
//! algorithm confusion), and the secret must be at least 32 bytes (RFC 7518 3.2: a key as long
//! as the hash).

use crate::request::Request;
use std::borrow::Cow;

/// How far past `exp` (and before `nbf`) a token is still accepted, seconds.
pub const LEEWAY_SECS: u64 = 5;

/// The shortest secret accepted (RFC 7518 section 3.2 for HS256).
pub const MIN_SECRET_BYTES: usize = 32;

/// Why an upgrade's token was refused (each a label of `ws_channels_auth_failures_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthError {
    /// No token in the `Authorization` header or the `token` query parameter.
    Missing,
    /// Not a JWT (three base64url parts), or a header that is not JSON, or another algorithm.
    Malformed,
    /// The signature does not match the secret.
    BadSignature,
    /// Past `exp` (plus the leeway).
    Expired,
    /// Before `nbf` (minus the leeway).
    NotYetValid,
    /// Signed and current, but `exp` or `channels` is missing or of the wrong kind, or a
    /// pattern has a misplaced `*`.
    Claims,
    /// Signed with another algorithm than HS256 (or a header naming it otherwise: `hs256`).
    Algorithm,
    /// Without the `aud` the server requires, or for another audience.
    Audience,
    /// Valid for longer than the server's lifetime cap (`exp - now` or `exp - iat`).
    Lifetime,
}

impl AuthError {
    /// How many reasons there are.
    pub const COUNT: usize = 9;
    /// Every reason, in label order.
    pub const ALL: [AuthError; AuthError::COUNT] = [
        AuthError::Missing,
        AuthError::Malformed,
        AuthError::BadSignature,
        AuthError::Expired,
        AuthError::NotYetValid,
        AuthError::Claims,
        AuthError::Algorithm,
        AuthError::Audience,
        AuthError::Lifetime,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            AuthError::Missing => "missing",
            AuthError::Malformed => "malformed",
            AuthError::BadSignature => "bad_signature",
            AuthError::Expired => "expired",
            AuthError::NotYetValid => "not_yet_valid",
            AuthError::Claims => "invalid_claims",
            AuthError::Algorithm => "bad_algorithm",
            AuthError::Audience => "bad_audience",
            AuthError::Lifetime => "lifetime_too_long",
        }
    }

    /// The 401's body: short, and never an echo of the token.
    pub fn message(self) -> &'static str {
        match self {
            AuthError::Missing => {
                "token required: send Authorization: Bearer TOKEN or ?token=TOKEN"
            }
            AuthError::Malformed => {
                "malformed token: expected a JWT (three base64url parts) signed with HS256"
            }
            AuthError::Algorithm => {
                "token algorithm not accepted: sign with HS256 (header {\"alg\":\"HS256\"}, \
                 upper case)"
            }
            AuthError::Audience => {
                "token audience not accepted: the aud claim must name this server"
            }
            AuthError::Lifetime => {
                "token lifetime too long: mint shorter-lived tokens (the server caps exp - now and \
                 exp - iat)"
            }
            AuthError::BadSignature => "bad token signature",
            AuthError::Expired => "token expired",
            AuthError::NotYetValid => "token not valid yet (nbf)",
            AuthError::Claims => {
                "invalid token claims: exp (number) and channels (list of names) are required"
            }
        }
    }
}

impl std::fmt::Display for AuthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for AuthError {}

/// What a verified token allows (a connection's state under auth).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Patterns of the channels it may subscribe to.
    pub subscribe: Vec<String>,
    /// Patterns of the channels it may publish to over the WebSocket.
    pub publish: Vec<String>,
    /// When the token expires, seconds since the epoch.
    pub exp: u64,
}

impl Grant {
    /// May subscribe to `channel`.
    pub fn may_subscribe(&self, channel: &str) -> bool {
        self.subscribe.iter().any(|p| matches(p, channel))
    }

    /// May publish to `channel`.
    pub fn may_publish(&self, channel: &str) -> bool {
        self.publish.iter().any(|p| matches(p, channel))
    }
}

/// Whether `pattern` (exact, `PREFIX.*` or `*`; see the module) covers `channel`.
pub fn matches(pattern: &str, channel: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    match pattern.strip_suffix('*') {
        Some(prefix) => channel.len() > prefix.len() && channel.starts_with(prefix),
        None => pattern == channel,
    }
}

/// A pattern the module's rules accept.
fn valid_pattern(p: &str) -> bool {
    match p.find('*') {
        None => !p.is_empty(),
        Some(i) => p == "*" || (i == p.len() - 1 && p.ends_with(".*") && p.len() > 2),
    }
}

/// Checks tokens against one HS256 secret.
pub struct Verifier {
    key: jsonwebtoken::DecodingKey,
    validation: jsonwebtoken::Validation,
    max_lifetime: Option<u64>,
}

/// The token of an `Authorization` header value: `Bearer TOKEN` (the scheme in any case,
/// spaces around the token ignored); None for another scheme or an empty token. The one parser
/// of the API key header and of upgrade tokens.
pub fn bearer(value: &str) -> Option<&str> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    let token = rest.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The `alg` of a JWT's header, when the header is base64url JSON with a string `alg`.
fn algorithm_of(token: &str) -> Option<String> {
    use base64::Engine;
    let head = token.split('.').next()?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(head.trim_end_matches('='))
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v.get("alg")?.as_str().map(str::to_string)
}

impl std::fmt::Debug for Verifier {
    // Never the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Verifier(HS256, secret redacted)")
    }
}

impl Verifier {
    /// A verifier for `secret` (the bytes of the shared secret, at least
    /// [`MIN_SECRET_BYTES`]). The error says what is wrong and how to fix it.
    pub fn new(secret: &[u8]) -> Result<Verifier, String> {
        if secret.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "the JWT secret is {} bytes; HS256 needs at least {MIN_SECRET_BYTES} (make one \
                 with `head -c 32 /dev/urandom | base64`)",
                secret.len()
            ));
        }
        let key = jsonwebtoken::DecodingKey::from_secret(secret).map_err(|e| e.to_string())?;
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
        validation.leeway = LEEWAY_SECS;
        validation.validate_nbf = true;
        validation.validate_aud = false;
        validation.set_required_spec_claims(&["exp"]);
        Ok(Verifier {
            key,
            validation,
            max_lifetime: None,
        })
    }

    /// Refuse tokens valid for more than `max_lifetime` seconds (`exp - now` or, when the
    /// token has `iat`, `exp - iat`; plus the leeway), and, with `audience`, tokens whose
    /// `aud` does not name it (or that have none).
    pub fn with_limits(mut self, max_lifetime: Option<u64>, audience: Option<&str>) -> Verifier {
        self.max_lifetime = max_lifetime;
        if let Some(a) = audience {
            self.validation.set_audience(&[a]);
            self.validation.validate_aud = true;
            self.validation.set_required_spec_claims(&["exp", "aud"]);
        }
        self
    }

    /// The token of an upgrade request: `Authorization: Bearer` first, else `?token=`.
    pub fn token_of<'a>(req: &Request<'a>) -> Option<Cow<'a, str>> {
        if let Some(t) = req.header("authorization").and_then(bearer) {
            return Some(Cow::Borrowed(t));
        }
        req.query_param("token").filter(|t| !t.is_empty())
    }

    /// Check `token`: what it allows, or why it is refused.
    pub fn verify(&self, token: &str) -> Result<Grant, AuthError> {
        #[derive(serde::Deserialize)]
        struct Claims {
            exp: u64,
            channels: Vec<String>,
            #[serde(default)]
            publish: Vec<String>,
            #[serde(default)]
            iat: Option<u64>,
        }
        use jsonwebtoken::errors::ErrorKind as K;
        // The header first: a token whose header does not parse is malformed; a JSON error
        // after that is about the (signed) claims.
        match algorithm_of(token) {
            Some(a) if a != "HS256" => return Err(AuthError::Algorithm),
            _ => {}
        }
        if jsonwebtoken::decode_header(token).is_err() {
            return Err(AuthError::Malformed);
        }
        let data = jsonwebtoken::decode::<Claims>(token, &self.key, &self.validation).map_err(
            |e| match e.kind() {
                K::InvalidSignature => AuthError::BadSignature,
                K::ExpiredSignature => AuthError::Expired,
                K::ImmatureSignature => AuthError::NotYetValid,
                K::InvalidAudience => AuthError::Audience,
                K::MissingRequiredClaim(c) if c == "aud" => AuthError::Audience,
                K::InvalidAlgorithm => AuthError::Algorithm,
                K::MissingRequiredClaim(_) | K::InvalidClaimFormat(_) | K::Json(_) => {
                    AuthError::Claims
                }
                _ => AuthError::Malformed,
            },
        )?;
        let c = data.claims;
        if let Some(max) = self.max_lifetime {
            let now = jsonwebtoken::get_current_timestamp();
            let cap = max.saturating_add(LEEWAY_SECS);
            if c.exp.saturating_sub(now) > cap
                || c.iat.is_some_and(|i| c.exp.saturating_sub(i) > cap)
            {
                return Err(AuthError::Lifetime);
            }
        }
        if !c
            .channels
            .iter()
            .chain(&c.publish)
            .all(|p| valid_pattern(p))
        {
            return Err(AuthError::Claims);
        }
        Ok(Grant {
            subscribe: c.channels,
            publish: c.publish,
            exp: c.exp,
        })
    }

    /// Check the token of an upgrade request ([`Verifier::token_of`]).
    pub fn verify_request(&self, req: &Request<'_>) -> Result<Grant, AuthError> {
        let token = Self::token_of(req).ok_or(AuthError::Missing)?;
        self.verify(&token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn now() -> u64 {
        jsonwebtoken::get_current_timestamp()
    }

    fn token(claims: serde_json::Value, secret: &[u8]) -> String {
        jsonwebtoken::encode(
            &jsonwebtoken::Header::default(),
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(secret).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn patterns_are_exact_prefix_dot_star_or_everything() {
        assert!(matches("a", "a") && !matches("a", "ab"));
        assert!(matches("news.*", "news.eu") && matches("news.*", "news.eu.fr"));
        assert!(!matches("news.*", "news") && !matches("news.*", "news."));
        assert!(!matches("news.*", "newsx"));
        assert!(matches("*", "anything"));
        for bad in ["", "a*", "*.a", "a.*.b", ".*", "**"] {
            assert!(!valid_pattern(bad), "{bad}");
        }
        for good in ["a", "news.*", "*", "a.b.*"] {
            assert!(valid_pattern(good), "{good}");
        }
    }

    #[test]
    fn each_bad_token_has_its_own_reason() {
        let v = Verifier::new(SECRET).unwrap();
        let ok = token(
            serde_json::json!({"exp": now() + 60, "channels": ["a"]}),
            SECRET,
        );
        let g = v.verify(&ok).unwrap();
        assert!(g.may_subscribe("a") && !g.may_subscribe("b") && !g.may_publish("a"));
        let other = token(
            serde_json::json!({"exp": now() + 60, "channels": ["a"]}),
            b"another secret of thirty-two bytes!",
        );
        assert_eq!(v.verify(&other), Err(AuthError::BadSignature));
        let old = token(
            serde_json::json!({"exp": now() - 60, "channels": ["a"]}),
            SECRET,
        );
        assert_eq!(v.verify(&old), Err(AuthError::Expired));
        let no_exp = token(serde_json::json!({"channels": ["a"]}), SECRET);
        assert_eq!(v.verify(&no_exp), Err(AuthError::Claims));
        let no_channels = token(serde_json::json!({"exp": now() + 60}), SECRET);
        assert_eq!(v.verify(&no_channels), Err(AuthError::Claims));
        let star = token(
            serde_json::json!({"exp": now() + 60, "channels": ["a*"]}),
            SECRET,
        );
        assert_eq!(v.verify(&star), Err(AuthError::Claims));
        let later = token(
            serde_json::json!({"exp": now() + 600, "nbf": now() + 300, "channels": []}),
            SECRET,
        );
        assert_eq!(v.verify(&later), Err(AuthError::NotYetValid));
        for junk in ["", "abc", "a.b.c", "%%%.%%%.%%%"] {
            assert_eq!(v.verify(junk), Err(AuthError::Malformed), "{junk}");
        }
        // alg none / another algorithm: refused whatever the claims.
        let none = format!(
            "{}.{}.",
            "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0",
            "eyJleHAiOjk5OTk5OTk5OTksImNoYW5uZWxzIjpbIioiXX0"
        );
        assert_eq!(v.verify(&none), Err(AuthError::Algorithm));
    }

    #[test]
    fn a_short_secret_is_refused_with_the_fix() {
        let e = Verifier::new(b"short").unwrap_err();
        assert!(e.contains("at least 32") && e.contains("urandom"), "{e}");
    }

    #[test]
    fn algorithm_audience_and_lifetime_have_their_own_reasons() {
        let v = Verifier::new(SECRET)
            .unwrap()
            .with_limits(Some(3600), Some("wstune"));
        let ok = token(
            serde_json::json!({"exp": now() + 600, "aud": "wstune", "channels": []}),
            SECRET,
        );
        assert!(v.verify(&ok).is_ok());
        let long = token(
            serde_json::json!({"exp": now() + 7200, "aud": "wstune", "channels": []}),
            SECRET,
        );
        assert_eq!(v.verify(&long), Err(AuthError::Lifetime));
        let old_iat = token(
            serde_json::json!({"exp": now() + 60, "iat": now() - 7200, "aud": "wstune", "channels": []}),
            SECRET,
        );
        assert_eq!(v.verify(&old_iat), Err(AuthError::Lifetime));
        let other = token(
            serde_json::json!({"exp": now() + 60, "aud": "else", "channels": []}),
            SECRET,
        );
        assert_eq!(v.verify(&other), Err(AuthError::Audience));
        let none = token(
            serde_json::json!({"exp": now() + 60, "channels": []}),
            SECRET,
        );
        assert_eq!(v.verify(&none), Err(AuthError::Audience));
        let hs512 = jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS512),
            &serde_json::json!({"exp": now() + 60, "channels": []}),
            &jsonwebtoken::EncodingKey::from_secret(SECRET).unwrap(),
        )
        .unwrap();
        assert_eq!(v.verify(&hs512), Err(AuthError::Algorithm));
        // A lower-case alg, hand-made (no library writes one).
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let lower = format!("{}.{}.x", b64(r#"{"alg":"hs256"}"#), b64("{}"));
        assert_eq!(v.verify(&lower), Err(AuthError::Algorithm));
        assert_eq!(v.verify("not a token"), Err(AuthError::Malformed));
        assert!(AuthError::Algorithm.message().contains("sign with HS256"));
        assert_eq!(bearer(" Bearer  abc "), Some("abc"));
        assert_eq!(bearer("bearer x"), Some("x"));
        assert_eq!(bearer("Basic x"), None);
        assert_eq!(bearer("Bearer "), None);
    }
}
