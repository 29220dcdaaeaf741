-- Carillon schema, version 2: jobs fire (started_at, deletions) and runs get generated ids.
ALTER TABLE jobs ADD COLUMN started_at_ms BIGINT NULL;

-- Deleted jobs, so the node that owns a job's partition learns of the deletion by polling.
CREATE TABLE job_deletions (
    job_id BIGINT NOT NULL PRIMARY KEY,
    partition_id BIGINT NOT NULL,
    deleted_at_ms BIGINT NOT NULL
);
CREATE INDEX job_deletions_at_idx ON job_deletions (deleted_at_ms);

-- Runs and attempts had no writer before this version: recreate them with ids the database
-- generates, so two claims can never collide on an id.
DROP TABLE attempts;
DROP TABLE runs;

CREATE TABLE runs (
    run_id INTEGER PRIMARY KEY AUTOINCREMENT,
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
    message TEXT NULL
);
CREATE UNIQUE INDEX runs_job_instant_idx ON runs (job_id, scheduled_at_ms);
CREATE INDEX runs_state_idx ON runs (state, partition_id);

CREATE TABLE attempts (
    attempt_id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id BIGINT NOT NULL,
    shard_index BIGINT NOT NULL,
    shard_total BIGINT NOT NULL,
    attempt_no BIGINT NOT NULL,
    executor_id VARCHAR(64) NULL,
    args_json TEXT NOT NULL,
    state VARCHAR(16) NOT NULL,
    dispatched_at_ms BIGINT NULL,
    finished_at_ms BIGINT NULL,
    result_code BIGINT NULL,
    output TEXT NULL,
    error TEXT NULL
);
CREATE UNIQUE INDEX attempts_run_shard_idx ON attempts (run_id, shard_index, attempt_no);
