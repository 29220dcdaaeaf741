-- Carillon schema, version 16: a namespace's own alert webhook, where its jobs' alerts go when
-- a job names none.
ALTER TABLE namespaces ADD COLUMN alert_webhook VARCHAR(2048) NULL;
