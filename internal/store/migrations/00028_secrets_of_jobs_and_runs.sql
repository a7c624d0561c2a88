-- Secrets (docs/secrets.md) in jobs and runs' records, names only: the secrets a job's runs
-- may use (comma-separated, '' for none), and each run's uses of its secrets' placeholders
-- (JSON: secret, host, added, why, status; NULL for none) with how many were left out.

-- +goose Up
ALTER TABLE jobs ADD COLUMN secrets TEXT NOT NULL DEFAULT '';
ALTER TABLE executions ADD COLUMN secret_uses TEXT;
ALTER TABLE executions ADD COLUMN secret_uses_omitted INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE executions DROP COLUMN secret_uses_omitted;
ALTER TABLE executions DROP COLUMN secret_uses;
ALTER TABLE jobs DROP COLUMN secrets;
