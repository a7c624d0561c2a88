-- How each execution's program started: "fork" (from the fork server) or "cold" (a fresh
-- interpreter); NULL for records made before this column, and for runs that never started.

-- +goose Up
ALTER TABLE executions ADD COLUMN start TEXT;

-- +goose Down
ALTER TABLE executions DROP COLUMN start;
