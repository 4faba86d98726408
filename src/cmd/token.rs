//! `wstune token`: an HS256 JWT for wstune's channels server (`serve --app channels
//! --auth-secret-file`), as Centrifugo's `gentoken` is for Centrifugo. The token is checked by
//! the server's own verifier before it is printed, so what this prints is what the server
//! accepts: a typo'd pattern, a lifetime over the server's cap or a short secret fail here.

use crate::outcome::Outcome;
use anyhow::{anyhow, Result};
use embedded_server::channels::Verifier;
use serde::Serialize;

pub struct Request {
    /// The secret, as the server reads it (trailing newline removed).
    pub secret: String,
    /// Where the secret came from, for the messages ("--secret-file F", "$WSTUNE_AUTH_SECRET").
    pub secret_from: String,
    pub channels: Vec<String>,
    pub publish: Vec<String>,
    pub ttl_secs: u64,
    pub aud: Option<String>,
    pub sub: Option<String>,
    pub max_lifetime: Option<u64>,
    /// Seconds since the epoch: `iat`, and `exp` = now + ttl.
    pub now: u64,
}

#[derive(Serialize)]
struct Claims<'a> {
    exp: u64,
    iat: u64,
    channels: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    publish: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    aud: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sub: Option<&'a str>,
}

/// The token, checked by the server's verifier.
pub fn mint(r: &Request) -> Result<String> {
    let verifier = Verifier::new(r.secret.as_bytes())
        .map_err(|e| anyhow!("{}: {e}", r.secret_from))?
        .with_limits(r.max_lifetime, r.aud.as_deref());
    let claims = Claims {
        exp: r.now + r.ttl_secs,
        iat: r.now,
        channels: &r.channels,
        publish: &r.publish,
        aud: r.aud.as_deref(),
        sub: r.sub.as_deref(),
    };
    let key = jsonwebtoken::EncodingKey::from_secret(r.secret.as_bytes())
        .map_err(|e| anyhow!("{}: {e}", r.secret_from))?;
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &key,
    )
    .map_err(|e| anyhow!("cannot sign the token: {e}"))?;
    verifier.verify(&token).map_err(|e| {
        anyhow!(
            "the server would refuse this token: {}{}",
            e.message(),
            match e {
                embedded_server::channels::AuthError::Lifetime => format!(
                    " (--ttl {} s is over --max-lifetime {} s; give a shorter --ttl)",
                    r.ttl_secs,
                    r.max_lifetime.unwrap_or(0)
                ),
                embedded_server::channels::AuthError::Claims => {
                    " (a pattern is a name, PREFIX.* or *: check --channels and --publish)".into()
                }
                _ => String::new(),
            }
        )
    })?;
    Ok(token)
}

pub fn run(r: Request) -> Result<Outcome> {
    let token = mint(&r)?;
    crate::output::emit(None, &format!("{token}\n"))?;
    Ok(Outcome::Ok)
}
