//! A run now, outside the schedule (a trigger, a rerun): at the database clock's millisecond,
//! or the next free one when another run of the job holds it (two triggers in one millisecond
//! both run), within a second.

use async_trait::async_trait;

use super::super::audit_records::AuditWrite;
use super::super::error::Error;
use super::super::job_records::{JobRecord, RunRecord};
use crate::states::RunState;

/// A run to insert now.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ManualRun<'a> {
    pub(crate) job: &'a JobRecord,
    pub(crate) node_id: &'a str,
    /// `pending`, or a finished state (a trigger recorded as skipped).
    pub(crate) state: RunState,
    pub(crate) message: Option<&'a str>,
    /// JSON.
    pub(crate) input: Option<&'a str>,
    /// The API call's audit event, stored with the run.
    pub(crate) audit: Option<&'a AuditWrite>,
}

impl ManualRun<'_> {
    pub(crate) fn finished(&self) -> bool {
        !RunState::UNFINISHED.contains(&self.state)
    }
}

/// What a manual run needs of the database (each insert commits alone, with the run's audit
/// event when it has one).
#[async_trait]
pub(crate) trait ManualRunDriver: Send {
    /// The database's clock, in epoch milliseconds.
    async fn clock_ms(&mut self) -> Result<i64, Error>;

    /// Inserts the run at `at_ms` unless its job has a run there; the run if inserted.
    async fn insert_manual_run(
        &mut self,
        run: &ManualRun<'_>,
        at_ms: i64,
    ) -> Result<Option<RunRecord>, Error>;
}

/// Inserts `run` at the first free millisecond from now.
pub(crate) async fn insert_manual_run<D: ManualRunDriver + ?Sized>(
    db: &mut D,
    run: &ManualRun<'_>,
) -> Result<RunRecord, Error> {
    let now = db.clock_ms().await?;
    for at in now..now + 1_000 {
        if let Some(inserted) = db.insert_manual_run(run, at).await? {
            return Ok(inserted);
        }
    }
    Err(Error::Conflict {
        what: format!(
            "every millisecond of the last second for job {}",
            run.job.job_id
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::super::memory::MemoryDb;
    use super::*;
    use crate::states::{JobKind, JobState};

    fn job() -> JobRecord {
        JobRecord {
            job_id: 4,
            partition_id: 2,
            name: "report".to_owned(),
            namespace_id: crate::store::NamespaceId::DEFAULT,
            app_name: "py".to_owned(),
            handler_name: "echo".to_owned(),
            schedule_json: r#"{"manual":true}"#.to_owned(),
            timezone: "UTC".to_owned(),
            args_json: "{}".to_owned(),
            stored_policy: r#"{"priority":8}"#.to_owned().into(),
            state: JobState::Stopped,
            version: 1,
            last_fired_at_ms: None,
            created_at_ms: 0,
            updated_at_ms: 0,
            started_at_ms: None,
            fired_count: 0,
            kind: JobKind::Job,
        }
    }

    #[tokio::test]
    async fn triggers_in_one_millisecond_each_take_the_next_free_one() {
        let mut db = MemoryDb {
            now_ms: 5_000,
            ..MemoryDb::default()
        };
        let job = job();
        let run = ManualRun {
            job: &job,
            node_id: "n1",
            state: RunState::Pending,
            message: None,
            input: Some(r#"{"params":{}}"#),
            audit: None,
        };
        let first = insert_manual_run(&mut db, &run).await.unwrap();
        let second = insert_manual_run(&mut db, &run).await.unwrap();
        assert_eq!(
            (first.scheduled_at_ms, second.scheduled_at_ms),
            (5_000, 5_001)
        );
        assert_eq!(
            (
                first.trigger_kind.as_str(),
                first.priority,
                first.partition_id
            ),
            ("manual", 8, 2),
            "the job's priority and partition"
        );
        assert_eq!(db.runs[0].input.as_deref(), Some(r#"{"params":{}}"#));
    }

    #[tokio::test]
    async fn a_second_full_of_runs_is_a_conflict() {
        let mut db = MemoryDb::default();
        let job = job();
        let run = ManualRun {
            job: &job,
            node_id: "n1",
            state: RunState::Skipped,
            message: Some("paused"),
            input: None,
            audit: None,
        };
        for _ in 0..1_000 {
            insert_manual_run(&mut db, &run).await.unwrap();
        }
        assert!(
            db.runs.iter().all(|r| r.finished_at_ms.is_some()),
            "skipped: finished"
        );
        let full = insert_manual_run(&mut db, &run).await;
        assert!(matches!(full, Err(Error::Conflict { .. })), "{full:?}");
    }
}
