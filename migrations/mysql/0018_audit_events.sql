-- Carillon schema, version 18: the audit trail of the API's changes and refusals.
CREATE TABLE audit_events (
    event_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    -- NULL: a change to the cluster, not to one namespace.
    namespace_id BIGINT NULL,
    actor VARCHAR(255) NOT NULL,
    source VARCHAR(64) NOT NULL,
    operation VARCHAR(64) NOT NULL,
    resource VARCHAR(512) NOT NULL,
    -- ok, failed (the change was refused by its own checks) or refused (not permitted).
    outcome VARCHAR(16) NOT NULL,
    status INTEGER NOT NULL,
    detail TEXT NULL
);
CREATE INDEX audit_events_at_idx ON audit_events (at_ms);
CREATE INDEX audit_events_namespace_idx ON audit_events (namespace_id, event_id);
