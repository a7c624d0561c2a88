-- Secrets in jobs and runs' records, names only, as SQLite's migration 28.

-- +goose Up
ALTER TABLE jobs ADD COLUMN secrets TEXT NOT NULL DEFAULT '';
ALTER TABLE executions ADD COLUMN secret_uses TEXT;
ALTER TABLE executions ADD COLUMN secret_uses_omitted BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE executions DROP COLUMN secret_uses_omitted;
ALTER TABLE executions DROP COLUMN secret_uses;
ALTER TABLE jobs DROP COLUMN secrets;
