//! The dispatch signature: HMAC-SHA256 with the shared dispatch secret over
//! `"<timestamp>.<body>"`, where the timestamp is Unix milliseconds sent in
//! `X-Carillon-Timestamp`; the signature travels as `X-Carillon-Signature: v1=<hex>`.
//! A receiver refuses a timestamp more than [`REPLAY_WINDOW_MS`] from its clock, and within the
//! window refuses an attempt id it has already accepted.

use hmac::{KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = hmac::Hmac<Sha256>;

pub const TIMESTAMP_HEADER: &str = "x-carillon-timestamp";
pub const SIGNATURE_HEADER: &str = "x-carillon-signature";
/// How far a signed request's timestamp may be from the receiver's clock.
pub const REPLAY_WINDOW_MS: i64 = 300_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("missing {0} header")]
    Missing(&'static str),
    #[error("the timestamp is not Unix milliseconds")]
    BadTimestamp,
    #[error("the timestamp is {0} ms away from this clock, outside the replay window")]
    Stale(i64),
    #[error("the signature is not of the form v1=<64 hex digits>")]
    Malformed,
    #[error("the signature does not match")]
    Mismatch,
}

fn mac(secret: &[u8], timestamp_ms: i64, body: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length; this cannot fail.
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    mac.update(timestamp_ms.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The `X-Carillon-Signature` value for `body` sent at `timestamp_ms`.
pub fn sign(secret: &[u8], timestamp_ms: i64, body: &[u8]) -> String {
    let tag = mac(secret, timestamp_ms, body).finalize().into_bytes();
    let mut out = String::with_capacity(3 + 64);
    out.push_str("v1=");
    for byte in tag.iter() {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// Checks the two headers of a signed request against its body, at `now_ms`; the timestamp
/// it was signed at (epoch milliseconds) when it verifies.
pub fn verify(
    secret: &[u8],
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now_ms: i64,
) -> Result<i64, SignatureError> {
    let timestamp = timestamp.ok_or(SignatureError::Missing(TIMESTAMP_HEADER))?;
    let signature = signature.ok_or(SignatureError::Missing(SIGNATURE_HEADER))?;
    let timestamp_ms: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| SignatureError::BadTimestamp)?;
    let skew = now_ms.saturating_sub(timestamp_ms);
    if skew.abs() > REPLAY_WINDOW_MS {
        return Err(SignatureError::Stale(skew));
    }
    let hex = signature
        .trim()
        .strip_prefix("v1=")
        .ok_or(SignatureError::Malformed)?;
    let tag = decode_hex(hex).ok_or(SignatureError::Malformed)?;
    // verify_slice compares in constant time.
    mac(secret, timestamp_ms, body)
        .verify_slice(&tag)
        .map(|()| timestamp_ms)
        .map_err(|_| SignatureError::Mismatch)
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"a-shared-dispatch-secret";

    #[test]
    fn a_signature_verifies_only_for_its_body_timestamp_and_secret() {
        let body = br#"{"attempt_id":1}"#;
        let signature = sign(SECRET, 1_000_000, body);
        assert!(signature.starts_with("v1=") && signature.len() == 67);
        assert_eq!(
            verify(SECRET, Some("1000000"), Some(&signature), body, 1_000_000),
            Ok(1_000_000)
        );
        assert_eq!(
            verify(SECRET, Some("1000000"), Some(&signature), b"{}", 1_000_000),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(SECRET, Some("1000001"), Some(&signature), body, 1_000_000),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(b"other", Some("1000000"), Some(&signature), body, 1_000_000),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn old_or_future_timestamps_and_bad_headers_are_refused() {
        let body = b"{}";
        let signature = sign(SECRET, 0, body);
        assert!(matches!(
            verify(
                SECRET,
                Some("0"),
                Some(&signature),
                body,
                REPLAY_WINDOW_MS + 1
            ),
            Err(SignatureError::Stale(_))
        ));
        assert_eq!(
            verify(SECRET, None, Some(&signature), body, 0),
            Err(SignatureError::Missing(TIMESTAMP_HEADER))
        );
        assert_eq!(
            verify(SECRET, Some("x"), Some(&signature), body, 0),
            Err(SignatureError::BadTimestamp)
        );
        assert_eq!(
            verify(SECRET, Some("0"), Some("v2=00"), body, 0),
            Err(SignatureError::Malformed)
        );
    }

    #[test]
    fn a_known_vector() {
        // Computed independently: python3 -c "import hmac,hashlib;
        // print(hmac.new(b'key', b'1700000000000.{}', hashlib.sha256).hexdigest())"
        assert_eq!(
            sign(b"key", 1_700_000_000_000, b"{}"),
            "v1=36a72f4525d3323bd0f238fe82098164fb77b1e42288ff8e07b074c686178ad3"
        );
    }
}
