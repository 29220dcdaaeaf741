//! What follows a run: child jobs and workflows.

use std::sync::Arc;

use super::Dialect;

queries! {
    FollowUpQueries {
        run_by_instant = "SELECT run_id, job_id, scheduled_at_ms, partition_id, epoch, node_id, \
            trigger_kind, state, priority, created_at_ms, started_at_ms, finished_at_ms, message, \
            namespace_id FROM runs WHERE job_id = ? AND scheduled_at_ms = ?";

        // Child jobs (`sql_store/follow_ups.rs`). `{partitions}`: the jobs of runs that ended; only
        // a policy that names children has the key.
        parents_with_children = "SELECT job_id, name, policy_json FROM jobs \
            WHERE job_id IN ({partitions}) AND policy_json LIKE '%\"children\"%'";
        // `{partitions}`: child job ids, locked in id order: follow-ups of one child job take
        // their instants one transaction at a time.
        child_jobs_lock = "SELECT job_id, partition_id, policy_json, args_json, namespace_id FROM jobs \
            WHERE job_id IN ({partitions}) ORDER BY job_id {for_update}";
        // `pending`, or `running` (with `started_at_ms`) when it starts with its attempt here.
        child_run_insert = "INSERT INTO runs (job_id, scheduled_at_ms, partition_id, epoch, \
            node_id, trigger_kind, state, priority, created_at_ms, started_at_ms, input_json, \
            namespace_id) \
            SELECT ?, ?, ?, 0, ?, ?, ?, ?, {now}, CASE WHEN ? = 'running' THEN {now} END, ?, ? \
            {from_dual} WHERE NOT EXISTS (SELECT 1 FROM runs WHERE job_id = ? AND scheduled_at_ms = ?)";
        run_id_at_instant = "SELECT run_id FROM runs WHERE job_id = ? AND scheduled_at_ms = ?";
        child_runs_of_run = "SELECT child_job_id, child_run_id FROM child_runs \
            WHERE parent_run_id = ? ORDER BY child_job_id";
        run_input = "SELECT input_json FROM runs WHERE run_id = ?";
        jobs_with_children = "SELECT job_id, name, policy_json FROM jobs \
            WHERE policy_json LIKE '%\"children\"%'";

        // Workflows (`sql_store/workflows.rs`).
        workflow_definition_delete = "DELETE FROM workflow_definitions WHERE workflow_id = ?";
        workflow_definition_insert = "INSERT INTO workflow_definitions (workflow_id, \
            definition_json, updated_at_ms) VALUES (?, ?, {now})";
        workflow_definition_get = "SELECT definition_json FROM workflow_definitions \
            WHERE workflow_id = ?";
        run_start_one = "UPDATE runs SET state = 'running', started_at_ms = {now} \
            WHERE run_id = ? AND state = 'pending'";
        workflow_run_insert = "INSERT INTO workflow_runs (run_id, workflow_id, definition_json, \
            params_json, rerun_of, created_at_ms) VALUES (?, ?, ?, ?, ?, {now})";
        workflow_run_get = "SELECT w.run_id, w.workflow_id, w.definition_json, w.params_json, \
            w.rerun_of, w.created_at_ms, r.flow_key FROM workflow_runs w \
            LEFT JOIN runs r ON r.run_id = w.run_id WHERE w.run_id = ?";
        // `{partitions}`: runs that ended.
        step_runs_of_runs = "SELECT workflow_run_id, step_name, state, run_id, output_json, \
            updated_at_ms FROM step_runs WHERE run_id IN ({partitions}) AND state = 'running' \
            ORDER BY workflow_run_id, step_name";
        step_runs_of_workflow_run = "SELECT workflow_run_id, step_name, state, run_id, \
            output_json, updated_at_ms FROM step_runs WHERE workflow_run_id = ? ORDER BY step_name";
        step_run_end = "UPDATE step_runs SET state = ?, output_json = ?, updated_at_ms = {now} \
            WHERE workflow_run_id = ? AND step_name = ? AND state = 'running'";
        step_run_unstarted = "UPDATE step_runs SET state = ?, output_json = ?, \
            updated_at_ms = {now} WHERE workflow_run_id = ? AND step_name = ? AND state = 'waiting'";
        step_run_insert_copy = "INSERT INTO step_runs (workflow_run_id, step_name, state, run_id, \
            output_json, updated_at_ms) VALUES (?, ?, ?, ?, ?, {now})";
    }
}
