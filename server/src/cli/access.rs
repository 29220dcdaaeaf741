//! `carillon namespaces` (the teams' spaces) and `carillon tokens` (a namespace's service
//! tokens).

use clap::Subcommand;
use reqwest::Method;
use serde_json::json;

use super::client::ApiTarget;
use super::commands::{CommandError, Output, encode, out, show};

#[derive(Debug, Subcommand)]
pub(crate) enum NamespacesCommand {
    /// List the namespaces this token has a role in.
    Ls,
    /// Create a namespace (the cluster's admin token).
    Create {
        name: String,
        #[arg(long, default_value = "")]
        description: String,
    },
    /// Delete an empty namespace, with its service tokens.
    Rm { name: String },
}

#[derive(Debug, Subcommand)]
pub(crate) enum TokensCommand {
    /// List the namespace's service tokens (never their secrets).
    Ls,
    /// Create a service token with one role in the namespace; it is printed this once.
    Create {
        name: String,
        /// viewer, operator (start, stop, trigger, cancel, re-run), editor (create, edit,
        /// delete) or admin (also the namespace's tokens).
        #[arg(long)]
        role: String,
        /// Days until it expires (default 90).
        #[arg(long)]
        expires_in_days: Option<u32>,
    },
    /// Revoke a token by id: every node refuses it within 5 seconds.
    Revoke { id: i64 },
}

const NAMESPACE_COLUMNS: [(&str, &str); 3] = [
    ("NAME", "/name"),
    ("CREATED", "/created_at"),
    ("DESCRIPTION", "/description"),
];

const TOKEN_COLUMNS: [(&str, &str); 7] = [
    ("ID", "/id"),
    ("NAME", "/name"),
    ("ROLE", "/role"),
    ("PREFIX", "/prefix"),
    ("EXPIRES", "/expires_at"),
    ("LAST USED", "/last_used_at"),
    ("CREATED BY", "/created_by"),
];

pub(crate) async fn namespaces(
    api: &ApiTarget,
    output: Output,
    command: NamespacesCommand,
) -> Result<(), CommandError> {
    match command {
        NamespacesCommand::Ls => {
            let list = api.call(Method::GET, "/api/v1/namespaces", None).await?;
            show(output, &list, Some("namespaces"), &NAMESPACE_COLUMNS);
        }
        NamespacesCommand::Create { name, description } => {
            let body = json!({"name": name, "description": description});
            let created = api
                .call(Method::POST, "/api/v1/namespaces", Some(&body))
                .await?;
            show(output, &created, None, &NAMESPACE_COLUMNS);
        }
        NamespacesCommand::Rm { name } => {
            let path = format!("/api/v1/namespaces/{}", encode(&name));
            api.call(Method::DELETE, &path, None).await?;
        }
    }
    Ok(())
}

pub(crate) async fn tokens(
    api: &ApiTarget,
    output: Output,
    command: TokensCommand,
) -> Result<(), CommandError> {
    match command {
        TokensCommand::Ls => {
            let list = api.call(Method::GET, "/api/v1/tokens", None).await?;
            show(output, &list, Some("tokens"), &TOKEN_COLUMNS);
        }
        TokensCommand::Create {
            name,
            role,
            expires_in_days,
        } => {
            let mut body = json!({"name": name, "role": role});
            if let Some(days) = expires_in_days {
                body["expires_in_days"] = json!(days);
            }
            let created = api
                .call(Method::POST, "/api/v1/tokens", Some(&body))
                .await?;
            show(output, &created, None, &TOKEN_COLUMNS);
            if matches!(output, Output::Table) {
                let token = created["token"].as_str().unwrap_or_default();
                out(&format!(
                    "token (shown this once; send it as Authorization: Bearer): {token}\n"
                ));
            }
        }
        TokensCommand::Revoke { id } => {
            api.call(Method::DELETE, &format!("/api/v1/tokens/{id}"), None)
                .await?;
        }
    }
    Ok(())
}
