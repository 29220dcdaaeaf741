-- Carillon schema, version 14: workflows. A workflow is a row of `jobs` of kind `workflow`
-- (scheduled like any job); an inline step's handler is a hidden job of kind `step`. Its
-- definition (steps, each a job, and what each needs) is kept per workflow and copied into
-- each workflow run when the run starts; each step of a run is a row of `step_runs`, unique
-- per (workflow run, step), pointing at the step's own run once it has one.
ALTER TABLE jobs ADD COLUMN kind VARCHAR(16) NOT NULL DEFAULT 'job';

CREATE TABLE workflow_definitions (
    workflow_id BIGINT NOT NULL PRIMARY KEY,
    definition_json TEXT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);

CREATE TABLE workflow_runs (
    run_id BIGINT NOT NULL PRIMARY KEY,
    workflow_id BIGINT NOT NULL,
    definition_json TEXT NOT NULL,
    params_json TEXT NOT NULL,
    rerun_of BIGINT NULL,
    created_at_ms BIGINT NOT NULL
);
CREATE INDEX workflow_runs_workflow_idx ON workflow_runs (workflow_id, run_id);

CREATE TABLE step_runs (
    workflow_run_id BIGINT NOT NULL,
    step_name VARCHAR(128) NOT NULL,
    state VARCHAR(16) NOT NULL,
    run_id BIGINT NULL,
    output_json TEXT NULL,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (workflow_run_id, step_name)
);
CREATE INDEX step_runs_run_idx ON step_runs (run_id);
