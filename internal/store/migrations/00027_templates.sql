-- Templates (docs/templates.md): an agent's named sandbox images, one row per (agent, name)
-- holding its latest build: the spec (JSON), its content hash, the images, the status and the
-- build's log (its last 64 KiB).

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
    size_bytes  INTEGER NOT NULL,
    status      TEXT NOT NULL,
    error       TEXT NOT NULL,
    log         TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (agent, name)
) WITHOUT ROWID;
CREATE INDEX templates_shared ON templates (shared, name);

-- +goose Down
DROP TABLE templates;
