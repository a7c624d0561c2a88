-- Templates, as SQLite's migration 25: one row per (agent, name) with its latest build.

-- +goose Up
CREATE TABLE templates (
    agent       TEXT NOT NULL,
    name        TEXT NOT NULL,
    version     INTEGER NOT NULL,
    spec        TEXT NOT NULL,
    shared      INTEGER NOT NULL,
    hash        TEXT NOT NULL,
    image       TEXT NOT NULL,
    layer_image TEXT NOT NULL,
    size_bytes  BIGINT NOT NULL,
    status      TEXT NOT NULL,
    error       TEXT NOT NULL,
    log         TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (agent, name)
);
CREATE INDEX templates_shared ON templates (shared, name);

-- +goose Down
DROP TABLE templates;
