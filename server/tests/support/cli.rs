//! The `carillon` client commands against a node, as a user runs them.

use std::process::Command;

use super::node::TOKEN;

/// Runs `carillon <args>` against the node at `url` with the admin token and no local
/// default node; returns whether it succeeded, its standard output and its standard error.
pub fn carillon(url: &str, args: &[&str]) -> (bool, String, String) {
    let home = tempfile::tempdir().expect("a temp dir");
    let output = Command::new(env!("CARGO_BIN_EXE_carillon"))
        .args(args)
        .env("CARILLON_URL", url)
        .env("CARILLON_TOKEN", TOKEN)
        .env("XDG_DATA_HOME", home.path())
        .output()
        .expect("carillon runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
