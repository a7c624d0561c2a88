-- The size of each stored result (its key and JSON value, in bytes), so that an agent's quota
-- (results_max_bytes) is checked by summing an index instead of reading every value.

-- +goose Up
ALTER TABLE results ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
UPDATE results SET bytes = length(CAST(key AS BLOB)) + length(CAST(value AS BLOB));
CREATE INDEX results_bytes_by_agent ON results (agent, bytes);

-- +goose Down
DROP INDEX results_bytes_by_agent;
ALTER TABLE results DROP COLUMN bytes;
