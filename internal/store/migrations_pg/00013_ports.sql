-- A session's ports, as SQLite's migration 23: the ledger of requests forwarded to them, and
-- the share links (only the secret's SHA-256 digest is kept).

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
    bytes_in    BIGINT NOT NULL,
    bytes_out   BIGINT NOT NULL,
    started_at  BIGINT NOT NULL,
    duration_ms BIGINT NOT NULL,
    error       TEXT NOT NULL
);
CREATE INDEX port_requests_session ON port_requests (session_id, started_at);
CREATE INDEX port_requests_started ON port_requests (started_at);

CREATE TABLE port_shares (
    id         TEXT PRIMARY KEY,
    agent      TEXT NOT NULL,
    session_id TEXT NOT NULL,
    port       INTEGER NOT NULL,
    digest     TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX port_shares_session ON port_shares (session_id);

-- +goose Down
DROP TABLE port_shares;
DROP TABLE port_requests;
