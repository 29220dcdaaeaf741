-- Carillon schema, version 7: schedule policies. How many scheduled instants a job has fired
-- (its `bounds.max_runs` counts them); named exclusion calendars that jobs share; and the
-- backfills of past ranges, which the owner of the job's partition claims a few at a time.
ALTER TABLE jobs ADD COLUMN fired_count BIGINT NOT NULL DEFAULT 0;
CREATE TABLE calendars (
    name VARCHAR(128) NOT NULL PRIMARY KEY,
    definition_json TEXT NOT NULL,
    version BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
CREATE TABLE backfills (
    backfill_id INTEGER PRIMARY KEY AUTOINCREMENT,
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
