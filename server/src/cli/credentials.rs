//! What `carillon login` keeps: for each node URL, the person's tokens from the identity
//! provider, in `credentials.json` beside the command line's settings (or
//! `CARILLON_CREDENTIALS`), a file only its owner may read or write (mode `0600`).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A person's tokens for one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Credential {
    pub(crate) issuer: String,
    pub(crate) client_id: String,
    pub(crate) audience: String,
    pub(crate) token_endpoint: String,
    pub(crate) access_token: String,
    pub(crate) refresh_token: Option<String>,
    /// When the access token expires, in seconds since the epoch.
    pub(crate) expires_at_s: i64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    /// By node URL.
    nodes: BTreeMap<String, Credential>,
}

/// The file could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CredentialsError {
    #[error("no place for the credentials: set HOME, XDG_CONFIG_HOME or CARILLON_CREDENTIALS")]
    NoPlace,
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
}

fn path() -> Result<PathBuf, CredentialsError> {
    if let Some(path) = std::env::var_os("CARILLON_CREDENTIALS") {
        return Ok(PathBuf::from(path));
    }
    super::client_config::settings_dir()
        .map(|dir| dir.join("credentials.json"))
        .ok_or(CredentialsError::NoPlace)
}

fn read() -> Result<(PathBuf, File), CredentialsError> {
    let path = path()?;
    let bad = |reason: String| CredentialsError::File {
        path: path.clone(),
        reason,
    };
    let file = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|err| {
            bad(format!(
                "not what `carillon login` writes ({err}); delete it and sign in again"
            ))
        })?,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => File::default(),
        Err(err) => return Err(bad(err.to_string())),
    };
    Ok((path, file))
}

fn write(path: &PathBuf, file: &File) -> Result<(), CredentialsError> {
    let bad = |reason: String| CredentialsError::File {
        path: path.clone(),
        reason,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|err| bad(err.to_string()))?;
    }
    let text = serde_json::to_vec_pretty(file).map_err(|err| bad(err.to_string()))?;
    // Written whole beside it, then moved over it: a reader never sees half a file, and the
    // tokens are never readable by anyone else, not even for a moment.
    let partial = path.with_extension("json.partial");
    // Made anew, so that it has this mode whatever a leftover had.
    match std::fs::remove_file(&partial) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(bad(err.to_string())),
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut out = options.open(&partial).map_err(|err| bad(err.to_string()))?;
    out.write_all(&text)
        .and_then(|()| out.sync_all())
        .map_err(|err| bad(err.to_string()))?;
    std::fs::rename(&partial, path).map_err(|err| bad(err.to_string()))
}

/// The credential kept for `url`, if any.
pub(crate) fn load(url: &str) -> Result<Option<Credential>, CredentialsError> {
    let (_, file) = read()?;
    Ok(file.nodes.get(url).cloned())
}

/// Keeps `credential` for `url`, in place of any before it.
pub(crate) fn save(url: &str, credential: Credential) -> Result<(), CredentialsError> {
    let (path, mut file) = read()?;
    file.nodes.insert(url.to_owned(), credential);
    write(&path, &file)
}

/// Forgets the credential of `url`: false when there was none.
pub(crate) fn remove(url: &str) -> Result<bool, CredentialsError> {
    let (path, mut file) = read()?;
    let removed = file.nodes.remove(url).is_some();
    if removed {
        write(&path, &file)?;
    }
    Ok(removed)
}
