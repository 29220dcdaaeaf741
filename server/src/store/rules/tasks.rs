//! Tasks: the keyed enqueue (a key is unique among a namespace's tasks, and a finished holder
//! gives it up to a new task enqueued with it) and the fenced fire of a window of due tasks (each fires once,
//! as a run of its own started with its one attempt).

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;

use super::super::cluster_records::PartitionEpoch;
use super::super::error::Error;
use super::super::namespace_records::NamespaceId;
use super::super::task_records::{Enqueued, TaskRecord, TaskWrite, TasksFired};
use super::claim::{FirstAttempt, FirstAttemptTx};
use super::fence::{FenceTx, owned};
use crate::states::{RunState, TaskState};

/// Rounds of giving keys up and inserting again in one enqueue: a key changes hands between
/// two reads only when another enqueue or the retention pass races this one.
const KEY_ROUNDS: usize = 3;

/// A due task as the window read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DueTask {
    pub(crate) task_id: i64,
    pub(crate) partition_id: i64,
    pub(crate) priority: i64,
    pub(crate) due_at_ms: i64,
    pub(crate) args_json: String,
    pub(crate) namespace_id: NamespaceId,
    /// Its policy has flow control: its run waits `pending` for the start pass to put it in
    /// line under its key, instead of starting with its attempt.
    pub(crate) in_line: bool,
}

impl DueTask {
    /// The job id its run carries: the task's id negated (job ids are positive).
    pub(crate) fn run_job_id(&self) -> i64 {
        -self.task_id
    }
}

/// A task that fires: its run goes in at its due instant under the partition's epoch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FiringTask<'a> {
    pub(crate) task: &'a DueTask,
    pub(crate) epoch: i64,
}

/// What tasks need of a write transaction: statements with their binds.
#[async_trait]
pub(crate) trait TaskTx: FenceTx + FirstAttemptTx {
    /// Inserts the tasks, skipping any whose id or key another task holds.
    async fn insert_tasks(&mut self, tasks: &[TaskWrite]) -> Result<(), Error>;

    /// The tasks of `namespace` holding `keys`, with their runs' states.
    async fn tasks_by_keys(
        &mut self,
        namespace: NamespaceId,
        keys: &[&str],
    ) -> Result<Vec<TaskRecord>, Error>;

    /// Task `task_id` gives `key` up.
    async fn release_key(&mut self, task_id: i64, key: &str) -> Result<(), Error>;

    /// Moves the tasks of `ids` still pending to `fired`; the ids it moved.
    async fn mark_fired(&mut self, ids: &[i64]) -> Result<Vec<i64>, Error>;

    /// Inserts the fired tasks' runs, `running` and created by `node_id`, skipping an instant a
    /// run holds; the runs' ids by job id.
    async fn insert_task_runs(
        &mut self,
        node_id: &str,
        firing: &[FiringTask<'_>],
    ) -> Result<HashMap<i64, i64>, Error>;

    /// Moves the runs of `run_ids`, inserted `running` without attempts, back to `pending`.
    async fn unstart_runs(&mut self, run_ids: &[i64]) -> Result<(), Error>;
}

/// Whether a task still holds its key for itself: not cancelled, and not fired with its run
/// ended (or purged).
pub(crate) fn holds_key(task: &TaskRecord) -> bool {
    match task.state {
        TaskState::Pending => true,
        TaskState::Fired => RunState::UNFINISHED
            .iter()
            .any(|s| task.run_state.as_deref() == Some(s.as_str())),
        TaskState::Cancelled => false,
    }
}

/// Enqueues `tasks`, some with keys (`sorted` is the same batch in key order, so two batches
/// sharing keys lock them in the same order): insert, read the keys' holders, let finished
/// holders give their keys up and insert again those tasks and any whose key had no holder at
/// the read (deleted meanwhile). Per task of `tasks`, what became of it; a key still unsettled
/// after every round is a conflict, never an answer for a task that may not be stored.
pub(crate) async fn enqueue_keyed<T: TaskTx + ?Sized>(
    tx: &mut T,
    sorted: &[TaskWrite],
    tasks: &[TaskWrite],
) -> Result<Vec<Enqueued>, Error> {
    tx.insert_tasks(sorted).await?;
    let mut holders = HashMap::new();
    read_holders(tx, sorted, &mut holders).await?;
    for _ in 0..KEY_ROUNDS {
        let mut again = Vec::new();
        for task in sorted {
            let Some(key) = &task.key else { continue };
            match holders.get(&(task.namespace_id, key.clone())) {
                // Held by a finished task: it gives the key up, this one takes it.
                Some(holder) if holder.task_id != task.task_id && !holds_key(holder) => {
                    tx.release_key(holder.task_id, key).await?;
                    again.push(task.clone());
                }
                Some(_) => {}
                None => again.push(task.clone()),
            }
        }
        if again.is_empty() {
            break;
        }
        tx.insert_tasks(&again).await?;
        read_holders(tx, &again, &mut holders).await?;
    }
    tasks
        .iter()
        .map(|task| {
            let Some(key) = &task.key else {
                return Ok(Enqueued::Created(task.task_id));
            };
            match holders.get(&(task.namespace_id, key.clone())) {
                Some(holder) if holder.task_id == task.task_id => {
                    Ok(Enqueued::Created(task.task_id))
                }
                Some(holder) if holds_key(holder) => Ok(Enqueued::Existing(holder.task_id)),
                _ => Err(Error::Conflict {
                    what: format!(
                        "task key {key:?} (it changed hands while enqueued; enqueue again)"
                    ),
                }),
            }
        })
        .collect()
}

/// The holders of the keys of `tasks`, read per namespace (a batch is usually of one), into
/// `holders` by namespace and key.
async fn read_holders<T: TaskTx + ?Sized>(
    tx: &mut T,
    tasks: &[TaskWrite],
    holders: &mut HashMap<(NamespaceId, String), TaskRecord>,
) -> Result<(), Error> {
    let mut keys_by_namespace: HashMap<NamespaceId, Vec<&str>> = HashMap::new();
    for task in tasks {
        if let Some(key) = task.key.as_deref() {
            keys_by_namespace
                .entry(task.namespace_id)
                .or_default()
                .push(key);
        }
    }
    for (namespace, keys) in keys_by_namespace {
        for holder in tx.tasks_by_keys(namespace, &keys).await? {
            if let Some(key) = holder.task_key.clone() {
                holders.insert((holder.namespace_id, key), holder);
            }
        }
    }
    Ok(())
}

/// Fires the tasks of `due` (read from `partitions`, each with the epoch `node_id` owns it at)
/// that are still this node's to fire: a partition handed off since keeps its tasks pending for
/// the next owner, and a task cancelled since the window was read stays cancelled. Each fired
/// task's run goes in `running`, started with its one attempt due at the task's instant.
pub(crate) async fn fire<T: TaskTx + ?Sized>(
    tx: &mut T,
    node_id: &str,
    partitions: &[PartitionEpoch],
    due: &[DueTask],
) -> Result<TasksFired, Error> {
    let epochs: HashMap<i64, i64> = partitions
        .iter()
        .map(|p| (p.partition_id, p.epoch))
        .collect();
    let epoch_of = |task: &DueTask| epochs.get(&task.partition_id).copied();
    let wanted: Vec<(i64, i64)> = due
        .iter()
        .filter_map(|t| epoch_of(t).map(|e| (t.partition_id, e)))
        .collect();
    let held = owned(tx, node_id, &wanted).await?;
    let fenced: Vec<FiringTask<'_>> = due
        .iter()
        .filter_map(|task| {
            let epoch = epoch_of(task)?;
            held.contains(&(task.partition_id, epoch))
                .then_some(FiringTask { task, epoch })
        })
        .collect();
    let ids: Vec<i64> = fenced.iter().map(|f| f.task.task_id).collect();
    let moved: HashSet<i64> = if ids.is_empty() {
        HashSet::new()
    } else {
        tx.mark_fired(&ids).await?.into_iter().collect()
    };
    let firing: Vec<FiringTask<'_>> = fenced
        .iter()
        .filter(|f| moved.contains(&f.task.task_id))
        .copied()
        .collect();
    let runs = if firing.is_empty() {
        HashMap::new()
    } else {
        tx.insert_task_runs(node_id, &firing).await?
    };
    let in_line: Vec<i64> = firing
        .iter()
        .filter(|f| f.task.in_line)
        .filter_map(|f| runs.get(&f.task.run_job_id()).copied())
        .collect();
    if !in_line.is_empty() {
        tx.unstart_runs(&in_line).await?;
    }
    let firsts: Vec<FirstAttempt<'_>> = firing
        .iter()
        .filter(|f| !f.task.in_line)
        .filter_map(|f| {
            let task = f.task;
            runs.get(&task.run_job_id()).map(|run_id| FirstAttempt {
                run_id: *run_id,
                job_id: task.run_job_id(),
                partition_id: task.partition_id,
                priority: task.priority,
                shard_index: 0,
                shard_total: 1,
                args_json: &task.args_json,
                not_before_ms: task.due_at_ms,
                executor_id: None,
            })
        })
        .collect();
    if !firsts.is_empty() {
        tx.insert_first_attempts(&firsts).await?;
    }
    let mut fired_by_namespace = std::collections::BTreeMap::new();
    for f in &firing {
        if runs.contains_key(&f.task.run_job_id()) {
            *fired_by_namespace.entry(f.task.namespace_id).or_default() += 1;
        }
    }
    Ok(TasksFired {
        read: due.len(),
        fired: firsts.len() + in_line.len(),
        fired_by_namespace,
        fenced: due.len() - fenced.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::memory::MemoryDb;
    use super::super::memory::tasks::task_row;
    use super::*;

    fn held(partition_id: i64, epoch: i64) -> PartitionEpoch {
        PartitionEpoch {
            partition_id,
            epoch,
        }
    }

    const NODE: &str = "n1";

    fn write(task_id: i64, key: Option<&str>) -> TaskWrite {
        TaskWrite {
            task_id,
            partition_id: task_id % 2,
            namespace_id: NamespaceId::DEFAULT,
            key: key.map(str::to_owned),
            app_name: "billing".to_owned(),
            handler_name: "invoice".to_owned(),
            args_json: format!(r#"{{"task":{task_id}}}"#),
            policy_json: "{}".to_owned(),
            priority: 5,
            due_at_ms: 1_000 + task_id,
        }
    }

    async fn enqueue(db: &mut MemoryDb, tasks: &[TaskWrite]) -> Result<Vec<Enqueued>, Error> {
        let mut sorted = tasks.to_vec();
        sorted.sort_by(|a, b| a.key.cmp(&b.key));
        enqueue_keyed(db, &sorted, tasks).await
    }

    fn due(db: &MemoryDb) -> Vec<DueTask> {
        db.tasks
            .iter()
            .filter(|t| t.state == TaskState::Pending)
            .map(|t| DueTask {
                task_id: t.task_id,
                partition_id: t.partition_id,
                priority: t.priority,
                due_at_ms: t.due_at_ms,
                args_json: t.args_json.clone(),
                namespace_id: t.namespace_id,
                in_line: false,
            })
            .collect()
    }

    #[tokio::test]
    async fn a_key_held_by_an_unfinished_task_answers_that_task_and_one_batch_stores_it_once() {
        let mut db = MemoryDb::default();
        let first = enqueue(&mut db, &[write(1, Some("order-7")), write(2, None)])
            .await
            .unwrap();
        assert_eq!(first, [Enqueued::Created(1), Enqueued::Created(2)]);
        let again = enqueue(
            &mut db,
            &[write(3, Some("order-7")), write(4, Some("order-7"))],
        )
        .await
        .unwrap();
        assert_eq!(again, [Enqueued::Existing(1), Enqueued::Existing(1)]);
        assert_eq!(db.tasks.len(), 2, "no task stored for a key already held");
    }

    #[tokio::test]
    async fn a_key_is_held_once_per_namespace_even_in_one_batch() {
        let mut db = MemoryDb::default();
        let team_b = |task_id| TaskWrite {
            namespace_id: NamespaceId(2),
            ..write(task_id, Some("order-7"))
        };
        let first = enqueue(&mut db, &[write(1, Some("order-7")), team_b(2)])
            .await
            .unwrap();
        assert_eq!(first, [Enqueued::Created(1), Enqueued::Created(2)]);
        let again = enqueue(&mut db, &[team_b(3), write(4, Some("order-7"))])
            .await
            .unwrap();
        assert_eq!(again, [Enqueued::Existing(2), Enqueued::Existing(1)]);
        assert_eq!(db.tasks.len(), 2);
    }

    #[tokio::test]
    async fn a_finished_holder_gives_its_key_up_to_the_next_enqueue() {
        let mut db = MemoryDb::default();
        enqueue(&mut db, &[write(1, Some("k"))]).await.unwrap();
        db.partitions.insert(1, (Some(NODE.to_owned()), 1));
        let window = due(&db);
        fire(&mut db, NODE, &[held(1, 1)], &window).await.unwrap();
        assert_eq!(
            enqueue(&mut db, &[write(3, Some("k"))]).await.unwrap(),
            [Enqueued::Existing(1)],
            "its run is still running"
        );
        db.runs[0].state = RunState::Succeeded;
        assert_eq!(
            enqueue(&mut db, &[write(5, Some("k"))]).await.unwrap(),
            [Enqueued::Created(5)]
        );
        assert_eq!(
            db.task(1).unwrap().task_key,
            None,
            "the old task gave it up"
        );
        assert_eq!(db.task(5).unwrap().task_key.as_deref(), Some("k"));
        // A cancelled holder gives its key up too.
        db.tasks.iter_mut().find(|t| t.task_id == 5).unwrap().state = TaskState::Cancelled;
        assert_eq!(
            enqueue(&mut db, &[write(7, Some("k"))]).await.unwrap(),
            [Enqueued::Created(7)]
        );
    }

    #[tokio::test]
    async fn a_key_that_keeps_changing_hands_is_a_conflict_not_an_answer() {
        let mut db = MemoryDb::default();
        // A holder that reads back finished but whose key no release frees: as if another
        // enqueue kept taking it between this one's reads.
        let mut holder = task_row(&write(1, Some("k")));
        holder.state = TaskState::Cancelled;
        db.tasks.push(holder);
        let mut stuck = StuckKeys(db);
        let refused =
            enqueue_keyed(&mut stuck, &[write(3, Some("k"))], &[write(3, Some("k"))]).await;
        assert!(
            matches!(refused, Err(Error::Conflict { .. })),
            "{refused:?}"
        );
    }

    /// The in-memory driver, but a key release changes nothing.
    struct StuckKeys(MemoryDb);

    #[async_trait]
    impl FenceTx for StuckKeys {
        async fn lock_partitions(
            &mut self,
            partition_ids: &[i64],
        ) -> Result<Vec<super::super::fence::PartitionLease>, Error> {
            self.0.lock_partitions(partition_ids).await
        }
    }

    #[async_trait]
    impl FirstAttemptTx for StuckKeys {
        async fn insert_first_attempts(&mut self, a: &[FirstAttempt<'_>]) -> Result<(), Error> {
            self.0.insert_first_attempts(a).await
        }
    }

    #[async_trait]
    impl TaskTx for StuckKeys {
        async fn insert_tasks(&mut self, tasks: &[TaskWrite]) -> Result<(), Error> {
            self.0.insert_tasks(tasks).await
        }
        async fn tasks_by_keys(
            &mut self,
            namespace: NamespaceId,
            keys: &[&str],
        ) -> Result<Vec<TaskRecord>, Error> {
            self.0.tasks_by_keys(namespace, keys).await
        }
        async fn release_key(&mut self, _: i64, _: &str) -> Result<(), Error> {
            Ok(())
        }
        async fn mark_fired(&mut self, ids: &[i64]) -> Result<Vec<i64>, Error> {
            self.0.mark_fired(ids).await
        }
        async fn insert_task_runs(
            &mut self,
            node_id: &str,
            firing: &[FiringTask<'_>],
        ) -> Result<HashMap<i64, i64>, Error> {
            self.0.insert_task_runs(node_id, firing).await
        }
        async fn unstart_runs(&mut self, run_ids: &[i64]) -> Result<(), Error> {
            self.0.unstart_runs(run_ids).await
        }
    }

    #[tokio::test]
    async fn only_tasks_of_partitions_still_this_nodes_at_their_epoch_fire_each_once() {
        let mut db = MemoryDb::default();
        enqueue(&mut db, &[write(2, None), write(3, None), write(4, None)])
            .await
            .unwrap();
        // Partition 0 is this node's at epoch 1; partition 1 was handed off (epoch 2).
        db.partitions.insert(0, (Some(NODE.to_owned()), 1));
        db.partitions.insert(1, (Some("n2".to_owned()), 2));
        let window = due(&db);
        // Task 4 is cancelled after the window was read.
        db.tasks.iter_mut().find(|t| t.task_id == 4).unwrap().state = TaskState::Cancelled;
        let fired = fire(&mut db, NODE, &[held(0, 1), held(1, 1)], &window)
            .await
            .unwrap();
        assert_eq!((fired.read, fired.fired, fired.fenced), (3, 1, 1));
        assert_eq!(db.task(2).unwrap().state, TaskState::Fired);
        assert_eq!(
            db.task(3).unwrap().state,
            TaskState::Pending,
            "kept for the next owner"
        );
        assert_eq!(
            db.task(4).unwrap().state,
            TaskState::Cancelled,
            "stays cancelled"
        );
        let run = &db.runs[0];
        assert_eq!(
            (
                run.job_id,
                run.scheduled_at_ms,
                run.state.as_str(),
                run.epoch
            ),
            (-2, 1_002, "running", 1)
        );
        let attempt = &db.attempts[0];
        assert_eq!(
            (
                attempt.run_id,
                attempt.args_json.as_str(),
                attempt.not_before_ms
            ),
            (run.run_id, r#"{"task":2}"#, 1_002)
        );
        let again = fire(&mut db, NODE, &[held(0, 1)], &window).await.unwrap();
        assert_eq!(again.fired, 0, "a task fires once");
        assert_eq!(db.runs.len(), 1);
    }
}
