//! `carillon tasks`: enqueue (one from flags, or a batch from a file), list, show and cancel
//! tasks.

use std::path::PathBuf;

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use super::client::ApiTarget;
use super::commands::{CommandError, Output, encode, read_document, show};

#[derive(Debug, Subcommand)]
pub(crate) enum TasksCommand {
    /// Enqueue one task from flags, or a batch from a JSON, TOML or YAML file (`-f`: a task,
    /// or `{"tasks": [...]}` of up to 10,000).
    Add {
        #[arg(short = 'f', long, conflicts_with_all = ["app", "handler"])]
        file: Option<PathBuf>,
        #[arg(long, required_unless_present = "file")]
        app: Option<String>,
        #[arg(long, required_unless_present = "file")]
        handler: Option<String>,
        /// Arguments, as JSON.
        #[arg(long)]
        args: Option<String>,
        /// Due at this instant (RFC 3339).
        #[arg(long, conflicts_with = "delay")]
        at: Option<String>,
        /// Due this long from now: 30s, 5m, 1h30m, 2d.
        #[arg(long)]
        delay: Option<String>,
        /// Idempotency key: one unfinished task per key.
        #[arg(long)]
        key: Option<String>,
        /// 0 (lowest) to 10.
        #[arg(long)]
        priority: Option<i32>,
        /// Attempts in all (retries + 1).
        #[arg(long)]
        max_attempts: Option<u32>,
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// at_least_once (the default), at_most_once or exactly_once_effect.
        #[arg(long)]
        delivery: Option<String>,
    },
    /// List tasks, newest first.
    Ls {
        #[arg(long)]
        app: Option<String>,
        #[arg(long)]
        handler: Option<String>,
        /// pending or fired.
        #[arg(long)]
        state: Option<String>,
        /// Due at or after this instant (RFC 3339).
        #[arg(long)]
        due_from: Option<String>,
        /// Due before this instant (RFC 3339).
        #[arg(long)]
        due_to: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// The cursor a previous page printed: the page after it.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Show a task by id, or by key (`--key`).
    Get {
        #[arg(required_unless_present = "key")]
        id: Option<i64>,
        #[arg(long, conflicts_with = "id")]
        key: Option<String>,
    },
    /// Cancel a task by id or by key (`--key`): before it fires, the task; once fired, its
    /// run while it is unfinished.
    Cancel {
        #[arg(required_unless_present = "key")]
        id: Option<i64>,
        #[arg(long, conflicts_with = "id")]
        key: Option<String>,
    },
}

const TASK_COLUMNS: [(&str, &str); 8] = [
    ("ID", "/id"),
    ("KEY", "/key"),
    ("APP", "/app"),
    ("HANDLER", "/handler"),
    ("DUE", "/due_at"),
    ("STATE", "/state"),
    ("RUN", "/run_id"),
    ("MESSAGE", "/message"),
];

const ENQUEUED_COLUMNS: [(&str, &str); 2] = [("ID", "/id"), ("STATUS", "/status")];

pub(crate) async fn tasks(
    api: &ApiTarget,
    output: Output,
    command: TasksCommand,
) -> Result<(), CommandError> {
    match command {
        TasksCommand::Add {
            file: Some(file), ..
        } => {
            let batch = read_document(&file)?;
            enqueue(api, output, &batch).await
        }
        TasksCommand::Add {
            file: None,
            app,
            handler,
            args,
            at,
            delay,
            key,
            priority,
            max_attempts,
            timeout_ms,
            delivery,
        } => {
            let mut task = json!({"app": app, "handler": handler});
            if let Some(args) = args {
                task["args"] = serde_json::from_str(&args).map_err(|e| CommandError::Flag {
                    flag: "args",
                    reason: format!("is not JSON: {e}"),
                })?;
            }
            for (field, value) in [
                ("at", at),
                ("delay", delay),
                ("key", key),
                ("delivery", delivery),
            ] {
                if let Some(value) = value {
                    task[field] = json!(value);
                }
            }
            if let Some(p) = priority {
                task["priority"] = json!(p);
            }
            if let Some(n) = max_attempts {
                task["retry"] = json!({"max_attempts": n});
            }
            if let Some(ms) = timeout_ms {
                task["timeout_ms"] = json!(ms);
            }
            enqueue(api, output, &task).await
        }
        TasksCommand::Ls {
            app,
            handler,
            state,
            due_from,
            due_to,
            limit,
            cursor,
        } => {
            let mut query = vec![format!("limit={limit}")];
            for (k, v) in [
                ("app", app),
                ("handler", handler),
                ("state", state),
                ("due_from", due_from),
                ("due_to", due_to),
                ("cursor", cursor),
            ] {
                if let Some(v) = v {
                    query.push(format!("{k}={}", encode(&v)));
                }
            }
            let path = format!("/api/v1/tasks?{}", query.join("&"));
            let page = api.call(Method::GET, &path, None).await?;
            show(output, &page, Some("items"), &TASK_COLUMNS);
            if output == Output::Table
                && let Some(next) = page["next_cursor"].as_str()
            {
                super::commands::out(&format!("next page: --cursor {next}"));
            }
            Ok(())
        }
        TasksCommand::Get { id, key } => {
            let task = match (id, key) {
                (Some(id), _) => {
                    api.call(Method::GET, &format!("/api/v1/tasks/{id}"), None)
                        .await?
                }
                (None, Some(key)) => {
                    let path = format!("/api/v1/tasks?key={}", encode(&key));
                    let page = api.call(Method::GET, &path, None).await?;
                    page["items"]
                        .get(0)
                        .cloned()
                        .ok_or_else(|| CommandError::Flag {
                            flag: "key",
                            reason: format!("no task holds {key:?}"),
                        })?
                }
                (None, None) => {
                    return Err(CommandError::Flag {
                        flag: "key",
                        reason: "give a task id or --key".into(),
                    });
                }
            };
            show(output, &task, None, &TASK_COLUMNS);
            Ok(())
        }
        TasksCommand::Cancel { id, key } => {
            let path = match (id, key) {
                (Some(id), _) => format!("/api/v1/tasks/{id}"),
                (None, Some(key)) => format!("/api/v1/tasks?key={}", encode(&key)),
                (None, None) => {
                    return Err(CommandError::Flag {
                        flag: "key",
                        reason: "give a task id or --key".into(),
                    });
                }
            };
            let task = api.call(Method::DELETE, &path, None).await?;
            show(output, &task, None, &TASK_COLUMNS);
            Ok(())
        }
    }
}

async fn enqueue(api: &ApiTarget, output: Output, body: &Value) -> Result<(), CommandError> {
    let answer = api.call(Method::POST, "/api/v1/tasks", Some(body)).await?;
    show(output, &answer, Some("tasks"), &ENQUEUED_COLUMNS);
    if output == Output::Table {
        let unknown = answer["unknown_handlers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for u in unknown {
            super::commands::out(&format!(
                "note: no executor of app {} has registered handler {} (yet); its tasks wait",
                u["app"], u["handler"]
            ));
        }
    }
    Ok(())
}
