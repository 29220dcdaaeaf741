//! Ending an attempt, wherever the news comes from (a direct answer, a result report, a
//! timeout, a lost executor): the job's retry policy decides whether the shard runs again.

use carillon_protocol::Outcome;
use serde_json::Value;

use super::backoff::retry_delay_ms;
use crate::jobs::{Delivery, JobPolicy};
use crate::observe::Observer;
use crate::states::AttemptState;
use crate::store::{self, AttemptEnd, AttemptEnded, AttemptRecord, JobRecord, Store};

/// Output kept per attempt; the rest is cut.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;
const MAX_ERROR_BYTES: usize = 8 * 1024;
/// Attempts lost with their executor are retried outside `max_attempts`, up to this many
/// times per shard: failing over must not use up the retry budget, but work that takes down
/// every executor it lands on must stop somewhere.
const EXTRA_LOST_ATTEMPTS: i64 = 5;

/// Why an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Reported(Outcome),
    TimedOut,
    Lost,
    Refused,
}

/// Ends `attempt` as `ending` says and reports what that did to its run.
pub async fn finish_attempt(
    store: &dyn Store,
    observer: &Observer,
    attempt: &AttemptRecord,
    ending: Ending,
    output: Option<&Value>,
    error: Option<String>,
) -> Result<AttemptEnded, store::Error> {
    finish_attempt_by(store, observer, attempt, None, ending, output, error).await
}

/// Like [`finish_attempt`], recording which executor reported the ending.
pub async fn finish_attempt_by(
    store: &dyn Store,
    observer: &Observer,
    attempt: &AttemptRecord,
    executor_id: Option<&str>,
    ending: Ending,
    output: Option<&Value>,
    error: Option<String>,
) -> Result<AttemptEnded, store::Error> {
    let job = store::job_of_run(store, attempt.job_id).await?;
    let end = match job.as_ref().map(JobRecord::policy) {
        Some(Ok(policy)) => end_of(policy, attempt, executor_id, ending, output, error),
        // A deleted job's run ends under the defaults: it is cancelled at its next turn.
        None => end_of(
            &JobPolicy::default(),
            attempt,
            executor_id,
            ending,
            output,
            error,
        ),
        Some(Err(unreadable)) => {
            end_unreadable(attempt, executor_id, ending, output, error, &unreadable)
        }
    };
    let began = std::time::SystemTime::now();
    let ended = store.attempt_end(attempt.attempt_id, &end).await?;
    if !matches!(ended, AttemptEnded::AlreadyEnded) {
        let run_state = match &ended {
            AttemptEnded::RunEnded(state) => Some(state.as_str()),
            _ => None,
        };
        observer.traces.settled(
            (attempt.run_id, attempt.attempt_id),
            end.state.as_str(),
            run_state,
            (began, std::time::SystemTime::now()),
        );
    }
    observer.attempt_ended(
        &ended,
        attempt.run_id,
        attempt.job_id,
        job.as_ref().map(|j| j.namespace_id),
        end.error.as_deref(),
    );
    Ok(ended)
}

/// How `attempt` ends under the job's `policy`: its final state, and whether and when its
/// shard is tried again.
pub fn end_of(
    policy: &JobPolicy,
    attempt: &AttemptRecord,
    executor_id: Option<&str>,
    ending: Ending,
    output: Option<&Value>,
    error: Option<String>,
) -> AttemptEnd {
    let max = i64::from(policy.retry.max_attempts);
    // Attempts lost with their executor say nothing of the work: they count apart.
    let tried = attempt.attempt_no - attempt.lost_before;
    let (state, retry) = match ending {
        Ending::Reported(Outcome::Succeeded) => (AttemptState::Succeeded, false),
        Ending::Reported(Outcome::Cancelled) => (AttemptState::Cancelled, false),
        Ending::Reported(Outcome::Failed) | Ending::Refused => (AttemptState::Failed, tried < max),
        Ending::TimedOut => (AttemptState::TimedOut, tried < max),
        Ending::Lost => (
            AttemptState::Lost,
            attempt.lost_before < EXTRA_LOST_ATTEMPTS,
        ),
    };
    // At most once: nothing that may have been delivered is delivered again, so nothing is
    // tried again; a delivery whose fate is unknown is recorded as lost.
    let at_most_once = policy.delivery == Delivery::AtMostOnce;
    let retry = retry && !at_most_once;
    let error = match ending {
        Ending::Lost if at_most_once => Some(format!(
            "{}; at_most_once: not delivered again",
            error.as_deref().unwrap_or("the delivery was lost")
        )),
        _ => error,
    };
    let retry_after_ms = retry.then(|| match ending {
        // A lost executor says nothing about the work: go again at once, elsewhere.
        Ending::Lost => 0,
        _ => retry_delay_ms(
            &policy.retry,
            u32::try_from(attempt.attempt_no).unwrap_or(u32::MAX),
            jitter(attempt.attempt_id),
        ),
    });
    AttemptEnd {
        state,
        output: output.map(bounded_output),
        error: error.map(|e| cut(&e, MAX_ERROR_BYTES)),
        executor_id: executor_id.map(str::to_owned),
        retry_after_ms,
        // The executor that had a lost attempt of an effect-once run holds its record: the
        // next attempt goes back to it (while it is healthy) instead of avoiding it.
        job_has_children: !policy.children.is_empty(),
        retry_to_same_executor: policy.delivery == Delivery::ExactlyOnceEffect
            && ending == Ending::Lost,
    }
}

/// How `attempt` ends when its job's policy does not read: as reported, and never tried
/// again, since whether it may be cannot be read; the error names the policy.
fn end_unreadable(
    attempt: &AttemptRecord,
    executor_id: Option<&str>,
    ending: Ending,
    output: Option<&Value>,
    error: Option<String>,
    unreadable: &store::Error,
) -> AttemptEnd {
    let mut end = end_of(
        &JobPolicy::default(),
        attempt,
        executor_id,
        ending,
        output,
        error,
    );
    end.retry_after_ms = None;
    end.retry_to_same_executor = false;
    // The follow-ups read the policy again and report the children they cannot start.
    end.job_has_children = true;
    if end.state != AttemptState::Succeeded {
        let error = match end.error.take() {
            Some(error) => format!("{error}; not tried again: {unreadable}"),
            None => format!("not tried again: {unreadable}"),
        };
        end.error = Some(cut(&error, MAX_ERROR_BYTES));
    }
    end
}

/// An output as stored: its JSON, or a JSON string holding the first bytes of it.
fn bounded_output(output: &Value) -> String {
    let text = output.to_string();
    if text.len() <= MAX_OUTPUT_BYTES {
        return text;
    }
    Value::String(format!(
        "{}… (cut at {MAX_OUTPUT_BYTES} bytes)",
        cut(&text, MAX_OUTPUT_BYTES - 64)
    ))
    .to_string()
}

fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// A jitter in [0, 1) that differs between attempts without a random source.
fn jitter(attempt_id: i64) -> f64 {
    let mut x = attempt_id as u64 ^ 0x9e37_79b9_7f4a_7c15;
    x = (x ^ (x >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_outputs_are_cut_to_valid_json() {
        let big = Value::String("x".repeat(MAX_OUTPUT_BYTES * 2));
        let stored = bounded_output(&big);
        assert!(stored.len() <= MAX_OUTPUT_BYTES + 64);
        assert!(serde_json::from_str::<Value>(&stored).is_ok());
        assert_eq!(
            bounded_output(&serde_json::json!({"rows": 3})),
            r#"{"rows":3}"#
        );
    }

    fn attempt(attempt_no: i64, lost_before: i64) -> AttemptRecord {
        AttemptRecord {
            attempt_id: 1,
            run_id: 1,
            job_id: 1,
            partition_id: 0,
            shard_index: 0,
            shard_total: 1,
            attempt_no,
            priority: 5,
            args_json: "null".into(),
            state: AttemptState::Running,
            created_at_ms: 0,
            not_before_ms: 0,
            avoid_executor_id: None,
            executor_id: Some("e1".into()),
            dispatched_at_ms: Some(0),
            deadline_ms: None,
            finished_at_ms: None,
            output: None,
            error: None,
            lost_before,
        }
    }

    #[test]
    fn an_attempt_whose_policy_does_not_read_is_never_tried_again_and_says_why() {
        let unreadable = store::Error::Unreadable {
            what: "the stored policy of job 1 (nightly)".into(),
            reason: "invalid type".into(),
        };
        for ending in [
            Ending::Refused,
            Ending::TimedOut,
            Ending::Lost,
            Ending::Reported(Outcome::Failed),
        ] {
            let end = end_unreadable(&attempt(1, 0), None, ending, None, None, &unreadable);
            assert_eq!(end.retry_after_ms, None, "{ending:?}");
            assert!(!end.retry_to_same_executor, "{ending:?}");
            let error = end.error.unwrap_or_default();
            assert!(
                error.contains("not tried again: the stored policy of job 1 (nightly)"),
                "{ending:?}: {error}"
            );
        }
        let done = end_unreadable(
            &attempt(1, 0),
            Some("e1"),
            Ending::Reported(Outcome::Succeeded),
            None,
            None,
            &unreadable,
        );
        assert_eq!(
            (done.state, done.error, done.job_has_children),
            (AttemptState::Succeeded, None, true),
            "the work was done; the follow-ups report the children they cannot read"
        );
    }

    #[test]
    fn failover_does_not_use_up_the_retry_budget() {
        let mut policy = JobPolicy::default();
        policy.retry.max_attempts = 3;
        let retries = |no, lost, ending| {
            end_of(&policy, &attempt(no, lost), None, ending, None, None)
                .retry_after_ms
                .is_some()
        };
        let failed = || Ending::Reported(Outcome::Failed);
        // Three real tries, whatever was lost between them.
        assert!(retries(2, 0, failed()));
        assert!(!retries(3, 0, failed()));
        assert!(
            retries(3, 1, failed()),
            "one of the three was lost: one more try"
        );
        assert!(!retries(4, 1, failed()));
        assert!(retries(5, 3, Ending::TimedOut));
        // Lost attempts go again, up to EXTRA_LOST_ATTEMPTS of them per shard.
        assert!(retries(1, 0, Ending::Lost));
        assert!(retries(9, EXTRA_LOST_ATTEMPTS - 1, Ending::Lost));
        assert!(!retries(9, EXTRA_LOST_ATTEMPTS, Ending::Lost));
    }

    #[test]
    fn at_most_once_never_tries_again_and_effect_once_returns_to_its_executor() {
        let mut policy = JobPolicy::default();
        policy.retry.max_attempts = 3;
        policy.delivery = Delivery::AtMostOnce;
        let end = |ending| end_of(&policy, &attempt(1, 0), None, ending, None, None);
        for ending in [
            Ending::Lost,
            Ending::TimedOut,
            Ending::Refused,
            Ending::Reported(Outcome::Failed),
        ] {
            assert_eq!(end(ending).retry_after_ms, None, "{ending:?}");
        }
        let lost = end(Ending::Lost);
        assert_eq!(lost.state, AttemptState::Lost);
        assert!(lost.error.unwrap().contains("at_most_once"));

        policy.delivery = Delivery::ExactlyOnceEffect;
        let lost = end_of(&policy, &attempt(1, 0), None, Ending::Lost, None, None);
        assert_eq!(lost.retry_after_ms, Some(0));
        assert!(lost.retry_to_same_executor);
        let failed = end_of(
            &policy,
            &attempt(1, 0),
            None,
            Ending::Reported(Outcome::Failed),
            None,
            None,
        );
        assert!(failed.retry_after_ms.is_some() && !failed.retry_to_same_executor);
        policy.delivery = Delivery::AtLeastOnce;
        assert!(
            !end_of(&policy, &attempt(1, 0), None, Ending::Lost, None, None).retry_to_same_executor
        );
    }

    #[test]
    fn jitter_is_in_range_and_varies() {
        let values: Vec<f64> = (0..100).map(jitter).collect();
        assert!(values.iter().all(|j| (0.0..1.0).contains(j)));
        assert!(values.windows(2).any(|w| (w[0] - w[1]).abs() > 0.1));
    }
}
