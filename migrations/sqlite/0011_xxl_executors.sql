-- Carillon schema, version 11: executors that speak XXL-JOB's executor protocol ('xxl')
-- beside Carillon's own ('carillon'), and how long each may go without a heartbeat before
-- its attempts fail over (0: the node's executor_lease; XXL-JOB executors beat every 10 to
-- 30 s and are given 90 s by default).
ALTER TABLE executors ADD COLUMN protocol VARCHAR(16) NOT NULL DEFAULT 'carillon';
ALTER TABLE executors ADD COLUMN lease_ms BIGINT NOT NULL DEFAULT 0;
