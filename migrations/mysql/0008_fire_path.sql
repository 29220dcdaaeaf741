-- Carillon schema, version 8: the attempts by state in due order, so the delivery pass reads
-- its slice of the pending ones and stops instead of sorting the whole backlog (see the
-- PostgreSQL migration; MySQL has no partial indexes).
CREATE INDEX attempts_pending_due_idx ON attempts (state, not_before_ms, attempt_id);
