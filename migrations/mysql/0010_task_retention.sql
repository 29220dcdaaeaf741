-- Carillon schema, version 10: tasks that left `pending` (fired or cancelled), oldest first,
-- for the retention pass that deletes them once their runs are gone.
CREATE INDEX tasks_ended_idx ON tasks (ended_at_ms);
