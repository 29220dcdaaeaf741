//! Tasks, and run-history retention.

use std::sync::Arc;

use super::Dialect;

queries! {
    TaskQueries {
        task_ids_lock = "SELECT next_id FROM id_blocks WHERE name = 'tasks' {for_update}";
        task_ids_advance = "UPDATE id_blocks SET next_id = next_id + ? WHERE name = 'tasks'";
        task_get = tasks_where!("t.task_id = ?");
        task_by_key = tasks_where!("t.namespace_id = ? AND t.task_key = ?");
        // `{partitions}`: task ids.
        tasks_get_many = tasks_where!("t.task_id IN ({partitions})");
        tasks_list = tasks_where!(
            "(? IS NULL OR t.namespace_id = ?) \
            AND (? IS NULL OR t.app_name = ?) AND (? IS NULL OR t.handler_name = ?) \
            AND (? IS NULL OR t.state = ?) AND (? IS NULL OR t.due_at_ms >= ?) \
            AND (? IS NULL OR t.due_at_ms < ?) AND (? IS NULL OR t.task_id < ?) \
            ORDER BY t.task_id DESC LIMIT ?"
        );
        task_remove_pending = "DELETE FROM tasks WHERE task_id = ? AND state = 'pending'";
        task_remove = "DELETE FROM tasks WHERE task_id = ?";
        task_release_key = "UPDATE tasks SET task_key = NULL WHERE task_id = ? AND task_key = ?";
        // The window: `{partitions}` the node's partitions, in due order (the pending-due index).
        // A task under flow control (its policy has a `flow` key: in JSON text an unescaped
        // `"flow":` is a key, and no other level of a task's policy has one) goes in line first.
        tasks_due = "SELECT task_id, partition_id, priority, due_at_ms, args_json, namespace_id, \
            CAST(CASE WHEN policy_json LIKE '%\"flow\":%' THEN 1 ELSE 0 END AS {bigint}) FROM tasks \
            WHERE state = 'pending' AND due_at_ms <= ? AND partition_id IN ({partitions}) \
            ORDER BY due_at_ms, task_id LIMIT ?";
        // `{partitions}`: run ids.
        runs_unstart = "UPDATE runs SET state = 'pending', started_at_ms = NULL \
            WHERE state = 'running' AND run_id IN ({partitions})";
        // `{partitions}`: task ids.
        tasks_mark_fired = "UPDATE tasks SET state = 'fired', ended_at_ms = {now} \
            WHERE state = 'pending' AND task_id IN ({partitions})";
        tasks_pending_among = "SELECT task_id FROM tasks WHERE state = 'pending' \
            AND task_id IN ({partitions}) ORDER BY task_id {for_update}";
        // `{partitions}`: the node's partitions. Tasks that left `pending` long enough ago, in
        // `tasks_ended_idx` order, whose run is gone.
        tasks_purgeable = "SELECT t.task_id FROM tasks t WHERE t.ended_at_ms IS NOT NULL \
            AND t.ended_at_ms < ? AND t.state <> 'pending' AND t.partition_id IN ({partitions}) \
            AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.job_id = -t.task_id \
            AND r.scheduled_at_ms = t.due_at_ms) ORDER BY t.ended_at_ms LIMIT ?";
        // `{partitions}`: task ids.
        tasks_delete = "DELETE FROM tasks WHERE state <> 'pending' AND task_id IN ({partitions})";
        // `{partitions}`: the runs' job ids (tasks negated).
        task_runs_of = "SELECT run_id, job_id FROM runs WHERE job_id IN ({partitions})";

        history_rules = "SELECT job_id, history_keep_ms, history_max_runs FROM jobs \
            WHERE (history_keep_ms IS NOT NULL OR history_max_runs IS NOT NULL) \
            AND partition_id IN ({partitions})";

        history_beyond_newest = "SELECT scheduled_at_ms FROM runs WHERE job_id = ? \
            ORDER BY scheduled_at_ms DESC LIMIT 1 OFFSET ?";

        history_oldest_run = "SELECT created_at_ms FROM runs ORDER BY run_id LIMIT 1";
    }
}
