-- Secrets the egress proxy adds to a run's requests (internal/secrets): value is sealed with
-- AES-256-GCM under a key kept outside the database (the data directory's secrets.key, or
-- SANDPIT_SECRETS_KEY). agent is '' for a secret every agent's runs may name. binding is the
-- JSON of the hosts and the place the value may go.

-- +goose Up
CREATE TABLE secrets (
    agent      TEXT NOT NULL,
    name       TEXT NOT NULL,
    value      BLOB NOT NULL,
    binding    TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (agent, name)
) WITHOUT ROWID;

-- +goose Down
DROP TABLE secrets;
