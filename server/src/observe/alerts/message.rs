//! What an alert says: described once from its event, its job and its run, then written as
//! JSON or as chat text.

use serde_json::{Value, json};

use super::AlertEvent;
use super::SkippedInstants;
use crate::clock::rfc3339;
use crate::jobs::AlertFormat;
use crate::store::{JobRecord, RunRecord};

/// An alert, described once and rendered per webhook format.
#[derive(Debug, Clone)]
pub struct Alert {
    pub(super) run_id: Option<i64>,
    summary: String,
    document: Value,
}

impl Alert {
    /// Names the namespace of the alert's job in its document.
    pub fn with_namespace(mut self, namespace: &str) -> Self {
        if let Some(job) = self.document.get_mut("job").and_then(Value::as_object_mut) {
            job.insert("namespace".to_owned(), Value::from(namespace));
        }
        self
    }

    /// `run` is the run a `RunFailed` is about, as stored (its instant and message).
    pub fn describe(
        event: &AlertEvent,
        job: Option<&JobRecord>,
        run: Option<&RunRecord>,
        node_id: &str,
    ) -> Self {
        let job_doc = |job_id: i64| match job {
            Some(j) => {
                json!({"id": j.job_id, "name": j.name, "app": j.app_name, "handler": j.handler_name})
            }
            None => json!({"id": job_id}),
        };
        let job_label = |job_id: i64| match job {
            Some(j) => format!("job {} ({}/{})", j.name, j.app_name, j.handler_name),
            None => format!("job {job_id}"),
        };
        let (kind, run_id, summary, extra) = match event {
            AlertEvent::RunFailed {
                run_id,
                job_id,
                state,
                error,
            } => {
                let scheduled = run.and_then(|r| rfc3339(r.scheduled_at_ms));
                let message = run.and_then(|r| r.message.as_deref());
                // The run's message says which shards failed; the error, what the last one said.
                let why = match (message, error.as_deref()) {
                    (Some(m), Some(e)) => format!("{m}: {e}"),
                    (Some(m), None) => m.to_owned(),
                    (None, Some(e)) => e.to_owned(),
                    (None, None) => "no error given".to_owned(),
                };
                (
                    "run_failed",
                    Some(*run_id),
                    format!(
                        "{} failed for good: run {run_id} ({state}), scheduled at {}: {why}",
                        job_label(*job_id),
                        scheduled.as_deref().unwrap_or("?"),
                    ),
                    json!({
                        "job": job_doc(*job_id),
                        "run": {"id": run_id, "state": state, "scheduled_at": scheduled,
                                "message": message, "error": error},
                    }),
                )
            }
            AlertEvent::FiredLate {
                run_id,
                job_id,
                scheduled_at_ms,
                lateness_ms,
            } => {
                let scheduled = rfc3339(*scheduled_at_ms);
                (
                    "run_late",
                    Some(*run_id),
                    format!(
                        "{} fired {:.1} s late: run {run_id}, scheduled at {}",
                        job_label(*job_id),
                        *lateness_ms as f64 / 1_000.0,
                        scheduled.as_deref().unwrap_or("?"),
                    ),
                    json!({
                        "job": job_doc(*job_id),
                        "run": {"id": run_id, "scheduled_at": scheduled},
                        "lateness_ms": lateness_ms,
                    }),
                )
            }
            AlertEvent::JobPaused { job_id, failures } => (
                "job_paused",
                None,
                format!(
                    "{} was stopped after {failures} failed runs in a row \
                     (pause_after_failures); start it again once the cause is mended",
                    job_label(*job_id),
                ),
                json!({"job": job_doc(*job_id), "failures": failures}),
            ),
            AlertEvent::InstantsSkipped { job_id, skipped } => (
                "instants_skipped",
                None,
                format!(
                    "{} did not fire {}",
                    job_label(*job_id),
                    skipped
                        .iter()
                        .map(skipped_phrase)
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                json!({
                    "job": job_doc(*job_id),
                    "skipped": skipped.iter().map(|s| json!({
                        "reason": s.reason.as_str(),
                        "count": s.count,
                        "at_least": s.at_least,
                        "first": rfc3339(s.first_ms),
                        "last": rfc3339(s.last_ms),
                        "detail": s.detail,
                    })).collect::<Vec<_>>(),
                }),
            ),
            AlertEvent::AppUnhealthy { app, executors } => (
                "app_unhealthy",
                None,
                format!(
                    "app {app} has no healthy executor ({executors} registered); its runs wait, then fail"
                ),
                json!({"app": app, "executors": executors, "healthy_executors": 0}),
            ),
            AlertEvent::AppRecovered { app, healthy } => (
                "app_recovered",
                None,
                format!("app {app} has a healthy executor again ({healthy} healthy)"),
                json!({"app": app, "healthy_executors": healthy}),
            ),
        };
        let mut document = json!({
            "event": kind,
            "summary": summary,
            "node_id": node_id,
        });
        if let (Some(doc), Some(extra)) = (document.as_object_mut(), extra.as_object()) {
            doc.extend(extra.clone());
        }
        Self {
            run_id,
            summary,
            document,
        }
    }

    /// The webhook body in `format`.
    pub fn body(&self, format: AlertFormat) -> Value {
        match format {
            AlertFormat::Json => self.document.clone(),
            // Chat webhooks read `<…>` as mentions and links, and `&` as an entity: names
            // and errors come from users and executors, so they are shown, never obeyed.
            AlertFormat::Slack => {
                json!({"text": format!("[carillon] {}", chat_escaped(&self.summary))})
            }
        }
    }
}

/// "3 instants from … to … (misfire: …)", one reason's part of a skip alert's summary.
fn skipped_phrase(skipped: &SkippedInstants) -> String {
    let first = rfc3339(skipped.first_ms).unwrap_or_default();
    let last = rfc3339(skipped.last_ms).unwrap_or_default();
    let what = match (skipped.count, skipped.at_least) {
        (1, false) => format!("the instant {first}"),
        (n, at_least) => format!(
            "{}{n} instants from {first} to {last}",
            if at_least { "at least " } else { "" }
        ),
    };
    let detail = skipped
        .detail
        .as_deref()
        .map(|d| format!(": {d}"))
        .unwrap_or_default();
    format!(
        "{what} ({}: {}{detail})",
        skipped.reason.as_str(),
        skipped.reason.explained()
    )
}

/// `text` with `&`, `<` and `>` written as the entities Slack-style chat expects.
fn chat_escaped(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::states::{RunState, TriggerKind};

    #[test]
    fn a_failed_run_is_described_with_its_job_and_error_in_both_formats() {
        let event = AlertEvent::RunFailed {
            run_id: 7,
            job_id: 3,
            state: "failed".to_owned(),
            error: Some("disk full".to_owned()),
        };
        let run = RunRecord {
            run_id: 7,
            job_id: 3,
            scheduled_at_ms: 0,
            partition_id: 0,
            epoch: 1,
            node_id: "n1".to_owned(),
            trigger_kind: TriggerKind::Schedule,
            state: RunState::Failed,
            priority: 5,
            created_at_ms: 0,
            started_at_ms: None,
            finished_at_ms: None,
            message: Some("failed after its last attempt (shard 0: failed)".to_owned()),
            namespace_id: crate::store::NamespaceId::DEFAULT,
            flow_key: None,
        };
        let alert = Alert::describe(&event, None, Some(&run), "n1");
        let doc = alert.body(AlertFormat::Json);
        assert_eq!(doc["event"], "run_failed");
        assert_eq!(doc["run"]["id"], 7);
        assert_eq!(doc["run"]["error"], "disk full");
        assert_eq!(doc["run"]["scheduled_at"], "1970-01-01T00:00:00.000Z");
        assert_eq!(doc["job"]["id"], 3);
        assert_eq!(doc["node_id"], "n1");
        let chat = alert.body(AlertFormat::Slack);
        let text = chat["text"].as_str().unwrap_or_default();
        assert!(
            text.starts_with("[carillon] job 3 failed for good: run 7"),
            "{text}"
        );
        assert!(
            text.ends_with("failed after its last attempt (shard 0: failed): disk full"),
            "{text}"
        );
        assert_eq!(chat.as_object().map(|o| o.len()), Some(1), "{chat}");
    }

    #[test]
    fn skipped_instants_are_told_per_reason_with_their_first_and_last() {
        use super::super::SkipReason;
        let event = AlertEvent::InstantsSkipped {
            job_id: 3,
            skipped: vec![
                SkippedInstants {
                    reason: SkipReason::Misfire,
                    count: 3,
                    first_ms: 0,
                    last_ms: 120_000,
                    at_least: false,
                    detail: None,
                },
                SkippedInstants::one(SkipReason::Calendar, 60_000, Some("holidays".into())),
            ],
        };
        let alert = Alert::describe(&event, None, None, "n1");
        let doc = alert.body(AlertFormat::Json);
        assert_eq!(doc["event"], "instants_skipped");
        assert_eq!(doc["skipped"][0]["reason"], "misfire");
        assert_eq!(doc["skipped"][0]["count"], 3);
        assert_eq!(doc["skipped"][0]["last"], "1970-01-01T00:02:00.000Z");
        assert_eq!(doc["skipped"][1]["detail"], "holidays");
        assert_eq!(
            doc["summary"],
            "job 3 did not fire 3 instants from 1970-01-01T00:00:00.000Z to \
             1970-01-01T00:02:00.000Z (misfire: not fired in time (no node could) and left by \
             the misfire policy); the instant 1970-01-01T00:01:00.000Z (calendar: excluded by \
             a calendar of the job: holidays)"
        );
    }

    #[test]
    fn chat_text_shows_markup_from_errors_instead_of_obeying_it() {
        let event = AlertEvent::RunFailed {
            run_id: 1,
            job_id: 2,
            state: "failed".to_owned(),
            error: Some("<!channel> see <https://evil|details> & more".to_owned()),
        };
        let alert = Alert::describe(&event, None, None, "n1");
        let text = alert.body(AlertFormat::Slack)["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            text.ends_with("&lt;!channel&gt; see &lt;https://evil|details&gt; &amp; more"),
            "{text}"
        );
        assert_eq!(
            alert.body(AlertFormat::Json)["run"]["error"],
            "<!channel> see <https://evil|details> & more",
            "the JSON document keeps the text as it is"
        );
    }
}
