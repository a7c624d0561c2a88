-- A session's commands, as SQLite's migration 19: each recorded like a call when it ends.

-- +goose Up
CREATE TABLE session_commands (
    id           TEXT PRIMARY KEY,
    session_id   TEXT NOT NULL,
    agent        TEXT NOT NULL,
    command      TEXT NOT NULL,
    started_at   BIGINT NOT NULL,
    duration_ms  BIGINT NOT NULL,
    exit_code    INTEGER NOT NULL,
    signal       TEXT,
    outcome      TEXT NOT NULL,
    stdout_bytes BIGINT NOT NULL,
    stderr_bytes BIGINT NOT NULL,
    info         TEXT NOT NULL
);
CREATE INDEX session_commands_session ON session_commands (session_id, started_at);
CREATE INDEX session_commands_started ON session_commands (started_at);

-- +goose Down
DROP TABLE session_commands;
