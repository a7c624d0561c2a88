-- Stateful sessions, as SQLite's migration 13: each execution that was a session's call names
-- its session, and sessions keeps every session's life (created, ended, why) and the daemon
-- that holds it.

-- +goose Up
ALTER TABLE executions ADD COLUMN session_id TEXT;
CREATE INDEX executions_session ON executions (session_id, started_at) WHERE session_id IS NOT NULL;

CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,
    agent      TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    ended_at   BIGINT,
    end_reason TEXT,
    reason     TEXT,
    info       TEXT NOT NULL,
    daemon     TEXT
);
CREATE INDEX sessions_open ON sessions (daemon) WHERE ended_at IS NULL;

-- +goose Down
DROP TABLE sessions;
DROP INDEX executions_session;
ALTER TABLE executions DROP COLUMN session_id;
