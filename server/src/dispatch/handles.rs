//! Attempt handles: what a dispatch gives its executor to act on the attempt afterwards. An
//! executor's result and log lines quote the handle of the attempt they are for; attempt ids
//! are small sequential numbers, so an id alone authorises nothing. A handle is the HMAC of
//! the attempt's id under a key only the nodes know (`node_keys`, made by the first node to
//! start): every node checks any node's handle, and nothing is written on the fire path.

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The name of the handles' key in `node_keys`.
pub const KEY_NAME: &str = "attempt_handles";

/// Bytes of the MAC a handle carries: 128 bits, unguessable at any rate of tries.
const HANDLE_BYTES: usize = 16;

/// Why the stored key cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("the nodes' key {KEY_NAME} is not 64 hexadecimal digits")]
pub struct BadKey;

/// Makes and checks attempt handles.
#[derive(Clone)]
pub struct AttemptHandles {
    /// Keyed once; cloned for each handle.
    keyed: Hmac<Sha256>,
}

impl std::fmt::Debug for AttemptHandles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AttemptHandles(***)")
    }
}

impl AttemptHandles {
    /// Handles under the key `key_hex` (as `node_keys` holds it).
    pub fn new(key_hex: &str) -> Result<Self, BadKey> {
        let bytes = key_hex.as_bytes();
        if bytes.len() != 64 {
            return Err(BadKey);
        }
        let mut key = [0u8; 32];
        for (i, pair) in bytes.chunks(2).enumerate() {
            let text = std::str::from_utf8(pair).map_err(|_| BadKey)?;
            key[i] = u8::from_str_radix(text, 16).map_err(|_| BadKey)?;
        }
        // HMAC takes keys of any length; this cannot fail.
        let keyed = <Hmac<Sha256> as KeyInit>::new_from_slice(&key)
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        Ok(Self { keyed })
    }

    /// A new random key, as `node_keys` stores it.
    pub fn random_key_hex() -> Result<String, getrandom::Error> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key)?;
        Ok(key.iter().map(|byte| format!("{byte:02x}")).collect())
    }

    /// The handle of attempt `attempt_id`.
    pub fn of(&self, attempt_id: i64) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.mac(attempt_id))
    }

    /// Whether `handle` is attempt `attempt_id`'s, compared in constant time.
    pub fn verifies(&self, attempt_id: i64, handle: &str) -> bool {
        let Ok(given) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(handle) else {
            return false;
        };
        let expected = self.mac(attempt_id);
        given.len() == expected.len()
            && given
                .iter()
                .zip(expected.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }

    fn mac(&self, attempt_id: i64) -> [u8; HANDLE_BYTES] {
        let mut mac = self.keyed.clone();
        mac.update(b"carillon attempt ");
        mac.update(attempt_id.to_string().as_bytes());
        let full = mac.finalize().into_bytes();
        let mut out = [0u8; HANDLE_BYTES];
        out.copy_from_slice(&full[..HANDLE_BYTES]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_is_its_attempts_alone_and_needs_the_nodes_key() {
        let key = AttemptHandles::random_key_hex().unwrap();
        let handles = AttemptHandles::new(&key).unwrap();
        let six = handles.of(6);
        assert_eq!(six.len(), 22);
        assert!(handles.verifies(6, &six));
        assert!(!handles.verifies(7, &six), "another attempt's handle");
        assert_ne!(handles.of(7), six);
        let other = AttemptHandles::new(&AttemptHandles::random_key_hex().unwrap()).unwrap();
        assert!(!other.verifies(6, &six), "another cluster's key");
        for forged in [
            "",
            "6",
            "AAAAAAAAAAAAAAAAAAAAAA",
            &six[..21],
            &format!("{six}A"),
        ] {
            assert!(!handles.verifies(6, forged), "{forged:?}");
        }
        assert!(AttemptHandles::new("00").is_err());
        assert!(AttemptHandles::new(&"g".repeat(64)).is_err());
        assert!(!format!("{handles:?}").contains(&key[..8]));
    }
}
