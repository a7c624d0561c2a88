-- API keys of the E2B-compatible API, as SQLite's migration 22: only the key's SHA-256 digest
-- is kept, with its agent and the key's first characters for listings.

-- +goose Up
CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    agent      TEXT NOT NULL,
    digest     TEXT NOT NULL UNIQUE,
    prefix     TEXT NOT NULL,
    name       TEXT NOT NULL DEFAULT '',
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);

-- +goose Down
DROP TABLE api_keys;
