//! The client commands: `jobs`, `runs`, `executors`, `cluster`, `schedule preview` (`apply` is
//! its own). Each is one or two API calls; output is a table, or the API's JSON with
//! `--output json`.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand, ValueEnum};
use reqwest::Method;
use serde_json::{Value, json};

use super::client::{ApiTarget, ClientError};
use super::job_fields::JobFields;
use super::table;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum Output {
    #[default]
    Table,
    Json,
}

/// Which page of a listing, in which order.
#[derive(Debug, Args)]
pub(crate) struct PageArgs {
    /// -created (newest first, the default), created; for jobs also name, -name.
    #[arg(long, allow_hyphen_values = true)]
    sort: Option<String>,
    #[arg(long, default_value_t = 100)]
    limit: u32,
    /// The cursor a previous page printed: the page after it.
    #[arg(long)]
    cursor: Option<String>,
}

impl PageArgs {
    /// The query parameters, percent-encoded.
    fn query(self) -> Vec<String> {
        let mut query = vec![format!("limit={}", self.limit)];
        for (k, v) in [("sort", self.sort), ("cursor", self.cursor)] {
            if let Some(v) = v {
                query.push(format!("{k}={}", encode(&v)));
            }
        }
        query
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum JobsCommand {
    /// List jobs, newest first unless --sort says otherwise.
    Ls {
        #[arg(long)]
        app: Option<String>,
        /// stopped, running or done.
        #[arg(long)]
        state: Option<String>,
        /// Names starting with this.
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        page: PageArgs,
    },
    /// Show one job.
    Get {
        id: i64,
    },
    /// Create a job from a JSON or TOML file (`-f`), from flags, or both (flags win).
    Create {
        #[arg(short = 'f', long)]
        file: Option<PathBuf>,
        #[command(flatten)]
        fields: JobFields,
    },
    /// Change a job: the file's and flags' fields replace the job's.
    Edit {
        id: i64,
        #[arg(short = 'f', long)]
        file: Option<PathBuf>,
        #[command(flatten)]
        fields: JobFields,
    },
    Start {
        id: i64,
    },
    Stop {
        id: i64,
    },
    /// One run now, outside the schedule.
    Trigger {
        id: i64,
    },
    /// Delete a job.
    Rm {
        id: i64,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum RunsCommand {
    /// List runs, newest first unless --sort says otherwise.
    Ls {
        #[arg(long)]
        job: Option<i64>,
        #[arg(long)]
        state: Option<String>,
        #[command(flatten)]
        page: PageArgs,
    },
    /// Show a run with its attempts.
    Get {
        id: i64,
    },
    Cancel {
        id: i64,
    },
    /// The lines a run's attempt logged (default: its latest attempt); -f follows them.
    Logs {
        id: i64,
        /// The attempt, by id.
        #[arg(long)]
        attempt: Option<i64>,
        /// Keep printing lines as they come, until the run ends.
        #[arg(short = 'f', long)]
        follow: bool,
    },
    /// Delete finished runs (and their attempts) that finished before an instant.
    Purge {
        /// An RFC 3339 instant, or an age: `30d` deletes what finished more than 30 days ago.
        #[arg(long)]
        before: String,
        /// Only this job's runs.
        #[arg(long)]
        job: Option<i64>,
        /// Count what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ExecutorsCommand {
    Ls,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ScheduleCommand {
    /// The next instants of a schedule.
    Preview {
        /// The expression: a cron expression by default.
        expression: String,
        /// What the expression is.
        #[arg(long, value_enum, default_value_t = ScheduleKind::Cron)]
        kind: ScheduleKind,
        #[arg(long, default_value = "UTC")]
        tz: String,
        #[arg(long, default_value_t = 10)]
        count: u32,
        /// RFC 3339; default now.
        #[arg(long)]
        after: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ScheduleKind {
    Cron,
    Rrule,
    At,
    Every,
    FixedDelay,
}

/// Why a client command failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CommandError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("--{flag}: {reason}")]
    Flag { flag: &'static str, reason: String },
}

/// A bad `--args`, as the error that names the flag.
fn field_flag((flag, reason): (&'static str, String)) -> CommandError {
    CommandError::Flag { flag, reason }
}

/// A job answer's warnings, on stderr: what stdout shows (a table, JSON) stays as it was.
fn warn_of(job: &Value) {
    let warnings = job["warnings"].as_array().into_iter().flatten();
    for warning in warnings.filter_map(Value::as_str) {
        eprintln!("carillon: warning: {warning}");
    }
}

pub(super) fn out(text: &str) {
    // A CLI's output is its product: write it, and ignore a closed pipe (`| head`).
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

pub(super) fn show(output: Output, value: &Value, rows: Option<&str>, columns: &[(&str, &str)]) {
    match output {
        Output::Json => out(&serde_json::to_string_pretty(value).unwrap_or_default()),
        Output::Table => {
            let list = match rows {
                Some(key) => value[key].as_array().cloned().unwrap_or_default(),
                None => vec![value.clone()],
            };
            out(&table::render(&list, columns));
            if let Some(cursor) = value["next_cursor"].as_str() {
                out(&format!("(more: add --cursor {cursor})\n"));
            }
        }
    }
}

const JOB_COLUMNS: [(&str, &str); 7] = [
    ("ID", "/id"),
    ("NAME", "/name"),
    ("APP", "/app"),
    ("HANDLER", "/handler"),
    ("SCHEDULE", "/schedule"),
    ("STATE", "/state"),
    ("NEXT", "/next_fire_at"),
];
const RUN_COLUMNS: [(&str, &str); 6] = [
    ("ID", "/id"),
    ("JOB", "/job_id"),
    ("SCHEDULED", "/scheduled_at"),
    ("TRIGGER", "/trigger"),
    ("STATE", "/state"),
    ("MESSAGE", "/message"),
];

/// Reads a job document from JSON or TOML (by extension; `-` is JSON on standard input).
pub(super) fn read_document(path: &Path) -> Result<Value, CommandError> {
    let bad = |reason: String| CommandError::File {
        path: path.to_owned(),
        reason,
    };
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).map_err(|e| bad(e.to_string()))?
    } else {
        std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?
    };
    match path.extension().and_then(|e| e.to_str()) {
        Some("toml") => {
            let parsed: toml::Value = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
            serde_json::to_value(parsed).map_err(|e| bad(e.to_string()))
        }
        Some("yaml" | "yml") => yaml_serde::from_str(&text).map_err(|e| bad(e.to_string())),
        _ => serde_json::from_str(&text).map_err(|e| bad(e.to_string())),
    }
}

pub(crate) async fn jobs(
    api: &ApiTarget,
    output: Output,
    command: JobsCommand,
) -> Result<(), CommandError> {
    let call = |method: Method, path: String, body: Option<Value>| async move {
        api.call(method, &path, body.as_ref()).await
    };
    match command {
        JobsCommand::Ls {
            app,
            state,
            name,
            page,
        } => {
            let mut query = page.query();
            for (k, v) in [("app", app), ("state", state), ("name", name)] {
                if let Some(v) = v {
                    query.push(format!("{k}={}", encode(&v)));
                }
            }
            let page = call(
                Method::GET,
                format!("/api/v1/jobs?{}", query.join("&")),
                None,
            )
            .await?;
            show(output, &page, Some("jobs"), &JOB_COLUMNS);
        }
        JobsCommand::Get { id } => {
            let job = call(Method::GET, format!("/api/v1/jobs/{id}"), None).await?;
            show(output, &job, None, &JOB_COLUMNS);
        }
        JobsCommand::Create { file, fields } => {
            let base = file
                .as_deref()
                .map(read_document)
                .transpose()?
                .unwrap_or(Value::Null);
            let job = call(
                Method::POST,
                "/api/v1/jobs".into(),
                Some(fields.over(base, true).map_err(field_flag)?),
            )
            .await?;
            show(output, &job, None, &JOB_COLUMNS);
            warn_of(&job);
        }
        JobsCommand::Edit { id, file, fields } => {
            let base = file
                .as_deref()
                .map(read_document)
                .transpose()?
                .unwrap_or(Value::Null);
            let patch = fields.over(base, false).map_err(field_flag)?;
            let job = call(Method::PATCH, format!("/api/v1/jobs/{id}"), Some(patch)).await?;
            show(output, &job, None, &JOB_COLUMNS);
            warn_of(&job);
        }
        JobsCommand::Start { id } | JobsCommand::Stop { id } => {
            let verb = if matches!(command, JobsCommand::Start { .. }) {
                "start"
            } else {
                "stop"
            };
            let job = call(Method::POST, format!("/api/v1/jobs/{id}/{verb}"), None).await?;
            show(output, &job, None, &JOB_COLUMNS);
        }
        JobsCommand::Trigger { id } => {
            let run = call(Method::POST, format!("/api/v1/jobs/{id}/trigger"), None).await?;
            show(output, &run, None, &RUN_COLUMNS);
        }
        JobsCommand::Rm { id } => {
            call(Method::DELETE, format!("/api/v1/jobs/{id}"), None).await?;
            if output == Output::Json {
                out(&json!({ "deleted": id }).to_string());
            } else {
                out(&format!("deleted job {id}"));
            }
        }
    }
    Ok(())
}

pub(crate) async fn runs(
    api: &ApiTarget,
    output: Output,
    command: RunsCommand,
) -> Result<(), CommandError> {
    match command {
        RunsCommand::Purge {
            before,
            job,
            dry_run,
        } => return super::purge::purge(api, output, &before, job, dry_run).await,
        RunsCommand::Logs {
            id,
            attempt,
            follow,
        } => return super::run_logs::logs(api, output, id, attempt, follow).await,
        RunsCommand::Ls { job, state, page } => {
            let mut query = page.query();
            if let Some(state) = state {
                query.push(format!("state={}", encode(&state)));
            }
            // A job's runs are listed in the job's namespace, whichever the command works in.
            let collection = match job {
                Some(job) => format!("/api/v1/jobs/{job}/runs"),
                None => "/api/v1/runs".to_owned(),
            };
            let page = api
                .call(
                    Method::GET,
                    &format!("{collection}?{}", query.join("&")),
                    None,
                )
                .await?;
            show(output, &page, Some("runs"), &RUN_COLUMNS);
        }
        RunsCommand::Get { id } | RunsCommand::Cancel { id } => {
            let run = if matches!(command, RunsCommand::Get { .. }) {
                api.call(Method::GET, &format!("/api/v1/runs/{id}"), None)
                    .await?
            } else {
                api.call(Method::POST, &format!("/api/v1/runs/{id}/cancel"), None)
                    .await?
            };
            match output {
                Output::Json => show(output, &run, None, &[]),
                Output::Table => {
                    show(output, &run, None, &RUN_COLUMNS);
                    out("");
                    show(
                        output,
                        &run,
                        Some("attempts"),
                        &[
                            ("ATTEMPT", "/id"),
                            ("SHARD", "/shard"),
                            ("TRY", "/attempt"),
                            ("EXECUTOR", "/executor_id"),
                            ("STATE", "/state"),
                            ("ERROR", "/error"),
                        ],
                    );
                }
            }
        }
    }
    Ok(())
}

pub(crate) async fn executors(api: &ApiTarget, output: Output) -> Result<(), CommandError> {
    let list = api.call(Method::GET, "/api/v1/executors", None).await?;
    show(
        output,
        &list,
        Some("executors"),
        &[
            ("ID", "/id"),
            ("APP", "/app"),
            ("ADDRESS", "/address"),
            ("WEIGHT", "/weight"),
            ("CAPACITY", "/capacity"),
            ("IN FLIGHT", "/in_flight"),
            ("STATE", "/state"),
            ("HEALTHY", "/healthy"),
        ],
    );
    Ok(())
}

pub(crate) async fn cluster(api: &ApiTarget, output: Output) -> Result<(), CommandError> {
    let cluster = api.call(Method::GET, "/api/v1/cluster", None).await?;
    if output == Output::Table {
        let leader = &cluster["leader"];
        out(&format!(
            "leader {} (term {}), {} partitions",
            leader["node_id"].as_str().unwrap_or("-"),
            leader["term"],
            cluster["partition_count"]
        ));
        let mut nodes = cluster["nodes"].as_array().cloned().unwrap_or_default();
        for node in &mut nodes {
            let owned = node["partitions"].as_array().map_or(0, Vec::len);
            node["owned"] = json!(owned);
        }
        out(&table::render(
            &nodes,
            &[
                ("NODE", "/node_id"),
                ("ADDRESS", "/address"),
                ("ALIVE", "/alive"),
                ("LEADER", "/leader"),
                ("PARTITIONS", "/owned"),
            ],
        ));
    } else {
        show(output, &cluster, None, &[]);
    }
    Ok(())
}

pub(crate) async fn schedule(
    api: &ApiTarget,
    output: Output,
    command: ScheduleCommand,
) -> Result<(), CommandError> {
    let ScheduleCommand::Preview {
        expression,
        kind,
        tz,
        count,
        after,
    } = command;
    let key = match kind {
        ScheduleKind::Cron => "cron",
        ScheduleKind::Rrule => "rrule",
        ScheduleKind::At => "at",
        ScheduleKind::Every => "every",
        ScheduleKind::FixedDelay => "fixed_delay",
    };
    let mut request = json!({ "schedule": { key: expression }, "timezone": tz, "count": count });
    if let Some(after) = after {
        request["after"] = json!(after);
    }
    let preview = api
        .call(Method::POST, "/api/v1/schedules/preview", Some(&request))
        .await?;
    show(
        output,
        &preview,
        Some("instants"),
        &[("UTC", "/utc"), ("LOCAL", "/local")],
    );
    Ok(())
}

/// Percent-encodes a query value.
pub(super) fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
