//! Executors, runs and attempts: dispatch, and what it reads back.

use std::sync::Arc;

use super::Dialect;

queries! {
    DispatchQueries {
        app_insert = "INSERT INTO apps (app_name, description, created_at_ms, namespace_id) \
            SELECT ?, '', {now}, ? {from_dual} WHERE NOT EXISTS (SELECT 1 FROM apps WHERE app_name = ?)";
        app_namespace = "SELECT namespace_id FROM apps WHERE app_name = ?";
        executor_owner = "SELECT e.app_name, COALESCE(a.namespace_id, 1) AS namespace_id, \
            e.registered_by FROM executors e LEFT JOIN apps a ON a.app_name = e.app_name \
            WHERE e.executor_id = ?";
        // Made only while its owner is the one the caller checked (a NULL one bound as NULL).
        executor_update = "UPDATE executors SET app_name = ?, address = ?, weight = ?, capacity = ?, \
            accepts_batch = ?, protocol = ?, lease_ms = ?, in_flight = 0, state = 'active', registered_at_ms = {now}, heartbeat_at_ms = {now}, \
            registered_by = ? \
            WHERE executor_id = ? AND (registered_by = ? OR (registered_by IS NULL AND ? IS NULL))";
        executor_insert = "INSERT INTO executors (executor_id, app_name, address, weight, capacity, \
            accepts_batch, protocol, lease_ms, in_flight, state, registered_at_ms, heartbeat_at_ms, registered_by) \
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 'active', {now}, {now}, ?)";
        handlers_delete = "DELETE FROM handlers WHERE executor_id = ?";
        handler_insert = "INSERT INTO handlers (executor_id, handler_name, app_name, description) \
            VALUES (?, ?, ?, ?)";
        // An executor an operator drained stays drained whatever it reports.
        executor_heartbeat = "UPDATE executors SET heartbeat_at_ms = {now}, in_flight = ?, \
            state = CASE WHEN state = 'drained' THEN 'drained' \
            WHEN ? = 1 THEN 'draining' ELSE 'active' END \
            WHERE executor_id = ? AND state <> 'left'";
        executor_set_drained = "UPDATE executors SET state = 'drained' \
            WHERE executor_id = ? AND state IN ('active', 'draining')";
        executor_set_active = "UPDATE executors SET state = 'active' \
            WHERE executor_id = ? AND state = 'drained'";
        executor_leave = "UPDATE executors SET state = 'left' WHERE executor_id = ? AND state <> 'left'";
        executor_remove = "UPDATE executors SET state = 'left', registered_by = '' WHERE executor_id = ?";
        executors_all = "SELECT e.executor_id, e.app_name, e.address, e.weight, e.capacity, \
            e.in_flight, e.state, e.registered_at_ms, e.heartbeat_at_ms, e.accepts_batch, e.protocol, \
            e.lease_ms, COALESCE(a.namespace_id, 1) AS namespace_id, e.registered_by FROM executors e \
            LEFT JOIN apps a ON a.app_name = e.app_name \
            WHERE (? IS NULL OR e.app_name = ?) \
            ORDER BY e.executor_id";
        handlers_all = "SELECT executor_id, handler_name FROM handlers \
            WHERE (? IS NULL OR app_name = ?)";

        // The runs of one tick at once; here `{partitions}` is a list of run ids.
        runs_pending_among = "SELECT run_id FROM runs WHERE state = 'pending' \
            AND run_id IN ({partitions}) {for_update}";
        runs_start_many = "UPDATE runs SET state = 'running', started_at_ms = {now} \
            WHERE state = 'pending' AND run_id IN ({partitions})";
        // Simple successes of one tick (one shard, no output) answered by one executor: its
        // attempts (`{partitions}`: attempt ids), then their runs (`{partitions}`: run ids).
        attempts_succeed_many = "UPDATE attempts SET state = 'succeeded', finished_at_ms = {now}, \
            executor_id = ?, dispatched_at_ms = COALESCE(dispatched_at_ms, {now}) \
            WHERE state IN ('pending', 'running') AND attempt_id IN ({partitions})";
        // Their outputs, once they ended in the same transaction: `{cases}` is `WHEN <attempt
        // id> THEN <parameter>` per attempt, `{partitions}` the attempts' ids.
        attempts_output_many = "UPDATE attempts SET output = CASE attempt_id {cases}END \
            WHERE state = 'succeeded' AND output IS NULL AND executor_id = {executor} \
            AND attempt_id IN ({partitions})";
        // On MySQL, which has no `UPDATE … RETURNING`: the runs of the attempts still live,
        // locked before `attempts_succeed_many` ends them.
        attempts_live_among = "SELECT run_id FROM attempts WHERE state IN ('pending', 'running') \
            AND attempt_id IN ({partitions}) ORDER BY attempt_id {for_update}";
        // `{partitions}`: the runs of exactly the attempts the same transaction ended. Each is its
        // run's only shard's latest attempt (only the latest can be live), so no run needs its
        // attempts read again.
        runs_succeed_many = "UPDATE runs SET state = 'succeeded', finished_at_ms = {now} \
            WHERE state IN ('pending', 'queued', 'running') AND run_id IN ({partitions})";
        run_end = "UPDATE runs SET state = ?, finished_at_ms = {now}, message = ? \
            WHERE run_id = ? AND state IN ('pending', 'queued', 'running')";
        run_get = "SELECT run_id, job_id, scheduled_at_ms, partition_id, epoch, node_id, \
            trigger_kind, state, priority, created_at_ms, started_at_ms, finished_at_ms, message, \
            namespace_id, flow_key FROM runs WHERE run_id = ?";
        runs_by_id_desc = runs_list!("run_id < ?", "run_id DESC");
        // The smallest id among the runs finished in `[?, ?)`: their first attempts have ids of
        // runs at least this, so the joins below read the attempts' unique key from there
        // instead of the whole table (Postgres otherwise hashes every attempt). `+ 0` keeps
        // Postgres from walking the primary key for the minimum instead of the range.
        runs_first_id_finished = "SELECT MIN(run_id + 0) FROM runs \
            WHERE finished_at_ms >= ? AND finished_at_ms < ?";
        // Per minute of finishing: `x - x % 60000` floors in integers on every backend (MySQL's
        // `/` would not); `COUNT(CASE …)` is a BIGINT everywhere, where MySQL's `SUM` is a
        // DECIMAL. Runs come from `runs_finished_idx`, first attempts from the attempts' unique
        // key. Binds: the late threshold, the first run id, the range.
        runs_finished_by_minute = "SELECT r.finished_at_ms - (r.finished_at_ms % 60000) AS minute_ms, \
            r.state, COUNT(*) AS runs, \
            COUNT(CASE WHEN a.dispatched_at_ms - r.scheduled_at_ms > ? THEN 1 END) AS late \
            FROM runs r LEFT JOIN attempts a \
            ON a.run_id = r.run_id AND a.shard_index = 0 AND a.attempt_no = 1 AND a.run_id >= ? \
            WHERE r.finished_at_ms >= ? AND r.finished_at_ms < ? GROUP BY 1, 2";
        // Binds: the first run id, the range, the late threshold, the limit.
        runs_late = "SELECT r.run_id, r.job_id, r.scheduled_at_ms, r.partition_id, r.epoch, \
            r.node_id, r.trigger_kind, r.state, r.priority, r.created_at_ms, r.started_at_ms, \
            r.finished_at_ms, r.message, r.namespace_id, \
            a.dispatched_at_ms - r.scheduled_at_ms AS lateness_ms \
            FROM runs r JOIN attempts a \
            ON a.run_id = r.run_id AND a.shard_index = 0 AND a.attempt_no = 1 AND a.run_id >= ? \
            WHERE r.finished_at_ms >= ? AND r.finished_at_ms < ? \
            AND a.dispatched_at_ms IS NOT NULL AND a.dispatched_at_ms - r.scheduled_at_ms > ? \
            ORDER BY r.finished_at_ms DESC LIMIT ?";
        runs_by_id_asc = runs_list!("run_id > ?", "run_id");
        // A run in line for its flow key is the key's to release, never its job's.
        run_next_queued = "SELECT run_id FROM runs WHERE job_id = ? AND state = 'queued' \
            AND flow_key IS NULL ORDER BY run_id LIMIT 1";
        run_release_queued = "UPDATE runs SET state = 'pending' WHERE run_id = ? AND state = 'queued'";
        attempt_insert = "INSERT INTO attempts (run_id, job_id, partition_id, shard_index, \
            shard_total, attempt_no, lost_before, priority, args_json, state, created_at_ms, \
            not_before_ms, avoid_executor_id, executor_id) \
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', {now}, {now} + ?, ?, ?)";
        executor_loads = "SELECT executor_id, COUNT(*) AS running FROM attempts \
            WHERE state = 'running' AND executor_id IS NOT NULL GROUP BY executor_id";
        xxl_jobs_running = "SELECT a.executor_id, a.job_id FROM executors e \
            JOIN attempts a ON a.executor_id = e.executor_id \
            WHERE e.protocol = 'xxl' AND a.state = 'running'";
        attempt_get = "SELECT attempt_id, run_id, job_id, partition_id, shard_index, shard_total, \
            attempt_no, priority, args_json, state, created_at_ms, not_before_ms, avoid_executor_id, \
            executor_id, dispatched_at_ms, deadline_ms, finished_at_ms, output, error, \
            lost_before FROM attempts WHERE attempt_id = ?";
        attempt_lock = "SELECT attempt_id, run_id, job_id, partition_id, shard_index, shard_total, \
            attempt_no, priority, args_json, state, created_at_ms, not_before_ms, avoid_executor_id, \
            executor_id, dispatched_at_ms, deadline_ms, finished_at_ms, output, error, \
            lost_before FROM attempts WHERE attempt_id = ? {for_update}";
        run_lock = "SELECT node_id FROM runs WHERE run_id = ? {for_update}";
        // The same, saying whether the run has an input (only runs that follow another do: a
        // child's, a step's, whose end may move a workflow on).
        run_lock_ending = "SELECT node_id, \
            CAST(CASE WHEN input_json IS NULL THEN 0 ELSE 1 END AS {bigint}), flow_key \
            FROM runs WHERE run_id = ? {for_update}";
        attempts_of_run = "SELECT attempt_id, run_id, job_id, partition_id, shard_index, \
            shard_total, attempt_no, priority, args_json, state, created_at_ms, not_before_ms, \
            avoid_executor_id, executor_id, dispatched_at_ms, deadline_ms, finished_at_ms, output, \
            error, lost_before FROM attempts WHERE run_id = ? ORDER BY shard_index, attempt_no";
        attempt_dispatched = "UPDATE attempts SET state = 'running', executor_id = ?, \
            dispatched_at_ms = {now}, deadline_ms = CASE WHEN ? > 0 THEN {now} + ? ELSE NULL END \
            WHERE attempt_id = ? AND state = 'pending'";
        attempt_prefer = "UPDATE attempts SET executor_id = ? WHERE attempt_id = ? AND state = 'pending'";
        attempt_undispatched = "UPDATE attempts SET state = 'pending', executor_id = NULL, \
            dispatched_at_ms = NULL, deadline_ms = NULL \
            WHERE attempt_id = ? AND state = 'running' AND executor_id = ?";
        // `{partitions}`: the attempt ids one executor accepted in one batch.
        attempts_dispatched_many = "UPDATE attempts SET state = 'running', executor_id = ?, \
            dispatched_at_ms = {now}, deadline_ms = CASE WHEN ? > 0 THEN {now} + ? ELSE NULL END \
            WHERE state = 'pending' AND attempt_id IN ({partitions})";
        // An executor named here ran it: an attempt it answered at once was dispatched now.
        attempt_end = "UPDATE attempts SET state = ?, finished_at_ms = {now}, output = ?, error = ?, \
            executor_id = COALESCE(?, executor_id), \
            dispatched_at_ms = COALESCE(dispatched_at_ms, CASE WHEN ? IS NULL THEN NULL ELSE {now} END) \
            WHERE attempt_id = ? AND state IN ('pending', 'running')";
        attempts_cancel_of_run = "UPDATE attempts SET state = 'cancelled', finished_at_ms = {now}, \
            error = ? WHERE run_id = ? AND state IN ('pending', 'running')";

        // `{partitions}` is filled at call time with the node's partition ids (integers we format).
        runs_pending = "SELECT run_id, job_id, scheduled_at_ms, partition_id, epoch, node_id, trigger_kind, \
            state, priority, created_at_ms, started_at_ms, finished_at_ms, message, namespace_id, \
            flow_key FROM runs WHERE state = 'pending' AND partition_id IN ({partitions}) AND run_id > ? ORDER BY run_id LIMIT ?";
        // With the run's instant, which every dispatch carries. The horizon is bound, read from
        // the clock once: `{now}` in the filter is read again for every row on PostgreSQL and
        // MySQL, so a scan crossing the horizon of an instant's attempts split them across passes.
        attempts_due = "SELECT a.attempt_id, a.run_id, a.job_id, a.partition_id, a.shard_index, a.shard_total, \
            a.attempt_no, a.priority, a.args_json, a.state, a.created_at_ms, a.not_before_ms, \
            a.avoid_executor_id, a.executor_id, a.dispatched_at_ms, a.deadline_ms, \
            a.finished_at_ms, a.output, a.error, a.lost_before, r.scheduled_at_ms, r.input_json FROM attempts a \
            JOIN runs r ON r.run_id = a.run_id WHERE a.state = 'pending' AND a.partition_id IN ({partitions}) AND \
            a.not_before_ms <= ? AND (a.not_before_ms > ? OR (a.not_before_ms = ? \
            AND a.attempt_id > ?)) ORDER BY a.not_before_ms, a.attempt_id LIMIT ?";
        attempts_expired = "SELECT attempt_id, run_id, job_id, partition_id, shard_index, shard_total, attempt_no, \
            priority, args_json, state, created_at_ms, not_before_ms, avoid_executor_id, \
            executor_id, dispatched_at_ms, deadline_ms, finished_at_ms, output, error, lost_before \
            FROM attempts WHERE state = 'running' AND partition_id IN ({partitions}) AND deadline_ms IS NOT NULL \
            AND deadline_ms <= {now} LIMIT ?";
        attempts_orphaned = "SELECT a.attempt_id, a.run_id, a.job_id, a.partition_id, a.shard_index, a.shard_total, \
            a.attempt_no, a.priority, a.args_json, a.state, a.created_at_ms, a.not_before_ms, \
            a.avoid_executor_id, a.executor_id, a.dispatched_at_ms, a.deadline_ms, a.finished_at_ms, \
            a.output, a.error, a.lost_before FROM attempts a LEFT JOIN executors e ON e.executor_id = a.executor_id \
            WHERE a.state = 'running' AND a.partition_id IN ({partitions}) AND (e.executor_id IS \
            NULL OR e.state = 'left' \
            OR e.heartbeat_at_ms + CASE WHEN e.lease_ms > 0 THEN e.lease_ms ELSE ? END <= {now} \
            OR (e.protocol = 'carillon' \
                AND e.heartbeat_at_ms >= COALESCE(a.seen_at_ms, a.dispatched_at_ms) + ?)) LIMIT ?";

        // Whose the attempts of a log batch are; `{partitions}` is a list of attempt ids.
        attempt_logs_owners = "SELECT attempt_id, run_id, executor_id, state FROM attempts \
            WHERE attempt_id IN ({partitions})";
        // What their logs hold: lines, bytes and the last line number, the truncation marker
        // left out.
        attempt_logs_sizes = "SELECT attempt_id, COUNT(*), \
            CAST(COALESCE(SUM(LENGTH(message)), 0) AS {bigint}), MAX(line_no) FROM attempt_logs \
            WHERE attempt_id IN ({partitions}) AND line_no < ? GROUP BY attempt_id";
        attempt_logs_page = "SELECT attempt_id, line_no, at_ms, level, message FROM attempt_logs \
            WHERE attempt_id = ? AND line_no > ? ORDER BY line_no LIMIT ?";

        attempts_seen = "UPDATE attempts SET seen_at_ms = {now} WHERE executor_id = ? \
            AND state = 'running' AND attempt_id IN ({partitions})";
    }
}
