-- Carillon schema, version 3: attempts become the dispatch queue (priority, retry time,
-- deadline, executor to avoid). The table had no writer before this version.
DROP TABLE attempts;

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
    error TEXT NULL
);
CREATE UNIQUE INDEX attempts_run_shard_idx ON attempts (run_id, shard_index, attempt_no);
CREATE INDEX attempts_queue_idx ON attempts (state, partition_id, not_before_ms);
CREATE INDEX attempts_executor_idx ON attempts (executor_id, state);
CREATE INDEX runs_finished_idx ON runs (finished_at_ms);
