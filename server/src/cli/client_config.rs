//! The command line's own settings file, so that someone who works with one node and one
//! namespace types `carillon jobs ls` rather than the same flags each time. Flags and
//! environment variables win over it. It is not the server's `--config`.
//!
//! ```toml
//! url = "https://carillon.example.com"
//! namespace = "team-a"
//! ca_file = "/etc/ssl/our-ca.pem"
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// What the file may set.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClientConfig {
    /// The node's API.
    pub(crate) url: Option<String>,
    /// The namespace client commands work in.
    pub(crate) namespace: Option<String>,
    /// A CA certificate (PEM) to trust for an https:// node.
    pub(crate) ca_file: Option<PathBuf>,
}

/// The command line's own directory: `$XDG_CONFIG_HOME/carillon` or `~/.config/carillon`.
pub(crate) fn settings_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))?;
    Some(base.join("carillon"))
}

/// The file could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientConfigError {
    #[error("cannot read the client settings {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid client settings {path}: {message}")]
    Parse { path: PathBuf, message: String },
}

impl ClientConfig {
    /// Where the file is: `CARILLON_CLI_CONFIG`, else `cli.toml` under `$XDG_CONFIG_HOME/carillon`
    /// or `~/.config/carillon`.
    pub(crate) fn path() -> Option<PathBuf> {
        if let Some(path) = std::env::var_os("CARILLON_CLI_CONFIG") {
            return Some(PathBuf::from(path));
        }
        Some(settings_dir()?.join("cli.toml"))
    }

    /// The settings of the file at [`ClientConfig::path`]; none when there is no file.
    pub(crate) fn load() -> Result<Self, ClientConfigError> {
        match Self::path() {
            Some(path) if path.is_file() => Self::read(&path),
            _ => Ok(Self::default()),
        }
    }

    /// The settings of the file at `path`.
    pub(crate) fn read(path: &Path) -> Result<Self, ClientConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ClientConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let config: Self = toml::from_str(&text).map_err(|err| ClientConfigError::Parse {
            path: path.to_owned(),
            message: err.message().to_owned(),
        })?;
        if let Some(namespace) = &config.namespace {
            crate::namespaces::check_name(namespace).map_err(|why| ClientConfigError::Parse {
                path: path.to_owned(),
                message: format!("namespace: {why}"),
            })?;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<ClientConfig, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cli.toml");
        std::fs::write(&path, text).unwrap();
        ClientConfig::read(&path).map_err(|e| e.to_string())
    }

    #[test]
    fn the_file_sets_the_node_the_namespace_and_the_ca() {
        let config = read("url = \"https://n1:9001\"\nnamespace = \"team-a\"\n").unwrap();
        assert_eq!(config.url.as_deref(), Some("https://n1:9001"));
        assert_eq!(config.namespace.as_deref(), Some("team-a"));
        assert_eq!(config.ca_file, None);
    }

    #[test]
    fn a_misspelt_key_or_a_bad_namespace_is_named() {
        let err = read("namspace = \"team-a\"\n").unwrap_err();
        assert!(
            err.contains("cli.toml") && err.contains("namspace"),
            "{err}"
        );
        let err = read("namespace = \"Team A\"\n").unwrap_err();
        assert!(
            err.contains("namespace: \"Team A\" is not a namespace name"),
            "{err}"
        );
    }
}
