-- Carillon schema, version 21: a namespace's optional quotas, set by the cluster's admins: the
-- jobs and workflows it may hold, its tasks pending at once, and the tasks a node takes from it
-- per second. NULL is no quota.
ALTER TABLE namespaces
    ADD COLUMN max_jobs BIGINT NULL,
    ADD COLUMN max_pending_tasks BIGINT NULL,
    ADD COLUMN max_enqueue_per_second BIGINT NULL;
