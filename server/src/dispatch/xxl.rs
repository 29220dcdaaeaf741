//! XXL-JOB's executor protocol (2.4), spoken to XXL-JOB executors: `/run` offers an attempt,
//! `/kill` stops a job's work, `/beat` and `/idleBeat` probe, `/log` reads a handler's log by
//! line. Every call carries the shared `XXL-JOB-ACCESS-TOKEN`; the allowlist of executor
//! networks holds as for Carillon's own executors. An accepted `/run` runs in the background
//! there; its callback (`api/xxl.rs`) ends the attempt.

use carillon_protocol::Dispatch;
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::client::{Delivery, DispatchClient, NotTaken};
use crate::jobs::{Balance, Overlap};
use crate::store::ExecutorRecord;

/// The header XXL-JOB's admin and executors authenticate each other with.
pub const TOKEN_HEADER: &str = "XXL-JOB-ACCESS-TOKEN";

/// XXL-JOB's answer to every call (`ReturnT`): `code` 200 is success.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct XxlReturn {
    pub code: i64,
    #[serde(default)]
    pub msg: Option<String>,
    /// What `/log` answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
    /// The same in XXL-JOB 3 (pyxxl sends both).
    #[serde(default, skip_serializing)]
    pub data: Option<Value>,
}

impl XxlReturn {
    pub fn ok() -> Self {
        Self {
            code: 200,
            msg: None,
            content: None,
            data: None,
        }
    }

    pub fn fail(msg: impl Into<String>) -> Self {
        Self {
            code: 500,
            msg: Some(msg.into()),
            content: None,
            data: None,
        }
    }
}

/// The body of `/run` (XXL-JOB's `TriggerParam`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TriggerParam {
    pub job_id: i32,
    pub executor_handler: String,
    pub executor_params: String,
    pub executor_block_strategy: String,
    /// Seconds; 0 for none.
    pub executor_timeout: i64,
    /// The Carillon attempt id: the callback and `/log` name the attempt by it.
    pub log_id: i64,
    /// When the attempt was created (ms): with `log_id` it names the log file on the executor.
    pub log_date_time: i64,
    pub glue_type: String,
    pub glue_source: String,
    pub glue_updatetime: i64,
    pub broadcast_index: u32,
    pub broadcast_total: u32,
}

/// One line range of a handler's log (`/log`'s `LogResult`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogResult {
    pub from_line_num: i64,
    pub to_line_num: i64,
    #[serde(default)]
    pub log_content: String,
    #[serde(default)]
    pub is_end: bool,
}

/// The XXL-JOB job id of a Carillon job (or task run: `-task_id`): XXL-JOB executors read it
/// as a Java `int` and keep one queue (and one `/kill`) per id, so it is a mix of the id
/// folded to 31 bits, never 0.
pub fn xxl_job_id(job_id: i64) -> i32 {
    let mut x = job_id as u64;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    i32::try_from(x & 0x7fff_ffff).unwrap_or(1).max(1)
}

/// The block strategy under which a run stops the job's earlier one on the executor.
const COVER_EARLY: &str = "COVER_EARLY";

/// XXL-JOB's block strategy for a job's overlap policy. Carillon applies the overlap itself
/// before it fires, and offers an executor no attempt of a job while it runs another
/// (`xxl_run`), so the strategy matters only for a run that replaces another (`COVER_EARLY`:
/// the executor stops the earlier one) or one that reaches it while a killed one lingers.
fn block_strategy(overlap: Overlap) -> &'static str {
    match overlap {
        Overlap::Skip => "DISCARD_LATER",
        Overlap::Replace => COVER_EARLY,
        Overlap::Allow | Overlap::Queue => "SERIAL_EXECUTION",
    }
}

/// The `/run` body for `dispatch`. A string argument goes as XXL-JOB's parameter text;
/// anything else as its JSON.
pub fn trigger_of(dispatch: &Dispatch, overlap: Overlap, created_at_ms: i64) -> TriggerParam {
    let executor_params = match &dispatch.args {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let executor_timeout = dispatch.timeout_ms.map_or(0, |ms| {
        i64::try_from(ms.div_ceil(1_000)).unwrap_or(i64::MAX)
    });
    TriggerParam {
        job_id: xxl_job_id(dispatch.job_id),
        executor_handler: dispatch.handler.clone(),
        executor_params,
        executor_block_strategy: block_strategy(overlap).to_owned(),
        executor_timeout,
        log_id: dispatch.attempt_id,
        log_date_time: created_at_ms,
        glue_type: "BEAN".to_owned(),
        glue_source: String::new(),
        glue_updatetime: 0,
        broadcast_index: dispatch.shard.index,
        broadcast_total: dispatch.shard.total,
    }
}

impl DispatchClient {
    /// POSTs `body` to `{address}{path}` with the access token; XXL-JOB's answer, or why
    /// there was none (`Err((not_taken, why))`).
    async fn post_xxl(
        &self,
        address: &str,
        path: &str,
        body: &impl Serialize,
    ) -> Result<XxlReturn, (NotTaken, String)> {
        let url = format!("{}{path}", address.trim_end_matches('/'));
        let response = self
            .post_with(url, body, |request| {
                request.header(TOKEN_HEADER, self.xxl_token().unwrap_or_default())
            })
            .await
            .map_err(|(sent, why)| {
                (
                    if sent {
                        NotTaken::NoAnswer
                    } else {
                        NotTaken::Unreachable
                    },
                    why,
                )
            })?;
        let status = response.status();
        if status != StatusCode::OK {
            let why = format!("XXL-JOB executor answered {status}");
            return Err((
                match status.as_u16() {
                    429 => NotTaken::Busy,
                    503 => NotTaken::Unavailable,
                    s if s >= 500 => NotTaken::Failing,
                    _ => NotTaken::Unavailable,
                },
                why,
            ));
        }
        response
            .json::<XxlReturn>()
            .await
            .map_err(|e| (NotTaken::Failing, format!("not XXL-JOB's answer: {e}")))
    }

    /// Offers an attempt to an XXL-JOB executor. Under `failover` it must answer `/beat`
    /// first. It must then say it is idle for the job (`/idleBeat`): it runs one attempt of a
    /// job at a time and its `/kill` names the job, so an attempt sent while an earlier one
    /// still runs there (a killed handler not yet stopped) would queue behind it, timed from
    /// its dispatch, or be stopped by the earlier one's kill. A busy executor passes the offer
    /// on to the next; with none left the attempt waits for the next pass. A run that
    /// replaces the earlier one (`COVER_EARLY`) goes at once: the executor stops the other.
    /// An executor whose `/idleBeat` says nothing of the job (an HTTP error, a route or a
    /// callback it lacks: [`says_busy`]) is offered the run.
    pub async fn xxl_run(
        &self,
        address: &str,
        trigger: &TriggerParam,
        balance: Balance,
    ) -> Delivery {
        if balance == Balance::Failover {
            match self
                .post_xxl(address, "/beat", &serde_json::json!({}))
                .await
            {
                Ok(answer) if answer.code == 200 => {}
                Ok(answer) => {
                    return Delivery::TryAnother(
                        NotTaken::Unavailable,
                        format!("/beat answered {}", describe(&answer)),
                    );
                }
                Err((_, why)) => return Delivery::TryAnother(NotTaken::Unreachable, why),
            }
        }
        if trigger.executor_block_strategy != COVER_EARLY {
            let probe = serde_json::json!({ "jobId": trigger.job_id });
            match self.post_xxl(address, "/idleBeat", &probe).await {
                Ok(answer) if answer.code == 200 || !says_busy(&answer) => {}
                Ok(answer) => {
                    return Delivery::TryAnother(
                        NotTaken::Busy,
                        format!("/idleBeat answered {}", describe(&answer)),
                    );
                }
                Err((NotTaken::Unreachable | NotTaken::NoAnswer, why)) => {
                    return Delivery::TryAnother(NotTaken::Unreachable, why);
                }
                Err(_) => {}
            }
        }
        match self.post_xxl(address, "/run", trigger).await {
            Ok(answer) if answer.code == 200 => Delivery::Accepted,
            // A handler it does not have, a run its block strategy discarded: refused, and
            // the retry policy decides what follows.
            Ok(answer) => Delivery::Refused(format!(
                "XXL-JOB executor refused the run: {}",
                describe(&answer)
            )),
            Err((not_taken, why)) => Delivery::TryAnother(not_taken, why),
        }
    }

    /// Asks `executor` to stop an attempt of job `job_id`, in its protocol: a signed cancel,
    /// or for an XXL-JOB executor (whose beats carry nothing back) `/kill` of the job's work,
    /// running and queued. Best effort.
    pub async fn stop(&self, executor: &ExecutorRecord, attempt_id: i64, job_id: i64) {
        if executor.is_xxl() {
            self.xxl_kill(&executor.address, xxl_job_id(job_id)).await;
        } else {
            self.cancel(&executor.address, attempt_id).await;
        }
    }

    /// Asks an XXL-JOB executor to stop job `job_id`'s work (running and queued); best effort.
    pub async fn xxl_kill(&self, address: &str, job_id: i32) -> bool {
        let body = serde_json::json!({ "jobId": job_id });
        matches!(self.post_xxl(address, "/kill", &body).await, Ok(answer) if answer.code == 200)
    }

    /// Lines of an attempt's log from line `from_line` (1 first), as the executor keeps them.
    pub async fn xxl_log(
        &self,
        address: &str,
        log_date_time: i64,
        log_id: i64,
        from_line: i64,
    ) -> Result<LogResult, String> {
        let body = serde_json::json!({
            "logDateTim": log_date_time,
            "logId": log_id,
            "fromLineNum": from_line,
        });
        let answer = self
            .post_xxl(address, "/log", &body)
            .await
            .map_err(|(_, why)| why)?;
        if answer.code != 200 {
            return Err(format!("/log answered {}", describe(&answer)));
        }
        serde_json::from_value(answer.content.or(answer.data).unwrap_or(Value::Null))
            .map_err(|e| format!("/log answered something that is not a log: {e}"))
    }
}

/// Whether an `/idleBeat` answer other than `200` says the job is running or queued there
/// (xxl-job-core: "job thread is running or has trigger queue."; pyxxl: "job 7 is running.").
/// Anything else is no word on the job: xxl-job-core's "uri-mapping(/idleBeat) not found.",
/// fastapi-xxljob's and flask-xxljob's "idleBeat callback is not configured" (their default).
/// The probe is advisory: the nodes keep one attempt of a job per XXL-JOB executor themselves.
fn says_busy(answer: &XxlReturn) -> bool {
    answer.msg.as_deref().is_some_and(|msg| {
        let msg = msg.to_ascii_lowercase();
        ["running", "queue", "busy"]
            .iter()
            .any(|word| msg.contains(word))
    })
}

fn describe(answer: &XxlReturn) -> String {
    let msg: String = answer
        .msg
        .as_deref()
        .unwrap_or_default()
        .chars()
        .take(300)
        .collect();
    format!("code {}: {msg}", answer.code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use carillon_protocol::Shard;

    #[test]
    fn job_ids_fit_a_java_int_and_spread() {
        let ids: std::collections::HashSet<i32> = (0..10_000)
            .map(|i| xxl_job_id(373_789_657_280_629 + i))
            .collect();
        assert_eq!(ids.len(), 10_000);
        assert!(ids.iter().all(|id| *id > 0));
        assert!(
            xxl_job_id(-65_537) > 0,
            "a task's run has a negative job id"
        );
    }

    #[test]
    fn a_trigger_carries_the_attempt_as_xxl_job_expects() {
        let dispatch = Dispatch {
            protocol: 1,
            run_id: 9,
            attempt_id: 42,
            handle: None,
            attempt: 1,
            job_id: 7,
            job: "nightly".to_owned(),
            handler: "invoiceJob".to_owned(),
            args: Value::String("region=eu".to_owned()),
            shard: Shard { index: 1, total: 3 },
            scheduled_at: String::new(),
            timeout_ms: Some(1_500),
            report_to: Vec::new(),
            effect_key: None,
            input: None,
            traceparent: None,
            secrets: Default::default(),
        };
        let trigger = trigger_of(&dispatch, Overlap::Skip, 1_700_000_000_000);
        assert_eq!(trigger.executor_params, "region=eu");
        assert_eq!(trigger.executor_timeout, 2, "rounded up to whole seconds");
        assert_eq!(trigger.executor_block_strategy, "DISCARD_LATER");
        assert_eq!((trigger.broadcast_index, trigger.broadcast_total), (1, 3));
        assert_eq!(trigger.log_id, 42);
        let json = serde_json::to_value(&trigger).unwrap_or_default();
        for key in [
            "jobId",
            "executorHandler",
            "executorParams",
            "logId",
            "logDateTime",
            "glueType",
            "broadcastIndex",
        ] {
            assert!(json.get(key).is_some(), "{key} missing from {json}");
        }
        let mut object = dispatch;
        object.args = serde_json::json!({ "a": 1 });
        assert_eq!(
            trigger_of(&object, Overlap::Allow, 0).executor_params,
            r#"{"a":1}"#
        );
    }

    #[test]
    fn only_an_idle_beat_that_says_the_job_runs_or_waits_holds_a_run_back() {
        let answer = |code: i64, msg: &str| XxlReturn {
            code,
            msg: Some(msg.to_owned()),
            content: None,
            data: None,
        };
        for busy in [
            "job thread is running or has trigger queue.",
            "job 7 is running.",
            "Busy",
        ] {
            assert!(says_busy(&answer(500, busy)), "{busy}");
        }
        for silent in [
            "invalid request, uri-mapping(/idleBeat) not found.",
            "XXL-JOB idleBeat callback is not configured",
            "",
        ] {
            assert!(!says_busy(&answer(500, silent)), "{silent}");
        }
        assert!(!says_busy(&XxlReturn {
            code: 500,
            msg: None,
            content: None,
            data: None,
        }));
    }
}
