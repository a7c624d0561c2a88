-- The kept versions of each template and their tags, as SQLite's migration 31.

-- +goose Up
CREATE TABLE template_versions (
    agent       TEXT NOT NULL,
    name        TEXT NOT NULL,
    version     INTEGER NOT NULL,
    spec        TEXT NOT NULL,
    hash        TEXT NOT NULL,
    image       TEXT NOT NULL,
    layer_image TEXT NOT NULL,
    size_bytes  BIGINT NOT NULL,
    shared      INTEGER NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (agent, name, version)
);
CREATE INDEX template_versions_image ON template_versions (image);
CREATE INDEX template_versions_layer_image ON template_versions (layer_image);
CREATE TABLE template_tags (
    agent      TEXT NOT NULL,
    name       TEXT NOT NULL,
    tag        TEXT NOT NULL,
    version    INTEGER NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (agent, name, tag)
);
INSERT INTO template_versions (agent, name, version, spec, hash, image, layer_image, size_bytes, shared, created_at)
    SELECT agent, name, version, spec, hash, image, layer_image, size_bytes, shared, updated_at FROM templates
    WHERE status = 'ready' AND image <> '';

-- +goose Down
DROP TABLE template_tags;
DROP TABLE template_versions;
