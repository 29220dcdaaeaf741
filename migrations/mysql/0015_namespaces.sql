-- Carillon schema, version 15: namespaces. Every job (workflows and their steps are jobs),
-- task, calendar, executor app and run belongs to one namespace; names are unique within
-- it. What existed before goes to `default` (id 1): a constant column default carries the
-- existing rows without rewriting them.
CREATE TABLE namespaces (
    namespace_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name VARCHAR(63) NOT NULL,
    description VARCHAR(1024) NOT NULL DEFAULT '',
    created_at_ms BIGINT NOT NULL
);
CREATE UNIQUE INDEX namespaces_name_idx ON namespaces (name);
-- IGNORE: a migration resumed statement by statement may insert it a second time.
INSERT IGNORE INTO namespaces (namespace_id, name, description, created_at_ms)
    VALUES (1, 'default', 'What is created without naming a namespace.',
    CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED));

ALTER TABLE jobs ADD COLUMN namespace_id BIGINT NOT NULL DEFAULT 1;
DROP INDEX jobs_name_idx ON jobs;
CREATE UNIQUE INDEX jobs_namespace_name_idx ON jobs (namespace_id, name);

ALTER TABLE runs ADD COLUMN namespace_id BIGINT NOT NULL DEFAULT 1;

ALTER TABLE tasks ADD COLUMN namespace_id BIGINT NOT NULL DEFAULT 1;
DROP INDEX tasks_key_idx ON tasks;
CREATE UNIQUE INDEX tasks_namespace_key_idx ON tasks (namespace_id, task_key);

ALTER TABLE calendars ADD COLUMN namespace_id BIGINT NOT NULL DEFAULT 1;
ALTER TABLE calendars DROP PRIMARY KEY, ADD PRIMARY KEY (namespace_id, name);

-- App names stay unique across the cluster (the executor protocol names an app alone); each
-- app belongs to one namespace.
ALTER TABLE apps ADD COLUMN namespace_id BIGINT NOT NULL DEFAULT 1;
