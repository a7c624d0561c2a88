-- The secrets a job's runs may use, as SQLite's migration 28.

-- +goose Up
ALTER TABLE jobs ADD COLUMN secrets TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE jobs DROP COLUMN secrets;
