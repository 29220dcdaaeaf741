-- Carillon schema, version 8: the fire path at 10,000 fires/s and more.
--
-- Room on each page of `jobs` for the claim's updates. Every claim rewrites its job's row
-- (`last_fired_at_ms`, `fired_count`); with the pages full, PostgreSQL cannot put the new
-- version beside the old one (a HOT update, no index entries), so each fire also wrote six
-- index entries and the table grew without bound between vacuums (measured: 16 % of the
-- updates HOT, 293 MB for 20,000 jobs after a minute at 10,000 fires/s; with this, all HOT and
-- 22 MB). Existing pages get the room when the table is next rewritten (VACUUM FULL).
ALTER TABLE jobs SET (fillfactor = 40);

-- The delivery pass reads the pending attempts earliest due first. Walking the queue index
-- (state, partition, due) for every owned partition and sorting the lot costs in proportion
-- to the backlog: with 800,000 attempts waiting it outlasted the statement timeout, and a
-- node that fell behind could never catch up. This index holds only the pending attempts, in
-- due order, so a pass reads its slice and stops.
CREATE INDEX attempts_pending_due_idx ON attempts (not_before_ms, attempt_id) WHERE state = 'pending';

-- The queue indexes hold only the rows still in the queue. A fire writes its run three times
-- and its attempt twice, and each row version not updated in place gets an entry in every
-- index whose predicate it meets: a finished run or attempt, the bulk of both tables, needs
-- no entry in an index of queue states. (Only the runs' key, the attempts' key and the
-- history's `runs_finished_idx` see finished rows.)
DROP INDEX runs_state_idx;
CREATE INDEX runs_queue_idx ON runs (state, partition_id)
    WHERE state IN ('pending', 'queued', 'running');
DROP INDEX runs_finished_idx;
CREATE INDEX runs_finished_idx ON runs (finished_at_ms) WHERE finished_at_ms IS NOT NULL;
-- Pending attempts are read through `attempts_pending_due_idx`; these two serve the watch
-- (timeouts, lost executors) and executors' loads, which read running attempts only.
DROP INDEX attempts_queue_idx;
CREATE INDEX attempts_running_idx ON attempts (partition_id, deadline_ms) WHERE state = 'running';
DROP INDEX attempts_executor_idx;
CREATE INDEX attempts_executor_idx ON attempts (executor_id) WHERE state = 'running';
