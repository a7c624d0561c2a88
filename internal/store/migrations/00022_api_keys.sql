-- API keys of the E2B-compatible API (internal/e2b): each belongs to an agent and sees only
-- that agent's sandboxes. Only the key's SHA-256 digest is kept; prefix is its first
-- characters, shown in listings so that a person can tell keys apart.

-- +goose Up
CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    agent      TEXT NOT NULL,
    digest     TEXT NOT NULL UNIQUE,
    prefix     TEXT NOT NULL,
    name       TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
) WITHOUT ROWID;

-- +goose Down
DROP TABLE api_keys;
