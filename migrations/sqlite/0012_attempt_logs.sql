-- Carillon schema, version 12: the lines handlers log while an attempt runs, shipped by
-- executors in batches (line numbers from 1, as the executor numbers them, so a batch sent
-- twice is stored once), kept as long as their run. A truncated log ends with a marker line
-- numbered 9007199254740991.
CREATE TABLE attempt_logs (
    attempt_id BIGINT NOT NULL,
    line_no BIGINT NOT NULL,
    run_id BIGINT NOT NULL,
    at_ms BIGINT NOT NULL,
    level VARCHAR(8) NOT NULL,
    message TEXT NOT NULL,
    PRIMARY KEY (attempt_id, line_no)
);
CREATE INDEX attempt_logs_run_idx ON attempt_logs (run_id);
