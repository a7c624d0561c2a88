-- The store's ID, made once, as SQLite's migration 32.

-- +goose Up
CREATE TABLE store_id (
    id TEXT PRIMARY KEY
);
INSERT INTO store_id (id) VALUES (replace(gen_random_uuid()::text, '-', ''));

-- +goose Down
DROP TABLE store_id;
