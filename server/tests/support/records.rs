//! Records the storage conformance suites write directly: a job of app `billing` and a claim
//! of one of its instants on partition 0 (owned by `n1` at epoch 1, as
//! `TestDb::store_owning_partition_0` sets it up).

use carillon_server::states::{JobKind, RunState, TriggerKind};
use carillon_server::store::{JobWrite, NamespaceId, NewAttempt, OverlapRule, RunClaim};

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
        kind: JobKind::Job,
        namespace_id: NamespaceId::DEFAULT,
    }
}

/// A scheduled claim of instant `at` of job `job_id` (version 1), entering `state`.
pub fn claim(job_id: i64, at: i64, state: RunState) -> RunClaim {
    RunClaim {
        job_id,
        namespace_id: NamespaceId::DEFAULT,
        job_version: 1,
        partition_id: 0,
        epoch: 1,
        scheduled_at_ms: at,
        trigger_kind: TriggerKind::Schedule,
        priority: 5,
        state,
        message: None,
        overlap: OverlapRule::Allow,
        job_done: false,
        start: false,
    }
}

/// A scheduled claim of instant `at` of job `job_id` at `version`, whose run is recorded
/// `no_executor` at once: nothing starts or delivers it.
pub fn ended_claim(job_id: i64, version: i64, at: i64) -> RunClaim {
    RunClaim {
        job_version: version,
        message: Some("nowhere to go".into()),
        ..claim(job_id, at, RunState::NoExecutor)
    }
}

/// The first attempt of shard `index` of `total`, for no executor in particular.
pub fn shard(index: i64, total: i64) -> NewAttempt {
    NewAttempt {
        shard_index: index,
        shard_total: total,
        args_json: "null".into(),
        prefer_executor_id: None,
        delay_ms: 0,
    }
}
