//! Values that must never reach a log line or an error message: tokens, the dispatch secret,
//! webhook URLs. A leaf: it imports nothing of the server.

use std::fmt;

use serde::Deserialize;

/// A value that must never reach a log line or an error message.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Self(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}
