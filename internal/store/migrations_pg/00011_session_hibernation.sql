-- Paused and hibernated sessions, as SQLite's migration 21: hibernated_at is set while a
-- session is hibernated (open, no container, its files in its daemon's data directory).

-- +goose Up
ALTER TABLE sessions ADD COLUMN hibernated_at BIGINT;
CREATE INDEX sessions_hibernated ON sessions (daemon) WHERE hibernated_at IS NOT NULL AND ended_at IS NULL;

-- +goose Down
DROP INDEX sessions_hibernated;
ALTER TABLE sessions DROP COLUMN hibernated_at;
