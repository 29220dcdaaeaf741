-- Carillon schema, version 6: run-history retention and lost attempts. A job's own rule
-- (`history` in the job document): how long its finished runs are kept (0: forever; NULL:
-- the node's retention.runs), and how many of its newest runs are kept at most.
ALTER TABLE jobs ADD COLUMN history_keep_ms BIGINT NULL;
ALTER TABLE jobs ADD COLUMN history_max_runs BIGINT NULL;
CREATE INDEX jobs_history_keep_idx ON jobs (history_keep_ms);
CREATE INDEX jobs_history_max_runs_idx ON jobs (history_max_runs);
-- How many earlier attempts of the same shard were lost with their executor: failover does
-- not count against the job's retry.max_attempts.
ALTER TABLE attempts ADD COLUMN lost_before BIGINT NOT NULL DEFAULT 0;
