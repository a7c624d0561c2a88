-- A session's ports (docs/ports.md). port_requests is the ledger of requests the daemon
-- forwarded to them, pruned with the session's commands (the executions' age and count).
-- port_shares are the share links a person's browser opens a port with: only the secret's
-- SHA-256 digest is kept; a share is deleted when revoked, when its session ends, and once
-- expired by Prune.

-- +goose Up
CREATE TABLE port_requests (
    id          TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL,
    agent       TEXT NOT NULL,
    port        INTEGER NOT NULL,
    method      TEXT NOT NULL,
    path        TEXT NOT NULL,
    status      INTEGER NOT NULL,
    client      TEXT NOT NULL,
    websocket   INTEGER NOT NULL,
    bytes_in    INTEGER NOT NULL,
    bytes_out   INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL,
    error       TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX port_requests_session ON port_requests (session_id, started_at);
CREATE INDEX port_requests_started ON port_requests (started_at);

CREATE TABLE port_shares (
    id         TEXT PRIMARY KEY,
    agent      TEXT NOT NULL,
    session_id TEXT NOT NULL,
    port       INTEGER NOT NULL,
    digest     TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX port_shares_session ON port_shares (session_id);

-- +goose Down
DROP TABLE port_shares;
DROP TABLE port_requests;
