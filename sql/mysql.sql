-- Carillon: the whole schema for mysql, for DBAs who create it by hand.
-- Keep equal to migrations/mysql/ (a test compares the two schemas).

-- Cluster-wide settings fixed at cluster init (one row).
CREATE TABLE cluster_meta (
    id BIGINT NOT NULL PRIMARY KEY,
    partition_count BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL
);

-- Namespaces: every job, task, calendar, executor app and run belongs to one; names are
-- unique within it. `default` (id 1) holds what is created without naming one.
CREATE TABLE namespaces (
    namespace_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name VARCHAR(63) NOT NULL,
    description VARCHAR(1024) NOT NULL DEFAULT '',
    created_at_ms BIGINT NOT NULL,
    -- Where its jobs' alerts go when a job names no webhook of its own.
    alert_webhook VARCHAR(2048) NULL,
    -- Its quotas, set by the cluster's admins (NULL: none): jobs and workflows it may hold,
    -- tasks pending at once, tasks each node takes from it per second.
    max_jobs BIGINT NULL,
    max_pending_tasks BIGINT NULL,
    max_enqueue_per_second BIGINT NULL
);
CREATE UNIQUE INDEX namespaces_name_idx ON namespaces (name);
INSERT INTO namespaces (namespace_id, name, description, created_at_ms)
    VALUES (1, 'default', 'What is created without naming a namespace.',
    CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED));

-- Service tokens, each with one role in one namespace. Only the SHA-256 of a token is kept:
-- the token itself is shown once, when it is created.
CREATE TABLE service_tokens (
    token_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    namespace_id BIGINT NOT NULL,
    name VARCHAR(63) NOT NULL,
    role VARCHAR(16) NOT NULL,
    secret_sha256 CHAR(64) NOT NULL,
    -- The token's first characters, to tell tokens apart in a listing.
    display_prefix VARCHAR(24) NOT NULL,
    created_at_ms BIGINT NOT NULL,
    created_by VARCHAR(255) NOT NULL,
    expires_at_ms BIGINT NULL,
    last_used_at_ms BIGINT NULL
);
CREATE UNIQUE INDEX service_tokens_secret_idx ON service_tokens (secret_sha256);
CREATE UNIQUE INDEX service_tokens_namespace_name_idx ON service_tokens (namespace_id, name);

-- Named secrets of a namespace, sealed with the operators' key (AES-256-GCM, the namespace
-- and name bound in): `v1.<key id>.<nonce, ciphertext and tag>`. key_id repeats the sealed
-- value's, so a rotation finds what is left under an old key.
CREATE TABLE secrets (
    secret_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    namespace_id BIGINT NOT NULL,
    -- Compared byte for byte: the sealed value is bound to the name as written.
    name VARCHAR(63) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    sealed TEXT NOT NULL,
    key_id VARCHAR(32) NOT NULL,
    version BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    updated_by VARCHAR(255) NOT NULL
);
CREATE UNIQUE INDEX secrets_namespace_name_idx ON secrets (namespace_id, name);
CREATE INDEX secrets_key_idx ON secrets (key_id);

-- Roles of a namespace granted to a group of the identity provider's people (the group
-- claim of their tokens). One role per group and namespace.
CREATE TABLE role_grants (
    grant_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    namespace_id BIGINT NOT NULL,
    group_name VARCHAR(255) NOT NULL,
    role VARCHAR(16) NOT NULL,
    created_at_ms BIGINT NOT NULL,
    created_by VARCHAR(255) NOT NULL
);
CREATE UNIQUE INDEX role_grants_namespace_group_idx ON role_grants (namespace_id, group_name);

-- The audit trail of the API's changes and refusals.
CREATE TABLE audit_events (
    event_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    -- NULL: a change to the cluster, not to one namespace.
    namespace_id BIGINT NULL,
    actor VARCHAR(255) NOT NULL,
    source VARCHAR(64) NOT NULL,
    operation VARCHAR(64) NOT NULL,
    resource VARCHAR(512) NOT NULL,
    -- ok, failed (the change was refused by its own checks) or refused (not permitted).
    outcome VARCHAR(16) NOT NULL,
    status INTEGER NOT NULL,
    detail TEXT NULL,
    -- What an edit changed: [{"field", "before", "after"}] as JSON.
    changes TEXT NULL
);
CREATE INDEX audit_events_at_idx ON audit_events (at_ms);
CREATE INDEX audit_events_namespace_idx ON audit_events (namespace_id, event_id);

-- Admin nodes. Liveness is heartbeat_at_ms compared with the database clock.
CREATE TABLE nodes (
    node_id VARCHAR(64) NOT NULL PRIMARY KEY,
    incarnation VARCHAR(64) NOT NULL,
    address VARCHAR(255) NOT NULL,
    version VARCHAR(64) NOT NULL,
    started_at_ms BIGINT NOT NULL,
    heartbeat_at_ms BIGINT NOT NULL,
    left_at_ms BIGINT NULL
);

-- The single leader lease row; term is the fencing token.
CREATE TABLE leader (
    id BIGINT NOT NULL PRIMARY KEY,
    node_id VARCHAR(64) NULL,
    term BIGINT NOT NULL,
    lease_until_ms BIGINT NOT NULL,
    acquired_at_ms BIGINT NOT NULL
);
INSERT INTO leader (id, node_id, term, lease_until_ms, acquired_at_ms) VALUES (1, NULL, 0, 0, 0);

-- Partition -> owner node. epoch increases on every change of owner.
CREATE TABLE partitions (
    partition_id BIGINT NOT NULL PRIMARY KEY,
    owner_node_id VARCHAR(64) NULL,
    pending_owner_node_id VARCHAR(64) NULL,
    epoch BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
CREATE INDEX partitions_owner_idx ON partitions (owner_node_id);

-- Executor apps, their instances and the handlers each instance registered.
CREATE TABLE apps (
    app_name VARCHAR(128) NOT NULL PRIMARY KEY,
    description VARCHAR(1024) NOT NULL,
    created_at_ms BIGINT NOT NULL,
    -- App names are unique across the cluster; each app belongs to one namespace.
    namespace_id BIGINT NOT NULL DEFAULT 1
);

CREATE TABLE executors (
    executor_id VARCHAR(64) NOT NULL PRIMARY KEY,
    app_name VARCHAR(128) NOT NULL,
    address VARCHAR(512) NOT NULL,
    weight BIGINT NOT NULL,
    capacity BIGINT NOT NULL,
    in_flight BIGINT NOT NULL,
    state VARCHAR(16) NOT NULL,
    registered_at_ms BIGINT NOT NULL,
    heartbeat_at_ms BIGINT NOT NULL,
    accepts_batch BIGINT NOT NULL DEFAULT 0,
    -- 'carillon', or 'xxl' for an XXL-JOB executor.
    protocol VARCHAR(16) NOT NULL DEFAULT 'carillon',
    -- Without a heartbeat this long its attempts fail over (0: the node's executor_lease).
    lease_ms BIGINT NOT NULL DEFAULT 0,
    -- The token that registered it (`cluster`, `app:<app>`, `token:<id>`, `admin`, `xxl`); only
    -- that token acts for it. NULL: registered before owners were kept; empty: removed.
    registered_by VARCHAR(160) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL
);
CREATE INDEX executors_app_idx ON executors (app_name, heartbeat_at_ms);

CREATE TABLE handlers (
    executor_id VARCHAR(64) NOT NULL,
    handler_name VARCHAR(128) NOT NULL,
    app_name VARCHAR(128) NOT NULL,
    description VARCHAR(1024) NOT NULL,
    PRIMARY KEY (executor_id, handler_name)
);
CREATE INDEX handlers_app_idx ON handlers (app_name, handler_name);

-- Jobs: a handler of an app bound to a schedule. partition_id is derived from job_id.
CREATE TABLE jobs (
    job_id BIGINT NOT NULL PRIMARY KEY,
    partition_id BIGINT NOT NULL,
    name VARCHAR(200) NOT NULL,
    app_name VARCHAR(128) NOT NULL,
    handler_name VARCHAR(128) NOT NULL,
    schedule_json TEXT NOT NULL,
    timezone VARCHAR(64) NOT NULL,
    args_json TEXT NOT NULL,
    policy_json TEXT NOT NULL,
    state VARCHAR(16) NOT NULL,
    version BIGINT NOT NULL,
    next_fire_at_ms BIGINT NULL,
    last_fired_at_ms BIGINT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    started_at_ms BIGINT NULL,
    -- A job's own history rule: keep its finished runs this long (0: forever; NULL: the
    -- node's retention.runs), and at most this many of its newest runs.
    history_keep_ms BIGINT NULL,
    history_max_runs BIGINT NULL,
    -- Scheduled instants fired so far (bounds.max_runs counts them).
    fired_count BIGINT NOT NULL DEFAULT 0,
    kind VARCHAR(16) NOT NULL DEFAULT 'job',
    namespace_id BIGINT NOT NULL DEFAULT 1
);
CREATE UNIQUE INDEX jobs_namespace_name_idx ON jobs (namespace_id, name);
CREATE INDEX jobs_partition_idx ON jobs (partition_id, state);
CREATE INDEX jobs_updated_idx ON jobs (updated_at_ms);
CREATE INDEX jobs_history_keep_idx ON jobs (history_keep_ms);
CREATE INDEX jobs_history_max_runs_idx ON jobs (history_max_runs);

-- Deleted jobs, so the node that owns a job's partition learns of the deletion by polling.
CREATE TABLE job_deletions (
    job_id BIGINT NOT NULL PRIMARY KEY,
    partition_id BIGINT NOT NULL,
    deleted_at_ms BIGINT NOT NULL
);
CREATE INDEX job_deletions_at_idx ON job_deletions (deleted_at_ms);

-- Runs: one per scheduled instant of a job (the unique key is the exactly-once guarantee).
CREATE TABLE runs (
    run_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    job_id BIGINT NOT NULL,
    scheduled_at_ms BIGINT NOT NULL,
    partition_id BIGINT NOT NULL,
    epoch BIGINT NOT NULL,
    node_id VARCHAR(64) NOT NULL,
    trigger_kind VARCHAR(16) NOT NULL,
    state VARCHAR(16) NOT NULL,
    priority BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    started_at_ms BIGINT NULL,
    finished_at_ms BIGINT NULL,
    message TEXT NULL,
    input_json TEXT NULL,
    namespace_id BIGINT NOT NULL DEFAULT 1,
    -- The flow-control key the run was put in line under, if any.
    flow_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL
);
CREATE UNIQUE INDEX runs_job_instant_idx ON runs (job_id, scheduled_at_ms);
CREATE INDEX runs_state_idx ON runs (state, partition_id);
CREATE INDEX runs_finished_idx ON runs (finished_at_ms);
CREATE INDEX runs_flow_idx ON runs (flow_key, state, run_id);

-- Attempts: one dispatch of a run (or of one shard of it) to an executor; pending ones are
-- the dispatch queue.
CREATE TABLE attempts (
    attempt_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    run_id BIGINT NOT NULL,
    job_id BIGINT NOT NULL,
    partition_id BIGINT NOT NULL,
    shard_index BIGINT NOT NULL,
    shard_total BIGINT NOT NULL,
    attempt_no BIGINT NOT NULL,
    priority BIGINT NOT NULL,
    args_json TEXT NOT NULL,
    state VARCHAR(16) NOT NULL,
    created_at_ms BIGINT NOT NULL,
    not_before_ms BIGINT NOT NULL,
    avoid_executor_id VARCHAR(64) NULL,
    executor_id VARCHAR(64) NULL,
    dispatched_at_ms BIGINT NULL,
    deadline_ms BIGINT NULL,
    finished_at_ms BIGINT NULL,
    output TEXT NULL,
    error TEXT NULL,
    seen_at_ms BIGINT NULL,
    -- Earlier attempts of the same shard lost with their executor (outside the retry budget).
    lost_before BIGINT NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX attempts_run_shard_idx ON attempts (run_id, shard_index, attempt_no);
CREATE INDEX attempts_queue_idx ON attempts (state, partition_id, not_before_ms);
CREATE INDEX attempts_executor_idx ON attempts (executor_id, state);
-- The dispatch queue in due order.
CREATE INDEX attempts_pending_due_idx ON attempts (state, not_before_ms, attempt_id);

-- Named exclusion calendars shared by the jobs of a namespace (`calendars` in the job
-- document).
CREATE TABLE calendars (
    namespace_id BIGINT NOT NULL DEFAULT 1,
    name VARCHAR(128) NOT NULL,
    definition_json TEXT NOT NULL,
    version BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (namespace_id, name)
);
-- Backfills of past ranges, claimed a few instants at a time by the partition's owner.
CREATE TABLE backfills (
    backfill_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    job_id BIGINT NOT NULL,
    partition_id BIGINT NOT NULL,
    from_ms BIGINT NOT NULL,
    to_ms BIGINT NOT NULL,
    cursor_ms BIGINT NOT NULL,
    max_in_flight BIGINT NOT NULL,
    state VARCHAR(16) NOT NULL,
    fired BIGINT NOT NULL,
    message TEXT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
CREATE INDEX backfills_partition_idx ON backfills (partition_id, state);
CREATE INDEX backfills_job_idx ON backfills (job_id);

-- Tasks: delayed one-shot work, fired by the owner of their partition in due-order windows.
CREATE TABLE tasks (
    task_id BIGINT NOT NULL PRIMARY KEY,
    partition_id BIGINT NOT NULL,
    -- The client's idempotency key: one unfinished task per key. A finished task gives its
    -- key up (set to NULL) when the key is enqueued again. Keys are unique per namespace.
    task_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    app_name VARCHAR(128) NOT NULL,
    handler_name VARCHAR(128) NOT NULL,
    args_json TEXT NOT NULL,
    -- The task's policy as a job policy document holding only what the task set.
    policy_json TEXT NOT NULL,
    priority BIGINT NOT NULL,
    due_at_ms BIGINT NOT NULL,
    -- pending, fired or cancelled.
    state VARCHAR(16) NOT NULL,
    created_at_ms BIGINT NOT NULL,
    ended_at_ms BIGINT NULL,
    message TEXT NULL,
    namespace_id BIGINT NOT NULL DEFAULT 1
);
CREATE UNIQUE INDEX tasks_namespace_key_idx ON tasks (namespace_id, task_key);
-- The windows the owners read: pending tasks in due order.
CREATE INDEX tasks_pending_due_idx ON tasks (state, due_at_ms);

-- Tasks that left `pending`, oldest first: the retention pass deletes them after their runs.
CREATE INDEX tasks_ended_idx ON tasks (ended_at_ms);

-- Blocks of ids that nodes take for the rows they create in bulk (tasks): one short
-- transaction per block instead of a generated key per row, so a node knows a task's id, and
-- so its partition, before inserting it, on every backend.
CREATE TABLE id_blocks (
    name VARCHAR(64) NOT NULL PRIMARY KEY,
    next_id BIGINT NOT NULL
);
INSERT INTO id_blocks (name, next_id) VALUES ('tasks', 1);

-- Lines handlers logged while an attempt ran, numbered by the executor; kept with their run.
-- A truncated log ends with a marker line numbered 9007199254740991.
CREATE TABLE attempt_logs (
    attempt_id BIGINT NOT NULL,
    line_no BIGINT NOT NULL,
    run_id BIGINT NOT NULL,
    at_ms BIGINT NOT NULL,
    level VARCHAR(8) NOT NULL,
    message TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    PRIMARY KEY (attempt_id, line_no)
);
CREATE INDEX attempt_logs_run_idx ON attempt_logs (run_id);

-- Child runs: the run each parent run triggered, once per child job, created in the
-- transaction that ended the parent.
CREATE TABLE child_runs (
    parent_run_id BIGINT NOT NULL,
    child_job_id BIGINT NOT NULL,
    child_run_id BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (parent_run_id, child_job_id)
);
CREATE INDEX child_runs_child_idx ON child_runs (child_run_id);

-- Workflows: a definition per workflow (its steps, each a job, and what each needs), copied
-- into each workflow run when it starts; each step of a run, unique per (workflow run, step).
CREATE TABLE workflow_definitions (
    workflow_id BIGINT NOT NULL PRIMARY KEY,
    definition_json TEXT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);

CREATE TABLE workflow_runs (
    run_id BIGINT NOT NULL PRIMARY KEY,
    workflow_id BIGINT NOT NULL,
    definition_json TEXT NOT NULL,
    params_json TEXT NOT NULL,
    rerun_of BIGINT NULL,
    created_at_ms BIGINT NOT NULL
);
CREATE INDEX workflow_runs_workflow_idx ON workflow_runs (workflow_id, run_id);

CREATE TABLE step_runs (
    workflow_run_id BIGINT NOT NULL,
    step_name VARCHAR(128) NOT NULL,
    state VARCHAR(16) NOT NULL,
    run_id BIGINT NULL,
    output_json TEXT NULL,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (workflow_run_id, step_name)
);
CREATE INDEX step_runs_run_idx ON step_runs (run_id);

-- Flow keys: the limits a key's runs are admitted under, its rate window, and when its
-- queued runs are looked at again.
CREATE TABLE flow_keys (
    flow_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PRIMARY KEY,
    max_in_flight BIGINT NULL,
    rate_limit BIGINT NULL,
    rate_per_ms BIGINT NULL,
    drop_when_full BIGINT NOT NULL,
    -- `fifo`: a run that failed for good keeps its place until it is released.
    hold_failed BIGINT NOT NULL,
    window_start_ms BIGINT NOT NULL,
    window_count BIGINT NOT NULL,
    recheck_at_ms BIGINT NULL,
    updated_at_ms BIGINT NOT NULL
);
CREATE INDEX flow_keys_recheck_idx ON flow_keys (recheck_at_ms);

-- Keys only nodes know: `attempt_handles` signs each dispatch's handle. Made once, by the
-- first node to start.
CREATE TABLE node_keys (
    name VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    key_hex CHAR(64) NOT NULL,
    created_at_ms BIGINT NOT NULL
);
