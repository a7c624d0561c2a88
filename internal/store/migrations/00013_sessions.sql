-- Stateful sessions. Each execution that was a session's call names its session
-- (session_id); sessions keeps every session's life: when it was created, when and why it
-- ended. A session does not outlive its daemon: one still open when a daemon starts is ended
-- then (end_reason daemon_stopped), so that a later call hears why.

-- +goose Up
ALTER TABLE executions ADD COLUMN session_id TEXT;
CREATE INDEX executions_session ON executions (session_id, started_at) WHERE session_id IS NOT NULL;

CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,
    agent      TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    ended_at   INTEGER,
    end_reason TEXT,
    reason     TEXT,
    info       TEXT NOT NULL,
    daemon     TEXT
) WITHOUT ROWID;

-- +goose Down
DROP TABLE sessions;
DROP INDEX executions_session;
ALTER TABLE executions DROP COLUMN session_id;
