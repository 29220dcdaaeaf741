-- Carillon schema, version 24: who registered each executor, and the nodes' own keys.
-- `registered_by` names the token that registered an executor (`cluster`, `app:<app>`,
-- `token:<id>`, `admin`, `xxl`): only that token acts for it until an operator removes it.
-- NULL for executors registered before, which act under their app's namespace as they did
-- until they register again.
ALTER TABLE executors ADD COLUMN registered_by VARCHAR(160) NULL;
-- Keys only nodes know (never executors): `attempt_handles` signs the handle each dispatch
-- carries, which an executor's results and log lines must quote. Made by the first node to
-- start, once.
CREATE TABLE node_keys (
    name VARCHAR(32) NOT NULL PRIMARY KEY,
    key_hex CHAR(64) NOT NULL,
    created_at_ms BIGINT NOT NULL
);
