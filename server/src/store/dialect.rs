//! The SQL of every query, written once, and its rendering for each backend.
//!
//! Templates use `?` for parameters, `{now}` for the database clock in epoch milliseconds and
//! `{for_update}` for a row lock. Only these differ between the backends we support; anything
//! that differs more gets its own template per backend.

use std::sync::Arc;

use super::Backend;

/// Backend-specific fragments.
#[derive(Debug, Clone, Copy)]
struct Dialect {
    now_ms: &'static str,
    for_update: &'static str,
    /// MySQL needs a table in `SELECT … WHERE`; the others need none.
    from_dual: &'static str,
    numbered_params: bool,
    /// What makes an `INSERT` into `runs` skip a row whose (job, instant) is taken.
    ignore_duplicate_run: &'static str,
    /// The type a `CAST` to a 64-bit integer names (`SUM` is `DECIMAL` on MySQL).
    bigint: &'static str,
    /// What makes an `INSERT` into `flow_keys` replace the limits of a key that has a row.
    upsert_flow_key: &'static str,
}

/// `{upsert_flow_key}` where the new row is `excluded` (PostgreSQL, SQLite).
const UPSERT_FLOW_KEY_EXCLUDED: &str = "ON CONFLICT (flow_key) DO UPDATE SET \
    max_in_flight = excluded.max_in_flight, rate_limit = excluded.rate_limit, \
    rate_per_ms = excluded.rate_per_ms, drop_when_full = excluded.drop_when_full, \
    hold_failed = excluded.hold_failed, updated_at_ms = excluded.updated_at_ms";

/// PostgreSQL's `{now}`, as a literal for the statements written for PostgreSQL alone
/// (`sql_store/bulk.rs`).
macro_rules! postgres_now {
    () => {
        "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT"
    };
}
pub(super) use postgres_now;

impl Dialect {
    fn of(backend: Backend) -> Self {
        match backend {
            Backend::Postgres => Dialect {
                // clock_timestamp(), not now(): a lease must be compared with the time of the
                // statement, not with the start of its transaction.
                now_ms: postgres_now!(),
                for_update: "FOR UPDATE",
                from_dual: "",
                numbered_params: true,
                ignore_duplicate_run: "ON CONFLICT (job_id, scheduled_at_ms) DO NOTHING",
                bigint: "BIGINT",
                upsert_flow_key: UPSERT_FLOW_KEY_EXCLUDED,
            },
            Backend::Mysql => Dialect {
                // sqlx sets the session time zone to UTC, so this round trip is exact.
                now_ms: "CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED)",
                for_update: "FOR UPDATE",
                from_dual: "FROM DUAL",
                numbered_params: false,
                // A no-op update; unlike INSERT IGNORE it does not hide other errors.
                ignore_duplicate_run: "ON DUPLICATE KEY UPDATE job_id = job_id",
                bigint: "SIGNED",
                upsert_flow_key: "ON DUPLICATE KEY UPDATE \
                    max_in_flight = VALUES(max_in_flight), rate_limit = VALUES(rate_limit), \
                    rate_per_ms = VALUES(rate_per_ms), drop_when_full = VALUES(drop_when_full), \
                    hold_failed = VALUES(hold_failed), updated_at_ms = VALUES(updated_at_ms)",
            },
            Backend::Sqlite => Dialect {
                now_ms: "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
                // SQLite has no row locks: writers are serialised by BEGIN IMMEDIATE instead.
                for_update: "",
                from_dual: "",
                numbered_params: false,
                ignore_duplicate_run: "ON CONFLICT (job_id, scheduled_at_ms) DO NOTHING",
                bigint: "INTEGER",
                upsert_flow_key: UPSERT_FLOW_KEY_EXCLUDED,
            },
        }
    }

    fn render(self, template: &str) -> Arc<str> {
        let text = template
            .replace("{now}", self.now_ms)
            .replace("{for_update}", self.for_update)
            .replace("{from_dual}", self.from_dual)
            .replace("{ignore_duplicate_run}", self.ignore_duplicate_run)
            .replace("{bigint}", self.bigint)
            .replace("{upsert_flow_key}", self.upsert_flow_key);
        if !self.numbered_params {
            return text.into();
        }
        let mut out = String::with_capacity(text.len() + 8);
        let mut n = 0;
        for ch in text.chars() {
            if ch == '?' {
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            } else {
                out.push(ch);
            }
        }
        out.into()
    }
}

/// A job listing: filters, then a keyset condition (`?` the key after which the page starts,
/// or NULL for the first page) and the order it pages in.
macro_rules! jobs_list {
    ($after:literal, $order:literal) => {
        concat!(
            "SELECT job_id, partition_id, name, app_name, handler_name, schedule_json, \
            timezone, args_json, policy_json, state, version, last_fired_at_ms, created_at_ms, \
            updated_at_ms, started_at_ms, fired_count, kind, namespace_id FROM jobs \
            WHERE (? IS NULL OR namespace_id = ?) AND (? IS NULL OR kind = ?) \
            AND (? IS NULL OR app_name = ?) AND (? IS NULL OR state = ?) \
            AND (? IS NULL OR name LIKE ? ESCAPE '!') \
            AND (? IS NULL OR LOWER(name) LIKE LOWER(?) ESCAPE '!') AND (? IS NULL OR ",
            $after,
            ") ORDER BY ",
            $order,
            " LIMIT ?"
        )
    };
}

/// A run listing, paged like [`jobs_list!`].
macro_rules! runs_list {
    ($after:literal, $order:literal) => {
        concat!(
            "SELECT run_id, job_id, scheduled_at_ms, partition_id, epoch, node_id, \
            trigger_kind, state, priority, created_at_ms, started_at_ms, finished_at_ms, \
            message, namespace_id FROM runs WHERE (? IS NULL OR namespace_id = ?) \
            AND (? IS NULL OR job_id = ?) AND (? IS NULL OR state = ?) \
            AND (? IS NULL OR ",
            $after,
            ") ORDER BY ",
            $order,
            " LIMIT ?"
        )
    };
}

/// A task with its run once fired (`runs.job_id = -task_id` at the task's instant), and a
/// condition.
macro_rules! tasks_where {
    ($condition:literal) => {
        concat!(
            "SELECT t.task_id, t.partition_id, t.task_key, t.app_name, t.handler_name, \
            t.args_json, t.policy_json, t.priority, t.due_at_ms, t.state, t.created_at_ms, \
            t.ended_at_ms, t.message, r.run_id, r.state AS run_state, t.namespace_id FROM tasks t \
            LEFT JOIN runs r ON r.job_id = -t.task_id AND r.scheduled_at_ms = t.due_at_ms \
            WHERE ",
            $condition
        )
    };
}

macro_rules! queries {
    ($($name:ident = $template:expr;)*) => {
        /// Every query of the store, rendered for one backend at connect time.
        #[derive(Debug)]
        pub(super) struct Queries {
            $(pub(super) $name: Arc<str>,)*
        }

        impl Queries {
            pub(super) fn for_backend(backend: Backend) -> Self {
                let dialect = Dialect::of(backend);
                Queries { $($name: dialect.render($template),)* }
            }
        }
    };
}

queries! {
    now = "SELECT {now} AS now_ms";

    cluster_meta_get = "SELECT partition_count, created_at_ms FROM cluster_meta WHERE id = 1";
    cluster_meta_insert =
        "INSERT INTO cluster_meta (id, partition_count, created_at_ms) VALUES (1, ?, {now})";
    partition_insert = "INSERT INTO partitions \
        (partition_id, owner_node_id, pending_owner_node_id, epoch, updated_at_ms) \
        VALUES (?, NULL, NULL, 0, {now})";

    node_update_registration = "UPDATE nodes SET incarnation = ?, address = ?, version = ?, \
        started_at_ms = {now}, heartbeat_at_ms = {now}, left_at_ms = NULL WHERE node_id = ?";
    node_insert = "INSERT INTO nodes \
        (node_id, incarnation, address, version, started_at_ms, heartbeat_at_ms, left_at_ms) \
        VALUES (?, ?, ?, ?, {now}, {now}, NULL)";
    node_heartbeat = "UPDATE nodes SET heartbeat_at_ms = {now} \
        WHERE node_id = ? AND incarnation = ? AND left_at_ms IS NULL";
    node_mark_left = "UPDATE nodes SET left_at_ms = {now} \
        WHERE node_id = ? AND incarnation = ? AND left_at_ms IS NULL";
    nodes_list = "SELECT node_id, address, version, started_at_ms, heartbeat_at_ms, left_at_ms \
        FROM nodes ORDER BY node_id";

    leader_get = "SELECT node_id, term, lease_until_ms, acquired_at_ms, {now} AS now_ms \
        FROM leader WHERE id = 1";
    leader_lock = "SELECT node_id, term, lease_until_ms, acquired_at_ms, {now} AS now_ms \
        FROM leader WHERE id = 1 {for_update}";
    leader_take = "UPDATE leader SET node_id = ?, term = ?, lease_until_ms = {now} + ?, \
        acquired_at_ms = {now} WHERE id = 1";
    leader_renew = "UPDATE leader SET lease_until_ms = {now} + ? WHERE id = 1 AND node_id = ?";
    leader_release = "UPDATE leader SET node_id = NULL, lease_until_ms = 0 \
        WHERE id = 1 AND node_id = ?";

    partitions_list = "SELECT partition_id, owner_node_id, pending_owner_node_id, epoch, \
        updated_at_ms FROM partitions ORDER BY partition_id";
    partitions_owned = "SELECT partition_id, owner_node_id, pending_owner_node_id, epoch, \
        updated_at_ms FROM partitions WHERE owner_node_id = ? ORDER BY partition_id";
    partitions_release_owned = "UPDATE partitions SET owner_node_id = NULL, \
        pending_owner_node_id = NULL, epoch = epoch + 1, updated_at_ms = {now} \
        WHERE owner_node_id = ?";
    partitions_cancel_pending_to = "UPDATE partitions SET pending_owner_node_id = NULL, \
        updated_at_ms = {now} WHERE pending_owner_node_id = ?";
    partition_assign = "UPDATE partitions SET owner_node_id = ?, pending_owner_node_id = NULL, \
        epoch = epoch + 1, updated_at_ms = {now} WHERE partition_id = ? AND epoch = ?";
    partition_request_hand_off = "UPDATE partitions SET pending_owner_node_id = ?, \
        updated_at_ms = {now} WHERE partition_id = ? AND epoch = ?";
    partition_cancel_hand_off = "UPDATE partitions SET pending_owner_node_id = NULL, \
        updated_at_ms = {now} WHERE partition_id = ? AND epoch = ?";
    // MySQL applies single-table SET clauses left to right; owner is read before pending is
    // cleared on every backend.
    partition_hand_off = "UPDATE partitions SET owner_node_id = pending_owner_node_id, \
        pending_owner_node_id = NULL, epoch = epoch + 1, updated_at_ms = {now} \
        WHERE partition_id = ? AND owner_node_id = ? AND epoch = ? \
        AND pending_owner_node_id IS NOT NULL";

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
    app_insert = "INSERT INTO apps (app_name, description, created_at_ms, namespace_id) \
        SELECT ?, '', {now}, ? {from_dual} WHERE NOT EXISTS (SELECT 1 FROM apps WHERE app_name = ?)";
    app_namespace = "SELECT namespace_id FROM apps WHERE app_name = ?";
    executor_namespace = "SELECT a.namespace_id FROM executors e \
        JOIN apps a ON a.app_name = e.app_name WHERE e.executor_id = ?";
    executor_update = "UPDATE executors SET app_name = ?, address = ?, weight = ?, capacity = ?, \
        accepts_batch = ?, protocol = ?, lease_ms = ?, in_flight = 0, state = 'active', registered_at_ms = {now}, heartbeat_at_ms = {now} \
        WHERE executor_id = ?";
    executor_insert = "INSERT INTO executors (executor_id, app_name, address, weight, capacity, \
        accepts_batch, protocol, lease_ms, in_flight, state, registered_at_ms, heartbeat_at_ms) \
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 'active', {now}, {now})";
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
    executors_all = "SELECT e.executor_id, e.app_name, e.address, e.weight, e.capacity, \
        e.in_flight, e.state, e.registered_at_ms, e.heartbeat_at_ms, e.accepts_batch, e.protocol, \
        e.lease_ms, COALESCE(a.namespace_id, 1) AS namespace_id FROM executors e \
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

    // Namespaces (`sql_store/namespaces.rs`).
    namespaces_list = "SELECT namespace_id, name, description, created_at_ms, alert_webhook, \
        max_jobs, max_pending_tasks, max_enqueue_per_second FROM namespaces ORDER BY name";
    namespace_by_name = "SELECT namespace_id, name, description, created_at_ms, alert_webhook, \
        max_jobs, max_pending_tasks, max_enqueue_per_second FROM namespaces WHERE name = ?";
    namespace_by_id = "SELECT namespace_id, name, description, created_at_ms, alert_webhook, \
        max_jobs, max_pending_tasks, max_enqueue_per_second FROM namespaces \
        WHERE namespace_id = ?";
    namespace_insert = "INSERT INTO namespaces (name, description, alert_webhook, max_jobs, \
        max_pending_tasks, max_enqueue_per_second, created_at_ms) \
        VALUES (?, ?, ?, ?, ?, ?, {now})";
    namespace_update = "UPDATE namespaces SET description = ?, alert_webhook = ?, \
        max_jobs = ?, max_pending_tasks = ?, max_enqueue_per_second = ? \
        WHERE namespace_id = ?";
    namespaces_jobs = "SELECT namespace_id, COUNT(*) FROM jobs WHERE kind <> 'step' \
        GROUP BY namespace_id";
    namespaces_pending_tasks = "SELECT namespace_id, COUNT(*) FROM tasks WHERE state = 'pending' \
        GROUP BY namespace_id";
    namespace_counts = "SELECT \
        (SELECT COUNT(*) FROM jobs WHERE namespace_id = ? AND kind <> 'step'), \
        (SELECT COUNT(*) FROM tasks WHERE namespace_id = ? AND state = 'pending') {from_dual}";
    namespace_lock = "SELECT namespace_id FROM namespaces WHERE namespace_id = ? {for_update}";
    // Jobs and tasks by the indexes that lead with the namespace; calendars by their key.
    namespace_usage = "SELECT \
        (SELECT COUNT(*) FROM jobs WHERE namespace_id = ?), \
        (SELECT COUNT(*) FROM tasks WHERE namespace_id = ? AND state = 'pending'), \
        (SELECT COUNT(*) FROM calendars WHERE namespace_id = ?), \
        (SELECT COUNT(*) FROM apps WHERE namespace_id = ?) {from_dual}";
    namespace_delete = "DELETE FROM namespaces WHERE namespace_id = ?";
    namespace_tokens_delete = "DELETE FROM service_tokens WHERE namespace_id = ?";

    // The audit trail (`sql_store/audit.rs`).
    audit_insert = "INSERT INTO audit_events (at_ms, namespace_id, actor, source, operation, \
        resource, outcome, status, detail, changes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
    audit_list = "SELECT event_id, at_ms, namespace_id, actor, source, operation, resource, \
        outcome, status, detail, changes FROM audit_events \
        WHERE (? IS NULL OR namespace_id = ?) AND (? IS NULL OR actor = ?) \
        AND (? IS NULL OR operation = ?) AND (? IS NULL OR outcome = ?) \
        AND (? IS NULL OR at_ms >= ?) AND (? IS NULL OR at_ms < ?) \
        AND (? IS NULL OR event_id < ?) ORDER BY event_id DESC LIMIT ?";
    audit_purge_upto = "SELECT MAX(event_id) FROM (SELECT event_id FROM audit_events \
        WHERE at_ms < ? ORDER BY event_id LIMIT ?) oldest";
    audit_purge = "DELETE FROM audit_events WHERE event_id <= ? AND at_ms < ?";

    // Service tokens (`sql_store/tokens.rs`).
    tokens_all = "SELECT token_id, namespace_id, name, role, secret_sha256, display_prefix, \
        created_at_ms, created_by, expires_at_ms, last_used_at_ms FROM service_tokens \
        ORDER BY namespace_id, name";
    token_by_secret = "SELECT token_id, namespace_id, name, role, secret_sha256, display_prefix, \
        created_at_ms, created_by, expires_at_ms, last_used_at_ms FROM service_tokens \
        WHERE secret_sha256 = ?";
    token_insert = "INSERT INTO service_tokens (namespace_id, name, role, secret_sha256, \
        display_prefix, created_by, expires_at_ms, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, {now})";
    token_delete = "DELETE FROM service_tokens WHERE token_id = ?";
    token_used = "UPDATE service_tokens SET last_used_at_ms = ? WHERE token_id = ?";

    // Secrets (`sql_store/secrets.rs`).
    secrets_list = "SELECT secret_id, namespace_id, name, sealed, key_id, version, created_at_ms, \
        updated_at_ms, updated_by FROM secrets WHERE namespace_id = ? ORDER BY name";
    secret_by_name = "SELECT secret_id, namespace_id, name, sealed, key_id, version, \
        created_at_ms, updated_at_ms, updated_by FROM secrets WHERE namespace_id = ? AND name = ?";
    secret_update = "UPDATE secrets SET sealed = ?, key_id = ?, updated_by = ?, \
        version = version + 1, updated_at_ms = {now} WHERE namespace_id = ? AND name = ?";
    secret_insert = "INSERT INTO secrets (namespace_id, name, sealed, key_id, updated_by, \
        version, created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?, ?, 1, {now}, {now})";
    secret_delete = "DELETE FROM secrets WHERE namespace_id = ? AND name = ?";
    secrets_under_other_keys = "SELECT secret_id, namespace_id, name, sealed, key_id, version, \
        created_at_ms, updated_at_ms, updated_by FROM secrets \
        WHERE key_id <> ? AND secret_id > ? ORDER BY secret_id LIMIT ?";
    secret_reseal = "UPDATE secrets SET sealed = ?, key_id = ? \
        WHERE secret_id = ? AND version = ?";
    namespace_secrets_delete = "DELETE FROM secrets WHERE namespace_id = ?";

    // Role grants (`sql_store/grants.rs`).
    grants_all = "SELECT grant_id, namespace_id, group_name, role, created_at_ms, created_by \
        FROM role_grants ORDER BY namespace_id, group_name";
    grant_by_group = "SELECT grant_id, namespace_id, group_name, role, created_at_ms, created_by \
        FROM role_grants WHERE namespace_id = ? AND group_name = ?";
    grant_insert = "INSERT INTO role_grants (namespace_id, group_name, role, created_by, \
        created_at_ms) VALUES (?, ?, ?, ?, {now})";
    grant_delete = "DELETE FROM role_grants WHERE grant_id = ?";
    namespace_grants_delete = "DELETE FROM role_grants WHERE namespace_id = ?";

    flow_key_upsert = "INSERT INTO flow_keys (flow_key, max_in_flight, rate_limit, \
        rate_per_ms, drop_when_full, hold_failed, window_start_ms, window_count, recheck_at_ms, \
        updated_at_ms) VALUES (?, ?, ?, ?, ?, ?, 0, 0, NULL, {now}) {upsert_flow_key}";
    flow_key_lock = "SELECT max_in_flight, rate_limit, rate_per_ms, drop_when_full, \
        hold_failed, window_start_ms, window_count, recheck_at_ms, {now} AS now_ms \
        FROM flow_keys WHERE flow_key = ? {for_update}";
    flow_key_save = "UPDATE flow_keys SET window_start_ms = ?, window_count = ?, \
        recheck_at_ms = ?, updated_at_ms = {now} WHERE flow_key = ?";
    flow_keys_due = "SELECT flow_key FROM flow_keys WHERE recheck_at_ms <= {now} \
        ORDER BY recheck_at_ms LIMIT ?";
    // `{partitions}`: run ids.
    runs_flow_enqueue = "UPDATE runs SET state = 'queued', flow_key = ?, message = ? \
        WHERE state = 'pending' AND flow_key IS NULL AND run_id IN ({partitions})";
    runs_flow_in_flight = "SELECT COUNT(*) FROM runs WHERE flow_key = ? \
        AND state IN ('pending', 'running')";
    runs_flow_holding = "SELECT COUNT(*) FROM runs WHERE flow_key = ? \
        AND state IN ('pending', 'running', 'failed', 'timed_out', 'no_executor')";
    run_flow_key_held = "SELECT flow_key FROM runs WHERE run_id = ? \
        AND state IN ('failed', 'timed_out', 'no_executor') AND flow_key IS NOT NULL";
    run_flow_unhold = "UPDATE runs SET flow_key = NULL WHERE run_id = ? AND flow_key = ? \
        AND state IN ('failed', 'timed_out', 'no_executor')";
    // `{partitions}`: attempt ids.
    runs_flow_keys_of_attempts = "SELECT DISTINCT r.flow_key FROM attempts a \
        JOIN runs r ON r.run_id = a.run_id \
        WHERE a.attempt_id IN ({partitions}) AND r.flow_key IS NOT NULL";
    runs_flow_unhold_all = "UPDATE runs SET flow_key = NULL WHERE flow_key = ? \
        AND state IN ('failed', 'timed_out', 'no_executor')";
    run_flow_take_place = "UPDATE runs SET flow_key = ?, state = 'pending', message = NULL \
        WHERE run_id = ? AND ((state = 'pending' AND flow_key IS NULL) \
        OR (state = 'queued' AND flow_key = ?))";
    runs_flow_queued = "SELECT run_id FROM runs WHERE flow_key = ? AND state = 'queued' \
        ORDER BY run_id LIMIT ?";
    // `{partitions}`: run ids.
    runs_flow_release = "UPDATE runs SET state = 'pending', message = NULL \
        WHERE state = 'queued' AND run_id IN ({partitions})";
    run_flow_drop = "UPDATE runs SET state = 'skipped', finished_at_ms = {now}, message = ? \
        WHERE run_id = ? AND state = 'queued'";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_parameters_are_numbered_in_order() {
        let q = Queries::for_backend(Backend::Postgres);
        assert!(q.partition_assign.contains("owner_node_id = $1"));
        assert!(
            q.partition_assign
                .contains("partition_id = $2 AND epoch = $3")
        );
        assert!(q.leader_lock.ends_with("FOR UPDATE"));
    }

    #[test]
    fn sqlite_and_mysql_keep_question_marks_and_clock_is_inlined() {
        for backend in [Backend::Mysql, Backend::Sqlite] {
            let q = Queries::for_backend(backend);
            assert!(q.node_heartbeat.contains("node_id = ? AND incarnation = ?"));
            assert!(!q.node_heartbeat.contains("{now}"));
        }
        assert!(
            !Queries::for_backend(Backend::Sqlite)
                .leader_lock
                .contains("FOR UPDATE")
        );
    }
}
