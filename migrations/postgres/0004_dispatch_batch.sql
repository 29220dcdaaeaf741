-- Carillon schema, version 4: executors that take the attempts due together in one request
-- (`POST /carillon/v1/dispatch-batch`) say so when they register; 1 = yes.
ALTER TABLE executors ADD COLUMN accepts_batch BIGINT NOT NULL DEFAULT 0;
