-- Carillon schema, version 13: child jobs. A run may carry an input (a child's: its parent's
-- run, state and output), and each child run is recorded against the parent run that
-- triggered it, once per (parent run, child job): it is created in the transaction that ends
-- the parent.
ALTER TABLE runs ADD COLUMN input_json TEXT NULL;

CREATE TABLE child_runs (
    parent_run_id BIGINT NOT NULL,
    child_job_id BIGINT NOT NULL,
    child_run_id BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (parent_run_id, child_job_id)
);
CREATE INDEX child_runs_child_idx ON child_runs (child_run_id);
