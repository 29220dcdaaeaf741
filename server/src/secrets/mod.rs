//! Named secrets: sealed with the operators' key before they reach the database (`seal`),
//! opened only where they are used, re-sealed under a new key by a rotation.

pub mod names;
pub mod seal;

pub use names::check_name;

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::secret::Secret;
use crate::store::{Error as StoreError, SecretStore};
use seal::{Keyring, SealError, SealingKey};

/// Secrets re-sealed per read of a rotation.
const ROTATION_BATCH: i64 = 100;

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("secrets.key_file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the secrets key in {path}: {source}")]
    Invalid { path: PathBuf, source: SealError },
    #[error("secrets.key: {0}")]
    Key(SealError),
    #[error("secrets.previous_keys: {0}")]
    Previous(SealError),
}

/// `[secrets]`. Every node of a cluster needs the same key. Without one, a node on SQLite
/// makes one in its data directory; a node on a shared database stores no secrets (the API
/// says to set this).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecretsConfig {
    /// 32 bytes as 64 hex digits or 44 base64 characters (`carillon secrets key`).
    pub key: Option<Secret>,
    /// A file holding the key (mode 0600), instead of `key`.
    pub key_file: Option<PathBuf>,
    /// Keys secrets may still be sealed with during a rotation: they open, never seal.
    pub previous_keys: Vec<Secret>,
}

impl SecretsConfig {
    /// Whether the settings name a key (else a node on SQLite keeps one of its own).
    pub fn names_a_key(&self) -> bool {
        self.key.is_some() || self.key_file.is_some()
    }
}

/// The node's keys: from `[secrets]`, else `kept` (the text and file of the key a node on
/// SQLite keeps in its data directory), else none: nodes on a shared database with keys of
/// their own would each seal what the others cannot open.
pub fn load_keys(
    config: &SecretsConfig,
    kept: Option<(&str, &Path)>,
) -> Result<Option<Keyring>, KeyError> {
    let current = match (&config.key, &config.key_file, kept) {
        (Some(key), _, _) => SealingKey::parse(key.expose()).map_err(KeyError::Key)?,
        (None, Some(path), _) => read_key(path)?,
        (None, None, Some((text, path))) => {
            SealingKey::parse(text).map_err(|source| KeyError::Invalid {
                path: path.to_owned(),
                source,
            })?
        }
        (None, None, None) => return Ok(None),
    };
    let previous = config
        .previous_keys
        .iter()
        .map(|key| SealingKey::parse(key.expose()).map_err(KeyError::Previous))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(Keyring::new(current, previous)))
}

fn read_key(path: &Path) -> Result<SealingKey, KeyError> {
    let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
        path: path.to_owned(),
        source,
    })?;
    SealingKey::parse(&text).map_err(|source| KeyError::Invalid {
        path: path.to_owned(),
        source,
    })
}

/// What a rotation did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rotation {
    /// Secrets now sealed with the current key.
    pub resealed: u64,
    /// Secrets sealed with a key this node does not have: they stay as they are.
    pub unopened: u64,
    /// Secrets written while the rotation read them: written with the current key already.
    pub rewritten: u64,
}

/// Seals every secret of every namespace that another key sealed with the current one, a
/// batch at a time; a secret written meanwhile is left to its writer.
pub async fn rotate(store: &dyn SecretStore, keys: &Keyring) -> Result<Rotation, StoreError> {
    let mut done = Rotation::default();
    let mut after = 0;
    loop {
        let batch = store
            .secrets_under_other_keys(keys.current().id(), after, ROTATION_BATCH)
            .await?;
        let Some(last) = batch.last() else {
            return Ok(done);
        };
        after = last.secret_id;
        for secret in batch {
            let namespace = secret.namespace_id.0;
            let Ok(value) = keys.open(namespace, &secret.name, &secret.sealed) else {
                done.unopened += 1;
                continue;
            };
            let Ok(sealed) = keys.current().seal(namespace, &secret.name, &value) else {
                done.unopened += 1;
                continue;
            };
            let resealed = store
                .secret_reseal(
                    secret.secret_id,
                    secret.version,
                    &sealed,
                    keys.current().id(),
                )
                .await?;
            if resealed {
                done.resealed += 1;
            } else {
                done.rewritten += 1;
            }
        }
    }
}
