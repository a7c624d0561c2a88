-- The secrets a job's runs may use (docs/secrets.md): their names, comma-separated ('' for
-- none). Names only: values are in the secrets table, sealed.

-- +goose Up
ALTER TABLE jobs ADD COLUMN secrets TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE jobs DROP COLUMN secrets;
