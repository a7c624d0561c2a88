-- How many processes the box's out-of-memory killer killed while each execution ran
-- (sandbox.Result.OOMKills); 0 for records made before this column.

-- +goose Up
ALTER TABLE executions ADD COLUMN oom_kills INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE executions DROP COLUMN oom_kills;
