-- The store's ID, made once: what the daemons using this store build is named apart from what
-- another store's daemons build on the same Docker engine or registry (template layers are
-- named by a hash of their owner, the store and the agent, and reused by that owner only).

-- +goose Up
CREATE TABLE store_id (
    id TEXT PRIMARY KEY
);
INSERT INTO store_id (id) VALUES (lower(hex(randomblob(16))));

-- +goose Down
DROP TABLE store_id;
