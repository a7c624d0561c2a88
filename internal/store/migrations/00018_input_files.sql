-- The input files a request handed its run: each one's name, size and SHA-256 (not its bytes,
-- which the request's sender has), so that a record says what the run was given. NULL for
-- records made before, and for runs without input files.

-- +goose Up
ALTER TABLE executions ADD COLUMN input_files TEXT;

-- +goose Down
ALTER TABLE executions DROP COLUMN input_files;
