//! `carillon secrets`: a namespace's secrets, set from standard input or a file (never from
//! the command line, which `ps` and shell histories show), listed without their values.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use reqwest::Method;
use serde_json::json;

use super::client::ApiTarget;
use super::commands::{CommandError, Output, encode, out, show};
use crate::secrets::seal::SealingKey;

#[derive(Debug, Subcommand)]
pub(crate) enum SecretsCommand {
    /// List the namespace's secrets: names, versions, who changed them (never values).
    Ls,
    /// Set a secret to what standard input holds (one trailing newline dropped), or a file's
    /// contents with --from-file.
    Set {
        name: String,
        #[arg(long)]
        from_file: Option<PathBuf>,
    },
    /// Delete a secret: jobs naming it fail until it is set again.
    Rm { name: String },
    /// Seal every secret with the nodes' current key, after a new secrets.key was given to
    /// every node with the old one among secrets.previous_keys.
    Rotate,
    /// Print a new random key for secrets.key (64 hex digits).
    Key,
}

const SECRET_COLUMNS: [(&str, &str); 6] = [
    ("NAME", "/name"),
    ("VERSION", "/version"),
    ("UPDATED", "/updated_at"),
    ("UPDATED BY", "/updated_by"),
    ("KEY", "/key_id"),
    ("READABLE", "/readable"),
];

/// `carillon secrets key`, which needs no node.
pub(crate) fn new_key() -> ExitCode {
    match SealingKey::generate() {
        Ok(key) => {
            out(&format!("{key}\n"));
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("carillon: {err}");
            ExitCode::FAILURE
        }
    }
}

pub(crate) async fn secrets(
    api: &ApiTarget,
    output: Output,
    command: SecretsCommand,
) -> Result<(), CommandError> {
    match command {
        SecretsCommand::Ls => {
            let list = api.call(Method::GET, "/api/v1/secrets", None).await?;
            show(output, &list, Some("secrets"), &SECRET_COLUMNS);
        }
        SecretsCommand::Set { name, from_file } => {
            let value = read_value(from_file)?;
            let path = format!("/api/v1/secrets/{}", encode(&name));
            let written = api
                .call(Method::PUT, &path, Some(&json!({"value": value})))
                .await?;
            show(output, &written, None, &SECRET_COLUMNS);
        }
        SecretsCommand::Rm { name } => {
            let path = format!("/api/v1/secrets/{}", encode(&name));
            api.call(Method::DELETE, &path, None).await?;
        }
        SecretsCommand::Rotate => {
            let done = api
                .call(Method::POST, "/api/v1/secrets/rotate", None)
                .await?;
            show(
                output,
                &done,
                None,
                &[
                    ("KEY", "/key_id"),
                    ("RESEALED", "/resealed"),
                    ("UNOPENED", "/unopened"),
                    ("REWRITTEN", "/rewritten"),
                ],
            );
        }
        // Answered before any node is looked for (`cli::run`).
        SecretsCommand::Key => {
            new_key();
        }
    }
    Ok(())
}

fn read_value(from_file: Option<PathBuf>) -> Result<String, CommandError> {
    let (mut value, source) = match from_file {
        Some(path) => {
            let value = std::fs::read_to_string(&path).map_err(|err| CommandError::File {
                path: path.clone(),
                reason: err.to_string(),
            })?;
            (value, path)
        }
        None => {
            let mut value = String::new();
            std::io::stdin()
                .read_to_string(&mut value)
                .map_err(|err| CommandError::File {
                    path: PathBuf::from("standard input"),
                    reason: err.to_string(),
                })?;
            (value, PathBuf::from("standard input"))
        }
    };
    if value.ends_with('\n') {
        value.pop();
        if value.ends_with('\r') {
            value.pop();
        }
    }
    if value.is_empty() {
        return Err(CommandError::File {
            path: source,
            reason: "holds no value".to_owned(),
        });
    }
    Ok(value)
}
