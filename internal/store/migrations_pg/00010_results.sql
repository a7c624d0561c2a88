-- Notebook results, as SQLite's migration 20 (docs/notebook.md): a run's displays and last expression's value (JSON
-- list, NULL when none), the uncaught exception that ended it (JSON: name, value, traceback,
-- NULL when none) and a session call's execution count (0 for a one-shot run). Counted in the
-- record's bytes (ledger_max_bytes) when it finishes.

-- +goose Up
ALTER TABLE executions ADD COLUMN results TEXT;
ALTER TABLE executions ADD COLUMN exec_error TEXT;
ALTER TABLE executions ADD COLUMN execution_count BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE executions DROP COLUMN execution_count;
ALTER TABLE executions DROP COLUMN exec_error;
ALTER TABLE executions DROP COLUMN results;
