//! `carillon namespaces` (the teams' spaces), `carillon tokens` (a namespace's service
//! tokens), `carillon grants` (a namespace's roles for the identity provider's groups) and
//! `carillon audit` (who changed what).

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
        #[command(flatten)]
        quotas: QuotaArgs,
    },
    /// Set all of a namespace's quotas (one left out is none; the cluster's admin token).
    Quotas {
        name: String,
        #[command(flatten)]
        quotas: QuotaArgs,
    },
    /// Delete an empty namespace, with its service tokens.
    Rm { name: String },
}

/// A namespace's quotas; work past one is refused.
#[derive(Debug, clap::Args)]
pub(crate) struct QuotaArgs {
    /// Jobs and workflows it may hold.
    #[arg(long)]
    max_jobs: Option<i64>,
    /// Tasks pending at once.
    #[arg(long)]
    max_pending_tasks: Option<i64>,
    /// Tasks each node takes from it per second.
    #[arg(long)]
    max_enqueue_per_second: Option<i64>,
}

impl QuotaArgs {
    fn body(&self) -> serde_json::Value {
        let mut quotas = serde_json::Map::new();
        for (key, value) in [
            ("jobs", self.max_jobs),
            ("pending_tasks", self.max_pending_tasks),
            ("enqueue_per_second", self.max_enqueue_per_second),
        ] {
            if let Some(value) = value {
                quotas.insert(key.to_owned(), value.into());
            }
        }
        quotas.into()
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum AuditCommand {
    /// The audit trail, newest first (the namespace's with -n; every one's with the admin
    /// token otherwise).
    Ls {
        /// Who, as events name them (`admin token`, `token ci (#4)`).
        #[arg(long)]
        actor: Option<String>,
        /// An operation, e.g. deleteJob.
        #[arg(long)]
        operation: Option<String>,
        /// ok, failed or refused.
        #[arg(long)]
        outcome: Option<String>,
        /// Recorded at or after this instant (RFC 3339).
        #[arg(long)]
        since: Option<String>,
        /// Recorded before this instant (RFC 3339).
        #[arg(long)]
        until: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// The cursor a previous page printed.
        #[arg(long)]
        cursor: Option<String>,
    },
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

#[derive(Debug, Subcommand)]
pub(crate) enum GrantsCommand {
    /// List the roles the namespace gives to the identity provider's groups.
    Ls,
    /// Give a group (as the provider's tokens name it) a role in the namespace.
    Add {
        group: String,
        /// viewer, operator, editor or admin.
        #[arg(long)]
        role: String,
    },
    /// Take a grant back by id: every node applies it within 5 seconds.
    Rm { id: i64 },
}

const GRANT_COLUMNS: [(&str, &str); 5] = [
    ("ID", "/id"),
    ("GROUP", "/group"),
    ("ROLE", "/role"),
    ("CREATED", "/created_at"),
    ("CREATED BY", "/created_by"),
];

const NAMESPACE_COLUMNS: [(&str, &str); 6] = [
    ("NAME", "/name"),
    ("CREATED", "/created_at"),
    ("MAX JOBS", "/quotas/jobs"),
    ("MAX PENDING", "/quotas/pending_tasks"),
    ("MAX /S", "/quotas/enqueue_per_second"),
    ("DESCRIPTION", "/description"),
];

const AUDIT_COLUMNS: [(&str, &str); 8] = [
    ("AT", "/at"),
    ("NAMESPACE", "/namespace"),
    ("ACTOR", "/actor"),
    ("FROM", "/source"),
    ("OPERATION", "/operation"),
    ("RESOURCE", "/resource"),
    ("OUTCOME", "/outcome"),
    ("STATUS", "/status"),
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
        NamespacesCommand::Create {
            name,
            description,
            quotas,
        } => {
            let body = json!({"name": name, "description": description, "quotas": quotas.body()});
            let created = api
                .call(Method::POST, "/api/v1/namespaces", Some(&body))
                .await?;
            show(output, &created, None, &NAMESPACE_COLUMNS);
        }
        NamespacesCommand::Quotas { name, quotas } => {
            let path = format!("/api/v1/namespaces/{}", encode(&name));
            let body = json!({"quotas": quotas.body()});
            let changed = api.call(Method::PATCH, &path, Some(&body)).await?;
            show(output, &changed, None, &NAMESPACE_COLUMNS);
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

pub(crate) async fn grants(
    api: &ApiTarget,
    output: Output,
    command: GrantsCommand,
) -> Result<(), CommandError> {
    match command {
        GrantsCommand::Ls => {
            let list = api.call(Method::GET, "/api/v1/grants", None).await?;
            show(output, &list, Some("grants"), &GRANT_COLUMNS);
        }
        GrantsCommand::Add { group, role } => {
            let body = json!({"group": group, "role": role});
            let created = api
                .call(Method::POST, "/api/v1/grants", Some(&body))
                .await?;
            show(output, &created, None, &GRANT_COLUMNS);
        }
        GrantsCommand::Rm { id } => {
            api.call(Method::DELETE, &format!("/api/v1/grants/{id}"), None)
                .await?;
        }
    }
    Ok(())
}

pub(crate) async fn audit(
    api: &ApiTarget,
    output: Output,
    command: AuditCommand,
) -> Result<(), CommandError> {
    let AuditCommand::Ls {
        actor,
        operation,
        outcome,
        since,
        until,
        limit,
        cursor,
    } = command;
    let mut query = vec![format!("limit={limit}")];
    for (key, value) in [
        ("actor", actor),
        ("operation", operation),
        ("outcome", outcome),
        ("since", since),
        ("until", until),
        ("cursor", cursor),
    ] {
        if let Some(value) = value {
            query.push(format!("{key}={}", encode(&value)));
        }
    }
    let path = format!("/api/v1/audit?{}", query.join("&"));
    let page = api.call(Method::GET, &path, None).await?;
    show(output, &page, Some("events"), &AUDIT_COLUMNS);
    Ok(())
}
