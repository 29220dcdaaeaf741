//! The tasks table of the in-memory driver: ids and keys unique as the SQL schema keeps them,
//! and a task's run found by its negated id, as the SQL read joins it.

use std::collections::HashMap;

use async_trait::async_trait;

use super::{MemoryDb, MemoryRun};
use crate::states::{RunState, TaskState, TriggerKind};
use crate::store::error::Error;
use crate::store::namespace_records::NamespaceId;
use crate::store::rules::tasks::{FiringTask, TaskTx};
use crate::store::task_records::{TaskRecord, TaskWrite};

impl MemoryDb {
    /// The task as the SQL read gives it: with its run's id and state.
    pub(crate) fn task(&self, task_id: i64) -> Option<TaskRecord> {
        let mut task = self.tasks.iter().find(|t| t.task_id == task_id)?.clone();
        if let Some(run) = self.runs.iter().find(|r| r.job_id == -task_id) {
            task.run_id = Some(run.run_id);
            task.run_state = Some(run.state.as_str().to_owned());
        }
        Some(task)
    }
}

/// A task as an enqueue stores it: pending.
pub(crate) fn task_row(write: &TaskWrite) -> TaskRecord {
    TaskRecord {
        task_id: write.task_id,
        partition_id: write.partition_id,
        task_key: write.key.clone(),
        namespace_id: write.namespace_id,
        app_name: write.app_name.clone(),
        handler_name: write.handler_name.clone(),
        args_json: write.args_json.clone(),
        stored_policy: write.policy_json.clone().into(),
        priority: write.priority,
        due_at_ms: write.due_at_ms,
        state: TaskState::Pending,
        created_at_ms: 0,
        ended_at_ms: None,
        message: None,
        run_id: None,
        run_state: None,
    }
}

#[async_trait]
impl TaskTx for MemoryDb {
    async fn insert_tasks(&mut self, tasks: &[TaskWrite]) -> Result<(), Error> {
        for write in tasks {
            let taken = self.tasks.iter().any(|t| {
                t.task_id == write.task_id
                    || (write.key.is_some()
                        && t.task_key == write.key
                        && t.namespace_id == write.namespace_id)
            });
            if !taken {
                self.tasks.push(task_row(write));
            }
        }
        Ok(())
    }

    async fn tasks_by_keys(
        &mut self,
        namespace: NamespaceId,
        keys: &[&str],
    ) -> Result<Vec<TaskRecord>, Error> {
        let ids: Vec<i64> = self
            .tasks
            .iter()
            .filter(|t| {
                t.namespace_id == namespace
                    && t.task_key.as_deref().is_some_and(|k| keys.contains(&k))
            })
            .map(|t| t.task_id)
            .collect();
        Ok(ids.into_iter().filter_map(|id| self.task(id)).collect())
    }

    async fn release_key(&mut self, task_id: i64, key: &str) -> Result<(), Error> {
        if let Some(task) = self
            .tasks
            .iter_mut()
            .find(|t| t.task_id == task_id && t.task_key.as_deref() == Some(key))
        {
            task.task_key = None;
        }
        Ok(())
    }

    async fn mark_fired(&mut self, ids: &[i64]) -> Result<Vec<i64>, Error> {
        let mut moved = Vec::new();
        for task in &mut self.tasks {
            if ids.contains(&task.task_id) && task.state == TaskState::Pending {
                task.state = TaskState::Fired;
                moved.push(task.task_id);
            }
        }
        Ok(moved)
    }

    async fn insert_task_runs(
        &mut self,
        node_id: &str,
        firing: &[FiringTask<'_>],
    ) -> Result<HashMap<i64, i64>, Error> {
        let mut runs = HashMap::new();
        for f in firing {
            let task = f.task;
            let inserted = self.insert_unique(MemoryRun {
                run_id: 0,
                job_id: task.run_job_id(),
                scheduled_at_ms: task.due_at_ms,
                partition_id: task.partition_id,
                epoch: f.epoch,
                node_id: node_id.to_owned(),
                trigger_kind: TriggerKind::Task,
                state: RunState::Running,
                priority: task.priority,
                message: None,
                namespace_id: task.namespace_id,
                started: true,
                finished_at_ms: None,
                input: None,
            });
            if let Some(run_id) = inserted {
                runs.insert(task.run_job_id(), run_id);
            }
        }
        Ok(runs)
    }

    async fn unstart_runs(&mut self, run_ids: &[i64]) -> Result<(), Error> {
        for run in &mut self.runs {
            if run_ids.contains(&run.run_id) && run.state == RunState::Running {
                run.state = RunState::Pending;
                run.started = false;
            }
        }
        Ok(())
    }
}
