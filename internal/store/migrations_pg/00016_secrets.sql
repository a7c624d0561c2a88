-- Secrets the egress proxy adds to a run's requests, as SQLite's migration 25: value sealed
-- with AES-256-GCM under a key kept outside the database; agent '' for a shared secret.

-- +goose Up
CREATE TABLE secrets (
    agent      TEXT NOT NULL,
    name       TEXT NOT NULL,
    value      BYTEA NOT NULL,
    binding    TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (agent, name)
);

-- +goose Down
DROP TABLE secrets;
