-- A session's commands (POST …/sessions/{id}/commands), each recorded like a call when it
-- ends: its command line (at most 4096 bytes kept), exit, signal, outcome, duration and the
-- bytes it wrote. Bounded with the executions (Prune: the same age and count).

-- +goose Up
CREATE TABLE session_commands (
    id           TEXT PRIMARY KEY,
    session_id   TEXT NOT NULL,
    agent        TEXT NOT NULL,
    command      TEXT NOT NULL,
    started_at   INTEGER NOT NULL,
    duration_ms  INTEGER NOT NULL,
    exit_code    INTEGER NOT NULL,
    signal       TEXT,
    outcome      TEXT NOT NULL,
    stdout_bytes INTEGER NOT NULL,
    stderr_bytes INTEGER NOT NULL,
    info         TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX session_commands_session ON session_commands (session_id, started_at);
CREATE INDEX session_commands_started ON session_commands (started_at);

-- +goose Down
DROP TABLE session_commands;
