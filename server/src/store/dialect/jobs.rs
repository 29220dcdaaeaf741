//! Jobs, their claims and the runs they make; calendars and backfills.

use std::sync::Arc;

use super::Dialect;

queries! {
    JobQueries {
        // The database clock as an expression, for statements built at run time.
        now_expr = "{now}";
        job_insert = "INSERT INTO jobs (job_id, partition_id, name, app_name, handler_name, \
            schedule_json, timezone, args_json, policy_json, history_keep_ms, history_max_runs, \
            state, version, next_fire_at_ms, last_fired_at_ms, created_at_ms, updated_at_ms, \
            started_at_ms, kind, namespace_id) \
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, NULL, NULL, {now}, {now}, \
            CASE WHEN ? = 1 THEN {now} ELSE NULL END, ?, ?)";
        job_id_max = "SELECT MAX(job_id) FROM jobs";
        // Rows of a long bulk insert stamped again just before its commit (by their id range).
        jobs_touch_range = "UPDATE jobs SET updated_at_ms = {now} WHERE job_id BETWEEN ? AND ?";
        job_get = "SELECT job_id, partition_id, name, app_name, handler_name, schedule_json, \
            timezone, args_json, policy_json, state, version, last_fired_at_ms, created_at_ms, \
            updated_at_ms, started_at_ms, fired_count, kind, namespace_id FROM jobs WHERE job_id = ?";
        jobs_by_id_desc = jobs_list!("job_id < ?", "job_id DESC");
        jobs_by_id_asc = jobs_list!("job_id > ?", "job_id");
        jobs_by_name_asc = jobs_list!("name > ?", "name");
        jobs_by_name_desc = jobs_list!("name < ?", "name DESC");
        jobs_in_partition = "SELECT job_id, partition_id, schedule_json, timezone, policy_json, \
            version, last_fired_at_ms, created_at_ms, started_at_ms, fired_count, namespace_id \
            FROM jobs WHERE partition_id = ? AND state = 'running'";
        jobs_get_many = "SELECT job_id, partition_id, name, app_name, handler_name, schedule_json, \
            timezone, args_json, policy_json, state, version, last_fired_at_ms, created_at_ms, \
            updated_at_ms, started_at_ms, fired_count, kind, namespace_id FROM jobs WHERE job_id IN ({partitions})";
        jobs_changed_since = "SELECT job_id, partition_id, name, app_name, handler_name, \
            schedule_json, timezone, args_json, policy_json, state, version, last_fired_at_ms, \
            created_at_ms, updated_at_ms, started_at_ms, fired_count, kind, namespace_id FROM jobs \
            WHERE updated_at_ms > ? OR (updated_at_ms = ? AND job_id > ?) \
            ORDER BY updated_at_ms, job_id LIMIT ?";
        job_update = "UPDATE jobs SET name = ?, app_name = ?, handler_name = ?, \
            schedule_json = ?, timezone = ?, args_json = ?, policy_json = ?, \
            history_keep_ms = ?, history_max_runs = ?, version = version + 1, updated_at_ms = {now} WHERE job_id = ? AND version = ?";
        job_start = "UPDATE jobs SET state = 'running', started_at_ms = {now}, \
            version = version + 1, updated_at_ms = {now} \
            WHERE job_id = ? AND state <> 'running'";
        job_stop = "UPDATE jobs SET state = 'stopped', version = version + 1, \
            updated_at_ms = {now} WHERE job_id = ? AND state = 'running'";
        job_delete = "DELETE FROM jobs WHERE job_id = ?";
        job_deletion_insert = "INSERT INTO job_deletions (job_id, partition_id, deleted_at_ms) \
            VALUES (?, ?, {now})";
        job_deletions_since = "SELECT job_id FROM job_deletions WHERE deleted_at_ms > ?";

        // A claim's partitions and jobs, locked in one statement each, in ascending order.
        partitions_lock_many = "SELECT partition_id, owner_node_id, epoch FROM partitions \
            WHERE partition_id IN ({partitions}) ORDER BY partition_id {for_update}";
        jobs_lock_many = "SELECT job_id, version, state, last_fired_at_ms FROM jobs \
            WHERE job_id IN ({partitions}) ORDER BY job_id {for_update}";
        // The same, with the arguments of the jobs whose runs start in the claim.
        jobs_lock_many_with_args = "SELECT job_id, version, state, last_fired_at_ms, args_json \
            FROM jobs WHERE job_id IN ({partitions}) ORDER BY job_id {for_update}";
        run_insert_ignore_duplicate = "{ignore_duplicate_run}";
        job_advance = "UPDATE jobs SET last_fired_at_ms = ?, fired_count = fired_count + ?, \
            state = CASE WHEN ? = 1 THEN 'done' ELSE state END \
            WHERE job_id = ? AND version = ? AND state = 'running' \
            AND (last_fired_at_ms IS NULL OR last_fired_at_ms < ?)";
        // Locking: a run ending at this moment is waited for and then seen ended, so an overlap
        // rule never queues behind a run whose end (and release of the queue) it cannot see.
        run_unfinished_of_job = "SELECT run_id FROM runs WHERE job_id = ? \
            AND state IN ('pending', 'queued', 'running') ORDER BY run_id LIMIT 1 {for_update}";
        runs_cancel_unfinished = "UPDATE runs SET state = 'cancelled', finished_at_ms = {now}, \
            message = ? WHERE job_id = ? AND state IN ('pending', 'queued', 'running')";
        // After `runs_cancel_unfinished`: every unfinished attempt of the job is one of those
        // runs'. Its executor is told to stop at its next heartbeat. The partition leads the
        // queue index.
        attempts_cancel_of_job = "UPDATE attempts SET state = 'cancelled', finished_at_ms = {now}, \
            error = ? WHERE partition_id = ? AND state IN ('pending', 'running') AND job_id = ?";
        run_insert = "INSERT INTO runs (job_id, scheduled_at_ms, partition_id, epoch, node_id, \
            trigger_kind, state, priority, created_at_ms, started_at_ms, finished_at_ms, message, \
            namespace_id) SELECT ?, ?, ?, ?, ?, ?, ?, ?, {now}, NULL, \
            CASE WHEN ? = 1 THEN {now} ELSE NULL END, ?, ? {from_dual} \
            WHERE NOT EXISTS (SELECT 1 FROM runs WHERE job_id = ? AND scheduled_at_ms = ?)";
        run_insert_manual = "INSERT INTO runs (job_id, scheduled_at_ms, partition_id, epoch, node_id, \
            trigger_kind, state, priority, created_at_ms, started_at_ms, finished_at_ms, message, \
            input_json, namespace_id) SELECT ?, ?, ?, ?, ?, ?, ?, ?, {now}, NULL, \
            CASE WHEN ? = 1 THEN {now} ELSE NULL END, ?, ?, ? {from_dual} \
            WHERE NOT EXISTS (SELECT 1 FROM runs WHERE job_id = ? AND scheduled_at_ms = ?)";
        runs_of_job = "SELECT run_id, job_id, scheduled_at_ms, partition_id, epoch, node_id, \
            trigger_kind, state, priority, created_at_ms, started_at_ms, finished_at_ms, message, \
            namespace_id FROM runs WHERE job_id = ? AND (? IS NULL OR run_id < ?) ORDER BY run_id DESC LIMIT ?";
        // Schedule policies: bounds, fixed delay, calendars, backfills.
        job_finish = "UPDATE jobs SET state = 'done', version = version + 1, updated_at_ms = {now} \
            WHERE job_id = ? AND version = ? AND state = 'running'";
        jobs_naming_calendar = "SELECT job_id, name, policy_json FROM jobs \
            WHERE namespace_id = ? AND policy_json LIKE ? ESCAPE '!'";
        calendar_insert = "INSERT INTO calendars (namespace_id, name, definition_json, version, \
            created_at_ms, updated_at_ms) VALUES (?, ?, ?, 1, {now}, {now})";
        calendar_update = "UPDATE calendars SET definition_json = ?, version = version + 1, \
            updated_at_ms = {now} WHERE namespace_id = ? AND name = ? \
            AND (? IS NULL OR version = ?)";
        calendar_get = "SELECT namespace_id, name, definition_json, version, created_at_ms, \
            updated_at_ms FROM calendars WHERE namespace_id = ? AND name = ?";
        calendars_list = "SELECT namespace_id, name, definition_json, version, created_at_ms, \
            updated_at_ms FROM calendars ORDER BY namespace_id, name";
        calendar_delete = "DELETE FROM calendars WHERE namespace_id = ? AND name = ?";
        backfill_insert = "INSERT INTO backfills (job_id, partition_id, from_ms, to_ms, cursor_ms, \
            max_in_flight, state, fired, message, created_at_ms, updated_at_ms) \
            VALUES (?, ?, ?, ?, ?, ?, 'running', 0, NULL, {now}, {now})";
        backfill_get = "SELECT backfill_id, job_id, partition_id, from_ms, to_ms, cursor_ms, \
            max_in_flight, state, fired, message, created_at_ms, updated_at_ms FROM backfills \
            WHERE backfill_id = ?";
        backfills_of_job = "SELECT backfill_id, job_id, partition_id, from_ms, to_ms, cursor_ms, \
            max_in_flight, state, fired, message, created_at_ms, updated_at_ms FROM backfills \
            WHERE job_id = ? ORDER BY backfill_id DESC LIMIT ?";
        backfills_running = "SELECT backfill_id, job_id, partition_id, from_ms, to_ms, cursor_ms, \
            max_in_flight, state, fired, message, created_at_ms, updated_at_ms FROM backfills \
            WHERE state = 'running' AND partition_id IN ({partitions}) ORDER BY backfill_id";
        backfill_cancel = "UPDATE backfills SET state = 'cancelled', updated_at_ms = {now} \
            WHERE backfill_id = ? AND state = 'running'";
        backfill_advance = "UPDATE backfills SET cursor_ms = ?, fired = fired + ?, \
            state = CASE WHEN ? = 1 THEN 'done' ELSE state END, message = ?, updated_at_ms = {now} \
            WHERE backfill_id = ? AND cursor_ms = ? AND state = 'running'";
        // Unfinished runs of a job in an instant range (the unique key leads with both).
        runs_unfinished_in_range = "SELECT COUNT(*) FROM runs WHERE job_id = ? \
            AND scheduled_at_ms >= ? AND scheduled_at_ms <= ? \
            AND state IN ('pending', 'queued', 'running')";
        runs_unfinished_of_job_count = "SELECT COUNT(*) FROM runs WHERE job_id = ? \
            AND state IN ('pending', 'queued', 'running')";
    }
}
