-- Dependencies of an execution: the statuses of its requirements (JSON list) and how long
-- checking and installing them took.

-- +goose Up
ALTER TABLE executions ADD COLUMN dependencies TEXT;
ALTER TABLE executions ADD COLUMN install_ms INTEGER;

-- +goose Down
ALTER TABLE executions DROP COLUMN install_ms;
ALTER TABLE executions DROP COLUMN dependencies;
