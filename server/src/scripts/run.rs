//! One attempt of a script: what reaches it (arguments, environment, stdin), what it says
//! (stdout and stderr, each line an event of the attempt, shipped to the run's live log by the
//! SDK), and what it ends as.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use carillon_executor::JobContext;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::Semaphore;

use super::ScriptSettings;
use super::process::{Group, read_lines, signal_name};

/// After the script exits, how long its output may take to reach its end (a process it left
/// behind may still hold the pipes open).
const DRAIN: Duration = Duration::from_millis(500);
/// Longest result file read; a larger one fails the attempt.
const MAX_RESULT_FILE: u64 = 1024 * 1024;
/// The environment a script gets when the executor has no `PATH` of its own.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Runs scripts for the handlers of one executor.
#[derive(Debug)]
pub struct ScriptRuns {
    settings: ScriptSettings,
    /// A slot per script that may run at once, held until its process group is gone.
    slots: Arc<Semaphore>,
}

impl ScriptRuns {
    pub fn new(settings: ScriptSettings) -> Self {
        let slots = Arc::new(Semaphore::new(settings.concurrency.max(1)));
        Self { settings, slots }
    }

    /// Runs `script` for the attempt of `ctx`. Exit 0 succeeds with the result file's JSON,
    /// else the last line of stdout (as JSON when it reads as JSON); another exit fails with
    /// the code and the last line of stderr; a signal fails naming it.
    pub async fn run(&self, script: &Path, ctx: JobContext) -> Result<Value, String> {
        let result_file = self
            .settings
            .result_dir
            .join(format!("{}.json", ctx.attempt_id()));
        let _ = std::fs::remove_file(&result_file);
        // A script cancelled a moment ago may still be winding down in its slot: this one
        // starts once it is gone.
        let slot = Arc::clone(&self.slots)
            .acquire_owned()
            .await
            .map_err(|_| "the executor is stopping".to_owned())?;
        let argv = argv_of(ctx.raw_args());
        let env = env_of(&ctx, &result_file)?;
        if let Some(at) = argv
            .iter()
            .position(|arg| arg.contains('\0'))
            .map(|i| format!("argument {}", i + 1))
            .or_else(|| {
                env.iter()
                    .find(|(_, value)| value.contains('\0'))
                    .map(|(name, _)| name.clone())
            })
        {
            return Err(format!(
                "{at} holds a NUL character, which a process's arguments and environment \
                 cannot carry: the script was not started"
            ));
        }
        let mut command = tokio::process::Command::new(script);
        command
            .args(argv)
            .current_dir(&self.settings.workdir)
            .env_clear()
            .envs(self.passed_env())
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", script.display()))?;
        let outputs: Vec<BorrowedFd<'_>> = [
            child.stdout.as_ref().map(AsFd::as_fd),
            child.stderr.as_ref().map(AsFd::as_fd),
        ]
        .into_iter()
        .flatten()
        .collect();
        let group = Group::led_by(child.id(), self.settings.kill_grace, slot, &outputs);
        tracing::debug!(script = %script.display(), pid = child.id(), "started");

        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let feed = async move {
            if let Some(mut stdin) = stdin {
                // A script that does not read its stdin ends it early: not an error.
                let _ = stdin.write_all(stdin_of(&ctx).as_bytes()).await;
            }
        };
        let mut last_out = String::new();
        let mut last_err = String::new();
        let status = {
            let out = async {
                if let Some(stdout) = stdout {
                    read_lines(stdout, |line| {
                        tracing::info!("{line}");
                        last_out = line;
                    })
                    .await;
                }
            };
            let err = async {
                if let Some(stderr) = stderr {
                    read_lines(stderr, |line| {
                        tracing::warn!("{line}");
                        last_err = line;
                    })
                    .await;
                }
            };
            let mut reading = std::pin::pin!(async { tokio::join!(feed, out, err) });
            let mut read_to_end = false;
            let status = tokio::select! {
                status = child.wait() => status,
                _ = &mut reading => {
                    read_to_end = true;
                    child.wait().await
                }
            };
            if !read_to_end {
                let _ = tokio::time::timeout(DRAIN, &mut reading).await;
            }
            status
        };
        // Ends what the script left running in its group.
        drop(group);
        let status = status.map_err(|e| format!("lost track of {}: {e}", script.display()))?;
        let outcome = outcome_of(status, &result_file, &last_out, &last_err);
        let _ = std::fs::remove_file(&result_file);
        outcome
    }

    /// The variables of the executor's own environment a script is given.
    fn passed_env(&self) -> Vec<(String, String)> {
        let mut passed: Vec<(String, String)> = self
            .settings
            .pass_env
            .iter()
            .filter_map(|name| Some((name.clone(), std::env::var(name).ok()?)))
            .collect();
        if !passed.iter().any(|(name, _)| name == "PATH") {
            passed.push(("PATH".to_owned(), DEFAULT_PATH.to_owned()));
        }
        passed
    }
}

/// The arguments as argv when they are a list of plain values (strings, numbers, booleans);
/// otherwise none (the script reads `CARILLON_ARGS` or stdin).
fn argv_of(args: &Value) -> Vec<String> {
    let Value::Array(items) = args else {
        return Vec::new();
    };
    items
        .iter()
        .map(plain_text)
        .collect::<Option<Vec<_>>>()
        .unwrap_or_default()
}

fn plain_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// `name` as the tail of an environment variable: upper case, anything else than letters
/// and digits `_`.
fn env_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// What a run tells its script through the environment.
fn env_of(ctx: &JobContext, result_file: &Path) -> Result<Vec<(String, String)>, String> {
    let shard = ctx.shard();
    let mut env = vec![
        ("CARILLON_RUN_ID".to_owned(), ctx.run_id().to_string()),
        (
            "CARILLON_ATTEMPT_ID".to_owned(),
            ctx.attempt_id().to_string(),
        ),
        ("CARILLON_ATTEMPT".to_owned(), ctx.attempt().to_string()),
        ("CARILLON_JOB".to_owned(), ctx.job_name().to_owned()),
        ("CARILLON_JOB_ID".to_owned(), ctx.job_id().to_string()),
        ("CARILLON_SHARD_INDEX".to_owned(), shard.index.to_string()),
        ("CARILLON_SHARD_TOTAL".to_owned(), shard.total.to_string()),
        (
            "CARILLON_SCHEDULED_AT".to_owned(),
            ctx.scheduled_at().to_owned(),
        ),
        ("CARILLON_ARGS".to_owned(), ctx.raw_args().to_string()),
        (
            "CARILLON_RESULT_FILE".to_owned(),
            result_file.display().to_string(),
        ),
    ];
    if let Some(traceparent) = ctx.traceparent() {
        env.push(("TRACEPARENT".to_owned(), traceparent.to_owned()));
    }
    let mut named = Named::default();
    if let Value::Object(params) = ctx.raw_args() {
        for (name, value) in params {
            if let Some(text) = plain_text(value) {
                let variable = format!("CARILLON_PARAM_{}", env_name(name));
                named.take(&variable, &format!("argument {name:?}"))?;
                env.push((variable, text));
            }
        }
    }
    for (name, value) in ctx.secrets() {
        let variable = format!("CARILLON_SECRET_{}", env_name(name));
        named.take(&variable, &format!("secret {name:?}"))?;
        env.push((variable, value.to_owned()));
    }
    Ok(env)
}

/// The variables made from names (arguments, secrets), each with what it was made from: two
/// names that make one variable would leave the script one of them silently.
#[derive(Default)]
struct Named(std::collections::HashMap<String, String>);

impl Named {
    fn take(&mut self, variable: &str, from: &str) -> Result<(), String> {
        match self.0.insert(variable.to_owned(), from.to_owned()) {
            Some(first) => Err(format!(
                "{first} and {from} would both be the variable {variable}: rename one"
            )),
            None => Ok(()),
        }
    }
}

/// The dispatch as the script reads it on stdin: one JSON document, then the end.
fn stdin_of(ctx: &JobContext) -> String {
    let shard = ctx.shard();
    let input: Option<Value> = ctx.input().ok().flatten();
    let document = json!({
        "run_id": ctx.run_id(),
        "attempt_id": ctx.attempt_id(),
        "attempt": ctx.attempt(),
        "job": ctx.job_name(),
        "job_id": ctx.job_id(),
        "scheduled_at": ctx.scheduled_at(),
        "shard": {"index": shard.index, "total": shard.total},
        "args": ctx.raw_args(),
        "input": input,
    });
    format!("{document}\n")
}

fn outcome_of(
    status: ExitStatus,
    result_file: &Path,
    last_out: &str,
    last_err: &str,
) -> Result<Value, String> {
    if status.success() {
        return match read_result_file(result_file)? {
            Some(result) => Ok(result),
            None if last_out.is_empty() => Ok(Value::Null),
            None => Ok(serde_json::from_str(last_out)
                .unwrap_or_else(|_| Value::String(last_out.to_owned()))),
        };
    }
    let said = if last_err.is_empty() {
        last_out
    } else {
        last_err
    };
    let ended = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by {}", signal_name(signal)),
        (None, None) => format!("ended as {status}"),
    };
    Err(if said.is_empty() {
        ended
    } else {
        format!("{ended}: {said}")
    })
}

/// The result file's JSON, if the script wrote one.
fn read_result_file(path: &Path) -> Result<Option<Value>, String> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(None);
    };
    if meta.len() == 0 {
        return Ok(None);
    }
    if meta.len() > MAX_RESULT_FILE {
        return Err(format!(
            "the result file ($CARILLON_RESULT_FILE) holds {} bytes, more than {MAX_RESULT_FILE}",
            meta.len()
        ));
    }
    let bytes = std::fs::read(path)
        .map_err(|e| format!("cannot read the result file ($CARILLON_RESULT_FILE): {e}"))?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| format!("the result file ($CARILLON_RESULT_FILE) is not JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_is_a_list_of_plain_values_only() {
        assert_eq!(argv_of(&json!(["a b", 2, true])), ["a b", "2", "true"]);
        assert!(argv_of(&json!(["a", {"b": 1}])).is_empty());
        assert!(argv_of(&json!({"a": 1})).is_empty());
        assert!(argv_of(&Value::Null).is_empty());
    }

    #[test]
    fn names_become_environment_names() {
        assert_eq!(env_name("api-key.v2"), "API_KEY_V2");
    }

    #[test]
    fn the_outcome_follows_the_exit() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("r.json");
        let exited = |code: i32| ExitStatus::from_raw(code << 8);
        assert_eq!(
            outcome_of(exited(0), &file, "{\"rows\": 3}", ""),
            Ok(json!({"rows": 3}))
        );
        assert_eq!(
            outcome_of(exited(0), &file, "done", "noise"),
            Ok(json!("done"))
        );
        assert_eq!(outcome_of(exited(0), &file, "", ""), Ok(Value::Null));
        std::fs::write(&file, "[1, 2]").unwrap();
        assert_eq!(outcome_of(exited(0), &file, "done", ""), Ok(json!([1, 2])));
        std::fs::write(&file, "not json").unwrap();
        let bad = outcome_of(exited(0), &file, "", "").unwrap_err();
        assert!(bad.contains("is not JSON"), "{bad}");
        assert_eq!(
            outcome_of(exited(3), &file, "out", "disk full"),
            Err("exit code 3: disk full".to_owned())
        );
        assert_eq!(
            outcome_of(exited(1), &file, "", ""),
            Err("exit code 1".to_owned())
        );
        assert_eq!(
            outcome_of(ExitStatus::from_raw(9), &file, "", ""),
            Err("killed by SIGKILL (signal 9)".to_owned())
        );
    }
}
