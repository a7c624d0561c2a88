-- The template whose sandbox runs each version of saved code, as SQLite's migration 30.

-- +goose Up
ALTER TABLE code_versions ADD COLUMN template TEXT;

-- +goose Down
ALTER TABLE code_versions DROP COLUMN template;
