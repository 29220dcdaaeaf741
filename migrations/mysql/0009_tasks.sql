-- Carillon schema, version 9: tasks, the delayed one-shot work applications enqueue by the
-- million (`POST /api/v1/tasks`). A task waits here, `pending`, until the owner of its
-- partition reads it in the window due next and fires it: the fire inserts its run (with
-- `runs.job_id = -task_id`, so the runs' key allows one run per task) and marks it `fired`.
CREATE TABLE tasks (
    task_id BIGINT NOT NULL PRIMARY KEY,
    partition_id BIGINT NOT NULL,
    -- The client's idempotency key: one unfinished task per key. A finished task gives its
    -- key up (set to NULL) when the key is enqueued again.
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
    message TEXT NULL
);
CREATE UNIQUE INDEX tasks_key_idx ON tasks (task_key);
-- The windows the owners read: pending tasks in due order.
CREATE INDEX tasks_pending_due_idx ON tasks (state, due_at_ms);

-- Blocks of ids that nodes take for the rows they create in bulk (tasks): one short
-- transaction per block instead of a generated key per row, so a node knows a task's id, and
-- so its partition, before inserting it, on every backend.
CREATE TABLE id_blocks (
    name VARCHAR(64) NOT NULL PRIMARY KEY,
    next_id BIGINT NOT NULL
);
INSERT INTO id_blocks (name, next_id) VALUES ('tasks', 1);
