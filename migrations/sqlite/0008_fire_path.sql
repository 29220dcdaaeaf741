-- Carillon schema, version 8: the pending attempts in due order, so the delivery pass reads
-- its slice and stops instead of sorting the whole backlog (see the PostgreSQL migration).
CREATE INDEX attempts_pending_due_idx ON attempts (not_before_ms, attempt_id) WHERE state = 'pending';
