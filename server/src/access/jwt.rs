//! Checking a JWT access token of the identity provider: its signature with a key of the
//! provider's JWKS, then its issuer, audience and times. RS256 and ES256 only: `none`, the
//! HMAC algorithms (whose "key" an attacker would take from the public JWKS) and everything
//! else are refused before any key is looked at. Plain functions over the token's text and
//! the keys; fetching the keys is `oidc`'s.

use base64::Engine as _;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde::Deserialize;
use serde_json::Value;

/// The signature algorithms accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Rs256,
    Es256,
}

impl Algorithm {
    fn parse(name: &str) -> Option<Algorithm> {
        match name {
            "RS256" => Some(Algorithm::Rs256),
            "ES256" => Some(Algorithm::Es256),
            _ => None,
        }
    }
}

/// A public key of the provider's JWKS that can check one of the accepted algorithms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyingKey {
    pub kid: Option<String>,
    pub algorithm: Algorithm,
    material: KeyMaterial,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum KeyMaterial {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// An uncompressed P-256 point: `04 || x || y`.
    P256(Vec<u8>),
}

#[derive(Debug, Deserialize)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    alg: Option<String>,
    #[serde(rename = "use")]
    usage: Option<String>,
    crv: Option<String>,
    n: Option<String>,
    e: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

#[derive(Debug, Deserialize)]
struct JwkSet {
    keys: Vec<Value>,
}

fn b64(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .ok()
}

impl VerifyingKey {
    /// The key of one JWK, or `None` when it cannot check an accepted algorithm (an
    /// encryption key, another key type or curve, an RSA key under 2048 bits).
    fn from_jwk(jwk: &Jwk) -> Option<VerifyingKey> {
        if jwk.usage.as_deref().is_some_and(|usage| usage != "sig") {
            return None;
        }
        let stated = match jwk.alg.as_deref() {
            Some(name) => Some(Algorithm::parse(name)?),
            None => None,
        };
        let (algorithm, material) = match jwk.kty.as_str() {
            "RSA" => {
                let n = b64(jwk.n.as_deref()?)?;
                let e = b64(jwk.e.as_deref()?)?;
                let bits = n.iter().skip_while(|byte| **byte == 0).count() * 8;
                if bits < 2048 {
                    return None;
                }
                (Algorithm::Rs256, KeyMaterial::Rsa { n, e })
            }
            "EC" if jwk.crv.as_deref() == Some("P-256") => {
                let (x, y) = (b64(jwk.x.as_deref()?)?, b64(jwk.y.as_deref()?)?);
                if x.len() != 32 || y.len() != 32 {
                    return None;
                }
                let mut point = Vec::with_capacity(65);
                point.push(4);
                point.extend_from_slice(&x);
                point.extend_from_slice(&y);
                (Algorithm::Es256, KeyMaterial::P256(point))
            }
            _ => return None,
        };
        if stated.is_some_and(|stated| stated != algorithm) {
            return None;
        }
        Some(VerifyingKey {
            kid: jwk.kid.clone(),
            algorithm,
            material,
        })
    }

    fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        match &self.material {
            KeyMaterial::Rsa { n, e } => RsaPublicKeyComponents { n, e }
                .verify(&signature::RSA_PKCS1_2048_8192_SHA256, message, signature)
                .is_ok(),
            KeyMaterial::P256(point) => {
                UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(message, signature)
                    .is_ok()
            }
        }
    }
}

/// The usable keys of a JWKS document; the others are skipped (a provider may publish
/// encryption keys or algorithms we do not accept beside them).
pub fn keys_of_jwks(document: &[u8]) -> Result<Vec<VerifyingKey>, String> {
    let set: JwkSet = serde_json::from_slice(document)
        .map_err(|_| "the JWKS document is not a JSON object with a `keys` list".to_owned())?;
    Ok(set
        .keys
        .into_iter()
        .filter_map(|value| serde_json::from_value::<Jwk>(value).ok())
        .filter_map(|jwk| VerifyingKey::from_jwk(&jwk))
        .collect())
}

/// Why a token was refused; said in the `401`'s detail and the audit trail. Never the
/// token's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the token is not a signed JWT ({0})")]
    Malformed(&'static str),
    #[error("the token is signed with {0}; only RS256 and ES256 are accepted")]
    Algorithm(String),
    #[error("the token's key (kid {0}) is not among the identity provider's keys")]
    UnknownKey(String),
    #[error("the token's signature does not verify")]
    Signature,
    #[error("the token was issued by {0}, not by the configured issuer")]
    Issuer(String),
    #[error("the token is not meant for this API (its audience does not name it)")]
    Audience,
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet")]
    NotYetValid,
    #[error("the token says it was issued in the future (`iat`)")]
    IssuedAhead,
    #[error("the token's `{0}` is not a date in seconds (a JSON number)")]
    NotANumericDate(&'static str),
    #[error("the token names no subject (`sub`)")]
    NoSubject,
}

/// How a refusal shows a value the token chose: 64 characters at most, control characters
/// escaped (it reaches the answer and the audit trail before any signature is checked).
pub fn shown(text: &str) -> String {
    text.chars().take(64).flat_map(char::escape_debug).collect()
}

/// A token's header: which algorithm and key signed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub algorithm: Algorithm,
    pub kid: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawHeader {
    alg: String,
    kid: Option<String>,
}

/// Whether `bearer` has a JWT's shape (three base64url parts, the first a JSON object), so
/// that a service token is never taken for one.
pub fn looks_like_jwt(bearer: &str) -> bool {
    bearer.starts_with("eyJ") && bearer.split('.').count() == 3
}

/// The header of `token`, checked for an accepted algorithm.
pub fn header(token: &str) -> Result<Header, Refusal> {
    let encoded = token.split('.').next().unwrap_or_default();
    let bytes = b64(encoded).ok_or(Refusal::Malformed("its header is not base64url"))?;
    let raw: RawHeader = serde_json::from_slice(&bytes)
        .map_err(|_| Refusal::Malformed("its header is not a JSON object with `alg`"))?;
    let Some(algorithm) = Algorithm::parse(&raw.alg) else {
        return Err(Refusal::Algorithm(shown(&raw.alg)));
    };
    Ok(Header {
        algorithm,
        kid: raw.kid,
    })
}

/// What a token must say.
#[derive(Debug, Clone)]
pub struct Expected<'a> {
    pub issuer: &'a str,
    pub audience: &'a str,
    /// Seconds of clock difference tolerated on `exp` and `nbf`.
    pub leeway_s: i64,
    pub now_s: i64,
    /// Where the groups are: a claim name, or a dotted path into nested objects
    /// (`realm_access.roles`).
    pub groups_claim: &'a str,
    /// The claim that names the person (`preferred_username`, `email`); `sub` when absent.
    pub name_claim: &'a str,
}

/// Who a valid token names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub subject: String,
    pub name: String,
    pub groups: Vec<String>,
    /// When the token expires, in seconds since the epoch.
    pub expires_at_s: i64,
}

/// Checks `token`'s signature with `key` (which must be for the header's algorithm), then its
/// claims against `expected`.
pub fn verify(
    token: &str,
    key: &VerifyingKey,
    expected: &Expected<'_>,
) -> Result<Identity, Refusal> {
    let header = header(token)?;
    if header.algorithm != key.algorithm {
        return Err(Refusal::Signature);
    }
    let mut parts = token.split('.');
    let (Some(head), Some(body), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::Malformed("it does not have three parts"));
    };
    let signature = b64(signature).ok_or(Refusal::Malformed("its signature is not base64url"))?;
    let message = &token.as_bytes()[..head.len() + 1 + body.len()];
    if !key.verifies(message, &signature) {
        return Err(Refusal::Signature);
    }
    let claims: Value = b64(body)
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .filter(Value::is_object)
        .ok_or(Refusal::Malformed("its claims are not a JSON object"))?;
    check_claims(&claims, expected)
}

fn check_claims(claims: &Value, expected: &Expected<'_>) -> Result<Identity, Refusal> {
    let issuer = claims
        .get("iss")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if issuer.trim_end_matches('/') != expected.issuer.trim_end_matches('/') {
        return Err(Refusal::Issuer(shown(issuer)));
    }
    let audience_named = match claims.get("aud") {
        Some(Value::String(one)) => one == expected.audience,
        Some(Value::Array(many)) => many.iter().any(|a| a.as_str() == Some(expected.audience)),
        _ => false,
    };
    if !audience_named {
        return Err(Refusal::Audience);
    }
    // Seconds as a float: a NumericDate may have a fraction, and every i64 of seconds that a
    // clock can hold is exact in an f64 far past the year 10,000.
    #[allow(
        clippy::cast_precision_loss,
        reason = "seconds of a clock, exact in an f64"
    )]
    let (now, leeway) = (expected.now_s as f64, expected.leeway_s as f64);
    let Some(expires_at) = numeric_date(claims, "exp")? else {
        return Err(Refusal::Malformed("it has no `exp`"));
    };
    if now >= expires_at + leeway {
        return Err(Refusal::Expired);
    }
    for (claim, refusal) in [("nbf", Refusal::NotYetValid), ("iat", Refusal::IssuedAhead)] {
        if numeric_date(claims, claim)?.is_some_and(|at| now + leeway < at) {
            return Err(refusal);
        }
    }
    #[allow(
        clippy::cast_possible_truncation,
        reason = "checked finite, floored, saturating"
    )]
    let expires_at_s = expires_at.floor() as i64;
    let subject = claims
        .get("sub")
        .and_then(Value::as_str)
        .filter(|sub| !sub.is_empty())
        .ok_or(Refusal::NoSubject)?
        .to_owned();
    let name = claims
        .get(expected.name_claim)
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
        .unwrap_or(&subject)
        .to_owned();
    let groups = match expected
        .groups_claim
        .split('.')
        .try_fold(claims, |value, step| value.get(step))
    {
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        Some(Value::String(one)) => vec![one.clone()],
        _ => Vec::new(),
    };
    Ok(Identity {
        subject,
        name,
        groups,
        expires_at_s,
    })
}

/// The NumericDate claim `name` (RFC 7519 §2: seconds since the epoch, a fraction allowed);
/// `None` when absent, refused when it is anything but a finite number.
fn numeric_date(claims: &Value, name: &'static str) -> Result<Option<f64>, Refusal> {
    match claims.get(name) {
        None => Ok(None),
        Some(value) => match value.as_f64().filter(|at| at.is_finite()) {
            Some(at) => Ok(Some(at)),
            None => Err(Refusal::NotANumericDate(name)),
        },
    }
}

#[cfg(test)]
mod tests;
