-- Carillon schema, version 20: what an edit changed, with its audit event.
ALTER TABLE audit_events ADD COLUMN changes TEXT NULL;
