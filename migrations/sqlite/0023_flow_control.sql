-- Carillon schema, version 23: flow control. A run under a job's `flow` policy carries its
-- key (the namespace, the key's name and the value its arguments give) once it has been put
-- in line; runs of one key are admitted under the lock of the key's row, which keeps the
-- limits the key was last queued under, its rate window, and when queued runs are looked at
-- again (a full rate window, or a safety net for an end that admitted nothing).
ALTER TABLE runs ADD COLUMN flow_key VARCHAR(255) NULL;
CREATE INDEX runs_flow_idx ON runs (flow_key, state, run_id) WHERE flow_key IS NOT NULL;
CREATE TABLE flow_keys (
    flow_key VARCHAR(255) PRIMARY KEY,
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
