//! Records the storage conformance suites write directly: a job of app `billing` and a claim
//! of one of its instants on partition 0 (owned by `n1` at epoch 1, as
//! `TestDb::store_owning_partition_0` sets it up).

use carillon_server::store::{JobWrite, OverlapRule, RunClaim};

/// A job firing every second, with no arguments and default policies.
pub fn job_write(name: &str) -> JobWrite {
    JobWrite {
        name: name.into(),
        app_name: "billing".into(),
        handler_name: "report".into(),
        schedule_json: r#"{"cron":"* * * * * *"}"#.into(),
        timezone: "UTC".into(),
        args_json: "null".into(),
        policy_json: "{}".into(),
        history_keep_ms: None,
        history_max_runs: None,
    }
}

/// A scheduled claim of instant `at` of job `job_id` (version 1), entering `state`.
pub fn claim(job_id: i64, at: i64, state: &'static str) -> RunClaim {
    RunClaim {
        job_id,
        job_version: 1,
        partition_id: 0,
        epoch: 1,
        scheduled_at_ms: at,
        trigger_kind: "schedule",
        priority: 5,
        state,
        message: None,
        overlap: OverlapRule::Allow,
        job_done: false,
        start: false,
    }
}
