//! Sealing a secret's value for the database: AES-256-GCM with a random nonce per write, the
//! secret's namespace and name as associated data (a sealed value copied onto another row does
//! not open), written as text so the three backends store it alike:
//! `v1.<key id>.<base64url(nonce ‖ ciphertext ‖ tag)>`. A leaf: it imports nothing of the server.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use sha2::{Digest, Sha256};

const VERSION: &str = "v1";
const KEY_LEN: usize = 32;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    #[error(
        "a secrets key is 32 bytes, written as 64 hex digits or 44 base64 characters \
         (`carillon secrets key` prints one)"
    )]
    BadKey,
    #[error("no secure random numbers available")]
    Random,
    #[error("the value could not be sealed")]
    Seal,
    #[error("the stored value is not a sealed secret")]
    Malformed,
    #[error("sealed with key {0}, which this node does not have")]
    UnknownKey(String),
    #[error("does not open with key {0}: altered, or stored under another name")]
    Tampered(String),
}

/// One 256-bit key and its id (the first 8 bytes of its SHA-256, in hex).
pub struct SealingKey {
    id: String,
    key: LessSafeKey,
}

impl std::fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SealingKey({})", self.id)
    }
}

impl SealingKey {
    /// A key from its text: 64 hex digits or standard base64 of 32 bytes.
    pub fn parse(text: &str) -> Result<Self, SealError> {
        let text = text.trim();
        let bytes = if text.len() == 2 * KEY_LEN {
            hex_bytes(text).ok_or(SealError::BadKey)?
        } else {
            STANDARD.decode(text).map_err(|_| SealError::BadKey)?
        };
        Self::from_bytes(&bytes)
    }

    fn from_bytes(bytes: &[u8]) -> Result<Self, SealError> {
        if bytes.len() != KEY_LEN {
            return Err(SealError::BadKey);
        }
        let digest = Sha256::digest(bytes);
        let id = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        let key = UnboundKey::new(&AES_256_GCM, bytes).map_err(|_| SealError::BadKey)?;
        Ok(Self {
            id,
            key: LessSafeKey::new(key),
        })
    }

    /// A new random key, as 64 hex digits.
    pub fn generate() -> Result<String, SealError> {
        let mut bytes = [0u8; KEY_LEN];
        SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| SealError::Random)?;
        Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// `value` sealed for the row `(namespace_id, name)`.
    pub fn seal(&self, namespace_id: i64, name: &str, value: &str) -> Result<String, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| SealError::Random)?;
        let mut data = value.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(associated(namespace_id, name)),
                &mut data,
            )
            .map_err(|_| SealError::Seal)?;
        let mut whole = nonce.to_vec();
        whole.extend_from_slice(&data);
        Ok(format!(
            "{VERSION}.{}.{}",
            self.id,
            URL_SAFE_NO_PAD.encode(whole)
        ))
    }

    fn open(&self, namespace_id: i64, name: &str, body: &str) -> Result<String, SealError> {
        let tampered = || SealError::Tampered(self.id.clone());
        let whole = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| SealError::Malformed)?;
        if whole.len() < NONCE_LEN {
            return Err(SealError::Malformed);
        }
        let (nonce, sealed) = whole.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Malformed)?;
        let mut data = sealed.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(associated(namespace_id, name)), &mut data)
            .map_err(|_| tampered())?;
        String::from_utf8(plain.to_vec()).map_err(|_| tampered())
    }
}

/// The key id a sealed value names, without opening it.
pub fn key_id_of(sealed: &str) -> Result<&str, SealError> {
    let mut parts = sealed.splitn(3, '.');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(VERSION), Some(id), Some(_)) => Ok(id),
        _ => Err(SealError::Malformed),
    }
}

/// The current key, which seals, and earlier ones, which only open (during a rotation).
#[derive(Debug)]
pub struct Keyring {
    current: SealingKey,
    previous: Vec<SealingKey>,
}

impl Keyring {
    pub fn new(current: SealingKey, previous: Vec<SealingKey>) -> Self {
        Self { current, previous }
    }

    pub fn current(&self) -> &SealingKey {
        &self.current
    }

    /// Opens a value sealed for `(namespace_id, name)` with whichever key it names.
    pub fn open(&self, namespace_id: i64, name: &str, sealed: &str) -> Result<String, SealError> {
        let id = key_id_of(sealed)?;
        let body = &sealed[VERSION.len() + id.len() + 2..];
        std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|key| key.id == id)
            .ok_or_else(|| SealError::UnknownKey(id.to_owned()))?
            .open(namespace_id, name, body)
    }

    /// Whether this ring has the key `id`.
    pub fn has(&self, id: &str) -> bool {
        self.current.id == id || self.previous.iter().any(|key| key.id == id)
    }
}

fn associated(namespace_id: i64, name: &str) -> Vec<u8> {
    let mut aad = namespace_id.to_be_bytes().to_vec();
    aad.extend_from_slice(name.as_bytes());
    aad
}

fn hex_bytes(text: &str) -> Option<Vec<u8>> {
    // `from_str_radix` would take a sign too.
    if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    fn key(text: &str) -> SealingKey {
        SealingKey::parse(text).unwrap()
    }

    #[test]
    fn a_value_opens_for_its_row_only() {
        let ring = Keyring::new(key(A), Vec::new());
        let sealed = ring.current().seal(2, "db-password", "hunter2").unwrap();
        assert!(sealed.starts_with(&format!("v1.{}.", ring.current().id())));
        assert!(!sealed.contains("hunter2"));
        assert_eq!(ring.open(2, "db-password", &sealed).unwrap(), "hunter2");
        let id = ring.current().id().to_owned();
        assert_eq!(
            ring.open(2, "api-key", &sealed),
            Err(SealError::Tampered(id.clone()))
        );
        assert_eq!(
            ring.open(3, "db-password", &sealed),
            Err(SealError::Tampered(id.clone()))
        );
        let mut altered = sealed.clone();
        let last = altered.pop().unwrap();
        altered.push(if last == 'A' { 'B' } else { 'A' });
        assert!(ring.open(2, "db-password", &altered).is_err());
        assert_eq!(
            ring.open(2, "db-password", "hunter2"),
            Err(SealError::Malformed)
        );
        // Two seals of one value differ (a nonce each), and both open.
        let again = ring.current().seal(2, "db-password", "hunter2").unwrap();
        assert_ne!(sealed, again);
        assert_eq!(ring.open(2, "db-password", &again).unwrap(), "hunter2");
    }

    #[test]
    fn a_rotated_ring_opens_old_values_and_seals_new_ones_with_the_new_key() {
        let old = Keyring::new(key(A), Vec::new());
        let sealed = old.current().seal(1, "token", "s3cret").unwrap();
        let new_key = SealingKey::generate().unwrap();
        let rotating = Keyring::new(key(&new_key), vec![key(A)]);
        assert_eq!(rotating.open(1, "token", &sealed).unwrap(), "s3cret");
        let resealed = rotating.current().seal(1, "token", "s3cret").unwrap();
        assert_eq!(key_id_of(&resealed).unwrap(), rotating.current().id());
        let new_only = Keyring::new(key(&new_key), Vec::new());
        assert_eq!(new_only.open(1, "token", &resealed).unwrap(), "s3cret");
        assert_eq!(
            new_only.open(1, "token", &sealed),
            Err(SealError::UnknownKey(old.current().id().to_owned()))
        );
    }

    #[test]
    fn keys_are_read_as_hex_or_base64_of_32_bytes() {
        let from_hex = key(A);
        let from_base64 = key("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=");
        assert_eq!(from_hex.id(), from_base64.id());
        assert_eq!(from_hex.id().len(), 16);
        let signed = format!("+0{}", &A[2..]);
        for bad in [
            "",
            "00",
            &A[..62],
            "not a key at all",
            &format!("{A}00"),
            &signed,
        ] {
            assert_eq!(
                SealingKey::parse(bad).unwrap_err(),
                SealError::BadKey,
                "{bad}"
            );
        }
        assert_eq!(SealingKey::generate().unwrap().len(), 64);
    }
}
