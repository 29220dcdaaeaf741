-- Carillon schema, version 5: when an executor's heartbeat last listed a running attempt as
-- in flight. An executor that heartbeats on without listing it (it restarted and forgot it)
-- has it dispatched again after its lease.
ALTER TABLE attempts ADD COLUMN seen_at_ms BIGINT NULL;
