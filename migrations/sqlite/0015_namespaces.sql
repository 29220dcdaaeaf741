-- Carillon schema, version 15: namespaces. Every job (workflows and their steps are jobs),
-- task, calendar, executor app and run belongs to one namespace; names are unique within
-- it. What existed before goes to `default` (id 1): a constant column default carries the
-- existing rows without rewriting them.
CREATE TABLE namespaces (
    namespace_id INTEGER PRIMARY KEY AUTOINCREMENT,
    name VARCHAR(63) NOT NULL,
    description VARCHAR(1024) NOT NULL DEFAULT '',
    created_at_ms BIGINT NOT NULL
);
CREATE UNIQUE INDEX namespaces_name_idx ON namespaces (name);
INSERT INTO namespaces (namespace_id, name, description, created_at_ms)
    VALUES (1, 'default', 'What is created without naming a namespace.',
    CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER));

ALTER TABLE jobs ADD COLUMN namespace_id BIGINT NOT NULL DEFAULT 1;
DROP INDEX jobs_name_idx;
CREATE UNIQUE INDEX jobs_namespace_name_idx ON jobs (namespace_id, name);

ALTER TABLE runs ADD COLUMN namespace_id BIGINT NOT NULL DEFAULT 1;

ALTER TABLE tasks ADD COLUMN namespace_id BIGINT NOT NULL DEFAULT 1;
DROP INDEX tasks_key_idx;
CREATE UNIQUE INDEX tasks_namespace_key_idx ON tasks (namespace_id, task_key);

-- SQLite cannot change a primary key: the table is made again and its rows copied.
ALTER TABLE calendars RENAME TO calendars_before_namespaces;
CREATE TABLE calendars (
    namespace_id BIGINT NOT NULL DEFAULT 1,
    name VARCHAR(128) NOT NULL,
    definition_json TEXT NOT NULL,
    version BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (namespace_id, name)
);
INSERT INTO calendars (namespace_id, name, definition_json, version, created_at_ms, updated_at_ms)
    SELECT 1, name, definition_json, version, created_at_ms, updated_at_ms
    FROM calendars_before_namespaces;
DROP TABLE calendars_before_namespaces;

-- App names stay unique across the cluster (the executor protocol names an app alone); each
-- app belongs to one namespace.
ALTER TABLE apps ADD COLUMN namespace_id BIGINT NOT NULL DEFAULT 1;
