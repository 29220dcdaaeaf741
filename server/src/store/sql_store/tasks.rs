//! `TaskStore` on the three backends: enqueueing tasks in bulk with their keys, reading and
//! cancelling them, and the fenced fire of a window of due tasks.
//!
//! Ids come from `id_blocks` a block at a time, so a batch is inserted with its ids (and
//! partitions) known: one multi-row statement, no generated key to read back. A key is unique
//! among all tasks; a finished task gives it up when the key is enqueued again.

use super::super::dialect::postgres_now;
use super::*;
use crate::store::rules::tasks::{DueTask, FiringTask, TaskTx};
use crate::store::task_records::{Enqueued, TaskFilter, TaskRecord, TaskWrite, TasksFired};
use crate::store::{PartitionEpoch, TaskStore};

/// Tasks per multi-row insert on MySQL and SQLite: 10 parameters each.
const TASK_ROWS_PER_INSERT: usize = 2_000;
/// Keys per `IN` list read back after an insert.
const KEYS_PER_READ: usize = 1_000;
/// The batch from arrays: one statement whatever its size. A key held already skips the row.
const POSTGRES_TASKS_INSERT: &str = concat!(
    "INSERT INTO tasks (task_id, partition_id, task_key, app_name, handler_name, args_json, \
     policy_json, priority, due_at_ms, namespace_id, state, created_at_ms) \
     SELECT v.task_id, v.partition_id, v.task_key, v.app_name, v.handler_name, v.args_json, \
     v.policy_json, v.priority, v.due_at_ms, v.namespace_id, 'pending', ",
    postgres_now!(),
    " FROM unnest($1::BIGINT[], $2::BIGINT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], $6::TEXT[], \
     $7::TEXT[], $8::BIGINT[], $9::BIGINT[], $10::BIGINT[]) \
     AS v(task_id, partition_id, task_key, app_name, handler_name, args_json, policy_json, \
     priority, due_at_ms, namespace_id) ON CONFLICT DO NOTHING"
);

/// The fired tasks' runs from arrays, `running` from now.
const POSTGRES_TASK_RUNS: &str = concat!(
    "INSERT INTO runs (job_id, scheduled_at_ms, partition_id, epoch, node_id, trigger_kind, \
     state, priority, created_at_ms, started_at_ms, namespace_id) \
     SELECT v.job_id, v.at_ms, v.partition_id, v.epoch, $1, 'task', 'running', v.priority, ",
    postgres_now!(),
    ", ",
    postgres_now!(),
    ", v.namespace_id FROM unnest($2::BIGINT[], $3::BIGINT[], $4::BIGINT[], $5::BIGINT[], \
     $6::BIGINT[], $7::BIGINT[]) AS v(job_id, at_ms, partition_id, epoch, priority, namespace_id) \
     ON CONFLICT (job_id, scheduled_at_ms) DO NOTHING RETURNING run_id, job_id"
);

/// Implements `TaskStore` for one backend's store.
macro_rules! task_store {
    ($store:ident, $db:ty, $backend:expr) => {
        impl $store {
            /// `tasks_enqueue` of a batch with keys, in one transaction (the rule:
            /// `crate::store::rules::tasks::enqueue_keyed`).
            /// `audit` is written with it when a task was created.
            async fn enqueue_keyed(
                &self,
                sorted: &[TaskWrite],
                tasks: &[TaskWrite],
                audit: Option<&AuditWrite>,
            ) -> Result<Vec<Enqueued>, Error> {
                let mut tx = self.begin_write().await?;
                let outcomes = crate::store::rules::tasks::enqueue_keyed(
                    &mut StoreTx {
                        store: self,
                        tx: &mut tx,
                    },
                    sorted,
                    tasks,
                )
                .await?;
                if outcomes.iter().any(|o| matches!(o, Enqueued::Created(_))) {
                    self.audit_in(&mut tx, audit).await?;
                }
                tx.commit().await?;
                Ok(outcomes)
            }

            /// A batch without keys: nothing to read back, so one statement, atomic alone,
            /// unless the call's event goes with it.
            async fn enqueue_unkeyed(
                &self,
                tasks: &[TaskWrite],
                audit: Option<&AuditWrite>,
            ) -> Result<(), Error> {
                if audit.is_none() {
                    return self.insert_tasks_alone(tasks).await;
                }
                let mut tx = self.begin_write().await?;
                self.insert_tasks(&mut *tx, tasks).await?;
                self.audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                Ok(())
            }
        }

        #[async_trait]
        impl TaskTx for StoreTx<'_, $store, Tx<$db>> {
            async fn insert_tasks(&mut self, tasks: &[TaskWrite]) -> Result<(), Error> {
                self.store.insert_tasks(&mut **self.tx, tasks).await
            }

            async fn tasks_by_keys(
                &mut self,
                namespace: NamespaceId,
                keys: &[&str],
            ) -> Result<Vec<TaskRecord>, Error> {
                let mut found = Vec::with_capacity(keys.len());
                let select: &str = &self.store.q.tasks.task_by_key;
                // The single-key text up to its condition, which becomes an `IN` list.
                let head = select
                    .rsplit_once("t.namespace_id")
                    .map_or(select, |(head, _)| head);
                for chunk in keys.chunks(KEYS_PER_READ) {
                    let mut read = sqlx::QueryBuilder::<$db>::new(head);
                    read.push("t.namespace_id = ")
                        .push_bind(namespace)
                        .push(" AND t.task_key IN (");
                    let mut list = read.separated(", ");
                    for key in chunk {
                        list.push_bind((*key).to_owned());
                    }
                    read.push(")");
                    found.extend(
                        read.build_query_as::<TaskRecord>()
                            .fetch_all(&mut **self.tx)
                            .await?,
                    );
                }
                Ok(found)
            }

            async fn release_key(&mut self, task_id: i64, key: &str) -> Result<(), Error> {
                sqlx::query::<$db>(sql(&self.store.q.tasks.task_release_key))
                    .bind(task_id)
                    .bind(key)
                    .execute(&mut **self.tx)
                    .await?;
                Ok(())
            }

            async fn mark_fired(&mut self, ids: &[i64]) -> Result<Vec<i64>, Error> {
                let q = &self.store.q;
                let Some(update) = with_partitions(&q.tasks.tasks_mark_fired, ids) else {
                    return Ok(Vec::new());
                };
                if $backend == Backend::Mysql {
                    let Some(read) = with_partitions(&q.tasks.tasks_pending_among, ids) else {
                        return Ok(Vec::new());
                    };
                    let moved = sqlx::query_scalar::<$db, i64>(read)
                        .fetch_all(&mut **self.tx)
                        .await?;
                    if !moved.is_empty() {
                        sqlx::query::<$db>(update).execute(&mut **self.tx).await?;
                    }
                    return Ok(moved);
                }
                let returning = AssertSqlSafe(format!("{} RETURNING task_id", update.0));
                Ok(sqlx::query_scalar::<$db, i64>(returning)
                    .fetch_all(&mut **self.tx)
                    .await?)
            }

            async fn insert_task_runs(
                &mut self,
                node_id: &str,
                firing: &[FiringTask<'_>],
            ) -> Result<HashMap<i64, i64>, Error> {
                self.store.insert_task_runs(self.tx, node_id, firing).await
            }

            async fn unstart_runs(&mut self, run_ids: &[i64]) -> Result<(), Error> {
                if let Some(update) = with_partitions(&self.store.q.tasks.runs_unstart, run_ids) {
                    sqlx::query::<$db>(update).execute(&mut **self.tx).await?;
                }
                Ok(())
            }
        }

        #[async_trait]
        impl TaskStore for $store {
            async fn task_ids_take(&self, count: i64) -> Result<i64, Error> {
                retry_transient(|| async {
                    let mut tx = self.begin_write().await?;
                    let first = sqlx::query_scalar::<$db, i64>(sql(&self.q.tasks.task_ids_lock))
                        .fetch_one(&mut *tx)
                        .await?;
                    sqlx::query::<$db>(sql(&self.q.tasks.task_ids_advance))
                        .bind(count.max(1))
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok(first)
                })
                .await
            }

            async fn tasks_enqueue(
                &self,
                tasks: &[TaskWrite],
                audit: Option<&AuditWrite>,
            ) -> Result<Vec<Enqueued>, Error> {
                let one_statement =
                    $backend == Backend::Postgres || tasks.len() <= TASK_ROWS_PER_INSERT;
                if one_statement && tasks.iter().all(|t| t.key.is_none()) {
                    retry_transient(|| self.enqueue_unkeyed(tasks, audit)).await?;
                    return Ok(tasks.iter().map(|t| Enqueued::Created(t.task_id)).collect());
                }
                // Rows in key order: two batches sharing keys lock them in the same order.
                let mut sorted: Vec<TaskWrite> = tasks.to_vec();
                sorted.sort_by(|a, b| (a.namespace_id, &a.key).cmp(&(b.namespace_id, &b.key)));
                retry_transient(|| self.enqueue_keyed(&sorted, tasks, audit)).await
            }

            async fn task_get(&self, task_id: i64) -> Result<Option<TaskRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, TaskRecord>(sql(&self.q.tasks.task_get))
                        .bind(task_id)
                        .fetch_optional(&self.pool)
                        .await?,
                )
            }

            async fn task_by_key(
                &self,
                namespace: NamespaceId,
                key: &str,
            ) -> Result<Option<TaskRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, TaskRecord>(sql(&self.q.tasks.task_by_key))
                        .bind(namespace)
                        .bind(key)
                        .fetch_optional(&self.pool)
                        .await?,
                )
            }

            async fn tasks_get_many(&self, task_ids: &[i64]) -> Result<Vec<TaskRecord>, Error> {
                let mut found = Vec::with_capacity(task_ids.len());
                for chunk in task_ids.chunks(KEYS_PER_READ) {
                    let Some(read) = with_partitions(&self.q.tasks.tasks_get_many, chunk) else {
                        continue;
                    };
                    found.extend(
                        sqlx::query_as::<$db, TaskRecord>(read)
                            .fetch_all(&self.pool)
                            .await?,
                    );
                }
                Ok(found)
            }

            async fn tasks_list(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, Error> {
                Ok(
                    sqlx::query_as::<$db, TaskRecord>(sql(&self.q.tasks.tasks_list))
                        .bind(filter.namespace)
                        .bind(filter.namespace)
                        .bind(filter.app.as_deref())
                        .bind(filter.app.as_deref())
                        .bind(filter.handler.as_deref())
                        .bind(filter.handler.as_deref())
                        .bind(filter.state.as_deref())
                        .bind(filter.state.as_deref())
                        .bind(filter.due_from_ms)
                        .bind(filter.due_from_ms)
                        .bind(filter.due_to_ms)
                        .bind(filter.due_to_ms)
                        .bind(filter.before_id)
                        .bind(filter.before_id)
                        .bind(filter.limit)
                        .fetch_all(&self.pool)
                        .await?,
                )
            }

            async fn task_remove(
                &self,
                task_id: i64,
                only_pending: bool,
                audit: Option<&AuditWrite>,
            ) -> Result<bool, Error> {
                let query = if only_pending {
                    &self.q.tasks.task_remove_pending
                } else {
                    &self.q.tasks.task_remove
                };
                retry_transient(|| async {
                    let mut tx = self.begin_write().await?;
                    let removed = sqlx::query::<$db>(sql(query))
                        .bind(task_id)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    self.commit_changed(tx, removed > 0, audit).await
                })
                .await
            }

            async fn tasks_purge(
                &self,
                partitions: &[i64],
                ended_before_ms: i64,
                limit: i64,
            ) -> Result<u64, Error> {
                let Some(find) = with_partitions(&self.q.tasks.tasks_purgeable, partitions) else {
                    return Ok(0);
                };
                let ids: Vec<i64> = sqlx::query_scalar::<$db, i64>(find)
                    .bind(ended_before_ms)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                let Some(delete) = with_partitions(&self.q.tasks.tasks_delete, &ids) else {
                    return Ok(0);
                };
                Ok(sqlx::query::<$db>(delete)
                    .execute(&self.pool)
                    .await?
                    .rows_affected())
            }

            async fn tasks_fire(
                &self,
                node_id: &str,
                partitions: &[PartitionEpoch],
                due_by_ms: i64,
                limit: i64,
            ) -> Result<TasksFired, Error> {
                let ids: Vec<i64> = partitions.iter().map(|p| p.partition_id).collect();
                let Some(window) = with_partitions(&self.q.tasks.tasks_due, &ids) else {
                    return Ok(TasksFired::default());
                };
                let due: Vec<DueTask> =
                    sqlx::query_as::<$db, (i64, i64, i64, i64, String, NamespaceId, i64)>(window)
                        .bind(due_by_ms)
                        .bind(limit)
                        .fetch_all(&self.pool)
                        .await?
                        .into_iter()
                        .map(
                            |(
                                task_id,
                                partition_id,
                                priority,
                                due_at_ms,
                                args_json,
                                namespace_id,
                                flow,
                            )| {
                                DueTask {
                                    task_id,
                                    partition_id,
                                    priority,
                                    due_at_ms,
                                    args_json,
                                    namespace_id,
                                    in_line: flow == 1,
                                }
                            },
                        )
                        .collect();
                if due.is_empty() {
                    return Ok(TasksFired::default());
                }
                retry_transient(|| async {
                    let mut tx = self.begin_write().await?;
                    let fired = crate::store::rules::tasks::fire(
                        &mut StoreTx {
                            store: self,
                            tx: &mut tx,
                        },
                        node_id,
                        partitions,
                        &due,
                    )
                    .await?;
                    tx.commit().await?;
                    Ok(fired)
                })
                .await
            }
        }
    };
}

impl PostgresStore {
    /// Inserts a batch of tasks in one statement, outside a transaction.
    async fn insert_tasks_alone(&self, tasks: &[TaskWrite]) -> Result<(), Error> {
        self.insert_tasks(&self.pool, tasks).await
    }

    /// Inserts a batch of tasks in one statement.
    async fn insert_tasks<'c>(
        &self,
        conn: impl sqlx::Executor<'c, Database = Postgres>,
        tasks: &[TaskWrite],
    ) -> Result<(), Error> {
        let ints = |pick: fn(&TaskWrite) -> i64| tasks.iter().map(pick).collect::<Vec<i64>>();
        let texts = |pick: fn(&TaskWrite) -> &str| tasks.iter().map(pick).collect::<Vec<&str>>();
        sqlx::query::<Postgres>(POSTGRES_TASKS_INSERT)
            .bind(ints(|t| t.task_id))
            .bind(ints(|t| t.partition_id))
            .bind(
                tasks
                    .iter()
                    .map(|t| t.key.as_deref())
                    .collect::<Vec<Option<&str>>>(),
            )
            .bind(texts(|t| &t.app_name))
            .bind(texts(|t| &t.handler_name))
            .bind(texts(|t| &t.args_json))
            .bind(texts(|t| &t.policy_json))
            .bind(ints(|t| t.priority))
            .bind(ints(|t| t.due_at_ms))
            .bind(ints(|t| t.namespace_id.0))
            .execute(conn)
            .await?;
        Ok(())
    }

    /// Inserts the fired tasks' runs `running` in one statement; their ids by job id.
    async fn insert_task_runs(
        &self,
        tx: &mut PgTx,
        node_id: &str,
        firing: &[FiringTask<'_>],
    ) -> Result<HashMap<i64, i64>, Error> {
        let ints = |pick: fn(&FiringTask<'_>) -> i64| firing.iter().map(pick).collect::<Vec<_>>();
        let rows = sqlx::query_as::<Postgres, (i64, i64)>(POSTGRES_TASK_RUNS)
            .bind(node_id)
            .bind(ints(|f| f.task.run_job_id()))
            .bind(ints(|f| f.task.due_at_ms))
            .bind(ints(|f| f.task.partition_id))
            .bind(ints(|f| f.epoch))
            .bind(ints(|f| f.task.priority))
            .bind(ints(|f| f.task.namespace_id.0))
            .fetch_all(&mut **tx)
            .await?;
        Ok(rows.into_iter().map(|(run, job)| (job, run)).collect())
    }
}

/// The same writes as `PostgresStore`'s, as multi-row `VALUES` lists, for one backend's store.
macro_rules! values_task_writes {
    ($store:ident, $db:ty, $backend:expr) => {
        impl $store {
            /// Inserts a batch of tasks, a statement per chunk, outside a transaction.
            async fn insert_tasks_alone(&self, tasks: &[TaskWrite]) -> Result<(), Error> {
                let mut conn = self.pool.acquire().await?;
                self.insert_tasks(&mut conn, tasks).await
            }

            /// Inserts a batch of tasks, a statement per chunk.
            async fn insert_tasks(
                &self,
                conn: &mut Conn<$db>,
                tasks: &[TaskWrite],
            ) -> Result<(), Error> {
                let now: &str = &self.q.jobs.now_expr;
                let skip_taken = if $backend == Backend::Mysql {
                    " ON DUPLICATE KEY UPDATE task_id = task_id"
                } else {
                    " ON CONFLICT DO NOTHING"
                };
                for chunk in tasks.chunks(TASK_ROWS_PER_INSERT) {
                    let mut insert = sqlx::QueryBuilder::<$db>::new(
                        "INSERT INTO tasks (task_id, partition_id, task_key, app_name, \
                        handler_name, args_json, policy_json, priority, due_at_ms, \
                        namespace_id, state, created_at_ms) ",
                    );
                    insert.push_values(chunk, |mut row, t| {
                        row.push_bind(t.task_id)
                            .push_bind(t.partition_id)
                            .push_bind(t.key.clone())
                            .push_bind(t.app_name.clone())
                            .push_bind(t.handler_name.clone())
                            .push_bind(t.args_json.clone())
                            .push_bind(t.policy_json.clone())
                            .push_bind(t.priority)
                            .push_bind(t.due_at_ms)
                            .push_bind(t.namespace_id)
                            .push("'pending'")
                            .push(now);
                    });
                    insert.push(skip_taken);
                    insert.build().execute(&mut *conn).await?;
                }
                Ok(())
            }

            /// Inserts the fired tasks' runs `running`; their ids by job id.
            async fn insert_task_runs(
                &self,
                tx: &mut Tx<$db>,
                node_id: &str,
                firing: &[FiringTask<'_>],
            ) -> Result<HashMap<i64, i64>, Error> {
                let now: &str = &self.q.jobs.now_expr;
                for chunk in firing.chunks(RUN_ROWS_PER_INSERT) {
                    let mut insert = sqlx::QueryBuilder::<$db>::new(
                        "INSERT INTO runs (job_id, scheduled_at_ms, partition_id, epoch, \
                        node_id, trigger_kind, state, priority, created_at_ms, started_at_ms, \
                        namespace_id) ",
                    );
                    insert.push_values(chunk, |mut row, f| {
                        row.push_bind(f.task.run_job_id())
                            .push_bind(f.task.due_at_ms)
                            .push_bind(f.task.partition_id)
                            .push_bind(f.epoch)
                            .push_bind(node_id.to_owned())
                            .push("'task'")
                            .push("'running'")
                            .push_bind(f.task.priority)
                            .push(now)
                            .push(now)
                            .push_bind(f.task.namespace_id);
                    });
                    insert.push(" ").push(&*self.q.jobs.run_insert_ignore_duplicate);
                    insert.build().execute(&mut **tx).await?;
                }
                let job_ids: Vec<i64> = firing.iter().map(|f| f.task.run_job_id()).collect();
                let mut runs = HashMap::with_capacity(firing.len());
                for chunk in job_ids.chunks(KEYS_PER_READ) {
                    let Some(read) = with_partitions(&self.q.tasks.task_runs_of, chunk) else {
                        continue;
                    };
                    for (run_id, job_id) in sqlx::query_as::<$db, (i64, i64)>(read)
                        .fetch_all(&mut **tx)
                        .await?
                    {
                        runs.insert(job_id, run_id);
                    }
                }
                Ok(runs)
            }

        }
    };
}

values_task_writes!(MysqlStore, MySql, Backend::Mysql);
values_task_writes!(SqliteStore, Sqlite, Backend::Sqlite);
task_store!(PostgresStore, Postgres, Backend::Postgres);
task_store!(MysqlStore, MySql, Backend::Mysql);
task_store!(SqliteStore, Sqlite, Backend::Sqlite);
