-- Carillon schema, version 19: roles of a namespace granted to a group of the identity
-- provider's people (the group claim of their tokens). One role per group and namespace.
CREATE TABLE role_grants (
    grant_id INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace_id BIGINT NOT NULL,
    group_name VARCHAR(255) NOT NULL,
    role VARCHAR(16) NOT NULL,
    created_at_ms BIGINT NOT NULL,
    created_by VARCHAR(255) NOT NULL
);
CREATE UNIQUE INDEX role_grants_namespace_group_idx ON role_grants (namespace_id, group_name);
