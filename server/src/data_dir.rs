//! The node's data directory: its persisted node id, its generated admin token and, by
//! default, its SQLite database.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::config::{self, Secret};

const NODE_ID_FILE: &str = "node-id";
const ADMIN_TOKEN_FILE: &str = "admin-token";
const SQLITE_FILE: &str = "carillon.db";

#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error("data directory {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no secure random numbers available: {0}")]
    Random(getrandom::Error),
    #[error("{path} holds an invalid value: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> DataDirError + '_ {
    move |source| DataDirError::Io {
        path: path.to_owned(),
        source,
    }
}

/// An existing data directory, created if needed.
#[derive(Debug, Clone)]
pub struct DataDir {
    path: PathBuf,
}

/// A value read from the data directory, or made and stored there on first use.
#[derive(Debug)]
pub struct Persisted<T> {
    pub value: T,
    pub path: PathBuf,
    pub created: bool,
}

impl DataDir {
    pub fn open(path: &Path) -> Result<Self, DataDirError> {
        std::fs::create_dir_all(path).map_err(io_error(path))?;
        // Absolute, so the SQLite URL and the logged token path mean the same from anywhere.
        let path = std::fs::canonicalize(path).map_err(io_error(path))?;
        Ok(Self { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn sqlite_url(&self) -> String {
        format!("sqlite://{}", self.path.join(SQLITE_FILE).display())
    }

    /// This node's id, generated once (`node-` and 12 hex digits) and then kept.
    pub fn node_id(&self) -> Result<Persisted<String>, DataDirError> {
        let persisted =
            self.read_or_create(NODE_ID_FILE, || Ok(format!("node-{}", random_hex(6)?)))?;
        config::validate_node_id(&persisted.value).map_err(|e| DataDirError::Invalid {
            path: persisted.path.clone(),
            reason: e.to_string(),
        })?;
        Ok(persisted)
    }

    /// The admin token, generated at first start (256 random bits) and readable only by the
    /// owner of the file.
    pub fn admin_token(&self) -> Result<Persisted<Secret>, DataDirError> {
        self.secret(ADMIN_TOKEN_FILE)
    }

    /// The executor token, like the admin token.
    pub fn executor_token(&self) -> Result<Persisted<Secret>, DataDirError> {
        self.secret("executor-token")
    }

    /// The dispatch signing secret, like the admin token.
    pub fn dispatch_secret(&self) -> Result<Persisted<Secret>, DataDirError> {
        self.secret("dispatch-secret")
    }

    /// The key secrets are sealed with when the settings name none (a node on SQLite): 32
    /// random bytes as hex, made once.
    pub fn secrets_key(&self) -> Result<Persisted<String>, DataDirError> {
        self.read_or_create("secrets-key", || random_hex(32))
    }

    fn secret(&self, name: &str) -> Result<Persisted<Secret>, DataDirError> {
        let persisted = self.read_or_create(name, || random_hex(32))?;
        config::validate_token(&persisted.value).map_err(|e| DataDirError::Invalid {
            path: persisted.path.clone(),
            reason: e.to_string(),
        })?;
        Ok(Persisted {
            value: Secret::new(persisted.value),
            path: persisted.path,
            created: persisted.created,
        })
    }

    fn read_or_create(
        &self,
        name: &str,
        make: impl FnOnce() -> Result<String, DataDirError>,
    ) -> Result<Persisted<String>, DataDirError> {
        let path = self.path.join(name);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                return Ok(Persisted {
                    value: text.trim().to_owned(),
                    path,
                    created: false,
                });
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(io_error(&path)(err)),
        }
        let value = make()?;
        write_private(&path, &value).map_err(io_error(&path))?;
        Ok(Persisted {
            value,
            path,
            created: true,
        })
    }
}

/// Writes a new file readable by its owner only; fails if it exists (two processes racing).
fn write_private(path: &Path, value: &str) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    writeln!(file, "{value}")?;
    file.sync_all()
}

/// `bytes` random bytes from the operating system, as hex.
pub fn random_hex(bytes: usize) -> Result<String, DataDirError> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(DataDirError::Random)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_id_and_token_are_generated_once_then_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = DataDir::open(&tmp.path().join("nested/data")).unwrap();
        let id = dir.node_id().unwrap();
        assert!(id.created && id.value.starts_with("node-") && id.value.len() == 17);
        let token = dir.admin_token().unwrap();
        assert!(token.created);
        assert_eq!(token.value.expose().len(), 64);

        let again = DataDir::open(&tmp.path().join("nested/data")).unwrap();
        assert_eq!(again.node_id().unwrap().value, id.value);
        let token_again = again.admin_token().unwrap();
        assert!(!token_again.created);
        assert_eq!(token_again.value, token.value);
    }

    #[cfg(unix)]
    #[test]
    fn the_token_file_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let token = DataDir::open(tmp.path()).unwrap().admin_token().unwrap();
        let mode = std::fs::metadata(&token.path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_blank_token_file_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(ADMIN_TOKEN_FILE), "\n").unwrap();
        let err = DataDir::open(tmp.path())
            .unwrap()
            .admin_token()
            .unwrap_err();
        assert!(err.to_string().contains("admin-token"), "{err}");
    }
}
